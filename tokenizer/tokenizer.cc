#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/decoders.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/unicode.h"

namespace baton {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

bool Tokenizer::has_tokenizer_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec) &&
         fs::is_regular_file(fs::path(dir) / "tokenizer_config.json", ec);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(str_cat(path, ": cannot open; a model directory needs tokenizer.json and "
                                             "tokenizer_config.json from the model's Hugging Face repository"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError(str_cat(path, ": not a JSON object"));

  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  const std::string where = path;
  auto model_it = j.find("model");
  if (model_it == j.end() || !model_it->is_object()) {
    return absl::InvalidArgumentError(str_cat(where, ": missing \"model\" object"));
  }
  // Not value("type", ...): that throws when "type" is not a string.
  auto type_it = model_it->find("type");
  const bool has_type = type_it != model_it->end() && !type_it->is_null();
  if (has_type && !type_it->is_string()) return json_fields::type_error(where + ": model", "type", "a string", *type_it);
  std::string model_type = has_type ? type_it->get<std::string>() : model_it->contains("merges") ? "BPE" : "";
  if (model_type != "BPE") {
    return json_fields::unsupported(where + ": model", "model", model_type, "BPE");
  }
  BATON_ASSIGN_OR_RETURN(tokenizer->model_, BpeModel::from_json(*model_it, where + ": model"));
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (present("normalizer")) {
    BATON_ASSIGN_OR_RETURN(tokenizer->normalizer_, make_normalizer(j["normalizer"], where + ": normalizer"));
  }
  if (present("pre_tokenizer")) {
    BATON_ASSIGN_OR_RETURN(tokenizer->pre_tokenizer_,
                           make_pre_tokenizer(j["pre_tokenizer"], where + ": pre_tokenizer"));
  }
  if (present("post_processor")) {
    BATON_ASSIGN_OR_RETURN(tokenizer->post_processor_,
                           make_post_processor(j["post_processor"], where + ": post_processor"));
  }
  if (present("decoder")) {
    BATON_ASSIGN_OR_RETURN(tokenizer->decoder_, make_decoder(j["decoder"], where + ": decoder"));
  }
  const BpeModel& model = *tokenizer->model_;
  BATON_ASSIGN_OR_RETURN(
      tokenizer->added_,
      AddedVocabulary::from_json(present("added_tokens") ? j["added_tokens"] : nlohmann::json(),
                                 tokenizer->normalizer_.get(),
                                 [&model](std::string_view token) { return model.token_to_id(token); },
                                 model.size(), where + ": added_tokens"));
  tokenizer->vocab_size_ = tokenizer->model_->max_id() + 1;
  for (const auto& t : tokenizer->added_->tokens()) tokenizer->vocab_size_ = std::max(tokenizer->vocab_size_, t.id + 1);

  BATON_ASSIGN_OR_RETURN(TokenizerConfig config, load_tokenizer_config(dir));
  tokenizer->bos_token_ = config.bos_token;
  tokenizer->eos_token_ = config.eos_token;
  tokenizer->unk_token_ = config.unk_token;
  tokenizer->pad_token_ = config.pad_token;
  for (const auto* token : {&config.bos_token, &config.eos_token}) {
    if (*token && !tokenizer->token_to_id(**token)) {
      return absl::InvalidArgumentError(str_cat(dir, "/tokenizer_config.json: special token \"", **token,
                                                "\" is not in tokenizer.json's vocabulary or added tokens"));
    }
  }
  if (config.chat_template) {
    auto compiled = ChatTemplate::compile(*config.chat_template);
    if (!compiled.ok()) {
      return absl::Status(compiled.status().code(),
                          str_cat(dir, "/tokenizer_config.json: chat_template: ", compiled.status().message()));
    }
    tokenizer->chat_template_ = std::move(compiled).value();
  }
  return tokenizer;
}

absl::Status Tokenizer::set_chat_template(const std::string& source, const std::string& origin) {
  auto compiled = ChatTemplate::compile(source);
  if (!compiled.ok()) return absl::Status(compiled.status().code(), str_cat(origin, ": ", compiled.status().message()));
  chat_template_ = std::move(compiled).value();
  return absl::OkStatus();
}

void Tokenizer::encode_text(std::string_view text, bool at_input_start, std::vector<std::int32_t>& ids) const {
  thread_local PieceList input, output;
  input.clear();
  output.clear();
  input.push(text, at_input_start);
  const PieceList* pieces = &input;
  if (pre_tokenizer_) {
    pre_tokenizer_->pre_tokenize(input, output);
    pieces = &output;
  }
  for (const auto& p : pieces->pieces()) model_->tokenize(pieces->view(p), ids);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view raw_text, bool add_special_tokens) const {
  std::string repaired;
  std::string_view text = raw_text;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::utf8_lossy(text);
    text = repaired;
  }
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSegment> raw_segments, normalized_segments;
  std::string normalized;
  added_->split_raw(text, raw_segments);
  for (const auto& seg : raw_segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    normalized.assign(text.substr(seg.begin, seg.end - seg.begin));
    if (normalizer_) normalizer_->normalize(normalized);
    added_->split_normalized(normalized, normalized_segments);
    for (const auto& sub : normalized_segments) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
      } else if (sub.end > sub.begin) {
        encode_text(std::string_view(normalized).substr(sub.begin, sub.end - sub.begin),
                    seg.begin == 0 && sub.begin == 0, ids);
      }
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    if (const std::string* content = decoded_content(id, skip_special_tokens)) tokens.push_back(*content);
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const auto& t : tokens) text.append(t);
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text.push_back(' ');
      text.append(tokens[i]);
    }
  }
  return text;
}

std::vector<std::string> Tokenizer::token_bytes() const {
  std::vector<std::string> out(static_cast<std::size_t>(vocab_size_));
  // The token between two "x": decoders that treat a text's first or last token specially
  // (Metaspace's prefix space, Strip, a BPE suffix) then treat it as any other; "x" decodes as
  // itself in every supported decoder, so what lies between is the token's own bytes.
  std::vector<std::string> tokens;
  for (std::int32_t id = 0; id < vocab_size_; ++id) {
    const std::string* content = decoded_content(id, /*skip_special_tokens=*/true);
    if (content == nullptr) continue;
    if (!decoder_) {
      out[static_cast<std::size_t>(id)] = *content;
      continue;
    }
    tokens.assign({"x", *content, "x"});
    decoder_->decode_chain_raw(tokens);
    std::string text;
    for (const auto& t : tokens) text.append(t);
    if (text.size() >= 2 && text.front() == 'x' && text.back() == 'x') {
      out[static_cast<std::size_t>(id)] = text.substr(1, text.size() - 2);
    }
  }
  return out;
}

const std::string* Tokenizer::decoded_content(std::int32_t id, bool skip_special_tokens) const {
  const AddedToken* added = added_->find(id);
  const std::string* content = added != nullptr ? &added->decoded : model_->id_to_token(id);
  if (content == nullptr || (skip_special_tokens && added_->is_special(*content))) return nullptr;
  return content;
}

std::int32_t Tokenizer::vocab_size() const { return vocab_size_; }

bool Tokenizer::in_byte_run(std::int32_t id) const {
  if (!decoder_ || !decoder_->joins_byte_runs() || added_->find(id) != nullptr) return false;
  const std::string* token = model_->id_to_token(id);
  return token != nullptr && token->size() == 6 && token->compare(0, 3, "<0x") == 0 && token->back() == '>';
}

bool Tokenizer::is_special(std::int32_t id) const {
  const AddedToken* added = added_->find(id);
  return added != nullptr && added->special;
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  if (const AddedToken* added = added_->find(id)) return added->decoded;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  return std::nullopt;
}

std::optional<std::int32_t> Tokenizer::bos_token_id() const {
  if (!bos_token_) return std::nullopt;
  return token_to_id(*bos_token_);
}

std::vector<std::int32_t> Tokenizer::eos_token_ids() const {
  std::vector<std::int32_t> ids;
  if (eos_token_) {
    if (auto id = token_to_id(*eos_token_)) ids.push_back(*id);
  }
  return ids;
}

absl::StatusOr<std::string> Tokenizer::apply_chat_template(const nlohmann::ordered_json& messages,
                                                           bool add_generation_prompt,
                                                           const nlohmann::ordered_json& tools) const {
  if (!chat_template_) {
    return absl::FailedPreconditionError(
        "this model's tokenizer_config.json has no chat_template; pass a plain prompt instead of chat messages");
  }
  if (!messages.is_array()) {
    return absl::InvalidArgumentError(str_cat("chat messages must be a JSON array of {\"role\", \"content\"}, got ",
                                              messages.type_name()));
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(str_cat("chat messages[", i, "]: expected an object with a string \"role\""));
    }
  }
  if (!tools.is_null() && !tools.is_array()) {
    return absl::InvalidArgumentError(str_cat("chat tools must be a JSON array, got ", tools.type_name()));
  }
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  variables["messages"] = messages;
  if (tools.is_array() && !tools.empty()) variables["tools"] = tools;
  variables["add_generation_prompt"] = add_generation_prompt;
  const std::pair<const char*, const std::optional<std::string>*> tokens[] = {
      {"bos_token", &bos_token_}, {"eos_token", &eos_token_}, {"unk_token", &unk_token_}, {"pad_token", &pad_token_}};
  for (const auto& [name, value] : tokens) {
    if (*value) variables[name] = **value;
  }
  return chat_template_->render(variables);
}

DecodeStream::DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string DecodeStream::step(std::int32_t id) {
  // A token decode() drops adds no text and ends nothing (a byte run continues across it). Keeping
  // it in the window would make every later step decode it again: quadratic over a run of skipped
  // specials (EOS after EOS under ignore_eos).
  if (tokenizer_.decoded_content(id, skip_special_tokens_) == nullptr) return {};
  window_.push_back(id);
  std::string text = tokenizer_.decode(window_, skip_special_tokens_);
  // Hold back while the new text is empty or may still change: it may end inside a character (the
  // decoders repair an incomplete tail to U+FFFD, which the next token can still complete), or a
  // run of <0xXX> tokens is open (ByteFallback judges a run as a whole: valid, or one U+FFFD per
  // byte, so even "a" from <0x61> is only final once the run ends).
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  // A special token that decoding skips ends nothing: a byte run continues across it.
  if ((skip_special_tokens_ && tokenizer_.is_special(id)) || text.size() <= prefix_text_.size() ||
      text.compare(0, prefix_text_.size(), prefix_text_) != 0 || std::string_view(text).ends_with(kReplacement) ||
      tokenizer_.in_byte_run(id)) {
    return {};
  }
  std::string fresh = text.substr(prefix_text_.size());
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(prefix_ids_));
  prefix_ids_ = window_.size();
  prefix_text_ = tokenizer_.decode(window_, skip_special_tokens_);
  return fresh;
}

std::string DecodeStream::flush() {
  std::string fresh;
  if (window_.size() > prefix_ids_) {
    // Only text that extends what was already emitted: never half a character.
    std::string text = tokenizer_.decode(window_, skip_special_tokens_);
    if (text.size() > prefix_text_.size() && text.compare(0, prefix_text_.size(), prefix_text_) == 0) {
      fresh = text.substr(prefix_text_.size());
    }
  }
  window_.clear();
  prefix_ids_ = 0;
  prefix_text_.clear();
  return fresh;
}

}  // namespace baton

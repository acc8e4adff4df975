// Decoders of tokenizer.json ("decoder"): turn the token strings of a sequence of ids back into
// text. Supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder.
// Like Hugging Face's, each decoder maps a list of token strings to a new list (decode_chain);
// the final text is their concatenation.
//
// Must not: emit invalid UTF-8 (byte-producing decoders repair it with U+FFFD the way Hugging
// Face does), or accept an unknown type (make_decoder fails naming it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites `tokens` (one string per token, in order).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // decode_chain() without repairing invalid UTF-8: the bytes themselves, for one token's share
  // of a text (which may end inside a character). Decoders that repair override it.
  virtual void decode_chain_raw(std::vector<std::string>& tokens) const { decode_chain(tokens); }
  // Whether <0xXX> tokens are joined into text by run (ByteFallback): the text of a run is only
  // final once the run ends, which streaming decode must wait for.
  virtual bool joins_byte_runs() const { return false; }
};

absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config, const std::string& where);

}  // namespace baton

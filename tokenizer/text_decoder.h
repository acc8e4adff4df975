// TextDecoder: the interface through which the engine sees text. It turns one request's output
// token ids into text, for stop strings and streamed output.
//
// The engine (engine/sample's StopChecker) depends on this header only, never on the Tokenizer:
// the implementation, TokenizerTextDecoder, lives beside the Tokenizer, and whoever owns both (the
// CLI, a node's main) hands the engine a factory. Must not: include anything beyond the standard
// library, so that linking it (the INTERFACE target baton_text_decoder) pulls in nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace baton {

// Incremental detokenization of one request's output.
class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // Text for the whole output so far (the checker works with the full string, so decoders need
  // not be incremental; an incremental one is faster). Must be stable: the text of a prefix of the
  // tokens is a prefix of the text of the whole (hold back an incomplete UTF-8 sequence rather
  // than emit a replacement character that later changes), since the checker only searches text
  // that is new since the previous call. `final` says no token will follow: release whatever was
  // held back (e.g. a byte-fallback run that ends the output).
  virtual std::string decode(std::span<const std::int32_t> output_tokens, bool final) = 0;
};

}  // namespace baton

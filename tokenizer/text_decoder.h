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

// Incremental detokenization of one request's output: each token is fed once, and text() only
// ever grows, so the work over a whole output is linear in its length (no call re-decodes or
// copies the text so far; readers keep an offset into text() instead).
//
// Stability contract: the text of a prefix of the tokens is a prefix of the text of the whole.
// An implementation holds back what may still change (an incomplete UTF-8 character, a
// byte-fallback run that has not ended) rather than emit a replacement character it would later
// have to take back. One decoder per request; not thread-safe.
class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // Feeds the tokens that follow every token fed so far; text() grows by the text they complete.
  // Must not be called after finish().
  virtual void append(std::span<const std::int32_t> new_tokens) = 0;
  // No token will follow: appends whatever was held back. Calling it again does nothing.
  virtual void finish() = 0;
  // The text of the tokens fed so far (minus what is held back). The reference stays valid for the
  // decoder's lifetime; its contents are only ever appended to.
  virtual const std::string& text() const = 0;
};

}  // namespace baton

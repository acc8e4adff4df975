// Bounds of one chat-template render. Templates come from the model directory
// (tokenizer_config.json), so a broken or malicious one must end in a TemplateError naming the
// bound, not in a crash, a hang or an out-of-memory. The bounds are far above what real templates
// need: they render a conversation in about a hundred steps per message (the reference tests'
// templates take at most 550 for five messages), nest a handful of levels and produce at most a
// few MiB (a million-token prompt is about 4 MiB of text). Under ASan a render that exhausts
// the budget ends within a second or two, well inside the fuzzer's per-input timeout.
//
//   kMaxEvalDepth      nested expression / statement evaluations (macro bodies included): the
//                      evaluator recurses once per level, and a chain like 1+1+...+1 is one level
//                      per operator
//   kMaxMacroDepth     nested macro calls (a recursive macro)
//   kMaxValueDepth     lists / dicts / namespaces nested in one another (repr, tojson, == and the
//                      destructor recurse once per level)
//   kMaxStringBytes    any one string the template builds, and the rendered text
//   kMaxListItems      any one list the template builds (range() is bounded by kMaxRangeItems)
//   kMaxRangeItems     range()'s length, as Jinja2's sandbox (MAX_RANGE), which transformers'
//                      apply_chat_template renders under
//   kMaxSteps          evaluation steps of one render: every statement, expression, loop
//                      iteration and value visited by a builtin (comparison, printing, copying a
//                      list) counts one
//   kMaxTextBytes      bytes of text one render builds or scans in total (strings built, output
//                      written, strings searched); with kMaxSteps it bounds the render's time
//
// RenderBudget counts steps and text for the render running on the calling thread; the evaluator
// installs one for the duration of render(). The value and builtin functions charge it through
// the static functions, which do nothing when no render is running on the thread.
//
// Must not: know about templates' syntax; it is only the bookkeeping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace baton::jinja {

inline constexpr int kMaxEvalDepth = 256;
inline constexpr int kMaxMacroDepth = 64;
inline constexpr int kMaxValueDepth = 128;
inline constexpr std::size_t kMaxStringBytes = std::size_t{16} << 20;
inline constexpr std::size_t kMaxListItems = 500'000;
inline constexpr std::int64_t kMaxRangeItems = 100'000;
inline constexpr std::uint64_t kMaxSteps = 1'000'000;
inline constexpr std::uint64_t kMaxTextBytes = std::uint64_t{256} << 20;

// Throws TemplateError when a string of `bytes` bytes would be over kMaxStringBytes; `what` names
// the construct ("'*'", "filter 'indent'", "the rendered text"). Call it before building the string.
void check_string_size(std::size_t bytes, std::string_view what);
// Throws TemplateError when a list of `items` items would be over kMaxListItems.
void check_list_size(std::size_t items, std::string_view what);

class RenderBudget {
 public:
  // Becomes the calling thread's budget until destroyed (the previous one, if any, comes back).
  RenderBudget();
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // Charge the thread's running render; TemplateError past kMaxSteps / kMaxTextBytes.
  static void steps(std::uint64_t n = 1);
  static void text(std::uint64_t bytes);
  // A string of `bytes` bytes was built: checks kMaxStringBytes and charges its text. Called by
  // Value::string, so every string built during a render counts.
  static void new_string(std::size_t bytes);

 private:
  std::uint64_t steps_ = 0;
  std::uint64_t text_ = 0;
  RenderBudget* previous_;
};

}  // namespace baton::jinja

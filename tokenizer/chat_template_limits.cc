#include "tokenizer/chat_template_limits.h"

#include "common/status.h"
#include "tokenizer/chat_template_value.h"

namespace baton::jinja {

namespace {
thread_local RenderBudget* current_budget = nullptr;
}  // namespace

void check_string_size(std::size_t bytes, std::string_view what) {
  if (bytes > kMaxStringBytes) {
    throw TemplateError(str_cat(what, ": a string of ", bytes, " bytes is over the limit of ", kMaxStringBytes,
                                " bytes"));
  }
}

void check_list_size(std::size_t items, std::string_view what) {
  if (items > kMaxListItems) {
    throw TemplateError(str_cat(what, ": a list of ", items, " items is over the limit of ", kMaxListItems, " items"));
  }
}

RenderBudget::RenderBudget() : previous_(current_budget) { current_budget = this; }

RenderBudget::~RenderBudget() { current_budget = previous_; }

void RenderBudget::steps(std::uint64_t n) {
  RenderBudget* b = current_budget;
  if (b == nullptr) return;
  b->steps_ += n;
  if (b->steps_ > kMaxSteps) {
    throw TemplateError(str_cat("the template takes more than ", kMaxSteps,
                                " evaluation steps (a loop or recursion too long for a chat template)"));
  }
}

void RenderBudget::text(std::uint64_t bytes) {
  RenderBudget* b = current_budget;
  if (b == nullptr) return;
  b->text_ += bytes;
  if (b->text_ > kMaxTextBytes) {
    throw TemplateError(str_cat("the template builds or scans more than ", kMaxTextBytes, " bytes of text"));
  }
}

void RenderBudget::new_string(std::size_t bytes) {
  if (current_budget == nullptr) return;
  check_string_size(bytes, "string");
  text(bytes);
}

}  // namespace baton::jinja

#include "engine/structured/grammar.h"

#include <algorithm>
#include <utility>

#include "common/status.h"

namespace baton::structured {

Symbol Symbol::byte(std::uint8_t b) {
  ByteSet s;
  s.set(b);
  return set(s);
}

Symbol Symbol::range(std::uint8_t lo, std::uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<std::size_t>(b));
  return set(s);
}

std::vector<Symbol> literal(std::string_view text) {
  std::vector<Symbol> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(Symbol::byte(static_cast<std::uint8_t>(c)));
  return out;
}

std::int32_t GrammarBuilder::rule(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  return static_cast<std::int32_t>(rules_.size()) - 1;
}

void GrammarBuilder::add(std::int32_t rule, std::vector<Symbol> alternative) {
  BATON_CHECK(rule >= 0 && static_cast<std::size_t>(rule) < rules_.size(), "grammar: no rule ", rule);
  rules_[static_cast<std::size_t>(rule)].push_back(std::move(alternative));
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::build(std::int32_t root) const {
  const std::size_t n = rules_.size();
  if (root < 0 || static_cast<std::size_t>(root) >= n) return absl::InvalidArgumentError("grammar: no root rule");
  std::size_t size = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (rules_[r].empty()) return absl::InvalidArgumentError(str_cat("grammar: rule '", names_[r], "' has no alternative"));
    for (const auto& alt : rules_[r]) {
      size += alt.size() + 1;
      for (const Symbol& s : alt) {
        if (s.is_rule && (s.rule < 0 || static_cast<std::size_t>(s.rule) >= n)) {
          return absl::InvalidArgumentError(str_cat("grammar: rule '", names_[r], "' refers to no rule (", s.rule, ")"));
        }
      }
    }
  }
  if (size > kMaxElements) {
    return absl::InvalidArgumentError(str_cat("grammar: ", size, " elements; at most ", kMaxElements));
  }

  // Left recursion (a rule reachable from itself without consuming a byte) would make expansion
  // loop: find the rules that can match "", then a cycle among leftmost references.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : rules_[r]) {
        const bool all = std::all_of(alt.begin(), alt.end(), [&](const Symbol& s) {
          return s.is_rule && nullable[static_cast<std::size_t>(s.rule)];
        });
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<std::int32_t>> leftmost(n);
  for (std::size_t r = 0; r < n; ++r) {
    for (const auto& alt : rules_[r]) {
      for (const Symbol& s : alt) {
        if (!s.is_rule) break;
        leftmost[r].push_back(s.rule);
        if (!nullable[static_cast<std::size_t>(s.rule)]) break;
      }
    }
  }
  std::vector<std::uint8_t> mark(n, 0);  // 0 unvisited, 1 on the path, 2 done
  for (std::size_t start = 0; start < n; ++start) {
    if (mark[start] != 0) continue;
    std::vector<std::pair<std::size_t, std::size_t>> path = {{start, 0}};
    mark[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == leftmost[r].size()) {
        mark[r] = 2;
        path.pop_back();
        continue;
      }
      const auto next = static_cast<std::size_t>(leftmost[r][i++]);
      if (mark[next] == 1) {
        return absl::InvalidArgumentError(
            str_cat("grammar: rule '", names_[next], "' is left-recursive (it can start with itself)"));
      }
      if (mark[next] == 0) {
        mark[next] = 1;
        path.emplace_back(next, 0);
      }
    }
  }

  auto g = std::make_shared<Grammar>();
  g->root_ = root;
  g->names_ = names_;
  g->alternatives_.resize(n);
  g->elements_.reserve(size);
  for (std::size_t r = 0; r < n; ++r) {
    for (const auto& alt : rules_[r]) {
      g->alternatives_[r].push_back(static_cast<std::int32_t>(g->elements_.size()));
      for (const Symbol& s : alt) {
        if (s.is_rule) {
          g->elements_.push_back({Grammar::Kind::kRule, s.rule});
          continue;
        }
        auto it = std::find(g->byte_sets_.begin(), g->byte_sets_.end(), s.bytes);
        if (it == g->byte_sets_.end()) it = g->byte_sets_.insert(g->byte_sets_.end(), s.bytes);
        g->elements_.push_back({Grammar::Kind::kBytes, static_cast<std::int32_t>(it - g->byte_sets_.begin())});
      }
      g->elements_.push_back({Grammar::Kind::kEnd, 0});
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  std::vector<Stack> stacks;
  bool complete = false;
  const auto& elements = grammar_->elements();
  for (std::int32_t a : grammar_->alternatives(grammar_->root())) {
    Stack s;
    if (elements[static_cast<std::size_t>(a)].kind != Grammar::Kind::kEnd) s.push_back(a);
    expand(std::move(s), stacks, &complete);
  }
  set_stacks(std::move(stacks), complete);
}

void GrammarMatcher::expand(Stack stack, std::vector<Stack>& out, bool* complete) const {
  const auto& elements = grammar_->elements();
  std::vector<Stack> work;
  work.push_back(std::move(stack));
  while (!work.empty()) {
    Stack s = std::move(work.back());
    work.pop_back();
    if (s.empty()) {
      *complete = true;
      continue;
    }
    const std::int32_t p = s.back();
    const Grammar::Element& e = elements[static_cast<std::size_t>(p)];
    if (e.kind == Grammar::Kind::kBytes) {
      out.push_back(std::move(s));
      if (out.size() > kMaxStacks) return;  // set_stacks() refuses
      continue;
    }
    // A rule reference: what follows it in its alternative stays below; each of the rule's
    // alternatives goes on top.
    s.pop_back();
    if (elements[static_cast<std::size_t>(p) + 1].kind != Grammar::Kind::kEnd) s.push_back(p + 1);
    for (std::int32_t a : grammar_->alternatives(e.value)) {
      Stack next = s;
      if (elements[static_cast<std::size_t>(a)].kind != Grammar::Kind::kEnd) next.push_back(a);
      work.push_back(std::move(next));
    }
    if (work.size() > 16 * kMaxStacks) {  // cannot happen without left recursion, which build() refuses
      out.resize(kMaxStacks + 1);
      return;
    }
  }
}

void GrammarMatcher::set_stacks(std::vector<Stack> stacks, bool complete) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxStacks) {
    ok_ = false;
    stacks.clear();
    complete = false;
  }
  stacks_ = std::move(stacks);
  complete_ = complete;
  next_bytes_.reset();
  const auto& elements = grammar_->elements();
  const auto& sets = grammar_->byte_sets();
  for (const Stack& s : stacks_) {
    next_bytes_ |= sets[static_cast<std::size_t>(elements[static_cast<std::size_t>(s.back())].value)];
  }
}

bool GrammarMatcher::accept(std::uint8_t byte) {
  if (!ok_ || !next_bytes_.test(byte)) return false;
  const auto& elements = grammar_->elements();
  const auto& sets = grammar_->byte_sets();
  std::vector<Stack> next;
  bool complete = false;
  for (const Stack& s : stacks_) {
    const std::int32_t p = s.back();
    if (!sets[static_cast<std::size_t>(elements[static_cast<std::size_t>(p)].value)].test(byte)) continue;
    Stack advanced(s.begin(), s.end() - 1);
    if (elements[static_cast<std::size_t>(p) + 1].kind != Grammar::Kind::kEnd) advanced.push_back(p + 1);
    expand(std::move(advanced), next, &complete);
  }
  set_stacks(std::move(next), complete);
  return ok_;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  if (bytes.empty()) return ok_;
  GrammarMatcher trial = *this;
  for (char c : bytes) {
    if (!trial.accept(static_cast<std::uint8_t>(c))) return false;
  }
  *this = std::move(trial);
  return true;
}

}  // namespace baton::structured

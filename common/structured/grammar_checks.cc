#include "common/structured/grammar_checks.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::structured {
namespace {

using Kind = Grammar::Kind;

// Fixpoint of "some alternative has only elements that satisfy `ok`".
std::vector<bool> RulesWhere(const Grammar& g, bool bytes_ok) {
  const auto& rules = g.rules();
  const auto& elements = g.elements();
  std::vector<bool> result(rules.size(), false);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (result[r]) continue;
      for (uint32_t start : rules[r].alternatives) {
        bool all = true;
        for (uint32_t p = start; elements[p].kind != Kind::kEnd; ++p) {
          const Grammar::Element& e = elements[p];
          if (e.kind == Kind::kBytes ? !bytes_ok : !result[e.arg]) {
            all = false;
            break;
          }
        }
        if (all) {
          result[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return result;
}

}  // namespace

absl::Status CheckGrammar(const Grammar& g) {
  const auto& rules = g.rules();
  const auto& elements = g.elements();
  const std::vector<bool> productive = RulesWhere(g, /*bytes_ok=*/true);
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!productive[r]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grammar rule \"", rules[r].name, "\" can never finish (every alternative recurses)"));
    }
  }
  const std::vector<bool> nullable = RulesWhere(g, /*bytes_ok=*/false);
  // Left corners: the rules an alternative can start with, through nullable prefixes.
  std::vector<std::vector<uint32_t>> corners(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    for (uint32_t start : rules[r].alternatives) {
      for (uint32_t p = start; elements[p].kind == Kind::kRule; ++p) {
        corners[r].push_back(elements[p].arg);
        if (!nullable[elements[p].arg]) break;
      }
    }
  }
  // Iterative DFS for a cycle.
  enum : uint8_t { kWhite, kGrey, kBlack };
  std::vector<uint8_t> color(rules.size(), kWhite);
  for (size_t s = 0; s < rules.size(); ++s) {
    if (color[s] != kWhite) continue;
    std::vector<std::pair<uint32_t, size_t>> stack = {{static_cast<uint32_t>(s), 0}};
    color[s] = kGrey;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == corners[r].size()) {
        color[r] = kBlack;
        stack.pop_back();
        continue;
      }
      const uint32_t c = corners[r][next++];
      if (color[c] == kGrey) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grammar rule \"", rules[c].name,
            "\" is left-recursive (it can reach itself before matching anything); "
            "write the repetition with * or + instead"));
      }
      if (color[c] == kWhite) {
        color[c] = kGrey;
        stack.push_back({c, 0});
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::structured

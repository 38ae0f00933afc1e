// GBNF text -> Grammar (grammar.h). A recursive-descent parser builds a small syntax tree;
// GrammarBuilder then lowers it to the flat element form, turning classes into UTF-8 byte
// sequences and repetitions into right-recursive helper rules.
#include <algorithm>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/structured/grammar.h"
#include "common/structured/grammar_checks.h"
#include "common/structured/utf8_ranges.h"

namespace tessera::structured {
namespace {

constexpr int kUnbounded = -1;
constexpr int kMaxRepetition = 100000;
constexpr int kMaxNesting = 256;

struct Sequence;

struct Item {
  enum class Kind { kLiteral, kClass, kRef, kGroup };
  Kind kind = Kind::kLiteral;
  std::vector<uint32_t> code_points;                  // kLiteral.
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kClass, after negation.
  std::string name;                                   // kRef.
  std::vector<Sequence> alternatives;                 // kGroup.
  int min = 1;
  int max = 1;  // kUnbounded: no limit.
  int line = 0;
  int column = 0;
};

struct Sequence {
  std::vector<Item> items;
};

struct RuleDefinition {
  std::string name;
  std::vector<Sequence> alternatives;
  int line = 0;
};

class Parser {
 public:
  Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::vector<RuleDefinition>> Parse() {
    std::vector<RuleDefinition> rules;
    SkipSpace();
    while (pos_ < text_.size()) {
      RuleDefinition rule;
      rule.line = line_;
      ASSIGN_OR_RETURN(rule.name, ParseName());
      SkipSpace();
      if (!Consume("::=")) return Error("expected ::= after the rule name");
      SkipSpace();
      ASSIGN_OR_RETURN(rule.alternatives, ParseAlternatives(0));
      if (pos_ < text_.size() && !AtRuleStart()) {
        return Error(absl::StrCat("unexpected '", text_.substr(pos_, 1), "'"));
      }
      rules.push_back(std::move(rule));
    }
    if (rules.empty()) return absl::InvalidArgumentError("the grammar has no rules");
    return rules;
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar line ", line_, " column ", pos_ - line_start_ + 1, ": ", message));
  }

  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
  }

  void Advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        Advance();
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') Advance();
      } else {
        break;
      }
    }
  }

  bool Consume(absl::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    for (size_t i = 0; i < s.size(); ++i) Advance();
    return true;
  }

  // Whether a new rule (`name ::=`) starts here: a rule body ends where the next begins.
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size()) {
      const char c = text_[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < text_.size() && text_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    return text_.substr(p, 3) == "::=";
  }

  absl::StatusOr<std::string> ParseName() {
    const size_t begin = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) Advance();
    if (pos_ == begin) return Error("expected a rule name");
    return std::string(text_.substr(begin, pos_ - begin));
  }

  absl::StatusOr<std::vector<Sequence>> ParseAlternatives(int depth) {
    if (depth > kMaxNesting) return Error("groups nested too deeply");
    std::vector<Sequence> alternatives;
    while (true) {
      ASSIGN_OR_RETURN(Sequence seq, ParseSequence(depth));
      alternatives.push_back(std::move(seq));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        Advance();
        SkipSpace();
        continue;
      }
      return alternatives;
    }
  }

  absl::StatusOr<Sequence> ParseSequence(int depth) {
    Sequence seq;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size()) return seq;
      const char c = text_[pos_];
      if (c == '|' || c == ')') return seq;
      if (IsNameChar(c) && AtRuleStart()) return seq;
      Item item;
      item.line = line_;
      item.column = static_cast<int>(pos_ - line_start_ + 1);
      if (c == '"') {
        Advance();
        item.kind = Item::Kind::kLiteral;
        while (true) {
          if (pos_ >= text_.size()) return Error("unterminated string literal");
          if (text_[pos_] == '"') {
            Advance();
            break;
          }
          ASSIGN_OR_RETURN(uint32_t cp, ParseChar());
          item.code_points.push_back(cp);
        }
      } else if (c == '[') {
        Advance();
        item.kind = Item::Kind::kClass;
        RETURN_IF_ERROR(ParseClass(&item));
      } else if (c == '.') {
        Advance();
        item.kind = Item::Kind::kClass;
        item.ranges = {{0, 0x10FFFF}};
      } else if (c == '(') {
        Advance();
        item.kind = Item::Kind::kGroup;
        SkipSpace();
        ASSIGN_OR_RETURN(item.alternatives, ParseAlternatives(depth + 1));
        SkipSpace();
        if (pos_ >= text_.size() || text_[pos_] != ')') return Error("expected ')'");
        Advance();
      } else if (IsNameChar(c)) {
        item.kind = Item::Kind::kRef;
        ASSIGN_OR_RETURN(item.name, ParseName());
      } else {
        return Error(absl::StrCat("unexpected '", text_.substr(pos_, 1), "'"));
      }
      RETURN_IF_ERROR(ParseQuantifiers(&item));
      seq.items.push_back(std::move(item));
    }
  }

  // A postfix operator applies to everything before it, so `x?*` nests.
  absl::Status ParseQuantifiers(Item* item) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      int min = 0, max = 0;
      if (c == '?') {
        Advance();
        min = 0, max = 1;
      } else if (c == '*') {
        Advance();
        min = 0, max = kUnbounded;
      } else if (c == '+') {
        Advance();
        min = 1, max = kUnbounded;
      } else if (c == '{') {
        Advance();
        SkipSpace();
        ASSIGN_OR_RETURN(min, ParseCount(0));
        SkipSpace();
        max = min;
        if (pos_ < text_.size() && text_[pos_] == ',') {
          Advance();
          SkipSpace();
          max = kUnbounded;
          if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
            ASSIGN_OR_RETURN(max, ParseCount(0));
            SkipSpace();
          }
        }
        if (pos_ >= text_.size() || text_[pos_] != '}') return Error("expected '}'");
        Advance();
        if (max != kUnbounded && max < min) return Error("repetition {m,n} with n < m");
      } else {
        return absl::OkStatus();
      }
      if (item->min == 1 && item->max == 1) {
        item->min = min;
        item->max = max;
      } else {
        Item inner = std::move(*item);
        Item outer;
        outer.kind = Item::Kind::kGroup;
        outer.line = inner.line;
        outer.column = inner.column;
        outer.alternatives.emplace_back();
        outer.alternatives.back().items.push_back(std::move(inner));
        outer.min = min;
        outer.max = max;
        *item = std::move(outer);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> ParseCount(int fallback) {
    const size_t begin = pos_;
    int64_t n = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      n = n * 10 + (text_[pos_] - '0');
      if (n > kMaxRepetition) {
        return Error(absl::StrCat("repetition count above ", kMaxRepetition));
      }
      Advance();
    }
    if (pos_ == begin) return fallback;
    return static_cast<int>(n);
  }

  absl::StatusOr<uint32_t> ParseHex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= text_.size()) return Error("truncated escape");
      const char c = text_[pos_];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return Error("bad hex digit in escape");
      }
      v = v * 16 + d;
      Advance();
    }
    if (v > 0x10FFFF) return Error("escape beyond U+10FFFF");
    return v;
  }

  // One character of a literal or class, escapes decoded, UTF-8 decoded.
  absl::StatusOr<uint32_t> ParseChar() {
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      Advance();
      if (pos_ >= text_.size()) return Error("truncated escape");
      const char e = text_[pos_];
      Advance();
      switch (e) {
        case 'n': return uint32_t{'\n'};
        case 'r': return uint32_t{'\r'};
        case 't': return uint32_t{'\t'};
        case 'f': return uint32_t{'\f'};
        case 'v': return uint32_t{'\v'};
        case '0': return uint32_t{0};
        case 'x': return ParseHex(2);
        case 'u': return ParseHex(4);
        case 'U': return ParseHex(8);
        default: return static_cast<uint32_t>(static_cast<unsigned char>(e));
      }
    }
    if (c < 0x80) {
      Advance();
      return uint32_t{c};
    }
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || pos_ + n > text_.size()) return Error("invalid UTF-8");
    uint32_t cp = c & (0xFF >> (n + 1));
    Advance();
    for (int i = 1; i < n; ++i) {
      const unsigned char b = static_cast<unsigned char>(text_[pos_]);
      if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
      Advance();
    }
    return cp;
  }

  absl::Status ParseClass(Item* item) {
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negated = true;
      Advance();
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated character class");
      if (text_[pos_] == ']') {
        Advance();
        break;
      }
      ASSIGN_OR_RETURN(uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        Advance();
        ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    if (negated) {
      std::vector<std::pair<uint32_t, uint32_t>> complement;
      uint32_t next = 0;
      for (const auto& r : merged) {
        if (r.first > next) complement.push_back({next, r.first - 1});
        next = r.second + 1;
      }
      if (next <= 0x10FFFF) complement.push_back({next, 0x10FFFF});
      merged = std::move(complement);
    }
    if (merged.empty()) return Error("character class matches nothing");
    item->ranges = std::move(merged);
    return absl::OkStatus();
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

// Lowers parsed rules to the flat form. An item's alternatives are built as element runs;
// a single run is inlined into the enclosing sequence, several become a helper rule.
class GrammarBuilder {
 public:
  GrammarBuilder(const GrammarLimits& limits) : limits_(limits), grammar_(new Grammar) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> Build(std::vector<RuleDefinition> rules) {
    for (const RuleDefinition& r : rules) {
      if (index_.contains(r.name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar line ", r.line, ": rule \"", r.name, "\" is defined twice"));
      }
      index_[r.name] = static_cast<uint32_t>(grammar_->rules_.size());
      grammar_->rules_.push_back({r.name, {}});
    }
    auto root = index_.find("root");
    if (root == index_.end()) {
      return absl::InvalidArgumentError("the grammar has no rule named \"root\"");
    }
    grammar_->root_ = root->second;
    for (RuleDefinition& r : rules) {
      Alternatives alts;
      for (const Sequence& seq : r.alternatives) {
        ASSIGN_OR_RETURN(Run run, BuildSequence(seq));
        alts.push_back(std::move(run));
      }
      RETURN_IF_ERROR(Define(index_[r.name], std::move(alts)));
    }
    RETURN_IF_ERROR(CheckGrammar(*grammar_));
    grammar_->fingerprint_ = Fingerprint(*grammar_);
    return std::shared_ptr<const Grammar>(std::move(grammar_));
  }

 private:
  using Run = std::vector<Grammar::Element>;
  using Alternatives = std::vector<Run>;

  absl::Status CountElements(size_t n) {
    num_elements_ += n;
    if (num_elements_ > limits_.max_elements) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "grammar expands to more than ", limits_.max_elements,
          " elements (bounded repetitions multiply what they repeat)"));
    }
    return absl::OkStatus();
  }

  absl::Status Define(uint32_t rule, Alternatives alts) {
    for (Run& run : alts) {
      RETURN_IF_ERROR(CountElements(run.size() + 1));
      grammar_->rules_[rule].alternatives.push_back(
          static_cast<uint32_t>(grammar_->elements_.size()));
      for (const Grammar::Element& e : run) {
        grammar_->elements_.push_back(e);
        grammar_->rule_of_.push_back(rule);
      }
      grammar_->elements_.push_back({Grammar::Kind::kEnd, 0});
      grammar_->rule_of_.push_back(rule);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> NewRule(absl::string_view base) {
    if (grammar_->rules_.size() >= limits_.max_rules) {
      return absl::ResourceExhaustedError(
          absl::StrCat("grammar needs more than ", limits_.max_rules, " rules"));
    }
    const uint32_t id = static_cast<uint32_t>(grammar_->rules_.size());
    grammar_->rules_.push_back({absl::StrCat(base, "-", id), {}});
    return id;
  }

  uint32_t ByteSet(const std::bitset<256>& set) {
    const std::string key = set.to_string();
    auto [it, inserted] = byte_set_index_.try_emplace(key, grammar_->byte_sets_.size());
    if (inserted) grammar_->byte_sets_.push_back(set);
    return static_cast<uint32_t>(it->second);
  }

  Grammar::Element Bytes(uint8_t lo, uint8_t hi) {
    std::bitset<256> set;
    for (int b = lo; b <= hi; ++b) set.set(b);
    return {Grammar::Kind::kBytes, ByteSet(set)};
  }

  // The alternatives an item matches once, before its quantifier.
  absl::StatusOr<Alternatives> BuildAtom(const Item& item) {
    switch (item.kind) {
      case Item::Kind::kLiteral: {
        Run run;
        for (uint32_t cp : item.code_points) {
          for (char b : EncodeUtf8(cp)) {
            const uint8_t u = static_cast<uint8_t>(b);
            run.push_back(Bytes(u, u));
          }
        }
        return Alternatives{std::move(run)};
      }
      case Item::Kind::kClass: {
        // Single bytes merge into one set; longer encodings stay one run each.
        std::bitset<256> ascii;
        Alternatives alts;
        for (const auto& [lo, hi] : item.ranges) {
          for (const std::vector<ByteRange>& seq : Utf8Sequences(lo, hi)) {
            if (seq.size() == 1) {
              for (int b = seq[0].lo; b <= seq[0].hi; ++b) ascii.set(b);
              continue;
            }
            Run run;
            for (const ByteRange& r : seq) run.push_back(Bytes(r.lo, r.hi));
            alts.push_back(std::move(run));
          }
        }
        if (ascii.any()) alts.insert(alts.begin(), Run{{Grammar::Kind::kBytes, ByteSet(ascii)}});
        return alts;
      }
      case Item::Kind::kRef: {
        auto it = index_.find(item.name);
        if (it == index_.end()) {
          return absl::InvalidArgumentError(absl::StrCat("grammar line ", item.line, " column ",
                                                         item.column, ": undefined rule \"",
                                                         item.name, "\""));
        }
        return Alternatives{Run{{Grammar::Kind::kRule, it->second}}};
      }
      case Item::Kind::kGroup: {
        Alternatives alts;
        for (const Sequence& seq : item.alternatives) {
          ASSIGN_OR_RETURN(Run run, BuildSequence(seq));
          alts.push_back(std::move(run));
        }
        return alts;
      }
    }
    return absl::InternalError("unknown grammar item");
  }

  // A single run inlined, else a helper rule holding the alternatives.
  absl::Status Emit(Alternatives alts, Run* out) {
    if (alts.size() == 1) {
      RETURN_IF_ERROR(CountElements(alts[0].size()));
      out->insert(out->end(), alts[0].begin(), alts[0].end());
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(uint32_t rule, NewRule("alt"));
    RETURN_IF_ERROR(Define(rule, std::move(alts)));
    out->push_back({Grammar::Kind::kRule, rule});
    return absl::OkStatus();
  }

  absl::Status BuildItem(const Item& item, Run* out) {
    ASSIGN_OR_RETURN(Alternatives alts, BuildAtom(item));
    if (item.min == 1 && item.max == 1) return Emit(std::move(alts), out);
    // Mandatory copies: several alternatives share one helper rule.
    if (item.min > 0) {
      Alternatives once = alts;
      if (once.size() > 1) {
        ASSIGN_OR_RETURN(uint32_t rule, NewRule("rep"));
        RETURN_IF_ERROR(Define(rule, std::move(once)));
        once = Alternatives{Run{{Grammar::Kind::kRule, rule}}};
      }
      for (int i = 0; i < item.min; ++i) RETURN_IF_ERROR(Emit(once, out));
    }
    if (item.max == item.min) return absl::OkStatus();
    if (item.max == kUnbounded) {
      // star ::= alt_1 star | ... | alt_n star | (empty): the tail call keeps stacks flat.
      ASSIGN_OR_RETURN(uint32_t star, NewRule("star"));
      Alternatives body;
      for (Run run : alts) {
        run.push_back({Grammar::Kind::kRule, star});
        body.push_back(std::move(run));
      }
      body.emplace_back();
      RETURN_IF_ERROR(Define(star, std::move(body)));
      out->push_back({Grammar::Kind::kRule, star});
      return absl::OkStatus();
    }
    // Up to k optional copies: opt_k ::= alt opt_(k-1) | (empty), opt_1 ::= alt | (empty).
    uint32_t previous = 0;
    for (int k = 1; k <= item.max - item.min; ++k) {
      ASSIGN_OR_RETURN(uint32_t opt, NewRule("opt"));
      Alternatives body;
      for (Run run : alts) {
        if (k > 1) run.push_back({Grammar::Kind::kRule, previous});
        body.push_back(std::move(run));
      }
      body.emplace_back();
      RETURN_IF_ERROR(Define(opt, std::move(body)));
      previous = opt;
    }
    out->push_back({Grammar::Kind::kRule, previous});
    return absl::OkStatus();
  }

  absl::StatusOr<Run> BuildSequence(const Sequence& seq) {
    Run run;
    for (const Item& item : seq.items) RETURN_IF_ERROR(BuildItem(item, &run));
    return run;
  }

  static std::string Fingerprint(const Grammar& g) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      h ^= v;
      h *= 1099511628211ull;
    };
    for (const Grammar::Element& e : g.elements()) {
      mix(static_cast<uint64_t>(e.kind));
      mix(e.arg);
    }
    for (const auto& set : g.byte_sets()) {
      for (int b = 0; b < 256; ++b) mix(set.test(b));
    }
    for (const Grammar::Rule& r : g.rules()) {
      for (uint32_t a : r.alternatives) mix(a);
      mix(0xFFFFFFFFu);
    }
    mix(g.root());
    return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
  }

  const GrammarLimits limits_;
  std::unique_ptr<Grammar> grammar_;
  absl::flat_hash_map<std::string, uint32_t> index_;
  absl::flat_hash_map<std::string, size_t> byte_set_index_;
  size_t num_elements_ = 0;
};

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::FromGbnf(absl::string_view text,
                                                                const GrammarLimits& limits) {
  if (text.size() > limits.max_source_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "grammar is ", text.size(), " bytes, above the limit of ", limits.max_source_bytes));
  }
  Parser parser(text);
  ASSIGN_OR_RETURN(std::vector<RuleDefinition> rules, parser.Parse());
  GrammarBuilder builder(limits);
  return builder.Build(std::move(rules));
}

}  // namespace tessera::structured

#include "common/structured/regex_parser.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::structured::regex_internal {

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

Ranges Intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t lo = std::max(a[i].first, b[j].first);
    const uint32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

namespace {

Node ClassNode(Ranges r) {
  Node n;
  n.kind = Node::Kind::kClass;
  n.ranges = Normalize(std::move(r));
  return n;
}

// ECMAScript's definitions (JSON Schema patterns are ECMA-262): \w and \d are ASCII.
Ranges DigitRanges() { return {{'0', '9'}}; }
Ranges WordRanges() { return Normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
Ranges SpaceRanges() {
  return Normalize({{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680},
                    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                    {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}

class RegexParser {
 public:
  explicit RegexParser(std::vector<uint32_t> cps) : cps_(std::move(cps)) {}

  absl::StatusOr<Node> Parse() {
    absl::StatusOr<Node> node = ParseAlternation(0);
    if (!node.ok()) return node;
    if (pos_ < cps_.size()) return Error("unbalanced ')'");
    return node;
  }

 private:
  bool AtEnd() const { return pos_ >= cps_.size(); }
  uint32_t Peek(size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0xFFFFFFFF;
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported regular expression: ", what, " at offset ", pos_));
  }

  absl::StatusOr<Node> ParseAlternation(int depth) {
    if (depth > kMaxDepth) {
      return absl::ResourceExhaustedError(
          absl::StrCat("regular expression nests groups deeper than ", kMaxDepth));
    }
    Node alt;
    alt.kind = Node::Kind::kAlternation;
    while (true) {
      absl::StatusOr<Node> seq = ParseSequence(depth);
      if (!seq.ok()) return seq;
      alt.children.push_back(*std::move(seq));
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  absl::StatusOr<Node> ParseSequence(int depth) {
    Node seq;
    seq.kind = Node::Kind::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const uint32_t c = Peek();
      // Anchors mean nothing at the ends of the whole pattern (of a top-level
      // alternative): the grammar matches the full text anyway. Anywhere else they would
      // constrain the context, which a grammar fragment cannot see.
      if (c == '^') {
        if (depth == 0 && seq.children.empty()) {
          ++pos_;
          continue;
        }
        return Error("anchor '^' inside the pattern");
      }
      if (c == '$') {
        ++pos_;
        if (depth == 0 && (AtEnd() || Peek() == '|')) continue;
        --pos_;
        return Error("anchor '$' inside the pattern");
      }
      absl::StatusOr<Node> atom = ParseAtom(depth);
      if (!atom.ok()) return atom;
      if (atom->kind == Node::Kind::kEmpty && atom->children.empty() &&
          atom->ranges.empty() && atom->min == 1) {
        continue;  // An anchor escape (\A, \Z) at an end.
      }
      absl::StatusOr<Node> quantified = ParseQuantifiers(*std::move(atom));
      if (!quantified.ok()) return quantified;
      seq.children.push_back(*std::move(quantified));
    }
    if (seq.children.empty()) return Node{};
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    return seq;
  }

  // Reads {m}, {m,}, {m,n} or {,n} at the current position; false (position unchanged)
  // where the brace is a literal.
  bool ReadBraces(int* min, int* max, bool* too_big) {
    size_t p = pos_ + 1;
    auto number = [&](int* out) {
      const size_t start = p;
      int64_t v = 0;
      while (p < cps_.size() && cps_[p] >= '0' && cps_[p] <= '9') {
        v = std::min<int64_t>(v * 10 + (cps_[p] - '0'), int64_t{kMaxCount} + 1);
        ++p;
      }
      if (v > kMaxCount) *too_big = true;
      *out = static_cast<int>(std::min<int64_t>(v, kMaxCount));
      return p > start;
    };
    const bool has_min = number(min);
    if (p < cps_.size() && cps_[p] == '}') {
      if (!has_min) return false;
      *max = *min;
    } else if (p < cps_.size() && cps_[p] == ',') {
      ++p;
      if (!has_min) *min = 0;
      const bool has_max = number(max);
      if (!has_min && !has_max) return false;
      if (!has_max) *max = -1;
      if (p >= cps_.size() || cps_[p] != '}') return false;
    } else {
      return false;
    }
    pos_ = p + 1;
    return true;
  }

  bool AtQuantifier() {
    const uint32_t c = Peek();
    if (c == '*' || c == '+' || c == '?') return true;
    if (c != '{') return false;
    const size_t saved = pos_;
    int min = 0, max = 0;
    bool too_big = false;
    const bool is = ReadBraces(&min, &max, &too_big);
    pos_ = saved;
    return is;
  }

  absl::StatusOr<Node> ParseQuantifiers(Node atom) {
    if (!AtQuantifier()) return atom;
    int min = 0, max = -1;
    const uint32_t c = Peek();
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      min = 1;
      ++pos_;
    } else if (c == '?') {
      max = 1;
      ++pos_;
    } else {
      bool too_big = false;
      ReadBraces(&min, &max, &too_big);
      if (too_big) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "regular expression repetition count above ", kMaxCount, " at offset ", pos_));
      }
      if (max != -1 && max < min) return Error("repetition {m,n} with n < m");
    }
    if (Peek() == '?') ++pos_;  // Lazy: the same strings.
    if (Peek() == '+') return Error("possessive quantifier");
    if (AtQuantifier()) return Error("quantifier after a quantifier");
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.children.push_back(std::move(atom));
    return rep;
  }

  absl::StatusOr<Node> ParseAtom(int depth) {
    const uint32_t c = Peek();
    if (c == '(') return ParseGroup(depth);
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return ClassNode(Complement({{'\n', '\n'}}));
    }
    if (c == '*' || c == '+' || c == '?' || AtQuantifier()) return Error("nothing to repeat");
    if (c == '\\') return ParseEscape(/*in_class=*/false);
    ++pos_;
    return ClassNode({{c, c}});
  }

  absl::StatusOr<Node> ParseGroup(int depth) {
    ++pos_;  // '('
    if (Peek() == '?') {
      const uint32_t k = Peek(1);
      if (k == ':') {
        pos_ += 2;
      } else if ((k == '<' && Peek(2) != '=' && Peek(2) != '!') || (k == 'P' && Peek(2) == '<')) {
        pos_ += k == 'P' ? 3 : 2;
        while (!AtEnd() && Peek() != '>') ++pos_;
        if (AtEnd()) return Error("unterminated group name");
        ++pos_;
      } else if (k == '=' || k == '!' || k == '<') {
        return Error("lookaround");
      } else if (k == 'P' && Peek(2) == '=') {
        return Error("backreference");
      } else {
        return Error("group flags or extension (?...)");
      }
    }
    absl::StatusOr<Node> inner = ParseAlternation(depth + 1);
    if (!inner.ok()) return inner;
    if (Peek() != ')') return Error("missing ')'");
    ++pos_;
    return inner;
  }

  // Reads exactly `digits` hex digits (or, with digits 0, a {...} code point).
  absl::StatusOr<uint32_t> ReadHex(int digits) {
    uint32_t v = 0;
    auto hex = [](uint32_t c) -> int {
      if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
      if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
      if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
      return -1;
    };
    if (digits == 0) {
      ++pos_;  // '{'
      int n = 0;
      while (!AtEnd() && Peek() != '}') {
        const int d = hex(Peek());
        if (d < 0 || ++n > 6) return Error("bad \\u{...} escape");
        v = v * 16 + static_cast<uint32_t>(d);
        ++pos_;
      }
      if (AtEnd() || n == 0) return Error("bad \\u{...} escape");
      ++pos_;
    } else {
      for (int i = 0; i < digits; ++i) {
        const int d = hex(Peek());
        if (d < 0) return Error("bad hex escape");
        v = v * 16 + static_cast<uint32_t>(d);
        ++pos_;
      }
    }
    if (v > kMaxCodePoint) return Error("code point past U+10FFFF");
    return v;
  }

  // After a backslash: a class (\d ...) or one code point. Outside a class, \A and \Z
  // at the pattern's ends come back as a marker node (kEmpty with min 1).
  absl::StatusOr<Node> ParseEscape(bool in_class) {
    ++pos_;  // '\\'
    if (AtEnd()) return Error("trailing backslash");
    const uint32_t c = Peek();
    ++pos_;
    switch (c) {
      case 'd': return ClassNode(DigitRanges());
      case 'D': return ClassNode(Complement(DigitRanges()));
      case 'w': return ClassNode(WordRanges());
      case 'W': return ClassNode(Complement(WordRanges()));
      case 's': return ClassNode(SpaceRanges());
      case 'S': return ClassNode(Complement(SpaceRanges()));
      case 'n': return ClassNode({{'\n', '\n'}});
      case 't': return ClassNode({{'\t', '\t'}});
      case 'r': return ClassNode({{'\r', '\r'}});
      case 'f': return ClassNode({{'\f', '\f'}});
      case 'v': return ClassNode({{'\v', '\v'}});
      case 'a': return ClassNode({{0x07, 0x07}});
      case 'x': {
        absl::StatusOr<uint32_t> v = ReadHex(2);
        if (!v.ok()) return v.status();
        return ClassNode({{*v, *v}});
      }
      case 'u': {
        absl::StatusOr<uint32_t> v = ReadHex(Peek() == '{' ? 0 : 4);
        if (!v.ok()) return v.status();
        return ClassNode({{*v, *v}});
      }
      case 'U': {
        absl::StatusOr<uint32_t> v = ReadHex(8);
        if (!v.ok()) return v.status();
        return ClassNode({{*v, *v}});
      }
      case '0':
        if (Peek() >= '0' && Peek() <= '9') return Error("octal escape");
        return ClassNode({{0, 0}});
      case 'b':
        if (in_class) return ClassNode({{0x08, 0x08}});
        return Error("word boundary \\b");
      case 'B': return Error("word boundary \\B");
      case 'A':
      case 'Z':
      case 'z': {
        const bool at_start = c == 'A' && pos_ == 2;
        const bool at_end = c != 'A' && AtEnd();
        if (in_class || !(at_start || at_end)) return Error("anchor inside the pattern");
        Node marker;
        marker.min = 1;
        return marker;
      }
      case 'k': return Error("backreference");
      case 'p':
      case 'P': return Error("Unicode property escape");
      case 'c': return Error("control escape \\c");
      default:
        break;
    }
    if (c >= '1' && c <= '9') return Error("backreference");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      --pos_;
      return Error(absl::StrCat("unknown escape \\", std::string(1, static_cast<char>(c))));
    }
    return ClassNode({{c, c}});
  }

  absl::StatusOr<Node> ParseClass() {
    ++pos_;  // '['
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Peek() == ']' && !first) break;
      first = false;
      // One item: a code point, possibly the start of a range, or a class escape.
      uint32_t lo;
      if (Peek() == '\\') {
        absl::StatusOr<Node> e = ParseEscape(/*in_class=*/true);
        if (!e.ok()) return e;
        const Ranges& r = e->ranges;
        if (r.size() != 1 || r[0].first != r[0].second) {
          ranges.insert(ranges.end(), r.begin(), r.end());
          continue;
        }
        lo = r[0].first;
      } else {
        lo = Peek();
        ++pos_;
      }
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != 0xFFFFFFFF) {
        ++pos_;
        uint32_t hi;
        if (Peek() == '\\') {
          absl::StatusOr<Node> e = ParseEscape(/*in_class=*/true);
          if (!e.ok()) return e;
          const Ranges& r = e->ranges;
          if (r.size() != 1 || r[0].first != r[0].second) {
            // [a-\d]: the '-' is a literal, as ECMAScript's Annex B reads it.
            ranges.emplace_back(lo, lo);
            ranges.emplace_back('-', '-');
            ranges.insert(ranges.end(), r.begin(), r.end());
            continue;
          }
          hi = r[0].first;
        } else {
          hi = Peek();
          ++pos_;
        }
        if (hi < lo) return Error("class range out of order");
        ranges.emplace_back(lo, hi);
      } else {
        ranges.emplace_back(lo, lo);
      }
    }
    ++pos_;  // ']'
    ranges = Normalize(std::move(ranges));
    return ClassNode(negate ? Complement(ranges) : ranges);
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Node> ParseRegex(absl::string_view pattern) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < pattern.size();) {
    const auto b = static_cast<unsigned char>(pattern[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > pattern.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("regular expression is not valid UTF-8 at byte ", i));
    }
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(pattern[i + k]);
      if ((c & 0xC0) != 0x80) {
        return absl::InvalidArgumentError(
            absl::StrCat("regular expression is not valid UTF-8 at byte ", i));
      }
      cp = (cp << 6) | (c & 0x3F);
    }
    cps.push_back(cp);
    i += len;
  }
  return RegexParser(std::move(cps)).Parse();
}

}  // namespace tessera::structured::regex_internal

#include "common/structured/regex_grammar.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/structured/regex_parser.h"

namespace tessera::structured {
namespace {

using regex_internal::Complement;
using regex_internal::Intersect;
using regex_internal::kMaxCodePoint;
using regex_internal::Node;
using regex_internal::Normalize;
using regex_internal::Ranges;

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// One code point as GBNF writes it inside "..." (in_class false) or [...] (in_class true).
void AppendGbnfChar(uint32_t cp, bool in_class, std::string* out) {
  if (cp == '"') {
    out->append("\\\"");
  } else if (cp == '\\') {
    out->append("\\\\");
  } else if (cp == '\n') {
    out->append("\\n");
  } else if (cp == '\t') {
    out->append("\\t");
  } else if (cp == '\r') {
    out->append("\\r");
  } else if (cp < 0x20 || cp == 0x7F ||
             (in_class && (cp == ']' || cp == '[' || cp == '^' || cp == '-'))) {
    absl::StrAppendFormat(out, "\\x%02X", cp);
  } else if ((cp >= 0x80 && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
             (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
             (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || (cp >= 0xD800 && cp <= 0xDFFF) ||
             cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFF)) {
    // Invisible characters (spaces, joiners, line separators) are written as escapes so
    // that the grammar text stays readable; surrogates have no UTF-8 form at all.
    absl::StrAppendFormat(out, "\\u%04X", cp);
  } else {
    AppendUtf8(cp, out);
  }
}

// `text` (code points) as a GBNF string literal.
std::string GbnfLiteral(const std::vector<uint32_t>& text) {
  std::string out = "\"";
  for (uint32_t cp : text) AppendGbnfChar(cp, /*in_class=*/false, &out);
  out.push_back('"');
  return out;
}

// A GBNF character class for a non-empty set, negated where that is shorter.
std::string GbnfClass(const Ranges& ranges) {
  const Ranges complement = Complement(ranges);
  const bool negate = complement.size() < ranges.size() ||
                      (!ranges.empty() && ranges.back().second == kMaxCodePoint);
  std::string out = negate ? "[^" : "[";
  for (const auto& [lo, hi] : negate ? complement : ranges) {
    AppendGbnfChar(lo, /*in_class=*/true, &out);
    if (hi == lo) continue;
    if (hi > lo + 1) out.push_back('-');
    AppendGbnfChar(hi, /*in_class=*/true, &out);
  }
  out.push_back(']');
  return out;
}

// --- Emitting ----------------------------------------------------------------------------

// What an emitted piece is, which decides where it needs parentheses.
enum class Shape {
  kLiteral,      // Code points in `literal`, not yet written out.
  kAtom,         // A class or parenthesised group: safe to quantify.
  kSequence,     // Several items: parenthesise before quantifying.
  kAlternation,  // a | b: parenthesise inside a sequence too.
};

struct Piece {
  Shape shape;
  std::vector<uint32_t> literal;
  std::string text;
  size_t cost = 0;  // Bytes once bounded repetitions are expanded.
};

std::string Text(const Piece& p) {
  return p.shape == Shape::kLiteral ? GbnfLiteral(p.literal) : p.text;
}

// The characters a JSON string cannot hold as themselves. DEL may stand as itself in
// JSON, but the JSON string rules escape it too, so the two stay consistent.
const Ranges& JsonEscaped() {
  static const Ranges* r = new Ranges{{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
  return *r;
}

// The JSON text of a character that must be escaped, as code points.
std::vector<uint32_t> JsonEscape(uint32_t cp) {
  std::string s;
  switch (cp) {
    case '"': s = "\\\""; break;
    case '\\': s = "\\\\"; break;
    case '\b': s = "\\b"; break;
    case '\f': s = "\\f"; break;
    case '\n': s = "\\n"; break;
    case '\r': s = "\\r"; break;
    case '\t': s = "\\t"; break;
    default: s = absl::StrFormat("\\u%04x", cp);
  }
  return std::vector<uint32_t>(s.begin(), s.end());
}

bool Nullable(const Node& node) {
  switch (node.kind) {
    case Node::Kind::kEmpty: return true;
    case Node::Kind::kClass: return false;
    case Node::Kind::kConcat:
      return std::all_of(node.children.begin(), node.children.end(), Nullable);
    case Node::Kind::kAlternation:
      return std::any_of(node.children.begin(), node.children.end(), Nullable);
    case Node::Kind::kRepeat: return node.min == 0 || Nullable(node.children[0]);
  }
  return true;
}

// Appends parts P1..Pk that cannot match the empty string with (P1 | ... | Pk)* equal
// to `node`*. A nullable sequence or repetition adds its parts: every piece of a
// sequence of nullable items is a sentence of the sequence with the others empty.
void NonEmptyParts(const Node& node, std::vector<Node>* out) {
  if (!Nullable(node)) {
    out->push_back(node);
    return;
  }
  switch (node.kind) {
    case Node::Kind::kEmpty:
    case Node::Kind::kClass:
      return;
    case Node::Kind::kConcat:
    case Node::Kind::kAlternation:
      for (const Node& child : node.children) NonEmptyParts(child, out);
      return;
    case Node::Kind::kRepeat:
      NonEmptyParts(node.children[0], out);
      return;
  }
}

class Emitter {
 public:
  Emitter(RegexContext context, size_t max_bytes) : context_(context), max_bytes_(max_bytes) {}

  absl::StatusOr<Piece> Emit(const Node& node) {
    switch (node.kind) {
      case Node::Kind::kEmpty: return Piece{Shape::kLiteral, {}, "", 0};
      case Node::Kind::kClass: return EmitClass(node.ranges);
      case Node::Kind::kConcat: return EmitConcat(node);
      case Node::Kind::kAlternation: return EmitAlternation(node);
      case Node::Kind::kRepeat: return EmitRepeat(node);
    }
    return absl::InternalError("unreachable");
  }

 private:
  absl::Status CheckCost(size_t cost) const {
    if (cost <= max_bytes_) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "regular expression expands past ", max_bytes_, " bytes of grammar"));
  }

  absl::StatusOr<Piece> EmitClass(const Ranges& ranges) {
    if (ranges.empty()) {
      return absl::InvalidArgumentError(
          "unsupported regular expression: a character class that matches nothing");
    }
    Ranges plain = ranges;
    std::vector<Piece> escaped;
    if (context_ == RegexContext::kJsonString) {
      plain = Intersect(ranges, Complement(JsonEscaped()));
      const Ranges special = Intersect(ranges, JsonEscaped());
      // Controls without a short escape are written \u00XX, grouped by their first
      // hex digit so a negated class does not become 30 alternatives.
      std::vector<uint32_t> by_nibble[8];
      for (const auto& [lo, hi] : special) {
        for (uint32_t cp = lo; cp <= hi; ++cp) {
          const std::vector<uint32_t> e = JsonEscape(cp);
          if (e.size() == 2) {
            escaped.push_back(Piece{Shape::kLiteral, e, "", 6});
          } else {
            by_nibble[cp >> 4].push_back(cp & 0xF);
          }
        }
      }
      for (uint32_t high = 0; high < 8; ++high) {
        const std::vector<uint32_t>& lows = by_nibble[high];
        if (lows.empty()) continue;
        std::string text = absl::StrFormat("\"\\\\u00%x\"", high);
        if (lows.size() == 1) {
          text = absl::StrFormat("\"\\\\u00%x%x\"", high, lows[0]);
        } else {
          Ranges hex;
          for (uint32_t l : lows) {
            const uint32_t ch = l < 10 ? '0' + l : 'a' + l - 10;
            hex.emplace_back(ch, ch);
          }
          absl::StrAppend(&text, " ", GbnfClass(Normalize(hex)));
        }
        escaped.push_back(Piece{Shape::kSequence, {}, text, text.size()});
      }
    }
    std::vector<Piece> alternatives;
    if (!plain.empty()) {
      if (plain.size() == 1 && plain[0].first == plain[0].second) {
        alternatives.push_back(Piece{Shape::kLiteral, {plain[0].first}, "", 3});
      } else {
        std::string text = GbnfClass(plain);
        alternatives.push_back(Piece{Shape::kAtom, {}, text, text.size()});
      }
    }
    for (Piece& p : escaped) alternatives.push_back(std::move(p));
    return Alternate(std::move(alternatives));
  }

  static Piece Alternate(std::vector<Piece> alternatives) {
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    Piece out{Shape::kAlternation, {}, "", 0};
    for (size_t i = 0; i < alternatives.size(); ++i) {
      if (i > 0) out.text.append(" | ");
      out.text.append(Text(alternatives[i]));
      out.cost += alternatives[i].cost + 3;
    }
    return out;
  }

  absl::StatusOr<Piece> EmitConcat(const Node& node) {
    std::vector<Piece> items;
    size_t cost = 0;
    for (const Node& child : node.children) {
      absl::StatusOr<Piece> p = Emit(child);
      if (!p.ok()) return p;
      cost += p->cost + 1;
      if (absl::Status s = CheckCost(cost); !s.ok()) return s;
      if (p->shape == Shape::kLiteral && !items.empty() && items.back().shape == Shape::kLiteral) {
        items.back().literal.insert(items.back().literal.end(), p->literal.begin(),
                                    p->literal.end());
        continue;
      }
      items.push_back(*std::move(p));
    }
    if (items.size() == 1) {
      items[0].cost = cost;
      return std::move(items[0]);
    }
    Piece out{Shape::kSequence, {}, "", cost};
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out.text.push_back(' ');
      if (items[i].shape == Shape::kAlternation) {
        absl::StrAppend(&out.text, "( ", items[i].text, " )");
      } else {
        out.text.append(Text(items[i]));
      }
    }
    return out;
  }

  absl::StatusOr<Piece> EmitAlternation(const Node& node) {
    std::vector<Piece> alternatives;
    size_t cost = 0;
    for (const Node& child : node.children) {
      absl::StatusOr<Piece> p = Emit(child);
      if (!p.ok()) return p;
      cost += p->cost + 3;
      if (absl::Status s = CheckCost(cost); !s.ok()) return s;
      alternatives.push_back(*std::move(p));
    }
    Piece out = Alternate(std::move(alternatives));
    out.cost = cost;
    return out;
  }

  absl::StatusOr<Piece> EmitRepeat(const Node& node) {
    if (node.max == -1 && Nullable(node.children[0])) {
      // The grammar compiler turns X* into `r ::= X r | ""`, which recurses on its left
      // when X can match nothing. X{m,} with such an X is X*, and X* is (A | B | ...)*
      // over the parts of X that cannot match nothing.
      Node body;
      body.kind = Node::Kind::kAlternation;
      NonEmptyParts(node.children[0], &body.children);
      if (body.children.empty()) return Piece{Shape::kLiteral, {}, "", 0};
      Node star;
      star.kind = Node::Kind::kRepeat;
      star.min = 0;
      star.max = -1;
      star.children.push_back(body.children.size() == 1 ? std::move(body.children[0])
                                                         : std::move(body));
      return EmitRepeat(star);
    }
    absl::StatusOr<Piece> inner = Emit(node.children[0]);
    if (!inner.ok()) return inner;
    if (node.max == 0) return Piece{Shape::kLiteral, {}, "", 0};
    // Bounded repetitions are expanded by the grammar compiler, so they are what costs.
    const size_t copies = static_cast<size_t>(node.max == -1 ? node.min + 1 : node.max);
    if (inner->cost > 0 && copies > max_bytes_ / inner->cost) return CheckCost(max_bytes_ + 1);
    const size_t cost = inner->cost * copies + 8;
    if (absl::Status s = CheckCost(cost); !s.ok()) return s;
    if (node.min == 1 && node.max == 1) return inner;
    std::string text;
    const bool atom = inner->shape == Shape::kAtom ||
                      (inner->shape == Shape::kLiteral && inner->literal.size() == 1);
    if (atom) {
      text = Text(*inner);
    } else {
      text = absl::StrCat("( ", Text(*inner), " )");
    }
    if (node.min == 0 && node.max == 1) {
      text.push_back('?');
    } else if (node.min == 0 && node.max == -1) {
      text.push_back('*');
    } else if (node.min == 1 && node.max == -1) {
      text.push_back('+');
    } else if (node.max == -1) {
      absl::StrAppend(&text, "{", node.min, ",}");
    } else if (node.min == node.max) {
      absl::StrAppend(&text, "{", node.min, "}");
    } else {
      absl::StrAppend(&text, "{", node.min, ",", node.max, "}");
    }
    // A quantified item quantified again needs parentheses: ( "a"{2} ){3}.
    return Piece{Shape::kSequence, {}, text, cost};
  }

  RegexContext context_;
  size_t max_bytes_;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(absl::string_view pattern, RegexContext context,
                                        size_t max_bytes) {
  absl::StatusOr<regex_internal::Node> node = regex_internal::ParseRegex(pattern);
  if (!node.ok()) return node.status();
  Emitter emitter(context, max_bytes);
  absl::StatusOr<Piece> piece = emitter.Emit(*node);
  if (!piece.ok()) return piece.status();
  std::string text = Text(*piece);
  if (text.size() > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("regular expression expands past ", max_bytes, " bytes of grammar"));
  }
  return text;
}

}  // namespace tessera::structured

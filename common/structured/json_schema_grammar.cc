#include "common/structured/json_schema_grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/structured/constraint_grammar.h"
#include "common/structured/regex_grammar.h"
#include "nlohmann/json.hpp"

namespace tessera::structured {
namespace {

// The converter reads objects in the order the schema lists them.
using Json = nlohmann::ordered_json;

constexpr size_t kMaxGrammarBytes = size_t{1} << 20;
constexpr int kMaxDepth = 64;
// Counts (lengths, items, properties) past this would expand into more grammar than the
// compiler accepts; refusing them here names the keyword.
constexpr int64_t kMaxCount = 100'000;
// Integers with no upper bound get up to 16 digits, so that generation ends.
constexpr uint64_t kUnboundedMagnitude = 9'999'999'999'999'999;
// Bounds past this are outside what the digit-range grammar handles exactly.
constexpr double kMaxBound = 1e18;

// One JSON string character: anything but '"', '\' and controls, or an escape.
constexpr char kStringChar[] =
    R"(( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) ))";

// Helper rules and their bodies; `$` stands for the rule prefix.
struct Helper {
  const char* name;
  const char* body;
};
constexpr Helper kHelpers[] = {
    {"space", R"(| " " | "\n" [ \t]{0,20})"},
    {"string",
     R"("\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" $space)"},
    {"integer", R"("-"? ( [0-9] | [1-9] [0-9]{0,15} ) $space)"},
    {"number",
     R"("-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,16} )? $space)"},
    {"boolean", R"(( "true" | "false" ) $space)"},
    {"null", R"("null" $space)"},
    {"value", R"($object | $array | $string | $number | $boolean | $null)"},
    {"object",
     R"("{" $space ( $string ":" $space $value ( "," $space $string ":" $space $value )* )? "}" $space)"},
    {"array", R"("[" $space ( $value ( "," $space $value )* )? "]" $space)"},
    // Days by month, so no impossible date ("2023-11-31") is written; February stops at
    // the 28th (the 29th would need the year's leap rule).
    {"date", R"([1-9] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02" "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))"},
    {"time",
     R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+\x2D] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
    {"date-time", R"($date "T" $time)"},
    {"uuid",
     R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
    {"email",
     R"([A-Za-z0-9._%+\x2D]{1,64} "@" [A-Za-z0-9\x2D]{1,63} ( "." [A-Za-z0-9\x2D]{1,63} ){0,4} "." [A-Za-z]{2,24})"},
    {"ipv4-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])"},
    {"ipv4", R"($ipv4-octet "." $ipv4-octet "." $ipv4-octet "." $ipv4-octet)"},
};
constexpr const char* kFormats[] = {"date-time", "date", "time", "email", "uuid", "ipv4"};

// Keywords that describe and never constrain.
const std::set<std::string>& Annotations() {
  static const auto* s = new std::set<std::string>{
      "title",    "description", "default",    "examples",        "$schema",
      "$id",      "$comment",    "deprecated", "readOnly",        "writeOnly",
      "$defs",    "definitions", "contentMediaType", "contentEncoding"};
  return *s;
}

const std::set<std::string>& ObjectKeywords() {
  static const auto* s = new std::set<std::string>{"properties", "required",
                                                   "additionalProperties", "minProperties",
                                                   "maxProperties"};
  return *s;
}
const std::set<std::string>& ArrayKeywords() {
  static const auto* s = new std::set<std::string>{"items", "prefixItems", "additionalItems",
                                                   "minItems", "maxItems", "uniqueItems"};
  return *s;
}
const std::set<std::string>& StringKeywords() {
  static const auto* s = new std::set<std::string>{"minLength", "maxLength", "pattern", "format"};
  return *s;
}
const std::set<std::string>& NumberKeywords() {
  static const auto* s = new std::set<std::string>{"minimum", "maximum", "exclusiveMinimum",
                                                   "exclusiveMaximum"};
  return *s;
}
const std::set<std::string>& GeneralKeywords() {
  static const auto* s = new std::set<std::string>{"type",  "enum",  "const", "anyOf",
                                                   "oneOf", "allOf", "$ref"};
  return *s;
}

std::string Where(const std::string& pointer) {
  return pointer.empty() ? "the root" : pointer;
}

std::string Child(const std::string& pointer, absl::string_view key) {
  std::string out = pointer + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

absl::Status Unsupported(absl::string_view keyword, const std::string& pointer) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported JSON Schema keyword \"", keyword,
                                                 "\" at ", Where(pointer)));
}

absl::Status Invalid(const std::string& pointer, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("JSON Schema at ", Where(pointer), ": ", what));
}

std::string CompactDump(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// `item` repeated min..max times (max nullopt: unbounded), in GBNF's postfix forms.
std::string Repeat(const std::string& item, int64_t min, std::optional<int64_t> max) {
  if (max.has_value() && *max == 0) return "";
  if (min == 1 && max == 1) return item;
  if (min == 0 && max == 1) return item + "?";
  if (!max.has_value()) {
    if (min == 0) return item + "*";
    if (min == 1) return item + "+";
    return absl::StrCat(item, "{", min, ",}");
  }
  if (min == *max) return absl::StrCat(item, "{", min, "}");
  return absl::StrCat(item, "{", min, ",", *max, "}");
}

std::string JoinSeq(std::initializer_list<absl::string_view> parts) {
  std::string out;
  for (absl::string_view p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out.append(p.data(), p.size());
  }
  return out;
}

// --- Integer ranges as digit patterns -------------------------------------------------

std::string DigitSpan(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return absl::StrCat("[", std::string(1, lo), "-", std::string(1, hi), "]");
}

std::string AnyDigits(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : absl::StrCat("[0-9]{", n, "}");
}

std::string Group(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
}

// The decimal strings of one length from `lo` to `hi` (same length, lo <= hi).
std::string SameLengthRange(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  const size_t rest = lo.size() - 1;
  if (lo[0] == hi[0]) {
    return JoinSeq({DigitSpan(lo[0], lo[0]), SameLengthRange(lo.substr(1), hi.substr(1))});
  }
  const bool lo_tail_zero = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_tail_nine = hi.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> alternatives;
  if (!lo_tail_zero) {
    alternatives.push_back(JoinSeq(
        {DigitSpan(lo[0], lo[0]), SameLengthRange(lo.substr(1), std::string(rest, '9'))}));
  }
  const char mid_lo = lo_tail_zero ? lo[0] : static_cast<char>(lo[0] + 1);
  const char mid_hi = hi_tail_nine ? hi[0] : static_cast<char>(hi[0] - 1);
  if (mid_lo <= mid_hi) alternatives.push_back(JoinSeq({DigitSpan(mid_lo, mid_hi), AnyDigits(rest)}));
  if (!hi_tail_nine) {
    alternatives.push_back(JoinSeq(
        {DigitSpan(hi[0], hi[0]), SameLengthRange(std::string(rest, '0'), hi.substr(1))}));
  }
  return Group(alternatives);
}

// Non-negative integers lo..hi written without leading zeros.
std::string UnsignedRange(uint64_t lo, uint64_t hi) {
  const std::string l = std::to_string(lo);
  const std::string h = std::to_string(hi);
  if (l.size() == h.size()) return SameLengthRange(l, h);
  std::vector<std::string> alternatives = {SameLengthRange(l, std::string(l.size(), '9'))};
  if (h.size() > l.size() + 1) {
    const size_t a = l.size(), b = h.size() - 2;  // Free digits after the first.
    alternatives.push_back(a == b ? JoinSeq({"[1-9]", AnyDigits(a)})
                                  : absl::StrCat("[1-9] [0-9]{", a, ",", b, "}"));
  }
  alternatives.push_back(SameLengthRange("1" + std::string(h.size() - 1, '0'), h));
  return Group(alternatives);
}

// Integers in [min, max], either side open; empty when there are none.
std::string IntegerRange(std::optional<int64_t> min, std::optional<int64_t> max) {
  if (min && max && *min > *max) return "";
  auto magnitude_cap = [](int64_t v) {
    return std::max<uint64_t>(kUnboundedMagnitude, static_cast<uint64_t>(v < 0 ? -v : v));
  };
  std::vector<std::string> alternatives;
  if (!min || *min < 0) {
    const uint64_t lo = max && *max < 0 ? static_cast<uint64_t>(-*max) : 1;
    const uint64_t hi = min ? static_cast<uint64_t>(-*min) : magnitude_cap(max.value_or(0));
    alternatives.push_back(JoinSeq({"\"-\"", UnsignedRange(lo, hi)}));
  }
  if (!max || *max >= 0) {
    const uint64_t lo = min && *min > 0 ? static_cast<uint64_t>(*min) : 0;
    const uint64_t hi = max ? static_cast<uint64_t>(*max) : magnitude_cap(min.value_or(0));
    alternatives.push_back(UnsignedRange(lo, hi));
  }
  return Group(alternatives);
}

// Numbers n.f with `lower` (<= or <, exclusive flag) <= n.f <= `upper`: an integer part
// range with any fraction, plus the ends where only some fractions are allowed.
void MagnitudeWithFraction(int64_t lower, bool lower_exclusive, std::optional<int64_t> upper,
                           bool upper_exclusive, std::vector<std::string>* out) {
  const int64_t any_lo = lower_exclusive ? lower + 1 : lower;
  const uint64_t any_hi_unsigned =
      upper ? static_cast<uint64_t>(std::max<int64_t>(*upper - 1, -1) + 1)
            : std::max<uint64_t>(kUnboundedMagnitude, static_cast<uint64_t>(any_lo)) + 1;
  // any_hi_unsigned is one past the last integer part that takes any fraction.
  if (any_hi_unsigned > static_cast<uint64_t>(any_lo)) {
    out->push_back(JoinSeq({UnsignedRange(any_lo, any_hi_unsigned - 1), "( \".\" [0-9]{1,16} )?"}));
  }
  if (lower_exclusive && (!upper || lower < *upper)) {
    out->push_back(JoinSeq({GbnfLiteral(std::to_string(lower)),
                            "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}"}));
  }
  if (upper && !upper_exclusive && *upper >= any_lo) {
    out->push_back(JoinSeq({GbnfLiteral(std::to_string(*upper)), "( \".\" \"0\"{1,16} )?"}));
  }
}

// A bound read from minimum/exclusiveMinimum (or the maximum pair).
struct Bound {
  double value = 0;
  bool exclusive = false;
  const char* keyword = nullptr;
};

// --- The converter ---------------------------------------------------------------------

class Converter {
 public:
  Converter(const Json& root, const JsonGrammarOptions& options)
      : root_(root), options_(options) {
    names_.insert(options_.root_rule);
    for (const Helper& h : kHelpers) names_.insert(options_.rule_prefix + h.name);
  }

  absl::StatusOr<std::string> Convert() {
    for (const Helper& h : kHelpers) {
      if (options_.rule_prefix + h.name == options_.root_rule) {
        return absl::InvalidArgumentError(absl::StrCat(
            "root rule name \"", options_.root_rule, "\" clashes with a helper rule"));
      }
    }
    ref_rules_["#"] = options_.root_rule;
    left_chain_.insert(options_.root_rule);
    absl::StatusOr<std::string> body =
        VisitBody(root_, "", options_.rule_prefix + "root", 0);
    if (!body.ok()) return body.status();
    std::string out = absl::StrCat(options_.root_rule, " ::= ", *body, "\n");
    for (const auto& [name, rule_body] : rules_) absl::StrAppend(&out, name, " ::= ", rule_body, "\n");
    // Helpers last, each once, in a fixed order (they only refer to each other).
    for (const Helper& h : kHelpers) {
      if (!used_helpers_.count(h.name)) continue;
      std::string text = h.body;
      for (size_t at = text.find('$'); at != std::string::npos; at = text.find('$', at)) {
        text.replace(at, 1, options_.rule_prefix);
        at += options_.rule_prefix.size();
      }
      absl::StrAppend(&out, options_.rule_prefix, h.name, " ::= ", text, "\n");
    }
    if (out.size() > kMaxGrammarBytes) return TooBig();
    return out;
  }

 private:
  static absl::Status TooBig() {
    return absl::ResourceExhaustedError(
        absl::StrCat("JSON Schema grammar would grow past ", kMaxGrammarBytes, " bytes"));
  }

  // The helper's rule name; marks it (and what its body refers to) for output.
  std::string UseHelper(const std::string& name) {
    if (used_helpers_.insert(name).second) {
      for (const Helper& h : kHelpers) {
        if (name != h.name) continue;
        const std::string body = h.body;
        for (size_t at = body.find('$'); at != std::string::npos; at = body.find('$', at + 1)) {
          size_t end = at + 1;
          while (end < body.size() && (std::isalnum(static_cast<unsigned char>(body[end])) ||
                                       body[end] == '-')) {
            ++end;
          }
          UseHelper(body.substr(at + 1, end - at - 1));
        }
      }
    }
    return options_.rule_prefix + name;
  }

  std::string Space() { return UseHelper("space"); }

  std::string NewName(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const auto u = static_cast<unsigned char>(c);
      if (std::isalnum(u)) {
        base += static_cast<char>(std::tolower(u));
      } else if (!base.empty() && base.back() != '-') {
        base += '-';
      }
      if (base.size() >= 60) break;
    }
    while (!base.empty() && base.back() == '-') base.pop_back();
    if (base.empty()) base = options_.rule_prefix + "rule";
    std::string name = base;
    for (int i = 1; names_.count(name); ++i) name = absl::StrCat(base, "-", i);
    names_.insert(name);
    return name;
  }

  // A rule with `body`; one rule per distinct body, so shared shapes share a rule.
  absl::StatusOr<std::string> AddRule(const std::string& hint, const std::string& body) {
    if (auto it = rule_by_body_.find(body); it != rule_by_body_.end()) return it->second;
    bytes_ += body.size() + hint.size() + 8;
    if (bytes_ > kMaxGrammarBytes) return TooBig();
    std::string name = NewName(hint);
    rules_.emplace_back(name, body);
    rule_by_body_[body] = name;
    return name;
  }

  // An expression for `schema` that fits in a sequence: a rule name where the body is
  // more than one.
  absl::StatusOr<std::string> Visit(const Json& schema, const std::string& pointer,
                                    const std::string& hint, int depth) {
    absl::StatusOr<std::string> body = VisitBody(schema, pointer, hint, depth);
    if (!body.ok()) return body;
    const bool is_name = body->find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") ==
                         std::string::npos;
    if (is_name) return body;
    return AddRule(hint, *body);
  }

  absl::StatusOr<std::string> VisitBody(const Json& schema, const std::string& pointer,
                                        const std::string& hint, int depth) {
    if (depth > kMaxDepth) {
      return absl::ResourceExhaustedError(
          absl::StrCat("JSON Schema nests deeper than ", kMaxDepth, " at ", Where(pointer)));
    }
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return UseHelper("value");
      return Invalid(pointer, "the schema false matches nothing");
    }
    if (!schema.is_object()) return Invalid(pointer, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (Annotations().count(key) || GeneralKeywords().count(key) ||
          ObjectKeywords().count(key) || ArrayKeywords().count(key) ||
          StringKeywords().count(key) || NumberKeywords().count(key)) {
        continue;
      }
      return Unsupported(key, pointer);
    }
    const Json siblings = Constraints(schema, {"$ref", "allOf", "anyOf", "oneOf"});
    if (schema.contains("$ref") || schema.contains("allOf")) {
      if (!schema.contains("allOf") && siblings.empty() && !schema.contains("anyOf") &&
          !schema.contains("oneOf")) {
        return RefRule(schema["$ref"], Child(pointer, "$ref"), depth);
      }
      // $ref with siblings is their intersection, as allOf is.
      absl::StatusOr<Json> merged = Flatten(schema, pointer, depth);
      if (!merged.ok()) return merged.status();
      return VisitBody(*merged, pointer, hint, depth + 1);
    }
    if (schema.contains("anyOf") || schema.contains("oneOf")) {
      return VisitAnyOf(schema, siblings, pointer, hint, depth);
    }
    if (schema.contains("const") || schema.contains("enum")) {
      return VisitEnum(schema, pointer, hint);
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      absl::StatusOr<std::vector<std::string>> listed = ReadTypes(schema["type"], pointer);
      if (!listed.ok()) return listed.status();
      types = *std::move(listed);
    } else {
      // Without `type`, each keyword constrains only values of its own type; the grammar
      // generates the types the keywords are about (a subset of what validates).
      auto any_of = [&](const std::set<std::string>& keys) {
        return std::any_of(keys.begin(), keys.end(),
                           [&](const std::string& k) { return schema.contains(k); });
      };
      if (any_of(ObjectKeywords())) types.push_back("object");
      if (any_of(ArrayKeywords())) types.push_back("array");
      if (any_of(StringKeywords())) types.push_back("string");
      if (any_of(NumberKeywords())) types.push_back("number");
      if (types.empty()) return UseHelper("value");
    }
    if (types.size() == 1) return VisitType(schema, types[0], pointer, hint, depth);
    std::vector<std::string> alternatives;
    for (const std::string& type : types) {
      absl::StatusOr<std::string> body = VisitType(schema, type, pointer, hint + "-" + type, depth);
      if (!body.ok()) return body;
      alternatives.push_back(*std::move(body));
      // A type body may be a sequence: keep each alternative one item.
      if (alternatives.back().find(' ') != std::string::npos) {
        absl::StatusOr<std::string> name = AddRule(hint + "-" + type, alternatives.back());
        if (!name.ok()) return name;
        alternatives.back() = *std::move(name);
      }
    }
    return absl::StrJoin(alternatives, " | ");
  }

  // The schema's keywords other than annotations and `except`.
  static Json Constraints(const Json& schema, std::initializer_list<const char*> except) {
    Json out = Json::object();
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();
      const Json& value = item.value();
      if (Annotations().count(key)) continue;
      if (std::any_of(except.begin(), except.end(), [&](const char* e) { return key == e; })) {
        continue;
      }
      out[key] = value;
    }
    return out;
  }

  absl::StatusOr<std::vector<std::string>> ReadTypes(const Json& type, const std::string& pointer) {
    static const std::set<std::string> kTypes = {"object", "array",   "string", "number",
                                                 "integer", "boolean", "null"};
    std::vector<std::string> out;
    const std::vector<Json> listed =
        type.is_array() ? type.get<std::vector<Json>>() : std::vector<Json>{type};
    for (const Json& t : listed) {
      if (!t.is_string() || !kTypes.count(t.get<std::string>())) {
        return Invalid(Child(pointer, "type"), absl::StrCat("unknown type ", CompactDump(t)));
      }
      if (std::find(out.begin(), out.end(), t.get<std::string>()) == out.end()) {
        out.push_back(t.get<std::string>());
      }
    }
    // integer is part of number.
    if (std::count(out.begin(), out.end(), "number") && std::count(out.begin(), out.end(), "integer")) {
      out.erase(std::find(out.begin(), out.end(), "integer"));
    }
    if (out.empty()) return Invalid(Child(pointer, "type"), "an empty type list matches nothing");
    return out;
  }

  // --- References and composition ---

  absl::StatusOr<const Json*> Resolve(const Json& ref, const std::string& pointer) {
    if (!ref.is_string()) return Invalid(pointer, "$ref must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported JSON Schema $ref \"", target, "\" at ", Where(pointer),
          ": only references into the same schema (#/$defs/...) are supported"));
    }
    const Json* node = &root_;
    size_t at = 1;
    while (at < target.size()) {
      if (target[at] != '/') return Invalid(pointer, absl::StrCat("bad $ref \"", target, "\""));
      size_t end = target.find('/', at + 1);
      if (end == std::string::npos) end = target.size();
      std::string key;
      for (size_t i = at + 1; i < end; ++i) {
        if (target[i] == '~' && i + 1 < end && (target[i + 1] == '0' || target[i + 1] == '1')) {
          key += target[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += target[i];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() &&
                 key.find_first_not_of("0123456789") == std::string::npos &&
                 key.size() < 9 && std::stoul(key) < node->size()) {
        node = &(*node)[std::stoul(key)];
      } else {
        return Invalid(pointer, absl::StrCat("$ref \"", target, "\" points at nothing"));
      }
      at = end;
    }
    return node;
  }

  // One rule per referenced location, so recursive schemas become recursive rules.
  absl::StatusOr<std::string> RefRule(const Json& ref, const std::string& pointer, int depth) {
    absl::StatusOr<const Json*> target = Resolve(ref, pointer);
    if (!target.ok()) return target.status();
    const std::string key = ref.get<std::string>();
    if (auto it = ref_rules_.find(key); it != ref_rules_.end()) {
      if (left_chain_.count(it->second)) {
        // Every JSON value starts with a character; a reference that comes back to itself
        // before one would be a rule that never ends.
        return Invalid(pointer, absl::StrCat("$ref \"", key, "\" refers to itself without an "
                                             "object or array in between"));
      }
      return it->second;
    }
    const std::string hint = key.substr(key.rfind('/') + 1);
    const std::string name = NewName(options_.rule_prefix + (hint.empty() ? "ref" : hint));
    ref_rules_[key] = name;
    left_chain_.insert(name);
    absl::StatusOr<std::string> body = VisitBody(**target, key.substr(1), name, depth + 1);
    left_chain_.erase(name);
    if (!body.ok()) return body;
    bytes_ += body->size() + name.size() + 8;
    if (bytes_ > kMaxGrammarBytes) return TooBig();
    rules_.emplace_back(name, *std::move(body));
    return name;
  }

  // The schema with $ref and allOf folded into one schema.
  absl::StatusOr<Json> Flatten(const Json& schema, const std::string& pointer, int depth) {
    if (depth > kMaxDepth) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "JSON Schema $ref/allOf nests deeper than ", kMaxDepth, " at ", Where(pointer)));
    }
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Json::object();
      return Invalid(pointer, "the schema false matches nothing");
    }
    if (!schema.is_object()) return Invalid(pointer, "a schema must be an object or a boolean");
    Json out = Constraints(schema, {"$ref", "allOf"});
    if (schema.contains("$ref")) {
      absl::StatusOr<const Json*> target = Resolve(schema["$ref"], Child(pointer, "$ref"));
      if (!target.ok()) return target.status();
      absl::StatusOr<Json> flat = Flatten(**target, Child(pointer, "$ref"), depth + 1);
      if (!flat.ok()) return flat;
      absl::StatusOr<Json> merged = Merge(out, *flat, pointer);
      if (!merged.ok()) return merged;
      out = *std::move(merged);
    }
    if (schema.contains("allOf")) {
      const Json& parts = schema["allOf"];
      if (!parts.is_array() || parts.empty()) return Invalid(pointer, "allOf must be a non-empty list");
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::string at = Child(Child(pointer, "allOf"), std::to_string(i));
        absl::StatusOr<Json> flat = Flatten(parts[i], at, depth + 1);
        if (!flat.ok()) return flat;
        absl::StatusOr<Json> merged = Merge(out, *flat, at);
        if (!merged.ok()) return merged;
        out = *std::move(merged);
      }
    }
    return out;
  }

  // The intersection of two flattened schemas, where it is again one schema.
  static absl::StatusOr<Json> Merge(const Json& a, const Json& b, const std::string& pointer) {
    static const std::set<std::string> kTakeMax = {"minimum", "minLength", "minItems",
                                                   "minProperties"};
    static const std::set<std::string> kTakeMin = {"maximum", "maxLength", "maxItems",
                                                   "maxProperties"};
    Json out = a;
    for (const auto& [key, value] : b.items()) {
      if (!out.contains(key)) {
        out[key] = value;
        continue;
      }
      Json& mine = out[key];
      if (mine == value) continue;
      if (key == "properties" && mine.is_object() && value.is_object()) {
        for (const auto& [name, sub] : value.items()) {
          mine[name] = mine.contains(name) ? Json{{"allOf", Json::array({mine[name], sub})}} : sub;
        }
      } else if (key == "required" && mine.is_array() && value.is_array()) {
        for (const Json& name : value) {
          if (std::find(mine.begin(), mine.end(), name) == mine.end()) mine.push_back(name);
        }
      } else if (key == "type") {
        const Json left = mine.is_array() ? mine : Json::array({mine});
        const Json right = value.is_array() ? value : Json::array({value});
        Json both = Json::array();
        for (const Json& t : left) {
          for (const Json& u : right) {
            if (t == u) {
              both.push_back(t);
            } else if ((t == "integer" && u == "number") || (t == "number" && u == "integer")) {
              both.push_back("integer");
            }
          }
        }
        if (both.empty()) return Invalid(pointer, "allOf of disjoint types matches nothing");
        mine = both;
      } else if (kTakeMax.count(key) && mine.is_number() && value.is_number()) {
        if (value > mine) mine = value;
      } else if (kTakeMin.count(key) && mine.is_number() && value.is_number()) {
        if (value < mine) mine = value;
      } else if (key == "additionalProperties" || key == "items") {
        if (mine == false || value == false) {
          mine = false;
        } else {
          mine = Json{{"allOf", Json::array({mine, value})}};
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "unsupported JSON Schema allOf at ", Where(pointer), ": conflicting \"", key, "\""));
      }
    }
    return out;
  }

  absl::StatusOr<std::string> VisitAnyOf(const Json& schema, const Json& siblings,
                                         const std::string& pointer, const std::string& hint,
                                         int depth) {
    if (schema.contains("anyOf") && schema.contains("oneOf")) {
      return Unsupported("oneOf", pointer);  // Together with anyOf.
    }
    const char* keyword = schema.contains("anyOf") ? "anyOf" : "oneOf";
    const Json& options = schema[keyword];
    if (!options.is_array() || options.empty()) {
      return Invalid(pointer, absl::StrCat(keyword, " must be a non-empty list"));
    }
    std::vector<std::string> alternatives;
    for (size_t i = 0; i < options.size(); ++i) {
      const std::string at = Child(Child(pointer, keyword), std::to_string(i));
      Json option = options[i];
      if (!siblings.empty()) {
        // Keywords beside anyOf apply to every option: fold them into each.
        absl::StatusOr<Json> flat = Flatten(option, at, depth + 1);
        if (!flat.ok()) return flat.status();
        absl::StatusOr<Json> merged = Merge(siblings, *flat, at);
        if (!merged.ok()) return merged.status();
        option = *std::move(merged);
      }
      absl::StatusOr<std::string> expr = Visit(option, at, absl::StrCat(hint, "-", i), depth + 1);
      if (!expr.ok()) return expr;
      if (std::find(alternatives.begin(), alternatives.end(), *expr) == alternatives.end()) {
        alternatives.push_back(*std::move(expr));
      }
    }
    return absl::StrJoin(alternatives, " | ");
  }

  // --- Literals ---

  absl::StatusOr<std::string> VisitEnum(const Json& schema, const std::string& pointer,
                                        const std::string& hint) {
    const Json rest = Constraints(schema, {"enum", "const", "type"});
    if (!rest.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported JSON Schema keyword \"", rest.begin().key(), "\" together with ",
          schema.contains("const") ? "const" : "enum", " at ", Where(pointer)));
    }
    std::vector<Json> values;
    if (schema.contains("const")) {
      values.push_back(schema["const"]);
      if (schema.contains("enum") &&
          std::find(schema["enum"].begin(), schema["enum"].end(), schema["const"]) ==
              schema["enum"].end()) {
        return Invalid(pointer, "const is not in enum, so nothing matches");
      }
    } else {
      if (!schema["enum"].is_array()) return Invalid(Child(pointer, "enum"), "enum must be a list");
      values = schema["enum"].get<std::vector<Json>>();
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      absl::StatusOr<std::vector<std::string>> listed = ReadTypes(schema["type"], pointer);
      if (!listed.ok()) return listed.status();
      types = *std::move(listed);
    }
    std::vector<std::string> literals;
    size_t bytes = 0;
    for (const Json& v : values) {
      if (!types.empty() && !std::any_of(types.begin(), types.end(), [&](const std::string& t) {
            return TypeMatches(v, t);
          })) {
        continue;
      }
      literals.push_back(GbnfLiteral(CompactDump(v)));
      bytes += literals.back().size() + 3;
      if (bytes_ + bytes > kMaxGrammarBytes) return TooBig();
    }
    if (literals.empty()) return Invalid(pointer, "no enum value has the schema's type");
    return AddRule(hint, absl::StrCat(Group(literals), " ", Space()));
  }

  static bool TypeMatches(const Json& v, const std::string& type) {
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "string") return v.is_string();
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "number") return v.is_number();
    // integer: 1.0 is an integer too.
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }

  // --- Types ---

  absl::StatusOr<std::string> VisitType(const Json& schema, const std::string& type,
                                        const std::string& pointer, const std::string& hint,
                                        int depth) {
    if (type == "object") return VisitObject(schema, pointer, hint, depth);
    if (type == "array") return VisitArray(schema, pointer, hint, depth);
    if (type == "string") return VisitString(schema, pointer, hint);
    if (type == "number" || type == "integer") return VisitNumber(schema, type, pointer);
    if (type == "boolean") return UseHelper("boolean");
    return UseHelper("null");
  }

  // Reads a count keyword (minLength ...) if present.
  absl::StatusOr<std::optional<int64_t>> Count(const Json& schema, const char* key,
                                               const std::string& pointer) {
    if (!schema.contains(key)) return std::optional<int64_t>();
    const Json& v = schema[key];
    const bool integral = v.is_number_integer() ||
                          (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!integral || v.get<double>() < 0) {
      return Invalid(Child(pointer, key), absl::StrCat(key, " must be a non-negative integer"));
    }
    if (v.get<double>() > kMaxCount) {
      return absl::ResourceExhaustedError(absl::StrCat("JSON Schema ", key, " ", CompactDump(v),
                                                       " at ", Where(pointer), " is above ",
                                                       kMaxCount));
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }

  absl::StatusOr<std::string> VisitString(const Json& schema, const std::string& pointer,
                                          const std::string& hint) {
    absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minLength", pointer);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxLength", pointer);
    if (!max.ok()) return max.status();
    const bool has_length = min->has_value() || max->has_value();
    if (schema.contains("format")) {
      const Json& f = schema["format"];
      const std::string format = f.is_string() ? f.get<std::string>() : CompactDump(f);
      if (std::find(std::begin(kFormats), std::end(kFormats), format) == std::end(kFormats)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unsupported JSON Schema format \"", format, "\" at ", Where(pointer)));
      }
      if (schema.contains("pattern") || has_length) {
        return Unsupported(schema.contains("pattern") ? "pattern" : "minLength/maxLength",
                           pointer + " (together with format)");
      }
      return AddRule(options_.rule_prefix + format + "-string",
                     absl::StrCat("\"\\\"\" ", UseHelper(format), " \"\\\"\" ", Space()));
    }
    if (schema.contains("pattern")) {
      if (has_length) {
        return Unsupported(min->has_value() ? "minLength" : "maxLength",
                           pointer + " (together with pattern)");
      }
      const Json& p = schema["pattern"];
      if (!p.is_string()) return Invalid(Child(pointer, "pattern"), "pattern must be a string");
      absl::StatusOr<std::string> regex = RegexToGbnf(
          p.get<std::string>(), RegexContext::kJsonString, kMaxGrammarBytes - std::min(bytes_, kMaxGrammarBytes));
      if (!regex.ok()) {
        return absl::Status(regex.status().code(),
                            absl::StrCat("JSON Schema pattern at ", Where(pointer), ": ",
                                         regex.status().message()));
      }
      return AddRule(hint, absl::StrCat("\"\\\"\" ( ", *regex, " ) \"\\\"\" ", Space()));
    }
    if (!has_length) return UseHelper("string");
    const int64_t lo = min->value_or(0);
    if (max->has_value() && **max < lo) return Invalid(pointer, "maxLength < minLength");
    return AddRule(hint, absl::StrCat("\"\\\"\" ", Repeat(kStringChar, lo, *max), " \"\\\"\" ",
                                      Space()));
  }

  absl::StatusOr<std::optional<Bound>> ReadBound(const Json& schema, bool lower,
                                                 const std::string& pointer) {
    const char* inclusive = lower ? "minimum" : "maximum";
    const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<Bound> out;
    auto tighter = [&](const Bound& b) {
      if (!out || (lower ? b.value > out->value : b.value < out->value) ||
          (b.value == out->value && b.exclusive)) {
        out = b;
      }
    };
    if (schema.contains(inclusive)) {
      const Json& v = schema[inclusive];
      if (!v.is_number()) return Invalid(Child(pointer, inclusive), "must be a number");
      // Draft 4 spells an exclusive bound as minimum + exclusiveMinimum: true.
      const bool draft4 = schema.contains(exclusive) && schema[exclusive].is_boolean();
      tighter(Bound{v.get<double>(), draft4 && schema[exclusive].get<bool>(),
                    draft4 && schema[exclusive].get<bool>() ? exclusive : inclusive});
    }
    if (schema.contains(exclusive) && !schema[exclusive].is_boolean()) {
      const Json& v = schema[exclusive];
      if (!v.is_number()) return Invalid(Child(pointer, exclusive), "must be a number");
      tighter(Bound{v.get<double>(), true, exclusive});
    }
    if (out && !std::isfinite(out->value)) {
      return Invalid(Child(pointer, out->keyword), "must be finite");
    }
    return out;
  }

  absl::StatusOr<std::string> VisitNumber(const Json& schema, const std::string& type,
                                          const std::string& pointer) {
    absl::StatusOr<std::optional<Bound>> lower = ReadBound(schema, true, pointer);
    if (!lower.ok()) return lower.status();
    absl::StatusOr<std::optional<Bound>> upper = ReadBound(schema, false, pointer);
    if (!upper.ok()) return upper.status();
    if (!lower->has_value() && !upper->has_value()) return UseHelper(type);
    // Bounds far out are no bound at all for 16-digit numbers, or nothing at all.
    for (std::optional<Bound>* b : {&*lower, &*upper}) {
      if (!b->has_value()) continue;
      const bool is_lower = b == &*lower;
      const double v = (*b)->value;
      if (std::fabs(v) <= kMaxBound) continue;
      if ((v < 0) == is_lower) {
        b->reset();
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "unsupported JSON Schema ", (*b)->keyword, " ", v, " at ", Where(pointer),
            ": bounds beyond 1e18 in magnitude"));
      }
    }
    std::string body;
    if (type == "integer") {
      std::optional<int64_t> min, max;
      if (*lower) {
        const double v = (*lower)->value;
        min = static_cast<int64_t>((*lower)->exclusive ? std::floor(v) + 1 : std::ceil(v));
      }
      if (*upper) {
        const double v = (*upper)->value;
        max = static_cast<int64_t>((*upper)->exclusive ? std::ceil(v) - 1 : std::floor(v));
      }
      body = IntegerRange(min, max);
    } else {
      for (const std::optional<Bound>& b : {*lower, *upper}) {
        if (b && std::floor(b->value) != b->value) {
          return absl::InvalidArgumentError(absl::StrCat(
              "unsupported JSON Schema ", b->keyword, " ", b->value, " at ", Where(pointer),
              ": number bounds must be integers"));
        }
      }
      std::optional<int64_t> a, b;
      if (*lower) a = static_cast<int64_t>((*lower)->value);
      if (*upper) b = static_cast<int64_t>((*upper)->value);
      const bool a_excl = *lower && (*lower)->exclusive;
      const bool b_excl = *upper && (*upper)->exclusive;
      std::vector<std::string> alternatives;
      if (!b || *b > 0 || (*b == 0 && !b_excl)) {  // x >= 0.
        const int64_t l = a && *a > 0 ? *a : 0;
        const bool l_excl = a && *a >= 0 && a_excl;
        MagnitudeWithFraction(l, l_excl, b, b_excl, &alternatives);
      }
      if (!a || *a < 0) {  // x < 0, as -m with m > 0.
        std::vector<std::string> negative;
        const int64_t l = b && *b < 0 ? -*b : 0;
        const bool l_excl = b && *b < 0 ? b_excl : true;
        std::optional<int64_t> u;
        if (a) u = -*a;
        MagnitudeWithFraction(l, l_excl, u, a_excl, &negative);
        if (!negative.empty()) alternatives.push_back(JoinSeq({"\"-\"", Group(negative)}));
      }
      if (!alternatives.empty()) body = Group(alternatives);
    }
    if (body.empty()) return Invalid(pointer, "the bounds leave no number");
    return JoinSeq({body, Space()});
  }

  absl::StatusOr<std::string> VisitObject(const Json& schema, const std::string& pointer,
                                          const std::string& hint, int depth) {
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Invalid(Child(pointer, "required"), "required must be a list");
      for (const Json& name : r) {
        if (!name.is_string()) return Invalid(Child(pointer, "required"), "names must be strings");
        required.insert(name.get<std::string>());
      }
    }
    // Listed properties in schema order; required names not listed follow, any value.
    std::vector<std::pair<std::string, Json>> listed;
    const bool has_properties = schema.contains("properties");
    if (has_properties) {
      const Json& p = schema["properties"];
      if (!p.is_object()) return Invalid(Child(pointer, "properties"), "must be an object");
      for (const auto& [name, sub] : p.items()) listed.emplace_back(name, sub);
    }
    if (schema.contains("required")) {
      for (const Json& name : schema["required"]) {
        const std::string n = name.get<std::string>();
        if (std::none_of(listed.begin(), listed.end(), [&](const auto& e) { return e.first == n; })) {
          listed.emplace_back(n, Json(true));
        }
      }
    }
    // additionalProperties: absent means none where properties are listed (llama.cpp's
    // and OpenAI's reading, not JSON Schema's), any where they are not.
    std::optional<std::string> extra_value;
    const Json* additional =
        schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
    if (additional != nullptr ? *additional != false : !has_properties) {
      if (additional == nullptr || *additional == true) {
        extra_value = UseHelper("value");
      } else {
        absl::StatusOr<std::string> v = WithoutLeftChain([&] {
          return Visit(*additional, Child(pointer, "additionalProperties"), hint + "-additional",
                       depth + 1);
        });
        if (!v.ok()) return v;
        extra_value = *std::move(v);
      }
    }
    const std::string sp = Space();
    struct Prop {
      std::string kv;
      bool required;
    };
    std::vector<Prop> props;
    for (const auto& [name, sub] : listed) {
      const bool is_required = required.count(name) > 0;
      if (sub == false) {
        if (is_required) return Invalid(pointer, absl::StrCat("required property \"", name,
                                                              "\" has the schema false"));
        continue;
      }
      // Named copies: lambdas cannot capture structured bindings before C++20 (clang < 16).
      const std::string& prop_name = name;
      const Json& prop_schema = sub;
      absl::StatusOr<std::string> value = WithoutLeftChain([&] {
        return Visit(prop_schema, Child(Child(pointer, "properties"), prop_name), hint + "-" + prop_name,
                     depth + 1);
      });
      if (!value.ok()) return value;
      props.push_back(Prop{JoinSeq({GbnfLiteral(CompactDump(Json(name))), sp, "\":\"", sp, *value}),
                           is_required});
    }
    absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minProperties", pointer);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxProperties", pointer);
    if (!max.ok()) return max.status();
    const std::string extra_kv =
        extra_value ? JoinSeq({UseHelper("string"), "\":\"", sp, *extra_value}) : "";
    const std::string comma = JoinSeq({"\",\"", sp});
    std::string members;
    if (props.empty()) {
      const int64_t lo = min->value_or(0);
      if (max->has_value() && **max < lo) return Invalid(pointer, "maxProperties < minProperties");
      if (!extra_value) {
        if (lo > 0) return Invalid(pointer, "minProperties > 0 but no property is allowed");
      } else if (!max->has_value() || **max > 0) {
        std::optional<int64_t> rest_max;
        if (max->has_value()) rest_max = **max - 1;
        members = JoinSeq({extra_kv, Repeat(absl::StrCat("( ", comma, " ", extra_kv, " )"),
                                            std::max<int64_t>(lo - 1, 0), rest_max)});
        if (lo == 0) members = absl::StrCat("( ", members, " )?");
      }
    } else {
      // Counts that the listed properties already decide are fine; others are not.
      const int64_t num_required = std::count_if(props.begin(), props.end(),
                                                 [](const Prop& p) { return p.required; });
      if (min->has_value() && **min > num_required) return Unsupported("minProperties", pointer);
      if (max->has_value() && (extra_value || **max < static_cast<int64_t>(props.size()))) {
        return Unsupported("maxProperties", pointer);
      }
      absl::StatusOr<std::string> listed_members = Members(props, extra_kv, comma, hint);
      if (!listed_members.ok()) return listed_members;
      members = *std::move(listed_members);
    }
    return JoinSeq({"\"{\"", sp, members, "\"}\"", sp});
  }

  // The properties between the braces: each present one after a comma but the first.
  template <typename Prop>
  absl::StatusOr<std::string> Members(const std::vector<Prop>& props, const std::string& extra_kv,
                                      const std::string& comma, const std::string& hint) {
    const size_t n = props.size();
    const std::string extras =
        extra_kv.empty() ? "" : absl::StrCat("( ", comma, " ", extra_kv, " )*");
    auto segment = [&](size_t j) {
      const std::string s = JoinSeq({comma, props[j].kv});
      return props[j].required ? s : absl::StrCat("( ", s, " )?");
    };
    size_t first_required = 0;
    while (first_required < n && !props[first_required].required) ++first_required;
    if (first_required == 0) {
      std::string out = props[0].kv;
      for (size_t j = 1; j < n; ++j) out = JoinSeq({out, segment(j)});
      return JoinSeq({out, extras});
    }
    // Optional properties come first: any of them up to the first required one may open
    // the list. rest-j is "everything after property j-1", shared between the openings.
    std::vector<std::string> rest(n + 1);
    rest[n] = extras;
    for (size_t j = n; j-- > 1;) {
      const std::string body = JoinSeq({segment(j), rest[j + 1]});
      absl::StatusOr<std::string> name = AddRule(absl::StrCat(hint, "-rest-", j), body);
      if (!name.ok()) return name;
      rest[j] = *std::move(name);
    }
    std::vector<std::string> openings;
    for (size_t k = 0; k <= first_required && k < n; ++k) {
      openings.push_back(JoinSeq({props[k].kv, rest[k + 1]}));
    }
    if (first_required == n && !extra_kv.empty()) {
      openings.push_back(JoinSeq({extra_kv, extras}));
    }
    std::string out = absl::StrCat("( ", absl::StrJoin(openings, " | "), " )");
    if (first_required == n) out += "?";
    return out;
  }

  absl::StatusOr<std::string> VisitArray(const Json& schema, const std::string& pointer,
                                         const std::string& hint, int depth) {
    if (schema.contains("uniqueItems") && schema["uniqueItems"] != false) {
      return Unsupported("uniqueItems", pointer);
    }
    absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minItems", pointer);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxItems", pointer);
    if (!max.ok()) return max.status();
    // The tuple form: prefixItems (2020-12) or items as a list (draft 7), then the rest.
    const Json* tuple = nullptr;
    const Json* rest_schema = nullptr;
    const char* rest_keyword = "items";
    if (schema.contains("prefixItems")) {
      tuple = &schema["prefixItems"];
      if (schema.contains("items")) rest_schema = &schema["items"];
    } else if (schema.contains("items") && schema["items"].is_array()) {
      tuple = &schema["items"];
      rest_keyword = "additionalItems";
      if (schema.contains("additionalItems")) rest_schema = &schema["additionalItems"];
    } else if (schema.contains("items")) {
      rest_schema = &schema["items"];
    }
    if (schema.contains("additionalItems") && rest_keyword != std::string("additionalItems")) {
      return Unsupported("additionalItems", pointer);
    }
    const std::string sp = Space();
    const std::string comma = JoinSeq({"\",\"", sp});
    std::vector<std::string> items;
    if (tuple != nullptr) {
      if (!tuple->is_array()) return Invalid(pointer, "prefixItems must be a list");
      for (size_t i = 0; i < tuple->size(); ++i) {
        absl::StatusOr<std::string> item = WithoutLeftChain([&] {
          return Visit((*tuple)[i],
                       Child(Child(pointer, tuple == &schema["items"] ? "items" : "prefixItems"),
                             std::to_string(i)),
                       absl::StrCat(hint, "-", i), depth + 1);
        });
        if (!item.ok()) return item;
        items.push_back(*std::move(item));
      }
    }
    // A tuple is generated whole, as llama.cpp and OpenAI read prefixItems.
    const int64_t k = static_cast<int64_t>(items.size());
    if (max->has_value() && **max < k) return Unsupported("maxItems", pointer + " (below the tuple length)");
    std::string rest_item;
    if (rest_schema == nullptr || *rest_schema != false) {
      if (rest_schema == nullptr || *rest_schema == true) {
        rest_item = UseHelper("value");
      } else {
        absl::StatusOr<std::string> item = WithoutLeftChain([&] {
          return Visit(*rest_schema, Child(pointer, rest_keyword), hint + "-item", depth + 1);
        });
        if (!item.ok()) return item;
        rest_item = *std::move(item);
      }
    }
    const int64_t extra_min = std::max<int64_t>(min->value_or(0) - k, 0);
    std::optional<int64_t> extra_max;
    if (max->has_value()) extra_max = **max - k;
    if (max->has_value() && min->has_value() && **max < **min) {
      return Invalid(pointer, "maxItems < minItems");
    }
    if (rest_item.empty()) {
      if (extra_min > 0) return Invalid(pointer, "minItems is above the tuple length");
      extra_max = 0;
    }
    std::string list;
    for (const std::string& item : items) list = list.empty() ? item : JoinSeq({list, comma, item});
    if (!extra_max.has_value() || *extra_max > 0) {
      const std::string more = absl::StrCat("( ", comma, " ", rest_item, " )");
      if (!list.empty()) {
        list = JoinSeq({list, Repeat(more, extra_min, extra_max)});
      } else {
        std::optional<int64_t> tail_max;
        if (extra_max.has_value()) tail_max = *extra_max - 1;
        list = JoinSeq({rest_item, Repeat(more, std::max<int64_t>(extra_min - 1, 0), tail_max)});
        if (extra_min == 0) list = absl::StrCat("( ", list, " )?");
      }
    }
    return JoinSeq({"\"[\"", sp, list, "\"]\"", sp});
  }

  // Values inside an object or array come after a '{' or '[': a reference back to an
  // enclosing rule from there is fine.
  template <typename F>
  absl::StatusOr<std::string> WithoutLeftChain(F visit) {
    std::set<std::string> saved;
    saved.swap(left_chain_);
    absl::StatusOr<std::string> out = visit();
    saved.swap(left_chain_);
    return out;
  }

  const Json& root_;
  const JsonGrammarOptions& options_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> rule_by_body_;
  std::map<std::string, std::string> ref_rules_;  // "#/$defs/x" -> rule name.
  std::set<std::string> names_;
  std::set<std::string> used_helpers_;
  // Reference rules being expanded since the last '{' or '['.
  std::set<std::string> left_chain_;
  size_t bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             const JsonGrammarOptions& options) {
  return Converter(schema, options).Convert();
}

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema,
                                             const JsonGrammarOptions& options) {
  return JsonSchemaToGbnf(nlohmann::ordered_json(schema), options);
}

std::string JsonObjectGbnf(const JsonGrammarOptions& options) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(Json{{"type", "object"}}, options);
  return gbnf.ok() ? *gbnf : "";
}

}  // namespace tessera::structured

#include "common/chat_template/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/chat_template/jinja_text.h"
#include "common/status_macros.h"

namespace tessera::jinja {
namespace {

absl::Status Bad(absl::string_view message) { return absl::InvalidArgumentError(message); }

std::optional<std::string> OptionalString(const Value* v) {
  if (v == nullptr || v->is_none() || v->is_undefined()) return std::nullopt;
  return v->Str();
}

int64_t IntOr(const Value* v, int64_t fallback) {
  if (v == nullptr || !(v->kind() == Value::Kind::kInt || v->kind() == Value::Kind::kBool)) return fallback;
  return v->as_int();
}

bool BoolOr(const Value* v, bool fallback) { return v == nullptr ? fallback : v->Truthy(); }

// jinja2's environment.getattr for attribute= arguments; "a.b" and "0" descend.
Value GetPath(const Value& obj, const std::string& path) {
  Value current = obj;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t i = std::strtoull(part.c_str(), nullptr, 10);
      current = i < current.list().size() ? current.list()[i]
                                           : Value::MakeUndefinedWithHint("list object has no element " + part);
    } else if (const Value* v = current.Find(part)) {
      current = *v;
    } else {
      current = Value::MakeUndefinedWithHint("'" + current.TypeName() + " object' has no attribute '" + part + "'");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

absl::StatusOr<Value> StringMethod(const std::string& s, absl::string_view name, const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(PyStrip(s, OptionalString(args.Get("chars", 0)), name != "rstrip", name != "lstrip"));
  }
  if (name == "upper") return Value(PyUpper(s));
  if (name == "lower") return Value(PyLower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") return Value(PyCapitalize(s));
  if (name == "startswith" || name == "endswith") {
    const Value* arg = args.Get("prefix", 0);
    if (arg == nullptr) return Bad(absl::StrCat(name, "() takes at least 1 argument"));
    std::vector<std::string> candidates;
    if (arg->is_list()) {
      for (const Value& v : arg->list()) candidates.push_back(v.Str());
    } else if (arg->is_string()) {
      candidates.push_back(arg->as_string());
    } else {
      return Bad(absl::StrCat(name, " first arg must be str or a tuple of str, not ", arg->TypeName()));
    }
    for (const std::string& c : candidates) {
      if (name == "startswith" ? absl::StartsWith(s, c) : absl::EndsWith(s, c)) return Value(true);
    }
    return Value(false);
  }
  if (name == "split" || name == "rsplit") {
    // rsplit without maxsplit splits like split.
    if (std::optional<std::string> sep = OptionalString(args.Get("sep", 0)); sep.has_value() && sep->empty()) {
      return Bad("empty separator");
    }
    ValueList out;
    for (std::string& part : PySplit(s, OptionalString(args.Get("sep", 0)), IntOr(args.Get("maxsplit", 1), -1))) {
      out.emplace_back(std::move(part));
    }
    return Value::List(std::move(out));
  }
  if (name == "replace") {
    const Value* old = args.Get("old", 0);
    const Value* replacement = args.Get("new", 1);
    if (old == nullptr || replacement == nullptr) return Bad("replace() takes at least 2 arguments");
    return Value(PyReplace(s, old->Str(), replacement->Str(), IntOr(args.Get("count", 2), -1)));
  }
  if (name == "find") {
    const Value* sub = args.Get("sub", 0);
    if (sub == nullptr) return Bad("find() takes at least 1 argument");
    const size_t at = s.find(sub->Str());
    return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(CodePointCount(s.substr(0, at))));
  }
  if (name == "count") {
    const Value* sub = args.Get("sub", 0);
    if (sub == nullptr) return Bad("count() takes at least 1 argument");
    const std::string needle = sub->Str();
    if (needle.empty()) return Value(static_cast<int64_t>(CodePointCount(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = args.Get("iterable", 0);
    if (items == nullptr) return Bad("join() takes exactly one argument");
    ASSIGN_OR_RETURN(ValueList list, Iterate(*items));
    std::vector<std::string> parts;
    for (const Value& v : list) parts.push_back(v.Str());
    return Value(absl::StrJoin(parts, s));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace") {
    std::vector<char32_t> cps = DecodeUtf8(s);
    if (cps.empty()) return Value(false);
    for (char32_t c : cps) {
      const bool ok = name == "isspace" ? IsPythonSpace(c)
                      : name == "isdigit" ? (c >= '0' && c <= '9')
                                          : ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c > 0x7f);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  return Bad(absl::StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const Value& d, absl::string_view name, const CallArgs& args) {
  if (name == "get") {
    const Value* key = args.Get("key", 0);
    if (key == nullptr) return Bad("get() takes at least 1 argument");
    if (key->is_string()) {
      if (const Value* v = d.Find(key->as_string())) return *v;
    }
    const Value* fallback = args.Get("default", 1);
    return fallback != nullptr ? *fallback : Value::MakeNone();
  }
  ValueList out;
  for (const auto& [key, value] : d.dict()) {
    if (name == "items") {
      out.push_back(Value::Tuple({Value(key), value}));
    } else if (name == "keys") {
      out.emplace_back(key);
    } else {
      out.push_back(value);
    }
  }
  return Value::List(std::move(out));
}

bool IsStringMethod(absl::string_view name) {
  static constexpr absl::string_view kNames[] = {"strip", "lstrip", "rstrip", "upper", "lower", "title",
                                                "capitalize", "startswith", "endswith", "split", "rsplit",
                                                "replace", "find", "count", "join", "isdigit", "isalpha",
                                                "isspace"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

absl::StatusOr<int64_t> ToInt(const Value& v, int64_t fallback) {
  switch (v.kind()) {
    case Value::Kind::kInt:
    case Value::Kind::kBool: return v.as_int();
    case Value::Kind::kFloat: return std::isfinite(v.as_double()) ? static_cast<int64_t>(v.as_double()) : fallback;
    case Value::Kind::kString: {
      const std::string s = PyStrip(v.as_string(), std::nullopt, true, true);
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0) return static_cast<int64_t>(i);
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && std::isfinite(d)) return static_cast<int64_t>(d);
      return fallback;
    }
    default: return fallback;
  }
}

// select/reject/selectattr/rejectattr: keep the items whose test (truthiness without one)
// is `keep`.
absl::StatusOr<Value> SelectItems(Interpreter& interp, const Value& input, const CallArgs& args, bool by_attribute,
                                  bool keep) {
  ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) return Bad("selectattr/rejectattr need an attribute");
    attribute = args.positional[0].Str();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < args.positional.size()) {
    test = args.positional[next].Str();
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  ValueList out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(interp.Step());
    const Value subject = by_attribute ? GetPath(item, attribute) : item;
    bool passed;
    if (test.empty()) {
      passed = subject.Truthy();
    } else {
      ASSIGN_OR_RETURN(passed, ApplyTest(interp, test, subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

}  // namespace

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList: return v.list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [key, value] : v.dict()) keys.emplace_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (char32_t c : DecodeUtf8(v.as_string())) chars.emplace_back(EncodeUtf8({c}));
      return chars;
    }
    case Value::Kind::kUndefined: return ValueList{};
    default: return Bad(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

Value GetMethod(const Value& obj, absl::string_view name) {
  if (obj.is_string() && IsStringMethod(name)) {
    std::string s = obj.as_string();
    std::string method(name);
    return Value::MakeFunction("str." + method, [s, method](Interpreter& interp, const CallArgs& args)
                                                       -> absl::StatusOr<Value> {
      RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(s.size() / 256)));  // String methods are linear.
      return StringMethod(s, method, args);
    });
  }
  if (obj.kind() == Value::Kind::kDict && (name == "get" || name == "items" || name == "keys" || name == "values")) {
    std::string method(name);
    return Value::MakeFunction("dict." + method, [obj, method](Interpreter&, const CallArgs& args) {
      return DictMethod(obj, method, args);
    });
  }
  return Value::MakeUndefinedWithHint(absl::StrCat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
}

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, absl::string_view name, const Value& input,
                                  const CallArgs& args) {
  if (name == "trim") {
    return Value(PyStrip(input.Str(), OptionalString(args.Get("chars", 0)), true, true));
  }
  if (name == "tojson") {
    const Value* indent = args.Get("indent", 0);
    ASSIGN_OR_RETURN(std::string json, ToJson(input, indent == nullptr || indent->is_none() ? -1 : IntOr(indent, -1),
                                              BoolOr(args.Get("sort_keys", 99), false)));
    return Value(std::move(json));
  }
  if (name == "length" || name == "count") {
    switch (input.kind()) {
      case Value::Kind::kString: return Value(static_cast<int64_t>(CodePointCount(input.as_string())));
      case Value::Kind::kList: return Value(static_cast<int64_t>(input.list().size()));
      case Value::Kind::kDict:
      case Value::Kind::kNamespace: return Value(static_cast<int64_t>(input.dict().size()));
      case Value::Kind::kUndefined: return Value(int64_t{0});
      default: return Bad(absl::StrCat("object of type '", input.TypeName(), "' has no len()"));
    }
  }
  if (name == "upper") return Value(PyUpper(input.Str()));
  if (name == "lower") return Value(PyLower(input.Str()));
  if (name == "capitalize") return Value(PyCapitalize(input.Str()));
  if (name == "title") return Value(PyTitle(input.Str()));
  if (name == "string") return Value(input.Str());
  if (name == "safe" || name == "e" || name == "escape") {
    if (name != "safe") return Bad("autoescaping filters are not supported");
    return input;
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.Get("default_value", 0);
    const bool boolean = BoolOr(args.Get("boolean", 1), false);
    if (input.is_undefined() || (boolean && !input.Truthy())) return fallback != nullptr ? *fallback : Value("");
    return input;
  }
  if (name == "replace") {
    const Value* old = args.Get("old", 0);
    const Value* replacement = args.Get("new", 1);
    if (old == nullptr || replacement == nullptr) return Bad("replace needs 2 arguments");
    return Value(PyReplace(input.Str(), old->Str(), replacement->Str(), IntOr(args.Get("count", 2), -1)));
  }
  if (name == "int") return Value(ToInt(input, IntOr(args.Get("default", 0), 0)).value());
  if (name == "float") {
    if (input.is_number()) return Value(input.as_double());
    char* end = nullptr;
    const std::string s = PyStrip(input.Str(), std::nullopt, true, true);
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
    const Value* fallback = args.Get("default", 0);
    return fallback != nullptr ? Value(fallback->as_double()) : Value(0.0);
  }
  if (name == "abs") {
    if (input.kind() == Value::Kind::kFloat) return Value(std::fabs(input.as_double()));
    if (input.is_number()) {
      if (input.as_int() == INT64_MIN) return Bad("abs(): integer overflow (beyond 64 bits)");
      return Value(static_cast<int64_t>(std::llabs(input.as_int())));
    }
    return Bad(absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::List();
    if (!input.is_mapping()) return Bad(absl::StrCat("can only get item pairs from a mapping, not ", input.TypeName()));
    ValueList out;
    for (const auto& [key, value] : input.dict()) out.push_back(Value::Tuple({Value(key), value}));
    return Value::List(std::move(out));
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    return Value::List(std::move(items));
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    if (items.empty()) return Value::MakeUndefinedWithHint(absl::StrCat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<char32_t> cps = DecodeUtf8(input.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value(EncodeUtf8(cps));
    }
    ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    const Value* sep = args.Get("d", 0);
    const Value* attribute = args.Get("attribute", 1);
    std::vector<std::string> parts;
    for (const Value& item : items) {
      parts.push_back(attribute != nullptr ? GetPath(item, attribute->Str()).Str() : item.Str());
    }
    Value joined(absl::StrJoin(parts, sep != nullptr ? sep->Str() : ""));
    if (joined.as_string().size() > interp.limits().max_output_bytes) {
      return Bad("joined string exceeds the output limit");
    }
    RETURN_IF_ERROR(interp.ChargeCopy(joined));
    return joined;
  }
  if (name == "unique") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    ValueList out;
    for (const Value& item : items) {
      RETURN_IF_ERROR(interp.Charge(1 + static_cast<int64_t>(out.size())));  // Quadratic: count it.
      bool seen = false;
      for (const Value& kept : out) seen = seen || kept.Equals(item);
      if (!seen) out.push_back(item);
    }
    return Value::List(std::move(out));
  }
  if (name == "map") {
    ASSIGN_OR_RETURN(ValueList items, Iterate(input));
    ValueList out;
    if (const Value* attribute = args.Get("attribute", 99)) {
      const Value* fallback = args.Get("default", 99);
      for (const Value& item : items) {
        Value v = GetPath(item, attribute->Str());
        out.push_back(v.is_undefined() && fallback != nullptr ? *fallback : v);
      }
      return Value::List(std::move(out));
    }
    if (args.positional.empty()) return Bad("map needs a filter name or attribute=");
    const std::string filter = args.positional[0].Str();
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      RETURN_IF_ERROR(interp.Step());
      ASSIGN_OR_RETURN(Value v, ApplyFilter(interp, filter, item, rest));
      out.push_back(std::move(v));
    }
    return Value::List(std::move(out));
  }
  if (name == "select") return SelectItems(interp, input, args, false, true);
  if (name == "reject") return SelectItems(interp, input, args, false, false);
  if (name == "selectattr") return SelectItems(interp, input, args, true, true);
  if (name == "rejectattr") return SelectItems(interp, input, args, true, false);
  if (name == "indent") {
    const Value* width_v = args.Get("width", 0);
    std::string pad = width_v != nullptr && width_v->is_string() ? width_v->as_string()
                                                                  : std::string(IntOr(width_v, 4), ' ');
    const bool first = BoolOr(args.Get("first", 1), false);
    const bool blank = BoolOr(args.Get("blank", 2), false);
    std::vector<std::string> lines = PySplit(input.Str(), std::string("\n"), -1);
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n";
      const bool indent_line = (i > 0 || first) && (blank || !PyStrip(lines[i], std::nullopt, true, true).empty());
      if (indent_line) out += pad;
      out += lines[i];
    }
    return Value(std::move(out));
  }
  if (name == "round") {
    const int64_t precision = IntOr(args.Get("precision", 0), 0);
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value(std::nearbyint(input.as_double() * scale) / scale);
  }
  if (name == "dictsort") {
    if (!input.is_mapping()) return Bad("dictsort expects a mapping");
    ValueDict items = input.dict();
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    ValueList out;
    for (auto& [key, value] : items) out.push_back(Value::Tuple({Value(key), value}));
    return Value::List(std::move(out));
  }
  return Bad(absl::StrCat("no filter named '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(Interpreter& interp, absl::string_view name, const Value& input, const CallArgs& args) {
  (void)interp;
  const Value* arg = args.Get("value", 0);
  using K = Value::Kind;
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "string") return input.is_string();
  if (name == "mapping") return input.is_mapping();
  if (name == "iterable") return input.is_list() || input.is_string() || input.is_mapping() || input.is_undefined();
  if (name == "sequence") return input.is_list() || input.is_string() || input.is_mapping();
  if (name == "number") return input.is_number();
  if (name == "integer") return input.kind() == K::kInt;
  if (name == "float") return input.kind() == K::kFloat;
  if (name == "boolean") return input.kind() == K::kBool;
  if (name == "true") return input.kind() == K::kBool && input.as_bool();
  if (name == "false") return input.kind() == K::kBool && !input.as_bool();
  if (name == "callable") return input.kind() == K::kFunction;
  if (name == "odd" || name == "even") {
    if (!input.is_number()) return Bad(absl::StrCat("'", name, "' test needs a number"));
    return (input.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (arg == nullptr || !arg->is_number() || arg->as_int() == 0) return Bad("divisibleby needs a non-zero number");
    return input.as_int() % arg->as_int() == 0;
  }
  if (name == "lower") return input.is_string() && PyLower(input.as_string()) == input.as_string();
  if (name == "upper") return input.is_string() && PyUpper(input.as_string()) == input.as_string();
  if (arg == nullptr) return Bad(absl::StrCat("no test named '", name, "' (or it needs an argument)"));
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return input.Equals(*arg);
  if (name == "ne" || name == "!=") return !input.Equals(*arg);
  if (name == "in") {
    if (arg->is_string()) return input.is_string() && arg->as_string().find(input.as_string()) != std::string::npos;
    if (arg->is_list()) {
      for (const Value& item : arg->list()) {
        if (item.Equals(input)) return true;
      }
      return false;
    }
    if (arg->is_mapping()) return input.is_string() && arg->Find(input.as_string()) != nullptr;
    return Bad(absl::StrCat("argument of type '", arg->TypeName(), "' is not iterable"));
  }
  if (name == "gt" || name == "lt" || name == "ge" || name == "le" || name == "greaterthan" || name == "lessthan") {
    double a, b;
    if (input.is_number() && arg->is_number()) {
      a = input.as_double();
      b = arg->as_double();
    } else if (input.is_string() && arg->is_string()) {
      const int c = input.as_string().compare(arg->as_string());
      a = c;
      b = 0;
    } else {
      return Bad(absl::StrCat("cannot compare '", input.TypeName(), "' and '", arg->TypeName(), "'"));
    }
    if (name == "gt" || name == "greaterthan") return a > b;
    if (name == "lt" || name == "lessthan") return a < b;
    if (name == "ge") return a >= b;
    return a <= b;
  }
  return Bad(absl::StrCat("no test named '", name, "'"));
}

void AddStandardGlobals(Globals* globals) {
  (*globals)["range"] = Value::MakeFunction("range", [](Interpreter& interp, const CallArgs& args)
                                                         -> absl::StatusOr<Value> {
    std::vector<int64_t> bounds;
    for (const Value& v : args.positional) {
      if (!(v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool)) {
        return Bad(absl::StrCat("range() takes integers, not '", v.TypeName(), "'"));
      }
      bounds.push_back(v.as_int());
    }
    if (bounds.empty() || bounds.size() > 3) return Bad("range() takes 1 to 3 arguments");
    const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
    const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
    const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
    if (step == 0) return Bad("range() arg 3 must not be zero");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                                 static_cast<double>(step)));
    if (count > static_cast<double>(interp.limits().max_range)) {
      return Bad(absl::StrCat("range() of ", count, " items exceeds the limit of ", interp.limits().max_range));
    }
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
    return Value::List(std::move(out));
  });
  (*globals)["namespace"] = Value::MakeFunction("namespace", [](Interpreter&, const CallArgs& args)
                                                                 -> absl::StatusOr<Value> {
    ValueDict items;
    for (const Value& v : args.positional) {
      if (!v.is_mapping()) return Bad("namespace() takes keyword arguments or a dict");
      for (const auto& item : v.dict()) items.push_back(item);
    }
    for (const auto& item : args.keyword) items.push_back(item);
    return Value::Namespace(std::move(items));
  });
  (*globals)["dict"] = Value::MakeFunction("dict", [](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
    ValueDict items;
    for (const auto& item : args.keyword) items.push_back(item);
    return Value::Dict(std::move(items));
  });
  (*globals)["raise_exception"] = Value::MakeFunction(
      "raise_exception", [](Interpreter&, const CallArgs& args) -> absl::StatusOr<Value> {
        const Value* message = args.Get("message", 0);
        return RaisedError(message != nullptr ? message->Str() : "raise_exception() called");
      });
}

}  // namespace tessera::jinja

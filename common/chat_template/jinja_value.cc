#include "common/chat_template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::jinja {

const Value* CallArgs::Get(absl::string_view name, size_t index) const {
  for (const auto& [key, value] : keyword) {
    if (key == name) return &value;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::List(ValueList items) { return Value(std::make_shared<ValueList>(std::move(items))); }
Value Value::Tuple(ValueList items) {
  return Value(std::make_shared<ValueList>(std::move(items)), /*is_namespace=*/true);
}
Value Value::Dict(ValueDict items) { return Value(std::make_shared<ValueDict>(std::move(items))); }
Value Value::Namespace(ValueDict items) {
  return Value(std::make_shared<ValueDict>(std::move(items)), /*is_namespace=*/true);
}
Value Value::MakeFunction(std::string name, NativeFunction fn) {
  return Value(std::make_shared<const Function>(Function{std::move(name), std::move(fn)}));
}

Value::Kind Value::kind() const {
  switch (data_.index()) {
    case 0: return Kind::kUndefined;
    case 1: return Kind::kNone;
    case 2: return Kind::kBool;
    case 3: return Kind::kInt;
    case 4: return Kind::kFloat;
    case 5: return Kind::kString;
    case 6: return Kind::kList;
    case 7: return namespace_ ? Kind::kNamespace : Kind::kDict;
    default: return Kind::kFunction;
  }
}

int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (kind() == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

ValueDict& Value::dict() const { return *std::get<std::shared_ptr<ValueDict>>(data_); }

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !list().empty();
    case Kind::kDict: return !dict().empty();
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Python's repr: the shortest round-tripping digits, scientific below 1e-4 and from 1e16.
  char digits[64];
  auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), d, std::chars_format::scientific);
  std::string sci(digits, end);  // e.g. "1.5e+20", "-2e-05"
  size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string mantissa = sci.substr(0, e);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string significant;
  for (char c : mantissa) {
    if (c != '.') significant += c;
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = significant.substr(0, 1);
    if (significant.size() > 1) out += "." + significant.substr(1);
    out += absl::StrFormat("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (exponent < 0) {
    out = "0." + std::string(-exponent - 1, '0') + significant;
  } else {
    const size_t int_digits = exponent + 1;
    if (significant.size() <= int_digits) {
      out = significant + std::string(int_digits - significant.size(), '0') + ".0";
    } else {
      out = significant.substr(0, int_digits) + "." + significant.substr(int_digits);
    }
  }
  return negative ? "-" + out : out;
}

namespace {

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return absl::StrCat(as_int());
    case Kind::kFloat: return FormatFloat(as_double());
    case Kind::kString: return ReprString(as_string());
    case Kind::kList: {
      std::string out = is_tuple() ? "(" : "[";
      for (size_t i = 0; i < list().size(); ++i) {
        if (i > 0) out += ", ";
        out += list()[i].Repr();
      }
      if (is_tuple()) return out + (list().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind() == Kind::kNamespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, value] : dict()) {
        if (!first) out += ", ";
        first = false;
        out += ReprString(key) + ": " + value.Repr();
      }
      return out + (kind() == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kFunction: return "<function " + function().name + ">";
  }
  return "";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind() == Kind::kFloat || other.kind() == Kind::kFloat) return as_double() == other.as_double();
    return as_int() == other.as_int();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return as_string() == other.as_string();
    case Kind::kList: {
      if (list().size() != other.list().size()) return false;
      for (size_t i = 0; i < list().size(); ++i) {
        if (!list()[i].Equals(other.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict().size() != other.dict().size()) return false;
      for (const auto& [key, value] : dict()) {
        const Value* theirs = other.Find(key);
        if (theirs == nullptr || !value.Equals(*theirs)) return false;
      }
      return true;
    }
    case Kind::kNamespace: return &dict() == &other.dict();
    case Kind::kFunction: return &function() == &other.function();
    default: return false;
  }
}

const Value* Value::Find(absl::string_view key) const {
  if (!is_mapping()) return nullptr;
  for (const auto& [k, v] : dict()) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kFunction: return "function";
  }
  return "object";
}

namespace {

void AppendJsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += absl::StrFormat("\\u%04x", c);
        } else {
          *out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 passes through.
        }
    }
  }
  *out += '"';
}

absl::Status AppendJson(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  if (depth > 100) return absl::InvalidArgumentError("tojson: nesting deeper than 100");
  const std::string newline = indent >= 0 ? "\n" + std::string((depth + 1) * indent, ' ') : "";
  const std::string closing = indent >= 0 ? "\n" + std::string(depth * indent, ' ') : "";
  const std::string item_separator = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: *out += absl::StrCat(v.as_int()); return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FormatFloat(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString: AppendJsonString(v.as_string(), out); return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_separator;
        *out += newline;
        if (absl::Status s = AppendJson(v.list()[i], indent, sort_keys, depth + 1, out); !s.ok()) return s;
      }
      *out += closing + "]";
      return absl::OkStatus();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict()) items.push_back(&item);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += "{";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += item_separator;
        *out += newline;
        AppendJsonString(items[i]->first, out);
        *out += ": ";
        if (absl::Status s = AppendJson(items[i]->second, indent, sort_keys, depth + 1, out); !s.ok()) return s;
      }
      *out += closing + "}";
      return absl::OkStatus();
    }
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError(absl::StrCat("tojson: ", v.undefined_hint()));
    case Value::Kind::kFunction:
      return absl::InvalidArgumentError("tojson: Object of type function is not JSON serializable");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& v, int indent, bool sort_keys) {
  std::string out;
  if (absl::Status s = AppendJson(v, indent, sort_keys, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace tessera::jinja

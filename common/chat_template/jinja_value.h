#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_VALUE_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// The values a chat template computes with, modelled on the Python objects jinja2 sees
// (so that printing, truthiness and equality match what Hugging Face renders).
namespace tessera::jinja {

class Value;
using ValueList = std::vector<Value>;
// Python dicts keep insertion order; templates iterate them (tojson, items()).
using ValueDict = std::vector<std::pair<std::string, Value>>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, else the positional one at `index`, else nullptr.
  const Value* Get(absl::string_view name, size_t index) const;
};

class Interpreter;
using NativeFunction = std::function<absl::StatusOr<Value>(Interpreter&, const CallArgs&)>;

struct Function {
  std::string name;
  NativeFunction call;
};

struct Undefined {
  std::string hint;  // jinja2's UndefinedError message, for when it is used where that raises.
};
struct None {};

// Lists, dicts and namespaces are shared by reference, as in Python: `set ns.x` through
// one name is seen through every other.
class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() : data_(Undefined{}) {}
  // An undefined variable `name`.
  static Value MakeUndefined(const std::string& name) { return Value(Undefined{"'" + name + "' is undefined"}); }
  // A missing attribute or item, with jinja2's explanation ("list object has no element 3").
  static Value MakeUndefinedWithHint(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value MakeNone() { return Value(None{}); }
  Value(bool b) : data_(b) {}  // NOLINT: literals convert implicitly, as in Python.
  Value(int64_t i) : data_(i) {}  // NOLINT
  Value(int i) : data_(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d) : data_(d) {}  // NOLINT
  Value(std::string s) : data_(std::move(s)) {}  // NOLINT
  Value(const char* s) : data_(std::string(s)) {}  // NOLINT
  static Value List(ValueList items = {});
  static Value Tuple(ValueList items);  // A list that prints as (a, b), as Python tuples do.
  static Value Dict(ValueDict items = {});
  static Value Namespace(ValueDict items = {});
  static Value MakeFunction(std::string name, NativeFunction fn);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_mapping() const { return kind() == Kind::kDict || kind() == Kind::kNamespace; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // bool and int
  double as_double() const;  // bool, int and float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  ValueList& list() const { return *std::get<std::shared_ptr<ValueList>>(data_); }
  ValueDict& dict() const;
  const Function& function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(data_).hint; }
  bool is_tuple() const { return is_list() && namespace_; }

  // Python's bool(x).
  bool Truthy() const;
  // str(x): what {{ x }} prints. Undefined prints as "".
  std::string Str() const;
  // repr(x), for lists and dicts printed whole.
  std::string Repr() const;
  // x == y with Python's rules (1 == 1.0 == True; containers compared deeply).
  bool Equals(const Value& other) const;
  // The value of `key` in a dict, or nullptr.
  const Value* Find(absl::string_view key) const;
  // Python's type name, for error messages.
  std::string TypeName() const;

 private:
  using Data = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ValueList>,
                            std::shared_ptr<ValueDict>, std::shared_ptr<const Function>>;
  explicit Value(Data data, bool is_namespace = false) : data_(std::move(data)), namespace_(is_namespace) {}
  Data data_;
  bool namespace_ = false;  // A dict that is a namespace(); a list that is a tuple.
};

// Python's repr(float), e.g. 1.0, 0.5, 1e+20.
std::string FormatFloat(double d);
// Python's json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys), which is
// Hugging Face's tojson. indent < 0 means none (one line, ", " and ": " separators).
absl::StatusOr<std::string> ToJson(const Value& v, int indent, bool sort_keys);

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_VALUE_H_

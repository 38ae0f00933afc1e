#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_BUILTINS_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_BUILTINS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/jinja_eval.h"
#include "common/chat_template/jinja_value.h"

// jinja2's filters, tests, globals and the Python methods templates call on strings and
// dicts. Errors carry no line; the interpreter adds the caller's.
namespace tessera::jinja {

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, absl::string_view name, const Value& input,
                                  const CallArgs& args);
absl::StatusOr<bool> ApplyTest(Interpreter& interp, absl::string_view name, const Value& input,
                               const CallArgs& args);
// obj.name where it names a method (str.strip, dict.items, ...), as a bound function;
// Undefined otherwise.
Value GetMethod(const Value& obj, absl::string_view name);
// range, namespace, dict and raise_exception.
void AddStandardGlobals(Globals* globals);

// Items of a for loop or a filter over an iterable: list items, dict keys, string
// characters; an Undefined iterates as empty. TypeError for the rest.
absl::StatusOr<ValueList> Iterate(const Value& v);

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_BUILTINS_H_

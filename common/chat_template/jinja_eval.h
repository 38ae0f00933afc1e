#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_EVAL_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_EVAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/chat_template/jinja_ast.h"
#include "common/chat_template/jinja_value.h"

// Renders a parsed template. Templates come with model downloads, so rendering is bounded:
// a template cannot run forever, recurse without end or print without end.
namespace tessera::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{32} << 20;  // Also bounds every string built on the way.
  int max_call_depth = 64;                     // Macro recursion.
  int64_t max_steps = 20'000'000;              // Statements, loop iterations, calls and copies.
  int max_namespace_depth = 32;                // Containers nested in a namespace attribute.
  int64_t max_range = 1'000'000;               // Items range() may produce.
};

using Globals = absl::flat_hash_map<std::string, Value>;

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, Globals globals) : limits_(limits), globals_(std::move(globals)) {}

  // The rendered text; InvalidArgument "template line N: ..." for errors, or the exact
  // message of the template's raise_exception.
  absl::StatusOr<std::string> Render(const Program& program);

  // For builtins that call back (map, select, macros passed around).
  absl::StatusOr<Value> Call(const Value& callee, const CallArgs& args);
  absl::Status Step() { return Charge(1); }
  // Counts work proportional to a copy: `items` list items or `bytes` / 256 of text, so
  // that growing a value in a loop (quadratic copying) hits max_steps, not a hang.
  absl::Status Charge(int64_t units);
  absl::Status ChargeCopy(const Value& v);
  const RenderLimits& limits() const { return limits_; }

 private:
  using Frame = absl::flat_hash_map<std::string, Value>;
  enum class Flow { kNormal, kBreak, kContinue };

  absl::StatusOr<Flow> ExecBody(const Body& body);
  absl::StatusOr<Flow> Exec(const Stmt& stmt);
  absl::StatusOr<Flow> ExecFor(const Stmt& stmt);
  absl::Status ExecSet(const Stmt& stmt);
  absl::Status Assign(const std::vector<std::string>& targets, const Value& value, int line);
  Value DefineMacro(const Stmt& stmt);
  absl::StatusOr<std::string> Capture(const Body& body);
  absl::Status Emit(absl::string_view text, int line);

  absl::StatusOr<Value> Eval(const Expr& expr);
  absl::StatusOr<Value> EvalBinary(const Expr& expr);
  absl::StatusOr<Value> EvalCompare(const Expr& expr);
  absl::StatusOr<Value> EvalCall(const Expr& expr);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& expr, size_t first);

  Value Lookup(const std::string& name) const;
  void SetLocal(const std::string& name, Value value);

  RenderLimits limits_;
  Globals globals_;
  std::vector<std::shared_ptr<Frame>> scopes_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  Value pending_caller_;  // The body of a {% call %} while its macro is being called.
};

// "template line N: message" as InvalidArgument.
absl::Status TemplateError(int line, absl::string_view message);
// The status of raise_exception(message), which keeps the template's own message.
absl::Status RaisedError(absl::string_view message);
bool IsRaisedError(const absl::Status& status);

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_EVAL_H_

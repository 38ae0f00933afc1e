#include "common/chat_template/jinja_eval.h"

#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/chat_template/jinja_builtins.h"
#include "common/chat_template/jinja_text.h"
#include "common/status_macros.h"

namespace tessera::jinja {

namespace {

constexpr absl::string_view kRaisedPayload = "tessera.jinja/raise_exception";

// Errors from builtins carry no line; give them the caller's.
absl::Status AtLine(absl::Status status, int line) {
  if (status.ok() || IsRaisedError(status) || absl::StartsWith(status.message(), "template line ")) {
    return status;
  }
  return TemplateError(line, status.message());
}

template <typename T>
absl::StatusOr<T> AtLine(absl::StatusOr<T> v, int line) {
  if (v.ok()) return v;
  return AtLine(v.status(), line);
}

absl::Status UndefinedError(const Value& v, int line) {
  return TemplateError(line, v.undefined_hint());
}

absl::Status TypeError(int line, absl::string_view op, const Value& a, const Value& b) {
  return TemplateError(line, absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '",
                                          b.TypeName(), "'"));
}

// Python integers do not overflow; 64-bit ones do, and then the template fails instead.
absl::StatusOr<Value> Checked(bool overflowed, int64_t result, int line) {
  if (overflowed) return TemplateError(line, "integer overflow (beyond 64 bits)");
  return Value(result);
}

// False when `v` nests containers deeper than `depth` or contains the dict `self`.
bool NestingWithin(const Value& v, const ValueDict* self, int depth) {
  if (v.is_list()) {
    if (depth == 0) return false;
    for (const Value& item : v.list()) {
      if (!NestingWithin(item, self, depth - 1)) return false;
    }
  } else if (v.is_mapping()) {
    if (depth == 0 || &v.dict() == self) return false;
    for (const auto& [key, item] : v.dict()) {
      if (!NestingWithin(item, self, depth - 1)) return false;
    }
  }
  return true;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Python slice indices for a sequence of `n` items.
std::vector<size_t> SliceIndices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v,
                                 absl::Status* status) {
  std::vector<size_t> out;
  auto as_index = [&](const Value& v, int64_t* out_index) {
    if (v.is_none() || v.is_undefined()) return false;
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      *status = absl::InvalidArgumentError("slice indices must be integers or None");
      return false;
    }
    *out_index = v.as_int();
    return true;
  };
  int64_t step = 1;
  as_index(step_v, &step);
  if (!status->ok()) return out;
  if (step == 0) {
    *status = absl::InvalidArgumentError("slice step cannot be zero");
    return out;
  }
  int64_t start = 0, stop = 0;
  const bool has_start = as_index(start_v, &start);
  const bool has_stop = as_index(stop_v, &stop);
  if (!status->ok()) return out;
  // Negative indices count from the end; out-of-range ones clamp to the ends.
  auto clamp = [&](int64_t i) {
    if (i < 0) i += n;
    return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  if (step > 0) {
    start = has_start ? clamp(start) : 0;
    stop = has_stop ? clamp(stop) : n;
    for (int64_t i = start; i < stop; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    start = has_start ? clamp(start) : n - 1;
    stop = has_stop ? clamp(stop) : -1;
    for (int64_t i = start; i > stop; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace

absl::Status TemplateError(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", message));
}

absl::Status RaisedError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kRaisedPayload, absl::Cord("1"));
  return status;
}

bool IsRaisedError(const absl::Status& status) { return status.GetPayload(kRaisedPayload).has_value(); }

absl::StatusOr<std::string> Interpreter::Render(const Program& program) {
  std::string out;
  out_ = &out;
  scopes_ = {std::make_shared<Frame>()};
  steps_ = 0;
  call_depth_ = 0;
  ASSIGN_OR_RETURN(Flow flow, ExecBody(program.body));
  (void)flow;
  return out;
}

absl::Status Interpreter::ChargeCopy(const Value& v) {
  if (v.is_string()) return Charge(static_cast<int64_t>(v.as_string().size() / 256));
  if (v.is_list()) return Charge(static_cast<int64_t>(v.list().size()));
  if (v.is_mapping()) return Charge(static_cast<int64_t>(v.dict().size()));
  return absl::OkStatus();
}

absl::Status Interpreter::Charge(int64_t units) {
  steps_ += units;
  if (steps_ > limits_.max_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("template exceeded ", limits_.max_steps, " steps (an endless or too large loop?)"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Emit(absl::string_view text, int line) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return TemplateError(line, absl::StrCat("output exceeds ", limits_.max_output_bytes, " bytes"));
  }
  out_->append(text.data(), text.size());
  return absl::OkStatus();
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = (*it)->find(name);
    if (found != (*it)->end()) return found->second;
  }
  auto global = globals_.find(name);
  if (global != globals_.end()) return global->second;
  return Value::MakeUndefined(name);
}

void Interpreter::SetLocal(const std::string& name, Value value) { (*scopes_.back())[name] = std::move(value); }

absl::StatusOr<Interpreter::Flow> Interpreter::ExecBody(const Body& body) {
  for (const StmtPtr& stmt : body) {
    ASSIGN_OR_RETURN(Flow flow, Exec(*stmt));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body) {
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  absl::StatusOr<Flow> flow = ExecBody(body);
  out_ = saved;
  if (!flow.ok()) return flow.status();
  return captured;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const Stmt& stmt) {
  RETURN_IF_ERROR(AtLine(Step(), stmt.line));
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      RETURN_IF_ERROR(Emit(stmt.text, stmt.line));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr));
      RETURN_IF_ERROR(Emit(v.Str(), stmt.line));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [condition, body] : stmt.branches) {
        bool taken = condition == nullptr;
        if (!taken) {
          ASSIGN_OR_RETURN(Value v, Eval(*condition));
          taken = v.Truthy();
        }
        if (taken) return ExecBody(body);
      }
      return Flow::kNormal;
    case Stmt::Kind::kFor:
      return ExecFor(stmt);
    case Stmt::Kind::kSet:
      RETURN_IF_ERROR(ExecSet(stmt));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      ASSIGN_OR_RETURN(std::string text, Capture(stmt.body));
      SetLocal(stmt.targets[0], Value(std::move(text)));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      SetLocal(stmt.name, DefineMacro(stmt));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      // caller() renders the block's body in the scope around the {% call %}.
      std::vector<std::shared_ptr<Frame>> scopes = scopes_;
      const Body* body = &stmt.body;
      pending_caller_ = Value::MakeFunction("caller", [scopes, body](Interpreter& interp, const CallArgs&)
                                                          -> absl::StatusOr<Value> {
        std::vector<std::shared_ptr<Frame>> saved = std::move(interp.scopes_);
        interp.scopes_ = scopes;
        interp.scopes_.push_back(std::make_shared<Frame>());
        absl::StatusOr<std::string> text = interp.Capture(*body);
        interp.scopes_ = std::move(saved);
        if (!text.ok()) return text.status();
        return Value(*std::move(text));
      });
      absl::StatusOr<Value> v = Eval(*stmt.expr);
      pending_caller_ = Value();
      if (!v.ok()) return v.status();
      RETURN_IF_ERROR(Emit(v->Str(), stmt.line));
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kScope:
      return ExecBody(stmt.body);
  }
  return Flow::kNormal;
}

absl::Status Interpreter::Assign(const std::vector<std::string>& targets, const Value& value, int line) {
  if (targets.size() == 1) {
    SetLocal(targets[0], value);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(ValueList items, AtLine(Iterate(value), line));
  if (items.size() != targets.size()) {
    return TemplateError(line, absl::StrCat("cannot unpack ", items.size(), " values into ", targets.size(), " names"));
  }
  for (size_t i = 0; i < targets.size(); ++i) SetLocal(targets[i], items[i]);
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Stmt& stmt) {
  ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr));
  if (stmt.attribute.empty()) return Assign(stmt.targets, v, stmt.line);
  Value ns = Lookup(stmt.targets[0]);
  if (ns.kind() != Value::Kind::kNamespace) {
    return TemplateError(stmt.line, absl::StrCat("cannot assign attribute on non-namespace object '",
                                                 stmt.targets[0], "'"));
  }
  // A namespace is the one value that outlives a loop iteration, so the one place a value
  // could grow without bound in depth or come to contain itself (a cycle that printing or
  // comparing would never leave).
  RETURN_IF_ERROR(AtLine(ChargeCopy(v), stmt.line));
  if (!NestingWithin(v, &ns.dict(), limits_.max_namespace_depth)) {
    return TemplateError(stmt.line, absl::StrCat("namespace attribute '", stmt.attribute, "' would contain its ",
                                                 "namespace or nest deeper than ", limits_.max_namespace_depth));
  }
  for (auto& [key, value] : ns.dict()) {
    if (key == stmt.attribute) {
      value = std::move(v);
      return absl::OkStatus();
    }
  }
  ns.dict().emplace_back(stmt.attribute, std::move(v));
  return absl::OkStatus();
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Stmt& stmt) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr));
  ASSIGN_OR_RETURN(ValueList items, AtLine(Iterate(iterable), stmt.line));
  if (stmt.condition != nullptr) {
    // The inline filter runs first, so loop.index/length/last count filtered items only.
    ValueList kept;
    for (const Value& item : items) {
      RETURN_IF_ERROR(AtLine(Step(), stmt.line));
      scopes_.push_back(std::make_shared<Frame>());
      absl::Status s = Assign(stmt.targets, item, stmt.line);
      absl::StatusOr<Value> keep = s.ok() ? Eval(*stmt.condition) : absl::StatusOr<Value>(s);
      scopes_.pop_back();
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    scopes_.push_back(std::make_shared<Frame>());
    absl::StatusOr<Flow> flow = ExecBody(stmt.else_body);
    scopes_.pop_back();
    if (!flow.ok()) return flow.status();
    return Flow::kNormal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(AtLine(Step(), stmt.line));
    ValueDict loop = {
        {"index0", Value(i)},
        {"index", Value(i + 1)},
        {"revindex0", Value(n - i - 1)},
        {"revindex", Value(n - i)},
        {"first", Value(i == 0)},
        {"last", Value(i == n - 1)},
        {"length", Value(n)},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[i - 1] : Value::MakeUndefinedWithHint("there is no previous item")},
        {"nextitem", i + 1 < n ? items[i + 1] : Value::MakeUndefinedWithHint("there is no next item")},
    };
    loop.emplace_back("cycle", Value::MakeFunction("loop.cycle", [i](Interpreter&, const CallArgs& args)
                                                                    -> absl::StatusOr<Value> {
      if (args.positional.empty()) return absl::InvalidArgumentError("loop.cycle needs at least one value");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }));
    // Each iteration has its own scope: what it sets is gone in the next one and after
    // the loop, as in jinja2.
    scopes_.push_back(std::make_shared<Frame>());
    SetLocal("loop", Value::Dict(std::move(loop)));
    absl::Status s = Assign(stmt.targets, items[i], stmt.line);
    absl::StatusOr<Flow> flow = s.ok() ? ExecBody(stmt.body) : absl::StatusOr<Flow>(s);
    scopes_.pop_back();
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::DefineMacro(const Stmt& stmt) {
  const Stmt* macro = &stmt;
  // Weak: the macro usually lives in the root frame itself, and a strong pointer back would
  // be a cycle that outlives the render.
  std::weak_ptr<Frame> weak_root = scopes_.front();
  return Value::MakeFunction(stmt.name, [macro, weak_root](Interpreter& interp, const CallArgs& args)
                                            -> absl::StatusOr<Value> {
    std::shared_ptr<Frame> root = weak_root.lock();
    if (root == nullptr) return TemplateError(macro->line, "macro called after its template finished");
    if (interp.call_depth_ >= interp.limits_.max_call_depth) {
      return TemplateError(macro->line, absl::StrCat("macro '", macro->name, "' recursed deeper than ",
                                                     interp.limits_.max_call_depth));
    }
    if (args.positional.size() > macro->params.size()) {
      return TemplateError(macro->line, absl::StrCat("macro '", macro->name, "' takes ", macro->params.size(),
                                                     " arguments, got ", args.positional.size()));
    }
    // The macro sees its arguments and the template's top level, not the caller's locals.
    std::vector<std::shared_ptr<Frame>> saved = std::move(interp.scopes_);
    interp.scopes_ = {root, std::make_shared<Frame>()};
    absl::Status status;
    for (size_t i = 0; i < macro->params.size() && status.ok(); ++i) {
      const auto& [param, default_value] = macro->params[i];
      const Value* given = args.Get(param, i);
      if (given != nullptr) {
        interp.SetLocal(param, *given);
      } else if (default_value != nullptr) {
        absl::StatusOr<Value> v = interp.Eval(*default_value);
        if (v.ok()) {
          interp.SetLocal(param, *v);
        } else {
          status = v.status();
        }
      } else {
        interp.SetLocal(param, Value::MakeUndefined(param));
      }
    }
    if (!interp.pending_caller_.is_undefined()) {
      interp.SetLocal("caller", interp.pending_caller_);
      interp.pending_caller_ = Value();
    }
    absl::StatusOr<std::string> text = absl::InternalError("unset");
    if (status.ok()) {
      ++interp.call_depth_;
      text = interp.Capture(macro->body);
      --interp.call_depth_;
    }
    interp.scopes_ = std::move(saved);
    if (!status.ok()) return status;
    if (!text.ok()) return text.status();
    return Value(*std::move(text));
  });
}

absl::StatusOr<Value> Interpreter::Call(const Value& callee, const CallArgs& args) {
  RETURN_IF_ERROR(Step());
  if (callee.kind() != Value::Kind::kFunction) {
    if (callee.is_undefined()) {
      return absl::InvalidArgumentError(callee.undefined_hint());
    }
    return absl::InvalidArgumentError(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  }
  return callee.function().call(*this, args);
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& expr, size_t first) {
  CallArgs args;
  for (size_t i = first; i < expr.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*expr.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, e] : expr.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*e));
    args.keyword.emplace_back(name, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& expr) {
  ASSIGN_OR_RETURN(Value callee, Eval(*expr.args[0]));
  ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
  return AtLine(Call(callee, args), expr.line);
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kName:
      return Lookup(expr.name);
    case Expr::Kind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*expr.args[0]));
      if (obj.is_undefined()) return UndefinedError(obj, expr.line);
      // jinja2 tries the Python attribute first, so dict.items is the method.
      Value method = GetMethod(obj, expr.name);
      if (!method.is_undefined()) return method;
      if (const Value* v = obj.Find(expr.name)) return *v;
      return Value::MakeUndefinedWithHint(absl::StrCat("'", obj.TypeName(), " object' has no attribute '", expr.name, "'"));
    }
    case Expr::Kind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*expr.args[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*expr.args[1]));
      if (obj.is_undefined()) return UndefinedError(obj, expr.line);
      const bool int_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
      if (obj.is_list() && int_key) {
        int64_t i = key.as_int();
        const int64_t n = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.list()[static_cast<size_t>(i)];
        return Value::MakeUndefinedWithHint(absl::StrCat("list object has no element ", key.as_int()));
      }
      if (obj.is_string() && int_key) {
        RETURN_IF_ERROR(AtLine(ChargeCopy(obj), expr.line));
        std::vector<char32_t> cps = DecodeUtf8(obj.as_string());
        int64_t i = key.as_int();
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return Value(EncodeUtf8({cps[static_cast<size_t>(i)]}));
        return Value::MakeUndefinedWithHint(absl::StrCat("str object has no element ", key.as_int()));
      }
      if (key.is_string()) {
        if (const Value* v = obj.Find(key.as_string())) return *v;
        Value method = GetMethod(obj, key.as_string());
        if (!method.is_undefined()) return method;
        return Value::MakeUndefinedWithHint(
            absl::StrCat("'", obj.TypeName(), " object' has no attribute '", key.as_string(), "'"));
      }
      return Value::MakeUndefinedWithHint(absl::StrCat(obj.TypeName(), " object has no element ", key.Repr()));
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*expr.args[0]));
      Value bounds[3];
      for (int i = 0; i < 3; ++i) {
        if (expr.args[i + 1] != nullptr) {
          ASSIGN_OR_RETURN(bounds[i], Eval(*expr.args[i + 1]));
        }
      }
      if (obj.is_undefined()) return UndefinedError(obj, expr.line);
      absl::Status status;
      if (obj.is_list()) {
        std::vector<size_t> idx =
            SliceIndices(static_cast<int64_t>(obj.list().size()), bounds[0], bounds[1], bounds[2], &status);
        RETURN_IF_ERROR(AtLine(status, expr.line));
        RETURN_IF_ERROR(AtLine(Charge(static_cast<int64_t>(idx.size())), expr.line));
        ValueList out;
        for (size_t i : idx) out.push_back(obj.list()[i]);
        return Value::List(std::move(out));
      }
      if (obj.is_string()) {
        RETURN_IF_ERROR(AtLine(ChargeCopy(obj), expr.line));
        std::vector<char32_t> cps = DecodeUtf8(obj.as_string());
        std::vector<size_t> idx = SliceIndices(static_cast<int64_t>(cps.size()), bounds[0], bounds[1], bounds[2], &status);
        RETURN_IF_ERROR(AtLine(status, expr.line));
        std::vector<char32_t> out;
        for (size_t i : idx) out.push_back(cps[i]);
        return Value(EncodeUtf8(out));
      }
      return TemplateError(expr.line, absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
    }
    case Expr::Kind::kCall:
      return EvalCall(expr);
    case Expr::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value input, Eval(*expr.args[0]));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
      RETURN_IF_ERROR(AtLine(ChargeCopy(input), expr.line));  // Filters walk their input.
      return AtLine(ApplyFilter(*this, expr.name, input, args), expr.line);
    }
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value input, Eval(*expr.args[0]));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
      ASSIGN_OR_RETURN(bool result, AtLine(ApplyTest(*this, expr.name, input, args), expr.line));
      return Value(result != expr.negated);
    }
    case Expr::Kind::kUnary: {
      ASSIGN_OR_RETURN(Value v, Eval(*expr.args[0]));
      if (expr.name == "not") return Value(!v.Truthy());
      if (v.is_undefined()) return UndefinedError(v, expr.line);
      if (!v.is_number()) {
        return TemplateError(expr.line, absl::StrCat("bad operand type for unary ", expr.name, ": '", v.TypeName(), "'"));
      }
      if (expr.name == "+") return v.kind() == Value::Kind::kFloat ? v : Value(v.as_int());
      if (v.kind() == Value::Kind::kFloat) return Value(-v.as_double());
      return Checked(v.as_int() == INT64_MIN, v.as_int() == INT64_MIN ? 0 : -v.as_int(), expr.line);
    }
    case Expr::Kind::kBinary:
      return EvalBinary(expr);
    case Expr::Kind::kCompare:
      return EvalCompare(expr);
    case Expr::Kind::kCondition: {
      ASSIGN_OR_RETURN(Value test, Eval(*expr.args[1]));
      if (test.Truthy()) return Eval(*expr.args[0]);
      if (expr.args[2] == nullptr) {
        return Value::MakeUndefinedWithHint("the inline if-expression on line " + std::to_string(expr.line) +
                                            " evaluated to false and no else section was defined.");
      }
      return Eval(*expr.args[2]);
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList items;
      for (const ExprPtr& e : expr.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*e));
        items.push_back(std::move(v));
      }
      return expr.kind == Expr::Kind::kTuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    case Expr::Kind::kDict: {
      ValueDict items;
      for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value key, Eval(*expr.args[i]));
        ASSIGN_OR_RETURN(Value value, Eval(*expr.args[i + 1]));
        if (!key.is_string()) return TemplateError(expr.line, "dict keys must be strings");
        bool replaced = false;
        for (auto& [k, v] : items) {
          if (k == key.as_string()) {
            v = value;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(key.as_string(), std::move(value));
      }
      return Value::Dict(std::move(items));
    }
  }
  return TemplateError(expr.line, "unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& expr) {
  const std::string& op = expr.name;
  ASSIGN_OR_RETURN(Value a, Eval(*expr.args[0]));
  if (op == "and") return a.Truthy() ? Eval(*expr.args[1]) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*expr.args[1]);
  ASSIGN_OR_RETURN(Value b, Eval(*expr.args[1]));
  const size_t max_bytes = limits_.max_output_bytes;
  if (op == "~") {
    Value s(a.Str() + b.Str());
    if (s.as_string().size() > max_bytes) return TemplateError(expr.line, "string exceeds the output limit");
    RETURN_IF_ERROR(AtLine(ChargeCopy(s), expr.line));
    return s;
  }
  if (a.is_undefined()) return UndefinedError(a, expr.line);
  if (b.is_undefined()) return UndefinedError(b, expr.line);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat);
  if (op == "+") {
    if (numbers && !floats) {
      int64_t r;
      const bool overflowed = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return Checked(overflowed, r, expr.line);
    }
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_bytes) {
        return TemplateError(expr.line, "string exceeds the output limit");
      }
      Value s(a.as_string() + b.as_string());
      RETURN_IF_ERROR(AtLine(ChargeCopy(s), expr.line));
      return s;
    }
    if (a.is_list() && b.is_list()) {
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      Value list = Value::List(std::move(items));
      RETURN_IF_ERROR(AtLine(ChargeCopy(list), expr.line));
      return list;
    }
    return TypeError(expr.line, op, a, b);
  }
  if (op == "-") {
    if (numbers && !floats) {
      int64_t r;
      const bool overflowed = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return Checked(overflowed, r, expr.line);
    }
    if (numbers) return Value(a.as_double() - b.as_double());
    return TypeError(expr.line, op, a, b);
  }
  if (op == "*") {
    if (numbers && !floats) {
      int64_t r;
      const bool overflowed = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Checked(overflowed, r, expr.line);
    }
    if (numbers) return Value(a.as_double() * b.as_double());
    const Value* seq = a.is_string() || a.is_list() ? &a : &b;
    const Value* count = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_list()) &&
        (count->kind() == Value::Kind::kInt || count->kind() == Value::Kind::kBool)) {
      const int64_t n = std::max<int64_t>(0, count->as_int());
      const size_t unit = seq->is_string() ? seq->as_string().size() : seq->list().size() * 8;
      if (unit > 0 && static_cast<double>(unit) * static_cast<double>(n) > static_cast<double>(max_bytes)) {
        return TemplateError(expr.line, "repetition exceeds the output limit");
      }
      Value repeated;
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < n; ++i) s += seq->as_string();
        repeated = Value(std::move(s));
      } else {
        ValueList items;
        for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq->list().begin(), seq->list().end());
        repeated = Value::List(std::move(items));
      }
      RETURN_IF_ERROR(AtLine(ChargeCopy(repeated), expr.line));
      return repeated;
    }
    return TypeError(expr.line, op, a, b);
  }
  if (op == "**") {
    if (!numbers) return TypeError(expr.line, op, a, b);
    if (!floats && b.as_int() >= 0) {
      const int64_t base = a.as_int(), exponent = b.as_int();
      if (exponent == 0) return Value(int64_t{1});
      if (base == 0 || base == 1) return Value(base);
      if (base == -1) return Value(int64_t{exponent % 2 == 0 ? 1 : -1});
      int64_t result = 1;  // |base| >= 2: overflows within 63 rounds.
      for (int64_t i = 0; i < exponent; ++i) {
        if (__builtin_mul_overflow(result, base, &result)) return Checked(true, 0, expr.line);
      }
      return Value(result);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  if (op == "/" || op == "//" || op == "%") {
    if (!numbers) return TypeError(expr.line, op, a, b);
    if (b.as_double() == 0.0) {
      return TemplateError(expr.line, op == "%" ? "integer modulo by zero" : "division by zero");
    }
    if (op == "/") return Value(a.as_double() / b.as_double());
    if (floats) {
      const double q = std::floor(a.as_double() / b.as_double());
      return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    if (a.as_int() == INT64_MIN && b.as_int() == -1) return Checked(true, 0, expr.line);
    return op == "//" ? Value(FloorDiv(a.as_int(), b.as_int())) : Value(FloorMod(a.as_int(), b.as_int()));
  }
  return TemplateError(expr.line, absl::StrCat("unknown operator ", op));
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& expr) {
  ASSIGN_OR_RETURN(Value left, Eval(*expr.args[0]));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, Eval(*expr.args[i + 1]));
    const std::string& op = expr.ops[i];
    bool result = false;
    if (op == "==") {
      result = left.Equals(right);
    } else if (op == "!=") {
      result = !left.Equals(right);
    } else if (op == "in" || op == "notin") {
      if (right.is_string()) {
        if (!left.is_string()) {
          return TemplateError(expr.line, absl::StrCat("'in <string>' requires string as left operand, not ",
                                                       left.TypeName()));
        }
        result = right.as_string().find(left.as_string()) != std::string::npos;
      } else if (right.is_list()) {
        for (const Value& item : right.list()) result = result || item.Equals(left);
      } else if (right.is_mapping()) {
        result = left.is_string() && right.Find(left.as_string()) != nullptr;
      } else if (right.is_undefined()) {
        result = false;
      } else {
        return TemplateError(expr.line, absl::StrCat("argument of type '", right.TypeName(), "' is not iterable"));
      }
      if (op == "notin") result = !result;
    } else {
      int cmp = 0;
      if (left.is_number() && right.is_number()) {
        cmp = left.as_double() < right.as_double() ? -1 : left.as_double() > right.as_double() ? 1 : 0;
      } else if (left.is_string() && right.is_string()) {
        cmp = left.as_string().compare(right.as_string());  // UTF-8 byte order is code point order.
      } else {
        if (left.is_undefined()) return UndefinedError(left, expr.line);
        if (right.is_undefined()) return UndefinedError(right, expr.line);
        return TemplateError(expr.line, absl::StrCat("'", op, "' not supported between instances of '",
                                                     left.TypeName(), "' and '", right.TypeName(), "'"));
      }
      result = op == "<" ? cmp < 0 : op == "<=" ? cmp <= 0 : op == ">" ? cmp > 0 : cmp >= 0;
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace tessera::jinja

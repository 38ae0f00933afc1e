#ifndef TESSERA_COMMON_CHAT_TEMPLATE_JINJA_AST_H_
#define TESSERA_COMMON_CHAT_TEMPLATE_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat_template/jinja_value.h"

// The parsed template. One node type per level keeps the evaluator a pair of switches.
namespace tessera::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kGetAttr,    // args[0].name
    kGetItem,    // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], each bound may be null
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs)
    kTest,       // args[0] is [not] name(args[1:])
    kUnary,      // name in {"-", "+", "not"} applied to args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    kCondition,  // args[0] if args[1] else args[2] (args[2] may be null)
    kList,       // [args...]
    kTuple,      // (args...)
    kDict,       // {args[0]: args[1], ...}
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value literal;
  bool negated = false;  // kTest: "is not".
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body); a null condition is the else
    kFor,       // for targets in expr [if condition]: body [else: else_body]
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0]: body
    kMacro,     // macro name(params): body
    kCallBlock, // call expr: body (the body is `caller()`)
    kBreak,
    kContinue,
    kScope,     // a body rendered as is ({% generation %} from Hugging Face)
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string name;       // kMacro name
  std::string attribute;  // kSet on a namespace: targets[0].attribute
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (may be null)
};

struct Program {
  Body body;
};

}  // namespace tessera::jinja

#endif  // TESSERA_COMMON_CHAT_TEMPLATE_JINJA_AST_H_

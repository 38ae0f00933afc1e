#include "common/chat_template/jinja_parser.h"

#include <cstdlib>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace tessera::jinja {
namespace {

using Type = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Program> Run() {
    Program program;
    std::string end_tag;
    ASSIGN_OR_RETURN(program.body, ParseBody({}, &end_tag));
    return program;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Type::kOperator && Peek(ahead).value == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Type::kName && Peek(ahead).value == name;
  }
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("template line ", Peek().line, ": ", message));
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case Type::kEnd: return "end of template";
      case Type::kVarEnd: return "'}}'";
      case Type::kBlockEnd: return "'%}'";
      case Type::kBlockBegin: return "'{%'";
      case Type::kVarBegin: return "'{{'";
      case Type::kText: return "text";
      default: return "'" + t.value + "'";
    }
  }
  absl::Status Expect(absl::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", op, "', got ", Describe(Peek())));
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != Type::kName) return Error(absl::StrCat("expected a name, got ", Describe(Peek())));
    return Next().value;
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().type != Type::kBlockEnd) return Error(absl::StrCat("expected '%}', got ", Describe(Peek())));
    Next();
    return absl::OkStatus();
  }

  // A depth guard for recursive descent.
  struct DepthGuard {
    explicit DepthGuard(int* depth) : depth(depth) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };
  absl::Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) return Error(absl::StrCat("nesting deeper than ", kMaxParseDepth));
    return absl::OkStatus();
  }

  // Statements up to one of `end_tags` (whose name is consumed and returned in
  // *end_tag; the rest of that tag is the caller's) or the end of the template.
  absl::StatusOr<Body> ParseBody(const std::set<std::string>& end_tags, std::string* end_tag) {
    DepthGuard guard(&depth_);
    RETURN_IF_ERROR(CheckDepth());
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.type == Type::kEnd) {
        if (!end_tags.empty()) {
          return Error(absl::StrCat("unexpected end of template; expected ",
                                    absl::StrJoin(end_tags, " or "), " to close the block"));
        }
        return body;
      }
      if (t.type == Type::kText) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::kText;
        stmt->line = t.line;
        stmt->text = Next().value;
        body.push_back(std::move(stmt));
        continue;
      }
      if (t.type == Type::kVarBegin) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::kOutput;
        stmt->line = Next().line;
        ASSIGN_OR_RETURN(stmt->expr, ParseExpression());
        if (Peek().type != Type::kVarEnd) return Error(absl::StrCat("expected '}}', got ", Describe(Peek())));
        Next();
        body.push_back(std::move(stmt));
        continue;
      }
      if (t.type != Type::kBlockBegin) return Error(absl::StrCat("unexpected ", Describe(t)));
      Next();
      if (Peek().type != Type::kName) return Error(absl::StrCat("expected a tag name, got ", Describe(Peek())));
      const std::string tag = Peek().value;
      if (end_tags.count(tag) != 0) {
        Next();
        *end_tag = tag;
        return body;
      }
      ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement());
      body.push_back(std::move(stmt));
    }
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    const Token& t = Next();
    const std::string& tag = t.value;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = t.line;
    std::string end_tag;
    if (tag == "if") {
      stmt->kind = Stmt::Kind::kIf;
      ASSIGN_OR_RETURN(ExprPtr condition, ParseExpression());
      while (true) {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, &end_tag));
        stmt->branches.emplace_back(std::move(condition), std::move(body));
        if (end_tag == "elif") {
          ASSIGN_OR_RETURN(condition, ParseExpression());
          continue;
        }
        if (end_tag == "else") {
          RETURN_IF_ERROR(ExpectBlockEnd());
          ASSIGN_OR_RETURN(Body else_body, ParseBody({"endif"}, &end_tag));
          stmt->branches.emplace_back(nullptr, std::move(else_body));
        }
        break;
      }
    } else if (tag == "for") {
      stmt->kind = Stmt::Kind::kFor;
      ASSIGN_OR_RETURN(stmt->targets, ParseTargets());
      if (!IsName("in")) return Error(absl::StrCat("expected 'in' in for loop, got ", Describe(Peek())));
      Next();
      ASSIGN_OR_RETURN(stmt->expr, ParseExpression(/*allow_condition=*/false));
      if (IsName("if")) {
        Next();
        ASSIGN_OR_RETURN(stmt->condition, ParseExpression(/*allow_condition=*/false));
      }
      if (IsName("recursive")) return Error("recursive for loops are not supported");
      RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      absl::StatusOr<Body> body = ParseBody({"else", "endfor"}, &end_tag);
      --loop_depth_;
      if (!body.ok()) return body.status();
      stmt->body = *std::move(body);
      if (end_tag == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endfor"}, &end_tag));
      }
    } else if (tag == "set") {
      ASSIGN_OR_RETURN(stmt->targets, ParseTargets());
      if (stmt->targets.size() == 1 && IsOp(".")) {
        Next();
        ASSIGN_OR_RETURN(stmt->attribute, ExpectName());
      }
      if (IsOp("=")) {
        Next();
        stmt->kind = Stmt::Kind::kSet;
        ASSIGN_OR_RETURN(stmt->expr, ParseTupleOrExpression());
      } else {
        if (stmt->targets.size() != 1 || !stmt->attribute.empty()) return Error("a block set takes one plain name");
        if (IsOp("|")) return Error("filters on block set are not supported");
        stmt->kind = Stmt::Kind::kSetBlock;
        RETURN_IF_ERROR(ExpectBlockEnd());
        ASSIGN_OR_RETURN(stmt->body, ParseBody({"endset"}, &end_tag));
      }
    } else if (tag == "macro") {
      stmt->kind = Stmt::Kind::kMacro;
      ASSIGN_OR_RETURN(stmt->name, ExpectName());
      RETURN_IF_ERROR(Expect("("));
      while (!IsOp(")")) {
        ASSIGN_OR_RETURN(std::string param, ExpectName());
        ExprPtr default_value;
        if (IsOp("=")) {
          Next();
          ASSIGN_OR_RETURN(default_value, ParseExpression());
        }
        stmt->params.emplace_back(std::move(param), std::move(default_value));
        if (!IsOp(",")) break;
        Next();
      }
      RETURN_IF_ERROR(Expect(")"));
      RETURN_IF_ERROR(ExpectBlockEnd());
      const int outer_loop_depth = loop_depth_;
      loop_depth_ = 0;  // A macro body cannot break out of the loop around its definition.
      absl::StatusOr<Body> body = ParseBody({"endmacro"}, &end_tag);
      loop_depth_ = outer_loop_depth;
      if (!body.ok()) return body.status();
      stmt->body = *std::move(body);
    } else if (tag == "call") {
      stmt->kind = Stmt::Kind::kCallBlock;
      if (IsOp("(")) return Error("call blocks with caller arguments are not supported");
      ASSIGN_OR_RETURN(stmt->expr, ParseExpression());
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(stmt->body, ParseBody({"endcall"}, &end_tag));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return Error(absl::StrCat("'", tag, "' outside a for loop"));
      stmt->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (tag == "generation") {
      stmt->kind = Stmt::Kind::kScope;
      RETURN_IF_ERROR(ExpectBlockEnd());
      ASSIGN_OR_RETURN(stmt->body, ParseBody({"endgeneration"}, &end_tag));
    } else {
      return Error(absl::StrCat("unknown or unexpected tag '", tag, "'"));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = IsOp("(");
    if (parenthesized) Next();
    while (true) {
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      targets.push_back(std::move(name));
      if (!IsOp(",")) break;
      Next();
    }
    if (parenthesized) RETURN_IF_ERROR(Expect(")"));
    return targets;
  }

  static ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // `a, b` without parentheses (as in set x = a, b) is a tuple.
  absl::StatusOr<ExprPtr> ParseTupleOrExpression() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (!IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      tuple->args.push_back(std::move(item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool allow_condition = true) {
    DepthGuard guard(&depth_);
    RETURN_IF_ERROR(CheckDepth());
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    if (!allow_condition) return expr;
    while (IsName("if")) {
      const int line = Next().line;
      ExprPtr cond = Make(Expr::Kind::kCondition, line);
      ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        Next();
        ASSIGN_OR_RETURN(otherwise, ParseExpression());
      }
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      ExprPtr node = Make(Expr::Kind::kBinary, Next().line);
      node->name = "or";
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      node->args.push_back(std::move(left));
      node->args.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      ExprPtr node = Make(Expr::Kind::kBinary, Next().line);
      node->name = "and";
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      node->args.push_back(std::move(left));
      node->args.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      RETURN_IF_ERROR(CheckDepth());
      ExprPtr node = Make(Expr::Kind::kUnary, Next().line);
      node->name = "not";
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      node->args.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Peek().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (Peek().type == Type::kOperator &&
          (Peek().value == "==" || Peek().value == "!=" || Peek().value == "<" || Peek().value == "<=" ||
           Peek().value == ">" || Peek().value == ">=")) {
        op = Next().value;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "notin";
      } else {
        break;
      }
      if (node == nullptr) {
        node = Make(Expr::Kind::kCompare, line);
        node->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      node->ops.push_back(op);
      node->args.push_back(std::move(operand));
    }
    return node != nullptr ? std::move(node) : std::move(first);
  }

  // Binary levels, loosest first: + -, then ~, then * / // %, then **.
  absl::StatusOr<ExprPtr> ParseMath1() { return ParseBinaryLevel(0); }

  absl::StatusOr<ExprPtr> ParseBinaryLevel(int level) {
    static const std::vector<std::vector<std::string>> kLevels = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == static_cast<int>(kLevels.size())) return ParseUnary();
    ASSIGN_OR_RETURN(ExprPtr left, ParseBinaryLevel(level + 1));
    while (Peek().type == Type::kOperator) {
      const std::string op = Peek().value;
      bool matches = false;
      for (const std::string& candidate : kLevels[level]) matches = matches || candidate == op;
      if (!matches) break;
      ExprPtr node = Make(Expr::Kind::kBinary, Next().line);
      node->name = op;
      ASSIGN_OR_RETURN(ExprPtr right, ParseBinaryLevel(level + 1));
      node->args.push_back(std::move(left));
      node->args.push_back(std::move(right));
      left = std::move(node);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filters = true) {
    DepthGuard guard(&depth_);
    RETURN_IF_ERROR(CheckDepth());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Make(Expr::Kind::kUnary, Peek().line);
      node->name = Next().value;
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(/*with_filters=*/false));
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
      ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    }
    if (with_filters) return ParseFiltersAndTests(std::move(node));
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    ExprPtr node;
    switch (t.type) {
      case Type::kName: {
        Next();
        if (t.value == "true" || t.value == "True") {
          node = Make(Expr::Kind::kLiteral, t.line);
          node->literal = Value(true);
        } else if (t.value == "false" || t.value == "False") {
          node = Make(Expr::Kind::kLiteral, t.line);
          node->literal = Value(false);
        } else if (t.value == "none" || t.value == "None") {
          node = Make(Expr::Kind::kLiteral, t.line);
          node->literal = Value::MakeNone();
        } else {
          node = Make(Expr::Kind::kName, t.line);
          node->name = t.value;
        }
        return node;
      }
      case Type::kString: {
        node = Make(Expr::Kind::kLiteral, t.line);
        std::string s;
        while (Peek().type == Type::kString) s += Next().value;  // Adjacent literals concatenate.
        node->literal = Value(std::move(s));
        return node;
      }
      case Type::kInteger: {
        node = Make(Expr::Kind::kLiteral, t.line);
        errno = 0;
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) return Error(absl::StrCat("integer literal out of range: ", t.value));
        node->literal = Value(static_cast<int64_t>(v));
        Next();
        return node;
      }
      case Type::kFloat: {
        node = Make(Expr::Kind::kLiteral, t.line);
        node->literal = Value(std::strtod(t.value.c_str(), nullptr));
        Next();
        return node;
      }
      case Type::kOperator:
        if (t.value == "(") {
          Next();
          if (IsOp(")")) {
            Next();
            return Make(Expr::Kind::kTuple, t.line);
          }
          ASSIGN_OR_RETURN(ExprPtr inner, ParseExpression());
          if (IsOp(",")) {
            ExprPtr tuple = Make(Expr::Kind::kTuple, t.line);
            tuple->args.push_back(std::move(inner));
            while (IsOp(",")) {
              Next();
              if (IsOp(")")) break;
              ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
              tuple->args.push_back(std::move(item));
            }
            inner = std::move(tuple);
          }
          RETURN_IF_ERROR(Expect(")"));
          return inner;
        }
        if (t.value == "[") {
          Next();
          node = Make(Expr::Kind::kList, t.line);
          while (!IsOp("]")) {
            ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
            node->args.push_back(std::move(item));
            if (!IsOp(",")) break;
            Next();
          }
          RETURN_IF_ERROR(Expect("]"));
          return node;
        }
        if (t.value == "{") {
          Next();
          node = Make(Expr::Kind::kDict, t.line);
          while (!IsOp("}")) {
            ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
            RETURN_IF_ERROR(Expect(":"));
            ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
            node->args.push_back(std::move(key));
            node->args.push_back(std::move(value));
            if (!IsOp(",")) break;
            Next();
          }
          RETURN_IF_ERROR(Expect("}"));
          return node;
        }
        break;
      default:
        break;
    }
    return Error(absl::StrCat("unexpected ", Describe(t), " in expression"));
  }

  absl::Status ParseCallArgs(Expr* call) {
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (Peek().type == Type::kName && IsOp("=", 1)) {
        std::string name = Next().value;
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        call->kwargs.emplace_back(std::move(name), std::move(value));
      } else {
        if (!call->kwargs.empty()) return Error("positional argument after keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        call->args.push_back(std::move(value));
      }
      if (!IsOp(",")) break;
      Next();
    }
    return Expect(")");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        ExprPtr attr = Make(Expr::Kind::kGetAttr, line);
        if (Peek().type == Type::kInteger) {  // x.0 is x[0] in jinja2.
          attr->kind = Expr::Kind::kGetItem;
          ExprPtr index = Make(Expr::Kind::kLiteral, line);
          index->literal = Value(static_cast<int64_t>(std::strtoll(Next().value.c_str(), nullptr, 10)));
          attr->args.push_back(std::move(node));
          attr->args.push_back(std::move(index));
        } else {
          ASSIGN_OR_RETURN(attr->name, ExpectName());
          attr->args.push_back(std::move(node));
        }
        node = std::move(attr);
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ExprPtr call = Make(Expr::Kind::kCall, Peek().line);
        call->args.push_back(std::move(node));
        RETURN_IF_ERROR(ParseCallArgs(call.get()));
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const int line = Next().line;  // [
    ExprPtr bounds[3];
    int colons = 0;
    for (int part = 0; part < 3; ++part) {
      if (!IsOp(":") && !IsOp("]")) {
        ASSIGN_OR_RETURN(bounds[part], ParseExpression());
      }
      if (IsOp(":") && colons < 2) {
        Next();
        ++colons;
        continue;
      }
      break;
    }
    RETURN_IF_ERROR(Expect("]"));
    ExprPtr out = Make(colons == 0 ? Expr::Kind::kGetItem : Expr::Kind::kSlice, line);
    out->args.push_back(std::move(node));
    if (colons == 0) {
      if (bounds[0] == nullptr) return Error("empty subscript");
      out->args.push_back(std::move(bounds[0]));
    } else {
      for (auto& b : bounds) out->args.push_back(std::move(b));
    }
    return out;
  }

  absl::StatusOr<ExprPtr> ParseFiltersAndTests(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        ExprPtr filter = Make(Expr::Kind::kFilter, line);
        ASSIGN_OR_RETURN(filter->name, ExpectName());
        while (IsOp(".")) {  // Dotted filter names.
          Next();
          ASSIGN_OR_RETURN(std::string part, ExpectName());
          filter->name += "." + part;
        }
        filter->args.push_back(std::move(node));
        if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(filter.get()));
        node = std::move(filter);
      } else if (IsName("is")) {
        const int line = Next().line;
        ExprPtr test = Make(Expr::Kind::kTest, line);
        if (IsName("not")) {
          Next();
          test->negated = true;
        }
        // Names like `none`, `true` and `false` are test names here.
        ASSIGN_OR_RETURN(test->name, ExpectName());
        test->args.push_back(std::move(node));
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(test.get()));
        } else if ((Peek().type == Type::kName || Peek().type == Type::kString || Peek().type == Type::kInteger ||
                    Peek().type == Type::kFloat || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") && !IsName("in") &&
                   !IsName("not") && !IsName("is")) {
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          test->args.push_back(std::move(arg));
        }
        node = std::move(test);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for loops around the current position (break/continue need one).
};

}  // namespace

absl::StatusOr<Program> Parse(absl::string_view source, const LexerOptions& options) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, options));
  return Parser(std::move(tokens)).Run();
}

}  // namespace tessera::jinja

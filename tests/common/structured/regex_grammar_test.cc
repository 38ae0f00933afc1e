// RegexToGbnf: the expressions compile and match what the regex matches in full, inside
// JSON strings too; what a grammar cannot express is refused by name.
#include "common/structured/regex_grammar.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/structured/grammar.h"
#include "gtest/gtest.h"

namespace tessera::structured {
namespace {

std::shared_ptr<const Grammar> Compile(absl::string_view pattern,
                                       RegexContext context = RegexContext::kRaw) {
  absl::StatusOr<std::string> expression = RegexToGbnf(pattern, context);
  EXPECT_TRUE(expression.ok()) << pattern << ": " << expression.status();
  if (!expression.ok()) return nullptr;
  const std::string gbnf = absl::StrCat("root ::= ", *expression, "\n");
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = Grammar::FromGbnf(gbnf);
  EXPECT_TRUE(grammar.ok()) << grammar.status() << "\n" << gbnf;
  return grammar.ok() ? *grammar : nullptr;
}

TEST(RegexGrammarTest, LiteralsClassesAndQuantifiers) {
  auto g = Compile("ab[0-9]{2,5}(x|y)*");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("ab12"));
  EXPECT_TRUE(g->Accepts("ab12345xyx"));
  EXPECT_FALSE(g->Accepts("ab1"));
  EXPECT_FALSE(g->Accepts("ab123456"));
  EXPECT_FALSE(g->Accepts("ab12z"));
  EXPECT_TRUE(g->AcceptsPrefix("ab1"));
}

TEST(RegexGrammarTest, AnchorsAtTheEndsMeanNothingMore) {
  auto g = Compile(R"(^\d{3}-\d{4}$)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("555-1234"));
  EXPECT_FALSE(g->Accepts("555-123"));
  auto alternatives = Compile("^a|b$");
  ASSERT_NE(alternatives, nullptr);
  EXPECT_TRUE(alternatives->Accepts("a"));
  EXPECT_TRUE(alternatives->Accepts("b"));
}

TEST(RegexGrammarTest, EscapesAndShorthandClasses) {
  auto g = Compile(R"([\w.-]+@x\.(com|org)\s?\D)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("a_b.c-d@x.com a"));
  EXPECT_TRUE(g->Accepts("z@x.orgq"));
  EXPECT_FALSE(g->Accepts("z@x.org1"));
  EXPECT_FALSE(g->Accepts("z@xcom a"));
  auto hex = Compile(R"(\x41\u00e9\t)");
  ASSERT_NE(hex, nullptr);
  EXPECT_TRUE(hex->Accepts("A\xC3\xA9\t"));
}

TEST(RegexGrammarTest, DotAndNegatedClasses) {
  auto g = Compile("a.b[^xyz]");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("a\xCE\xB1" "bq"));  // Non-ASCII is one character.
  EXPECT_FALSE(g->Accepts("a\nbq"));
  EXPECT_FALSE(g->Accepts("a-bx"));
}

TEST(RegexGrammarTest, RepetitionOfWhatCanMatchNothingStaysUsable) {
  // (a*)* and (a|)+ would be left-recursive if written as they stand.
  for (const char* pattern : {"(a*)*b", "(a|)+b", "(a?b?){2,}c", "()*x"}) {
    auto g = Compile(pattern);
    ASSERT_NE(g, nullptr) << pattern;
  }
  auto g = Compile("(a?b?)+c");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("c"));
  EXPECT_TRUE(g->Accepts("abbac"));
  EXPECT_FALSE(g->Accepts("abd"));
}

TEST(RegexGrammarTest, LazyQuantifiersMatchTheSameStrings) {
  auto g = Compile("a+?b*?c??");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("aabbc"));
  EXPECT_TRUE(g->Accepts("a"));
}

TEST(RegexGrammarTest, BracesThatAreNotQuantifiersAreLiterals) {
  auto g = Compile("{a}x{,2}");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("{a}xx"));
  EXPECT_TRUE(g->Accepts("{a}"));
}

TEST(RegexGrammarTest, JsonStringContextEscapes) {
  // The grammar covers the characters as JSON writes them inside a string.
  auto quote = Compile(R"(a"b\\c)", RegexContext::kJsonString);
  ASSERT_NE(quote, nullptr);
  EXPECT_TRUE(quote->Accepts(R"(a\"b\\c)"));
  EXPECT_FALSE(quote->Accepts(R"(a"b\c)"));

  auto dot = Compile("x.{2}", RegexContext::kJsonString);
  ASSERT_NE(dot, nullptr);
  EXPECT_TRUE(dot->Accepts(R"(x\"\\)"));
  EXPECT_TRUE(dot->Accepts(R"(x\tq)"));
  EXPECT_TRUE(dot->Accepts(R"(x\u0001q)"));
  EXPECT_FALSE(dot->Accepts(R"(x\nq)"));  // '.' is not a newline.
  EXPECT_FALSE(dot->Accepts("x\"q"));     // A bare quote would end the string.
  EXPECT_FALSE(dot->Accepts("x\tq"));     // A bare control is not JSON.

  auto negated = Compile("[^a]", RegexContext::kJsonString);
  ASSERT_NE(negated, nullptr);
  EXPECT_TRUE(negated->Accepts(R"(\n)"));
  EXPECT_TRUE(negated->Accepts(R"(\u001f)"));
  EXPECT_TRUE(negated->Accepts("b"));
  EXPECT_FALSE(negated->Accepts("a"));
  EXPECT_FALSE(negated->Accepts("\n"));
}

TEST(RegexGrammarTest, RefusesWhatAGrammarCannotExpress) {
  struct Case {
    const char* pattern;
    const char* names;
  };
  for (const Case& c : {Case{R"((a)\1)", "backreference"}, Case{"(?=a)a", "lookaround"},
                        Case{"(?<!a)b", "lookaround"}, Case{R"(a\bc)", "word boundary"},
                        Case{"a^b", "anchor"}, Case{"a$b", "anchor"}, Case{"(?i)a", "flags"},
                        Case{R"(\p{L})", "Unicode property"}, Case{"*a", "nothing to repeat"},
                        Case{"a**", "quantifier after a quantifier"},
                        Case{"a{3,2}", "n < m"}, Case{"(ab", "missing ')'"},
                        Case{"ab)", "unbalanced"}, Case{"[ab", "missing ']'"},
                        Case{R"(\q)", "unknown escape"}}) {
    absl::StatusOr<std::string> r = RegexToGbnf(c.pattern);
    ASSERT_FALSE(r.ok()) << c.pattern << " -> " << *r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.pattern;
    EXPECT_NE(r.status().message().find(c.names), absl::string_view::npos)
        << c.pattern << ": " << r.status();
  }
}

TEST(RegexGrammarTest, HostilePatternsAreRefusedQuickly) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> nested = RegexToGbnf("(a{1,1000}){1,1000}");
  EXPECT_EQ(nested.status().code(), absl::StatusCode::kResourceExhausted) << nested.status();
  absl::StatusOr<std::string> deep =
      RegexToGbnf(std::string(200, '(') + "a" + std::string(200, ')'));
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kResourceExhausted) << deep.status();
  absl::StatusOr<std::string> huge_count = RegexToGbnf("a{99999999999}");
  EXPECT_EQ(huge_count.status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<std::string> small_budget = RegexToGbnf("[a-z]{1,100}", RegexContext::kRaw, 100);
  EXPECT_EQ(small_budget.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

}  // namespace
}  // namespace tessera::structured

// The grammar engine: GBNF parsing and checks, the lazily determinised automaton, the
// vocabulary trie and the per-state token masks, the matcher that holds a sequence to its
// grammar.
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/structured/constraint_grammar.h"
#include "common/structured/grammar.h"
#include "common/structured/grammar_automaton.h"
#include "common/structured/token_grammar.h"
#include "common/structured/token_vocabulary.h"
#include "common/structured/utf8_ranges.h"
#include "gtest/gtest.h"

namespace tessera::structured {
namespace {

std::shared_ptr<const Grammar> Compile(const std::string& gbnf) {
  auto g = Grammar::FromGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf;
  return g.ok() ? *g : nullptr;
}

TEST(GbnfTest, LiteralsAlternativesAndRepetitions) {
  auto g = Compile(R"(root ::= "a" ("b" | "cd")* "e"? [0-9]{2,3}   # comment
  )");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("a12"));
  EXPECT_TRUE(g->Accepts("abcdbe123"));
  EXPECT_FALSE(g->Accepts("a1"));
  EXPECT_FALSE(g->Accepts("a1234"));
  EXPECT_FALSE(g->Accepts("ac12"));
  EXPECT_TRUE(g->AcceptsPrefix("abc"));
  EXPECT_FALSE(g->AcceptsPrefix("ax"));
}

TEST(GbnfTest, RulesSpanLinesAndReferToEachOther) {
  auto g = Compile(R"(
root ::= value
value ::=
  object |
  "null"
object ::= "{" ( pair ( "," pair )* )? "}"
pair ::= [a-z]+ ":" value
)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("{a:null,bc:{d:null}}"));
  EXPECT_TRUE(g->Accepts("{}"));
  EXPECT_FALSE(g->Accepts("{a:null,}"));
}

TEST(GbnfTest, ClassesAreOverCodePoints) {
  auto g = Compile(R"(root ::= [^"\\\x00-\x1F]+ "." [\u00e9-\u00ea] [😀])");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->Accepts("h\xC3\xA9llo \xE2\x82\xAC.\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(g->Accepts("h\"i.\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(g->Accepts("hi.e\xF0\x9F\x98\x80"));
  // A lone continuation byte is not a character.
  EXPECT_FALSE(g->Accepts("\x80.\xC3\xA9\xF0\x9F\x98\x80"));
  auto dot = Compile(R"(root ::= . .)");
  EXPECT_TRUE(dot->Accepts("a\xE2\x82\xAC"));
  EXPECT_FALSE(dot->Accepts("a"));
}

TEST(GbnfTest, Utf8SequencesCoverEveryCodePointOnce) {
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u,
                      0x10FFFFu, 0x1F600u}) {
    const std::string bytes = EncodeUtf8(cp);
    int matches = 0;
    for (const auto& seq : Utf8Sequences(0, 0x10FFFF)) {
      if (seq.size() != bytes.size()) continue;
      bool all = true;
      for (size_t i = 0; i < seq.size(); ++i) {
        const uint8_t b = static_cast<uint8_t>(bytes[i]);
        all = all && b >= seq[i].lo && b <= seq[i].hi;
      }
      matches += all;
    }
    EXPECT_EQ(matches, 1) << cp;
  }
  // Surrogates are not characters.
  for (const auto& seq : Utf8Sequences(0xD800, 0xDFFF)) ADD_FAILURE() << seq.size();
}

TEST(GbnfTest, ErrorsNameTheProblem) {
  auto missing = Grammar::FromGbnf("root ::= item\n");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("undefined rule \"item\""), std::string::npos)
      << missing.status();
  auto no_root = Grammar::FromGbnf("item ::= \"a\"\n");
  EXPECT_NE(no_root.status().message().find("root"), std::string::npos);
  auto left = Grammar::FromGbnf("root ::= root \"a\" | \"b\"\n");
  EXPECT_NE(left.status().message().find("left-recursive"), std::string::npos) << left.status();
  auto hidden_left = Grammar::FromGbnf("root ::= x root \"a\" | \"b\"\nx ::= \"c\"?\n");
  EXPECT_NE(hidden_left.status().message().find("left-recursive"), std::string::npos);
  auto forever = Grammar::FromGbnf("root ::= \"a\" root\n");
  EXPECT_NE(forever.status().message().find("never finish"), std::string::npos);
  auto syntax = Grammar::FromGbnf("root ::= \"a\n");
  EXPECT_NE(syntax.status().message().find("unterminated"), std::string::npos);
  auto twice = Grammar::FromGbnf("root ::= \"a\"\nroot ::= \"b\"\n");
  EXPECT_NE(twice.status().message().find("defined twice"), std::string::npos);
}

TEST(GbnfTest, HostileGrammarsAreRefusedQuickly) {
  auto big = Grammar::FromGbnf("root ::= (\"a\"{1000}){1000}\n");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  // Nested optional repetitions stay small (each level refers to the one below), and the
  // ambiguity they create is bounded while matching: a result or an error, never a hang.
  auto nested = Compile("root ::= ((\"a\"{1,1000}){1,1000}){1,1000}\n");
  ASSERT_NE(nested, nullptr);
  EXPECT_LT(nested->elements().size(), 50000u);
  GrammarAutomaton a(nested);
  auto s = a.Initial();
  ASSERT_TRUE(s.ok());
  auto end = a.StepBytes(*s, std::string(3000, 'a'));
  if (end.ok()) {
    EXPECT_TRUE(a.IsAccepting(*end));
  } else {
    EXPECT_EQ(end.status().code(), absl::StatusCode::kResourceExhausted) << end.status();
  }
  std::string deep = "root ::= ";
  for (int i = 0; i < 1000; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 1000; ++i) deep += ")";
  EXPECT_FALSE(Grammar::FromGbnf(deep).ok());
}

TEST(GbnfTest, RepetitionKeepsStacksFlat) {
  auto g = Compile("root ::= (\"ab\" | [c-d])* \"!\"\n");
  GrammarAutomaton a(g);
  auto s = a.Initial();
  ASSERT_TRUE(s.ok());
  std::string text;
  for (int i = 0; i < 5000; ++i) text += i % 3 == 0 ? "c" : "ab";
  auto end = a.StepBytes(*s, text);
  ASSERT_TRUE(end.ok());
  EXPECT_NE(*end, GrammarAutomaton::kDead);
  // Each loop iteration lands in the same few states.
  EXPECT_LT(a.num_states(), 10u);
  EXPECT_LT(a.num_nodes(), 30u);
  auto done = a.StepBytes(*end, "!");
  EXPECT_TRUE(a.IsAccepting(*done));
}

// A small vocabulary with shared prefixes, multi-byte characters, duplicates and specials.
std::shared_ptr<const TokenVocabulary> SmallVocabulary() {
  std::vector<std::string> bytes = {
      "<eos>", "{", "}", "\"", "a", "ab", "abc", "b", "\":", "\",", "1", "12", " ",
      "\xC3\xA9", "\xC3", "\xA9", "true", "tr", "\"}", "x", "ab", "{\"", "<tool>"};
  return TokenVocabulary::Build(bytes, {0, 22});
}

// Brute force: token allowed iff its bytes keep the automaton alive.
std::vector<bool> BruteForceMask(GrammarAutomaton& a, GrammarAutomaton::StateId s,
                                 const TokenVocabulary& v) {
  std::vector<bool> allowed(v.size(), false);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (!v.is_text(id)) continue;
    auto next = a.StepBytes(s, v.bytes(id));
    allowed[id] = next.ok() && *next != GrammarAutomaton::kDead;
  }
  return allowed;
}

TEST(TokenGrammarTest, TrieWalkMatchesBruteForceOnEveryState) {
  auto g = Compile(R"(root ::= "{" ( "\"" [a-c]+ "\":" (" "? ("1" [0-9]* | "true")) ) "}")");
  auto vocab = SmallVocabulary();
  TokenGrammar tg(g, vocab);
  GrammarAutomaton brute(g);
  // Follow a path and compare masks on each state.
  const std::string text = "{\"abc\": 12}";
  auto s = tg.Initial();
  auto b = brute.Initial();
  ASSERT_TRUE(s.ok() && b.ok());
  for (size_t i = 0; i <= text.size(); ++i) {
    auto mask = tg.Mask(*s);
    ASSERT_TRUE(mask.ok());
    const std::vector<bool> expected = BruteForceMask(brute, *b, *vocab);
    for (int32_t id = 0; id < vocab->size(); ++id) {
      EXPECT_EQ((*mask)->Test(id), expected[id]) << "after \"" << text.substr(0, i) << "\" token "
                                                  << id << " \"" << vocab->bytes(id) << "\"";
    }
    if (i == text.size()) break;
    s = tg.automaton().Step(*s, static_cast<uint8_t>(text[i]));
    b = brute.Step(*b, static_cast<uint8_t>(text[i]));
    ASSERT_TRUE(s.ok() && b.ok());
  }
  EXPECT_TRUE(tg.automaton().IsAccepting(*s));
}

TEST(TokenGrammarTest, MasksMatchBruteForceOnRandomGrammarsAndVocabularies) {
  std::mt19937 rng(7);
  const std::vector<std::string> grammars = {
      "root ::= ([a-c] | \"ab\" \"c\"?)+ \"!\"",
      "root ::= x (\",\" x){0,3}\nx ::= [0-9]+ | \"[\" root \"]\"",
      "root ::= [^a]* \"a\"",
      "root ::= (\"é\" | [a-b]{2} | \"\\u00e9a\")* \".\"",
  };
  for (const std::string& text : grammars) {
    auto g = Compile(text);
    ASSERT_NE(g, nullptr);
    std::vector<std::string> bytes;
    const std::string alphabet = "abc!,[]0129.\xC3\xA9";
    for (int t = 0; t < 300; ++t) {
      std::string s;
      const int len = 1 + rng() % 4;
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      bytes.push_back(s);
    }
    auto vocab = TokenVocabulary::Build(bytes, {});
    TokenGrammar tg(g, vocab);
    GrammarAutomaton brute(g);
    auto s = tg.Initial();
    auto b = brute.Initial();
    ASSERT_TRUE(s.ok() && b.ok());
    // Random walk under the mask.
    for (int step = 0; step < 40; ++step) {
      auto mask = tg.Mask(*s);
      ASSERT_TRUE(mask.ok());
      const std::vector<bool> expected = BruteForceMask(brute, *b, *vocab);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        ASSERT_EQ((*mask)->Test(id), expected[id]) << text << " token " << bytes[id];
        if (expected[id]) allowed.push_back(id);
      }
      ASSERT_EQ((*mask)->num_allowed, static_cast<int32_t>(allowed.size()));
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      s = tg.Advance(*s, pick);
      b = brute.StepBytes(*b, bytes[pick]);
      ASSERT_TRUE(s.ok() && b.ok());
    }
  }
}

TEST(GrammarMatcherTest, EndTokensOnlyWhereTheGrammarIsComplete) {
  auto g = Compile("root ::= \"ab\" \"c\"?\n");
  auto vocab = SmallVocabulary();
  auto tg = std::make_shared<TokenGrammar>(g, vocab);
  auto m = GrammarMatcher::Create(tg, {0});
  ASSERT_TRUE(m.ok());
  std::vector<float> logits(vocab->size() + 3, 1.0f);  // A padded logits row.
  ASSERT_TRUE(m->MaskLogits(m->state(), absl::MakeSpan(logits)).ok());
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    const bool allowed = id < vocab->size() && vocab->is_text(id) &&
                         (vocab->bytes(id) == "a" || vocab->bytes(id) == "ab" ||
                          vocab->bytes(id) == "abc");
    EXPECT_EQ(std::isfinite(logits[id]), allowed) << id;
  }
  EXPECT_FALSE(m->Accept(7).ok());  // "b"
  ASSERT_TRUE(m->Accept(5).ok());   // "ab": complete, "c" may follow.
  std::fill(logits.begin(), logits.end(), 2.0f);
  ASSERT_TRUE(m->MaskLogits(m->state(), absl::MakeSpan(logits)).ok());
  EXPECT_EQ(logits[0], 2.0f);  // EOS allowed now, its logit untouched.
  EXPECT_TRUE(std::isinf(logits[22]));  // Another special token stays out.
  ASSERT_TRUE(m->Accept(0).ok());
  EXPECT_TRUE(m->finished());
  std::fill(logits.begin(), logits.end(), 2.0f);
  ASSERT_TRUE(m->MaskLogits(GrammarMatcher::StateId{kFinishedState}, absl::MakeSpan(logits)).ok());
  for (size_t id = 1; id < logits.size(); ++id) EXPECT_TRUE(std::isinf(logits[id]));
  EXPECT_EQ(logits[0], 2.0f);
}

TEST(GrammarMatcherTest, PeekDoesNotMoveTheMatcher) {
  auto g = Compile("root ::= \"ab\" \"c\"\n");
  auto tg = std::make_shared<TokenGrammar>(g, SmallVocabulary());
  auto m = GrammarMatcher::Create(tg, {0});
  ASSERT_TRUE(m.ok());
  const auto before = m->state();
  auto after = m->Peek(before, std::vector<int32_t>{4, 7});  // "a" "b"
  ASSERT_TRUE(after.ok());
  EXPECT_NE(*after, GrammarAutomaton::kDead);
  EXPECT_EQ(m->state(), before);
  auto dead = m->Peek(before, std::vector<int32_t>{7});
  EXPECT_EQ(*dead, GrammarAutomaton::kDead);
}

TEST(ConstraintGrammarTest, ChoiceAndLiteralEscaping) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kChoice;
  c.choices = {"yes", "no \"way\"", "a\\b\n", "caf\xC3\xA9"};
  auto gbnf = ConstraintToGbnf(c);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  auto g = Compile(*gbnf);
  for (const std::string& s : c.choices) EXPECT_TRUE(g->Accepts(s)) << s;
  EXPECT_FALSE(g->Accepts("ye"));
  EXPECT_FALSE(g->Accepts("yesno"));
  c.choices = {};
  EXPECT_FALSE(ConstraintToGbnf(c).ok());
}

TEST(ConstraintGrammarTest, CacheReturnsTheSameCompiledGrammar) {
  GrammarCache cache(2);
  auto a = cache.Get("root ::= \"a\"\n");
  auto b = cache.Get("root ::= \"a\"\n");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_FALSE(cache.Get("root ::= \n x").ok());
}

}  // namespace
}  // namespace tessera::structured

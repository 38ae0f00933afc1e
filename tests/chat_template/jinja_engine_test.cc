// The Jinja-subset engine on its own: syntax, filters, loops, whitespace control, errors
// (with their lines) and the limits that keep a hostile template from hanging or
// exhausting the server.
#include <string>

#include "absl/status/status.h"
#include "common/chat_template/jinja_builtins.h"
#include "common/chat_template/jinja_eval.h"
#include "common/chat_template/jinja_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> Render(const std::string& source, Globals globals = {}, RenderLimits limits = {}) {
  absl::StatusOr<Program> program = Parse(source);
  if (!program.ok()) return program.status();
  AddStandardGlobals(&globals);
  Interpreter interpreter(limits, std::move(globals));
  return interpreter.Render(*program);
}

std::string Ok(const std::string& source, Globals globals = {}) {
  absl::StatusOr<std::string> out = Render(source, std::move(globals));
  EXPECT_TRUE(out.ok()) << out.status() << "\nfor: " << source;
  return out.ok() ? *out : "<error>";
}

TEST(JinjaEngineTest, TextExpressionsAndComments) {
  EXPECT_EQ(Ok("plain"), "plain");
  EXPECT_EQ(Ok("a{# comment #}b"), "ab");
  EXPECT_EQ(Ok("{{ 'x' ~ 1 ~ none }}"), "x1None");
  EXPECT_EQ(Ok("{{ \"a\" 'b' }}"), "ab");
  EXPECT_EQ(Ok("{{ '\\u00e9\\n' | tojson }}"), "\"é\\n\"");
  EXPECT_EQ(Ok("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}"), "7 9 64 4");
  EXPECT_EQ(Ok("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}"), "3 -4 2 3.5 2.0");
  EXPECT_EQ(Ok("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True False");
  EXPECT_EQ(Ok("{{ 2 ** 62 }} {{ (-1) ** 7 }} {{ 0 ** 0 }} {{ 1 ** 999999999999 }} {{ 2 ** -1 }}"),
            "4611686018427387904 -1 1 1 0.5");
  EXPECT_EQ(Ok("{{ 'yes' if 1 else 'no' }}|{{ 'x' if 0 }}|"), "yes||");
}

TEST(JinjaEngineTest, Filters) {
  EXPECT_EQ(Ok("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}"), "a b|a");
  EXPECT_EQ(Ok("{{ [1, 2, 3] | length }} {{ 'héllo' | length }} {{ {'a': 1} | length }}"), "3 5 1");
  EXPECT_EQ(Ok("{{ 'abc' | upper }} {{ 'ABC' | lower }} {{ 'hello world' | capitalize }} {{ 'hello world' | title }}"),
            "ABC abc Hello world Hello World");
  EXPECT_EQ(Ok("{{ missing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }}"), "d  d");
  EXPECT_EQ(Ok("{{ [1, 2] | join(', ') }} {{ [3, 4] | first }} {{ [3, 4] | last }}"), "1, 2 3 4");
  EXPECT_EQ(Ok("{{ 'aXbX' | replace('X', '-') }} {{ 42 | string }} {{ '7' | int + 1 }} {{ 'x' | int }}"),
            "a-b- 42 8 0");
  EXPECT_EQ(Ok("{{ {'b': 1, 'a': 2} | items | list }}"), "[('b', 1), ('a', 2)]");
  Globals g;
  g["people"] = Value::List({Value::Dict({{"name", "ann"}, {"role", "user"}}),
                             Value::Dict({{"name", "bob"}, {"role", "assistant"}}),
                             Value::Dict({{"name", "cy"}, {"role", "user"}})});
  EXPECT_EQ(Ok("{{ people | selectattr('role', 'equalto', 'user') | map(attribute='name') | join(',') }}", g),
            "ann,cy");
  EXPECT_EQ(Ok("{{ people | rejectattr('role', 'equalto', 'user') | map(attribute='name') | list }}", g), "['bob']");
  EXPECT_EQ(Ok("{{ [' a ', 'b '] | map('trim') | list }} {{ [0, 1, 2] | select | list }}"), "['a', 'b'] [1, 2]");
  EXPECT_EQ(Ok("{{ {'k': [1, 'x', none, true, 1.5]} | tojson }}"), "{\"k\": [1, \"x\", null, true, 1.5]}");
  EXPECT_EQ(Ok("{{ {'k': [1]} | tojson(indent=2) }}"), "{\n  \"k\": [\n    1\n  ]\n}");
}

TEST(JinjaEngineTest, TestsAndMembership) {
  EXPECT_EQ(Ok("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }}"),
            "False True True True True");
  EXPECT_EQ(Ok("{{ [] is iterable }} {{ 3 is not string }} {{ 'u' is equalto 'u' }} {{ 2 is in [1, 2] }}"),
            "True True True True");
  EXPECT_EQ(Ok("{{ 'b' in 'abc' }} {{ 1 not in [1] }} {{ 'k' in {'k': 1} }} {{ 'z' in undefined_var }}"),
            "True False True False");
  EXPECT_EQ(Ok("{{ not x is defined }}"), "True");
}

TEST(JinjaEngineTest, StringAndDictMethods) {
  EXPECT_EQ(Ok("{{ '  x '.strip() }}|{{ ' x'.lstrip() }}|{{ 'x '.rstrip() }}|{{ 'xyx'.strip('x') }}"), "x|x|x|y");
  EXPECT_EQ(Ok("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'a b  c'.split() }}"),
            "True True ['a', 'b', 'c']");
  EXPECT_EQ(Ok("{{ 'a,b'.split(',') }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} {{ 'aa'.replace('a', 'b') }}"),
            "['a', 'b'] AB ab bb");
  EXPECT_EQ(Ok("{{ 'hello there'.title() }}"), "Hello There");
  EXPECT_EQ(Ok("{% set d = {'a': 1} %}{{ d.get('a') }} {{ d.get('b', 2) }} {{ d.get('b') }} {{ d.keys() | list }}"),
            "1 2 None ['a']");
  EXPECT_EQ(Ok("{% set d = {'a': 1, 'b': 2} %}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  // \u3000 (ideographic space) is whitespace to Python, so to strip().
  EXPECT_EQ(Ok("[{{ '\\u3000 hi \\u00a0' | trim }}]"), "[hi]");
}

TEST(JinjaEngineTest, SlicingAndIndexing) {
  EXPECT_EQ(Ok("{{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][::-1] }} {{ [1, 2, 3][5] }}|"),
            "[2, 3] 3 [3, 2, 1] |");
  EXPECT_EQ(Ok("{{ 'héllo'[1:3] }} {{ 'héllo'[-1] }} {{ 'abcdef'[::2] }}"), "él o ace");
  EXPECT_EQ(Ok("{{ [1, 2, 3][:-1] }} {{ 'abc'[10:] }}|"), "[1, 2] |");
}

TEST(JinjaEngineTest, ForLoops) {
  EXPECT_EQ(Ok("{% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.index }}{{ x }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.length }}{{ loop.revindex }};{% endfor %}"),
            "01aTrueFalse33;12bFalseFalse32;23cFalseTrue31;");
  EXPECT_EQ(Ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Ok("{% for x in [1, 2, 3, 4] if x is odd %}{{ x }}{{ loop.last }}{% endfor %}"), "1False3True");
  EXPECT_EQ(Ok("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}"
               "{{ x }}{% endfor %}"),
            "02");
  // A loop's assignments stay in the loop; namespaces carry values out.
  EXPECT_EQ(Ok("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(Ok("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(Ok("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"), "37");
  EXPECT_EQ(Ok("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(Ok("{% for i in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
}

TEST(JinjaEngineTest, SetBlockMacrosAndCall) {
  EXPECT_EQ(Ok("{% set v %}in {{ 1 + 1 }}{% endset %}[{{ v }}]"), "[in 2]");
  EXPECT_EQ(Ok("{% macro greet(name, punct='!') %}hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} "
               "{{ greet('b', punct='?') }}"),
            "hi a! hi b?");
  EXPECT_EQ(Ok("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}"), "<body>");
  EXPECT_EQ(Ok("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
}

TEST(JinjaEngineTest, WhitespaceControlAsHuggingFaceSetsIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it.
  EXPECT_EQ(Ok("{% if true %}\n  yes\n{% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(Ok("line\n    {% if true %}x{% endif %}\n"), "line\nx");
  // Expressions are not block tags: neither rule touches them.
  EXPECT_EQ(Ok("a\n  {{ 'b' }}\nc"), "a\n  b\nc");
  // "-" strips all whitespace on its side, newlines included; "+" keeps it.
  EXPECT_EQ(Ok("a  \n {{- 'b' -}} \n  c"), "abc");
  EXPECT_EQ(Ok("a\n  {%- if true %}b{% endif -%}\n\n c"), "abc");
  EXPECT_EQ(Ok("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(Ok("{# c #}\nx"), "x");
  // The template's single trailing newline is dropped (keep_trailing_newline=False).
  EXPECT_EQ(Ok("x\n"), "x");
  EXPECT_EQ(Ok("x\n\n"), "x\n");
  EXPECT_EQ(Ok("a\r\nb"), "a\nb");
}

TEST(JinjaEngineTest, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(Ok("[{{ nothing }}]"), "[]");
  EXPECT_EQ(Ok("[{{ nothing | length }}]{% for x in nothing %}x{% endfor %}"), "[0]");
  Globals g;
  g["m"] = Value::Dict({{"role", "user"}});
  EXPECT_EQ(Ok("[{{ m.content }}][{{ m['content'] }}][{{ m.content is defined }}]", g), "[][][False]");
  absl::StatusOr<std::string> out = Render("{{ nothing.attr }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("'nothing' is undefined"));
  out = Render("{{ [][0]['role'] }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("list object has no element 0"));
}

TEST(JinjaEngineTest, RaiseExceptionKeepsTheTemplatesMessage) {
  absl::StatusOr<std::string> out = Render("a\n{{ raise_exception('Roles must alternate') }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Roles must alternate");
  EXPECT_TRUE(IsRaisedError(out.status()));
}

TEST(JinjaEngineTest, ErrorsNameTheLine) {
  struct Case {
    std::string source;
    std::string expected;
  };
  const Case cases[] = {
      {"ok\n{% if x %}\nno end", "template line 3: unexpected end of template; expected elif or else or endif"},
      {"\n\n{{ 1 + }}", "template line 3: unexpected '}}' in expression"},
      {"{% frobnicate %}", "template line 1: unknown or unexpected tag 'frobnicate'"},
      {"a\n{{ 'unterminated }}", "template line 2: unterminated string literal"},
      {"a\nb\n{# never closed", "template line 3: unterminated comment"},
      {"{{ x", "template line 1: unterminated expression"},
      {"{% for %}", "template line 1: expected a name, got '%}'"},
      {"{% endfor %}", "template line 1: unknown or unexpected tag 'endfor'"},
      {"{{ 1 $ 2 }}", "template line 1: unexpected character '$'"},
      {"{% if true %}\n{% break %}{% endif %}", "template line 2: 'break' outside a for loop"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Program> program = Parse(c.source);
    ASSERT_FALSE(program.ok()) << c.source;
    EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(program.status().message(), HasSubstr(c.expected)) << c.source;
  }
  const Case runtime[] = {
      {"\n\n{{ 1 + 'a' }}", "template line 3: unsupported operand type(s) for +: 'int' and 'str'"},
      {"\n{{ 1 / 0 }}", "template line 2: division by zero"},
      {"{{ 9223372036854775807 + 1 }}", "template line 1: integer overflow"},
      {"{{ 2 ** 64 }}", "template line 1: integer overflow"},
      {"{{ 'abc'.split('') }}", "template line 1: empty separator"},
      {"{{ [1] | nofilter }}", "template line 1: no filter named 'nofilter'"},
      {"x\n{{ 1 is notatest }}", "template line 2: no test named 'notatest'"},
      {"{{ 'a'() }}", "template line 1: 'str' object is not callable"},
      {"{% set n = 1 %}\n{% set n.x = 2 %}", "template line 2: cannot assign attribute on non-namespace object"},
      {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", "template line 1: cannot unpack 3 values into 2 names"},
  };
  for (const Case& c : runtime) {
    absl::StatusOr<std::string> out = Render(c.source);
    ASSERT_FALSE(out.ok()) << c.source;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(out.status().message(), HasSubstr(c.expected)) << c.source;
  }
}

TEST(JinjaEngineTest, MalformedTemplatesFailCleanly) {
  // Truncations of a real-looking template: every prefix must parse or fail, never crash.
  const std::string source =
      "{%- for m in messages %}{{- '<|' + m['role'] + '|>' }}{% if m.content is string %}{{ m.content | trim }}"
      "{% else %}{{ m.content | tojson(indent=2) }}{% endif %}{%- endfor %}{# done #}{{ x[1:2] }}";
  for (size_t n = 0; n <= source.size(); ++n) {
    absl::StatusOr<std::string> out = Render(source.substr(0, n));
    if (!out.ok()) EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  }
  const char* junk[] = {"{{", "{%", "{#", "}}", "%}", "{{}}", "{%%}", "{{ ( }}", "{{ [ }}", "{{ { }}", "{{ a. }}",
                        "{{ a[ }}", "{{ a | }}", "{{ a is }}", "{% set %}", "{% set x %}", "{% macro %}",
                        "{% if %}{% endif %}", "{{ 'a' 'b }}", "{% for x in %}{% endfor %}", "{{ ... }}",
                        "{% elif x %}", "{% else %}", "{{ \"\\", "{{ 1e }}", "{{ 99999999999999999999 }}"};
  for (const char* j : junk) {
    absl::StatusOr<std::string> out = Render(j);
    if (!out.ok()) EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << j;
  }
}

TEST(JinjaEngineTest, RandomTokenSoupNeverCrashesOrHangs) {
  // Deterministic pseudo-random templates from the pieces templates are made of.
  const char* pieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " ", "\n", "if", "elif", "else", "endif",
                          "for", "in", "endfor", "set", "endset", "macro", "endmacro", "call", "endcall", "x", "ns",
                          "loop", ".", "[", "]", "(", ")", "{", "}", ",", ":", "|", "'s'", "\"t\"", "1", "2.5",
                          "*", "**", "/", "//", "%", "~", "==", "!=", "<", ">", "=", "is", "not", "and", "or",
                          "none", "true", "defined", "trim", "length", "tojson", "join", "range", "namespace",
                          "messages", "caller", "break", "continue", "'", "\"", "\\", "é", "\xff"};
  uint64_t state = 42;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(state >> 33);
  };
  RenderLimits limits;
  limits.max_steps = 20'000;
  limits.max_output_bytes = 1 << 16;
  limits.max_range = 1000;
  Globals globals;
  globals["messages"] = Value::List({Value::Dict({{"role", "user"}, {"content", "hi"}})});
  for (int i = 0; i < 3000; ++i) {
    std::string source;
    const size_t n = 1 + next() % 40;
    for (size_t k = 0; k < n; ++k) source += pieces[next() % (sizeof(pieces) / sizeof(pieces[0]))];
    absl::StatusOr<std::string> out = Render(source, globals, limits);
    if (!out.ok()) EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << source;
  }
}

TEST(JinjaEngineTest, LimitsStopRunawayTemplates) {
  // Nesting deeper than the parser allows.
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "{% if true %}";
  absl::StatusOr<std::string> out = Render(deep);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("nesting deeper than"));
  out = Render("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("nesting deeper than"));
  out = Render("{{ " + std::string(5000, '-') + "1 }}");
  ASSERT_FALSE(out.ok());

  // Unbounded macro recursion.
  out = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("recursed deeper than"));

  RenderLimits small;
  small.max_steps = 10'000;
  small.max_output_bytes = 1 << 16;
  small.max_range = 1000;
  // Work: nested loops that would take forever.
  out = Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {}, small);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("steps"));
  // Output and string size.
  out = Render("{% for i in range(1000) %}{{ 'x' * 1000 }}{% endfor %}", {}, small);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("exceeds"));
  out = Render("{{ 'x' * 1000000000000 }}", {}, small);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("exceeds the output limit"));
  out = Render("{{ range(100000000) | length }}", {}, small);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("exceeds the limit"));
  // Growing a list in a namespace: quadratic copying is counted as work.
  out = Render("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + [i] * 100 %}{% endfor %}",
               {}, small);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("steps"));
  // A namespace cannot come to contain itself, nor nest without bound.
  out = Render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("would contain its namespace"));
  out = Render("{% set ns = namespace(x=1) %}{% for i in range(100) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("nest deeper than"));
  // Linear work on a large string, many times over.
  out = Render("{% set s = 'x' * 60000 %}{% for i in range(1000) %}{{ s | length }}{{ s.strip() | length }}{% endfor %}",
               {}, small);
  ASSERT_FALSE(out.ok());
  out = Render("{{ range(1000) | unique | list | length }}", {}, small);
  ASSERT_FALSE(out.ok());
  // Doubling a string each iteration.
  out = Render("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {},
               small);
  ASSERT_FALSE(out.ok());
}

}  // namespace
}  // namespace tessera::jinja

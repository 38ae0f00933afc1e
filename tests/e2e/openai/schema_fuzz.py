#!/usr/bin/env python3
"""Seeded random constraints for the structured-outputs tests, and the checker of outputs.

Generator: `SchemaFuzzer(seed).schema(i)` is a random JSON Schema (draft 2020-12) built only
from the keywords Tessera's grammar compiler supports (common/structured/
json_schema_grammar.h): type (one or a list), enum, const, object (properties, required,
additionalProperties: false), array (items, prefixItems, minItems, maxItems), string
(minLength, maxLength, pattern, format date-time / date / time / email / uuid), integer
(minimum, maximum, exclusiveMinimum, exclusiveMaximum), number (integer bounds, inclusive
and exclusive), boolean, null, anyOf, oneOf (of disjoint types), $ref to #/$defs/...
(recursive definitions included). Everything is bounded so that a decoder drawing random
allowed tokens ends: strings maxLength <= 20 (or enum / const / format / a bounded
pattern), arrays maxItems <= 4, nesting depth <= 4, and recursion only through optional
properties and arrays of at most 2 items. Objects always say additionalProperties: false.
Schema i depends only on (seed, i). `regex(i)`, `choice(i)` and `GRAMMARS` give the other
constraint kinds (regexes bounded the same way, choice lists with shared prefixes, quotes
and multi-byte characters, and GBNF grammars each with a Python recognizer).

Checker: `check_text(case, text)` says whether an output satisfies its constraint, where
`case` is one line of the `tessera constrain --schemas-jsonl` input: {"json_schema": S},
{"regex": R}, {"choice": [...]}, {"grammar": G} (or {"json_object": true}). JSON outputs are
parsed exactly (numbers as Decimal, duplicate keys refused), validated with the `jsonschema`
package (Draft202012Validator and its FORMAT_CHECKER), and also checked for the grammar's
formatting promises: properties in schema order, and whitespace between tokens only " " or
"\\n" + up to 20 spaces/tabs.

Standalone:
    schema_fuzz.py --count 1000 --seed 1 > schemas.jsonl           # JSON Schemas only
    schema_fuzz.py --count 1000 --seed 1 --extras > cases.jsonl    # + regex, choice, grammar
    schema_fuzz.py --check cases.jsonl results.jsonl               # check `tessera constrain` output
    schema_fuzz.py --self-test                                     # the generator's own checks
"""

import argparse
import decimal
import json
import random
import re
import sys

# ---------------------------------------------------------------------------------------------
# Validation.

_JSONSCHEMA = None


def _jsonschema():
    global _JSONSCHEMA
    if _JSONSCHEMA is None:
        import jsonschema
        import jsonschema.validators

        base = jsonschema.Draft202012Validator

        # Numbers are parsed as Decimal (exact bounds: 1.99999999999999999999 is below 2, a
        # float would round it to 2.0): a Decimal with no fraction is an integer, as 1.0 is.
        def is_integer(checker, instance):
            if isinstance(instance, decimal.Decimal):
                return instance.is_finite() and instance == instance.to_integral_value()
            return base.TYPE_CHECKER.is_type(instance, "integer")

        def is_number(checker, instance):
            if isinstance(instance, decimal.Decimal):
                return True
            return base.TYPE_CHECKER.is_type(instance, "number")

        checker = base.TYPE_CHECKER.redefine_many({"integer": is_integer, "number": is_number})
        _JSONSCHEMA = (jsonschema, jsonschema.validators.extend(base, type_checker=checker))
    return _JSONSCHEMA


def format_checker():
    """Draft 2020-12's format checker. Note: bare `jsonschema.FormatChecker()` holds every
    draft's checkers and its "time" is draft 3's %H:%M:%S, which refuses RFC 3339 times
    such as 12:00:00Z; the draft's own FORMAT_CHECKER checks "time" per RFC 3339."""
    jsonschema, _ = _jsonschema()
    return jsonschema.Draft202012Validator.FORMAT_CHECKER


# Values each format checker must refuse, to prove that it checks something (date-time and
# time need the rfc3339-validator package; without it jsonschema passes every string).
FORMAT_PROBES = {
    "date-time": ("2024-02-29T12:30:00Z", "2023-02-29T12:30:00Z"),
    "date": ("2024-02-29", "2023-02-30"),
    "time": ("12:30:00+02:00", "25:30:00Z"),
    "email": ("a@example.com", "no-at-sign"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"),
}


def verified_formats():
    """{format: True/False}: whether jsonschema really verifies it in this environment."""
    fc = format_checker()
    return {f: fc.conforms(good, f) and not fc.conforms(bad, f) for f, (good, bad) in FORMAT_PROBES.items()}


class _DuplicateKey(ValueError):
    pass


def _pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def parse_json(text):
    """The JSON value of `text`, numbers exact (Decimal), duplicate keys an error."""
    return json.loads(text, parse_float=decimal.Decimal, object_pairs_hook=_pairs, parse_constant=_no_constant)


_WS_OK = re.compile(r"( |\n[ \t]{0,20})?")


def whitespace_problem(text):
    """None when every run of whitespace outside strings is "", " " or "\\n" + up to 20
    spaces/tabs (the grammar's promise); else a description."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c in " \t\n\r":
            j = i
            while j < n and text[j] in " \t\n\r":
                j += 1
            if not _WS_OK.fullmatch(text[i:j]):
                return f"whitespace run {text[i:j]!r} at offset {i}"
            i = j
            continue
        i += 1
    return None


def _resolve(schema, root):
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return schema
        node = root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        schema = node
        seen += 1
        if seen > 100:
            return schema
    return schema


def order_problem(value, schema, root, validator_cls=None):
    """None when every object lists its schema's properties in the schema's order (extra
    properties after them); else a description. anyOf/oneOf: some branch that the value
    validates against must agree."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return None
    for key in ("anyOf", "oneOf"):
        if key in schema:
            if validator_cls is None:
                _, validator_cls = _jsonschema()
            problems = []
            for branch in schema[key]:
                full = dict(branch) if isinstance(branch, dict) else branch
                if isinstance(full, dict) and "$defs" not in full and "$defs" in root:
                    full["$defs"] = root["$defs"]
                if isinstance(full, dict) and "definitions" not in full and "definitions" in root:
                    full["definitions"] = root["definitions"]
                if validator_cls(full).is_valid(value):
                    p = order_problem(value, branch, root, validator_cls)
                    if p is None:
                        break
                    problems.append(p)
            else:
                if problems:
                    return problems[0]
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        listed = list(schema["properties"])
        last = -1
        for k in value:
            pos = listed.index(k) if k in listed else len(listed)
            if pos < last:
                return f"property {k!r} out of schema order (schema order {listed}, output {list(value)})"
            last = pos
        for k, v in value.items():
            if k in schema["properties"]:
                p = order_problem(v, schema["properties"][k], root, validator_cls)
                if p:
                    return p
    if isinstance(value, list):
        prefix = schema.get("prefixItems") or []
        for idx, item in enumerate(value):
            sub = prefix[idx] if idx < len(prefix) else schema.get("items")
            if isinstance(sub, dict):
                p = order_problem(item, sub, root, validator_cls)
                if p:
                    return p
    return None


def check_json(schema, text, check_formatting=True):
    """(ok, reason) for a JSON output under `schema` (None: json_object, any object)."""
    try:
        value = parse_json(text)
    except (ValueError, RecursionError) as e:
        return False, f"not JSON: {e}"
    if check_formatting:
        p = whitespace_problem(text)
        if p:
            return False, p
    if schema is None:
        return (True, "") if isinstance(value, dict) else (False, "json_object output is not an object")
    _, validator_cls = _jsonschema()
    validator = validator_cls(schema, format_checker=format_checker())
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        return False, f"{e.message} at {'/'.join(map(str, e.absolute_path)) or '(root)'} (schema {list(e.schema_path)})"
    if check_formatting:
        p = order_problem(value, schema, schema, validator_cls)
        if p:
            return False, p
    return True, ""


def python_regex(pattern):
    """A Python `re` pattern for an ECMAScript-subset pattern: (?<name>...) -> (?P<name>...)."""
    return re.sub(r"\(\?<([A-Za-z_][A-Za-z0-9_]*)>", r"(?P<\1>", pattern)


def regex_matches(pattern, text):
    """Full match, ASCII classes (\\d \\w \\s as ECMAScript and the grammar: ASCII digits and
    word characters; \\D \\W their ASCII complements)."""
    return re.fullmatch(python_regex(pattern), text, flags=re.ASCII) is not None


def check_text(case, text):
    """(ok, reason): whether `text` satisfies the constraint of `case`."""
    if "json_schema" in case:
        return check_json(case["json_schema"], text)
    if "json_object" in case:
        return check_json(None, text)
    if "regex" in case:
        return (True, "") if regex_matches(case["regex"], text) else (False, "no full match of the regex")
    if "choice" in case:
        return (True, "") if text in case["choice"] else (False, "not one of the choices")
    if "grammar" in case:
        g = GRAMMAR_BY_TEXT.get(case["grammar"])
        if g is None:
            return False, "no Python recognizer for this grammar"
        return (True, "") if g["check"](text) else (False, f"not a sentence of grammar {g['name']}")
    return False, f"unknown case {sorted(case)}"


# ---------------------------------------------------------------------------------------------
# GBNF grammars with recognizers.

def _arith_ok(text):
    """root ::= expr; expr ::= term (("+"|"-") term){0,3}; term ::= factor (("*"|"/") factor){0,2};
    factor ::= num | "(" expr ")"; num ::= [0-9]{1,3}"""
    pos = 0

    def num():
        nonlocal pos
        m = re.match(r"[0-9]{1,3}", text[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    def factor(depth):
        nonlocal pos
        if depth > 200:
            return False
        if text.startswith("(", pos):
            pos += 1
            if not expr(depth + 1) or not text.startswith(")", pos):
                return False
            pos += 1
            return True
        return num()

    def seq(item, ops, most, depth):
        nonlocal pos
        if not item(depth):
            return False
        for _ in range(most):
            if pos < len(text) and text[pos] in ops:
                save = pos
                pos += 1
                if not item(depth):
                    pos = save
                    return False
            else:
                break
        return True

    def term(depth):
        return seq(factor, "*/", 2, depth)

    def expr(depth):
        return seq(term, "+-", 3, depth)

    # The grammar is LL(1) here: a greedy parse accepts exactly its sentences.
    return expr(0) and pos == len(text)


def _nested_list_ok(text):
    """root ::= list; list ::= "[" (item ("," item){0,3})? "]"; item ::= [0-9]{1,2} | list"""
    pos = 0

    def lst(depth):
        nonlocal pos
        if depth > 200 or not text.startswith("[", pos):
            return False
        pos += 1
        if text.startswith("]", pos):
            pos += 1
            return True
        count = 0
        while True:
            if not item(depth):
                return False
            count += 1
            if text.startswith(",", pos) and count < 4:
                pos += 1
                continue
            break
        if not text.startswith("]", pos):
            return False
        pos += 1
        return True

    def item(depth):
        nonlocal pos
        if text.startswith("[", pos):
            return lst(depth + 1)
        m = re.match(r"[0-9]{1,2}", text[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    return lst(0) and pos == len(text)


GRAMMARS = [
    {
        "name": "arithmetic",
        "gbnf": (
            "# Integer arithmetic with parentheses.\n"
            "root   ::= expr\n"
            "expr   ::= term ((\"+\" | \"-\") term){0,3}\n"
            "term   ::= factor ((\"*\" | \"/\") factor){0,2}\n"
            "factor ::= num | \"(\" expr \")\"\n"
            "num    ::= [0-9]{1,3}\n"),
        "check": _arith_ok,
    },
    {
        "name": "key_values",
        "gbnf": "root ::= pair (\",\" pair){0,4}\npair ::= [a-z]{1,8} \"=\" [0-9]{1,4}\n",
        "check": lambda t: re.fullmatch(r"[a-z]{1,8}=[0-9]{1,4}(,[a-z]{1,8}=[0-9]{1,4}){0,4}", t) is not None,
    },
    {
        "name": "yes_no_reason",
        "gbnf": "root ::= (\"yes\" | \"no\") \", because \" reason \".\"\nreason ::= [a-z ]{1,30}\n",
        "check": lambda t: re.fullmatch(r"(yes|no), because [a-z ]{1,30}\.", t) is not None,
    },
    {
        "name": "nested_list",
        "gbnf": ("root ::= list\n"
                 "list ::= \"[\" (item (\",\" item){0,3})? \"]\"\n"
                 "item ::= [0-9]{1,2} | list\n"),
        "check": _nested_list_ok,
    },
    {
        "name": "greeting_unicode",
        "gbnf": ("root ::= greeting \" \" name  # a comment\n"
                 "greeting ::= \"hello\" | \"hi\" | \"h\u00e9llo\" | \"\u3053\u3093\u306b\u3061\u306f\"\n"
                 "name ::= [A-Z\u00c9] [a-z\u00e9]{0,9}\n"),
        "check": lambda t: re.fullmatch("(hello|hi|h\u00e9llo|\u3053\u3093\u306b\u3061\u306f) "
                                        "[A-Z\u00c9][a-z\u00e9]{0,9}", t) is not None,
    },
    {
        "name": "csv_row",
        "gbnf": ("root  ::= field \",\" field \",\" field\n"
                 "field ::= \"\\\"\" [^\"\\n]{0,10} \"\\\"\" | [0-9]{1,5}\n"),
        "check": lambda t: re.fullmatch(r'(?:"[^"\n]{0,10}"|[0-9]{1,5})(?:,(?:"[^"\n]{0,10}"|[0-9]{1,5})){2}',
                                        t) is not None,
    },
]
GRAMMAR_BY_TEXT = {g["gbnf"]: g for g in GRAMMARS}

# ---------------------------------------------------------------------------------------------
# Regex generation: (pattern, example) pairs in the supported ECMAScript/Python subset.

_LITERALS = list("abcxyzABCXYZ0123456789_-:@/ ,'")
_ESCAPED = {".": r"\.", "+": r"\+", "*": r"\*", "?": r"\?", "(": r"\(", ")": r"\)", "[": r"\[",
            "]": r"\]", "{": r"\{", "}": r"\}", "|": r"\|", "^": r"\^", "$": r"\$", "\\": "\\\\"}
_CLASSES = [  # (regex, characters an example draws from)
    ("[a-z]", "abcdefghijklmnopqrstuvwxyz"),
    ("[A-Z0-9]", "ABCXYZ0189"),
    ("[abc]", "abc"),
    ("[0-9a-f]", "0123456789abcdef"),
    ("[a-zA-Z_]", "azAZ_"),
    ("[-+.]", "-+."),
    ("[^,;\"\\\\]", "abc XYZ\u00e9\u65e5"),
    (r"\d", "0123456789"),
    (r"\w", "aZ09_"),
    ("[\u00e0-\u00ff]", "\u00e0\u00e9\u00ff"),
    ("[\u03b1-\u03c9]", "\u03b1\u03b2\u03c9"),
]
_RAW_ONLY_CLASSES = [(r"\D", "a-Z \u00e9"), (r"\W", " -.\u00e9"), (".", "a .\u00e9\u65e5!")]


def _quantifier(rng, narrow):
    """(text, lo, hi); `narrow`: the atom matches few tokens' worth of text, so + and * end."""
    r = rng.random()
    if narrow and r < 0.12:
        return ("+", 1, 3) if rng.random() < 0.5 else ("*", 0, 3)
    if r < 0.3:
        return "", 1, 1
    if r < 0.45:
        return "?", 0, 1
    if r < 0.65:
        m = rng.randint(1, 4)
        return "{%d}" % m, m, m
    lo = rng.randint(0, 3)
    hi = rng.randint(max(lo, 1), lo + 4)
    lazy = "?" if rng.random() < 0.1 else ""
    return "{%d,%d}%s" % (lo, hi, lazy), lo, hi


class RegexGen:
    def __init__(self, rng, raw):
        self.rng = rng
        self.raw = raw  # Whole-output regexes (may use \D \W . and named groups).
        self.groups = 0

    def atom(self, depth):
        rng = self.rng
        r = rng.random()
        if depth < 2 and r < 0.18:
            return self.group(depth + 1), False
        if r < 0.5:
            c = rng.choice(_LITERALS + list(_ESCAPED) if rng.random() < 0.2 else _LITERALS)
            return (_ESCAPED.get(c, c), lambda c=c: c), True
        if r < 0.58:
            special = rng.choice([(r"\x41", "A"), ("\\u00e9", "\u00e9"), (r"\t", "\t"), (r"\.", "."),
                                  ("\u65e5", "\u65e5"), ("\U0001f600", "\U0001f600")])
            return (special[0], lambda s=special[1]: s), True
        classes = _CLASSES + (_RAW_ONLY_CLASSES if self.raw else [])
        regex, chars = rng.choice(classes)
        narrow = regex in ("[abc]", "[-+.]")
        return (regex, lambda chars=chars: rng.choice(chars)), narrow

    def group(self, depth):
        rng = self.rng
        alts = [self.sequence(depth, rng.randint(1, 3)) for _ in range(rng.randint(1, 3))]
        kind = rng.random()
        if self.raw and kind < 0.15:
            self.groups += 1
            open_ = f"(?<g{self.groups}>"
        elif kind < 0.6:
            open_ = "(?:"
        else:
            open_ = "("
        text = open_ + "|".join(a[0] for a in alts) + ")"
        return text, lambda: rng.choice(alts)[1]()

    def sequence(self, depth, length):
        parts = []
        for _ in range(length):
            (text, example), narrow = self.atom(depth)
            q, lo, hi = _quantifier(self.rng, narrow)
            if q and len(text) > 1 and not (text.startswith("[") or text.startswith("\\") or text.startswith("(")):
                text = f"(?:{text})"
            parts.append((text + q, lo, hi, example))
        rng = self.rng

        def example():
            return "".join(ex() for _, lo, hi, ex in parts for _ in range(rng.randint(lo, hi)))

        return "".join(p[0] for p in parts), example

    def pattern(self):
        text, example = self.sequence(0, self.rng.randint(1, 5))
        if self.rng.random() < 0.3:
            text = "^" + text + "$"
        return text, example


# ---------------------------------------------------------------------------------------------
# Schema generation.

_NAMES = ["id", "name", "age", "city", "tags", "score", "kind", "value", "items", "active", "note",
          "count", "price", "code", "level", "email", "when", "data", "x", "y", "a_b", "camelCase",
          "with space", "quote\"d", "back\\slash", "\u00fcn\u00efc\u00f6d\u00e9", "\u540d\u524d", "emoji\U0001f600"]
_STRINGS = ["red", "green", "blue", "a", "ab", "abc", "caf\u00e9", "na\u00efve", "\u65e5\u672c",
            "\U0001f600 smile", "quote\"inside", "back\\slash", "new\nline", "tab\there", "", " lead", "UPPER",
            "x-y_z", "123", "true", "null", "{}"]
_FORMAT_EXAMPLES = {
    "date-time": "2024-02-29T23:59:59.25-08:00",
    "date": "2024-02-29",
    "time": "08:30:00.5+05:30",
    "email": "user.name@example.com",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
}
MAX_DEPTH = 4


class SchemaFuzzer:
    """`schema(i)`: the i-th random schema of `seed`; `example(schema)`: a valid instance."""

    def __init__(self, seed=1):
        self.seed = seed
        self.pattern_examples = {}  # pattern -> example factory (for example()).

    def _rng(self, kind, i):
        return random.Random(f"{kind}:{self.seed}:{i}")

    # -- leaves
    def _literal(self, rng, depth=0):
        r = rng.random()
        if r < 0.35:
            return rng.choice(_STRINGS)
        if r < 0.55:
            return rng.randint(-1000, 1000)
        if r < 0.65:
            return rng.choice([1.5, -2.25, 0.5, 1024.125, -0.0625])
        if r < 0.75:
            return rng.choice([True, False])
        if r < 0.82:
            return None
        if depth < 1 and r < 0.91:
            return {rng.choice(_NAMES): self._literal(rng, depth + 1) for _ in range(rng.randint(0, 2))}
        if depth < 1:
            return [self._literal(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return rng.choice(_STRINGS)

    def _string(self, rng):
        r = rng.random()
        if r < 0.45:
            hi = rng.randint(0, 20)
            s = {"type": "string", "maxLength": hi}
            if rng.random() < 0.5:
                s["minLength"] = rng.randint(0, hi)
            return s
        if r < 0.65:
            pattern, example = RegexGen(rng, raw=False).pattern()
            self.pattern_examples[pattern] = example
            return {"type": "string", "pattern": pattern}
        if r < 0.85:
            return {"type": "string", "format": rng.choice(sorted(_FORMAT_EXAMPLES))}
        values = rng.sample(_STRINGS, rng.randint(1, 5))
        return {"type": "string", "enum": values} if rng.random() < 0.5 else {"enum": values}

    def _integer_bounds(self, rng):
        """A random non-empty integer range in JSON Schema keywords."""
        lo = rng.choice([-(10 ** rng.randint(0, 9)), 0, rng.randint(-100, 100), 10 ** rng.randint(0, 6)])
        width = rng.choice([0, 1, 2, 9, 100, 10 ** rng.randint(1, 9)])
        hi = lo + width
        s = {}
        shape = rng.random()
        if shape < 0.35:
            s["minimum"], s["maximum"] = lo, hi
        elif shape < 0.55:
            s["exclusiveMinimum"], s["exclusiveMaximum"] = lo - 1, hi + 1
        elif shape < 0.7:
            s["minimum"], s["exclusiveMaximum"] = lo, hi + 1
        elif shape < 0.8:
            s["exclusiveMinimum"], s["maximum"] = lo - 1, hi
        elif shape < 0.87:
            s["minimum"] = lo
        elif shape < 0.94:
            s["exclusiveMaximum"] = hi
        # else: unbounded.
        return s

    def _integer(self, rng):
        return {"type": "integer", **self._integer_bounds(rng)}

    def _number(self, rng):
        s = {"type": "number"}
        shape = rng.random()
        lo = rng.randint(-1000, 1000)
        hi = lo + rng.choice([1, 2, 10, 1000])
        if shape < 0.4:
            s.update(minimum=lo, maximum=hi)
        elif shape < 0.65:
            s.update(exclusiveMinimum=lo, exclusiveMaximum=hi)  # Non-empty: (lo, hi) holds lo + 0.5.
        elif shape < 0.75:
            s.update(minimum=lo, exclusiveMaximum=hi)
        elif shape < 0.85:
            s.update(exclusiveMinimum=lo)
        elif shape < 0.9:
            s.update(minimum=lo, maximum=lo)  # Exactly one value (lo, lo.0, lo.00...).
        return s

    def _type_list(self, rng):
        types = rng.sample(["string", "integer", "number", "boolean", "null"], rng.randint(2, 3))
        s = {"type": types}
        if "string" in types:
            s["maxLength"] = rng.randint(0, 12)
            if rng.random() < 0.3:
                s["minLength"] = rng.randint(0, s["maxLength"])
        if "integer" in types or "number" in types:
            if rng.random() < 0.6:
                s.update(minimum=rng.randint(-50, 0), maximum=rng.randint(0, 50))
        return s

    # -- compound
    def _object(self, rng, depth, defs):
        n = rng.randint(0, 5 if depth < 2 else 3)
        names = rng.sample(_NAMES, n)
        props = {name: self._value(rng, depth + 1, defs) for name in names}
        s = {"type": "object", "properties": props}
        if names:
            r = rng.random()
            required = names if r < 0.45 else [x for x in names if rng.random() < 0.5]
            if required:
                s["required"] = required
        s["additionalProperties"] = False
        return s

    def _array(self, rng, depth, defs):
        hi = rng.randint(0, 4)
        s = {"type": "array", "items": self._value(rng, depth + 1, defs)}
        r = rng.random()
        if r < 0.6:
            s["maxItems"] = hi
            if rng.random() < 0.6:
                s["minItems"] = rng.randint(0, hi)
        else:
            s["minItems"] = s["maxItems"] = hi
        return s

    def _tuple(self, rng, depth, defs):
        k = rng.randint(1, 3)
        s = {"type": "array", "prefixItems": [self._value(rng, depth + 1, defs) for _ in range(k)]}
        if rng.random() < 0.5:
            s["items"] = False
            s["minItems"] = rng.randint(0, k)
        else:
            s["items"] = self._value(rng, depth + 1, defs)
            s["maxItems"] = rng.randint(k, 4)
            s["minItems"] = rng.randint(0, s["maxItems"])
        return s

    def _any_of(self, rng, depth, defs):
        return {"anyOf": [self._value(rng, depth + 1, defs) for _ in range(rng.randint(2, 3))]}

    def _one_of(self, rng, depth, defs):
        """Branches of distinct JSON types, so that no value matches two."""
        kinds = rng.sample(["string", "integer", "boolean", "null", "object", "array"], rng.randint(2, 3))
        branches = []
        for kind in kinds:
            if kind == "string":
                branches.append(self._string(rng) if rng.random() < 0.5 else {"type": "string", "maxLength": 8})
                branches[-1].setdefault("type", "string")
            elif kind == "integer":
                branches.append(self._integer(rng))
            elif kind == "boolean":
                branches.append({"type": "boolean"})
            elif kind == "null":
                branches.append({"type": "null"})
            elif kind == "object":
                branches.append(self._object(rng, min(depth + 1, MAX_DEPTH), defs))
            else:
                branches.append(self._array(rng, min(depth + 1, MAX_DEPTH), defs))
        return {"oneOf": branches}

    def _value(self, rng, depth, defs):
        if defs and rng.random() < 0.15:
            return {"$ref": "#/$defs/" + rng.choice(sorted(defs))}
        leaf_only = depth >= MAX_DEPTH
        r = rng.random()
        if leaf_only:
            r = r * 0.62
        if r < 0.16:
            return self._string(rng)
        if r < 0.28:
            return self._integer(rng)
        if r < 0.36:
            return self._number(rng)
        if r < 0.41:
            return {"type": "boolean"}
        if r < 0.44:
            return {"type": "null"}
        if r < 0.50:
            return self._type_list(rng)
        if r < 0.55:
            return {"enum": list({json.dumps(v, sort_keys=True): v
                                  for v in (self._literal(rng) for _ in range(rng.randint(1, 4)))}.values())}
        if r < 0.62:
            return {"const": self._literal(rng)}
        if r < 0.76:
            return self._object(rng, depth, defs)
        if r < 0.86:
            return self._array(rng, depth, defs)
        if r < 0.91:
            return self._tuple(rng, depth, defs)
        if r < 0.97:
            return self._any_of(rng, depth, defs)
        return self._one_of(rng, depth, defs)

    def _recursive_def(self, rng):
        """A node with an optional recursive branch: a tree (children: at most 2 nodes) or a
        linked list (next: a node)."""
        if rng.random() < 0.5:
            return {"type": "object",
                    "properties": {"value": self._integer(rng) if rng.random() < 0.5 else {"type": "string", "maxLength": 6},
                                   "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                "maxItems": rng.randint(1, 2)}},
                    "required": ["value"], "additionalProperties": False}
        return {"type": "object",
                "properties": {"v": {"type": "boolean"}, "next": {"$ref": "#/$defs/node"}},
                "required": ["v"], "additionalProperties": False}

    def schema(self, i):
        rng = self._rng("schema", i)
        defs = {}
        r = rng.random()
        if r < 0.08:
            defs["node"] = self._recursive_def(rng)
        elif r < 0.25:
            for k in range(rng.randint(1, 2)):
                defs[f"d{k}"] = self._value(rng, 2, {})
        if defs.get("node") is not None and rng.random() < 0.5:
            s = {"$ref": "#/$defs/node"}
        else:
            r = rng.random()
            if r < 0.7:
                s = self._object(rng, 0, defs)
            elif r < 0.85:
                s = self._array(rng, 0, defs)
            else:
                s = self._value(rng, 1, defs)
        if "node" in defs and "$ref" not in json.dumps(s):
            s = {"type": "object", "properties": {"root": {"$ref": "#/$defs/node"}, "rest": s},
                 "required": ["root"], "additionalProperties": False}
        if defs:
            s = dict(s)
            s["$defs"] = defs
        return s

    def regex(self, i):
        pattern, example = RegexGen(self._rng("regex", i), raw=True).pattern()
        self.pattern_examples[pattern] = example
        return pattern

    def choice(self, i):
        rng = self._rng("choice", i)
        pool = ["yes", "no", "maybe", "positive", "negative", "neutral", "a", "ab", "abc", "abcd",
                "New York", "New York City", "caf\u00e9", "\u65e5\u672c\u8a9e", "\U0001f600",
                "say \"hi\"", "C:\\path", "two\nlines", "tab\there", "  padded  ", "<|eot_id|>"]
        return rng.sample(pool, rng.randint(1, 6))

    def cases(self, count, extras=False):
        """The `tessera constrain` input: `count` schemas, then (extras) regexes, choices and
        each grammar a few times."""
        out = [{"json_schema": self.schema(i)} for i in range(count)]
        if extras:
            out += [{"regex": self.regex(i)} for i in range(max(1, count // 7))]
            out += [{"choice": self.choice(i)} for i in range(max(1, count // 20))]
            out += [{"grammar": g["gbnf"]} for _ in range(5) for g in GRAMMARS]
        return out

    # -- examples (the generator's self-check: every schema has a valid instance)
    def example(self, schema, root=None, rng=None, depth=0):
        rng = rng or random.Random(0)
        root = root if root is not None else schema
        if schema is True or schema == {}:
            return None
        if "$ref" in schema:
            return self.example(_resolve(schema, root), root, rng, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return rng.choice(schema["enum"])
        if "anyOf" in schema or "oneOf" in schema:
            return self.example(rng.choice(schema.get("anyOf") or schema["oneOf"]), root, rng, depth)
        t = schema.get("type")
        if isinstance(t, list):
            t = rng.choice(t)
        if t == "string":
            if "pattern" in schema:
                return self.pattern_examples[schema["pattern"]]()
            if "format" in schema:
                return _FORMAT_EXAMPLES[schema["format"]]
            lo, hi = schema.get("minLength", 0), schema.get("maxLength", 20)
            return "".join(rng.choice("ab\u00e9\u65e5\"\\ ") for _ in range(rng.randint(lo, hi)))
        if t in ("integer", "number"):
            lo = max(schema.get("minimum", -10 ** 12), schema.get("exclusiveMinimum", -10 ** 12 - 1) + 1)
            hi = min(schema.get("maximum", 10 ** 12), schema.get("exclusiveMaximum", 10 ** 12 + 1) - 1)
            if lo > hi:  # A number strictly between two consecutive integers.
                return decimal.Decimal(schema["exclusiveMinimum"]) + decimal.Decimal("0.5")
            return rng.randint(lo, hi)
        if t == "boolean":
            return rng.choice([True, False])
        if t == "null":
            return None
        if t == "object":
            props = schema.get("properties", {})
            required = set(schema.get("required", []))
            return {k: self.example(v, root, rng, depth + 1) for k, v in props.items()
                    if k in required or (depth < 6 and rng.random() < 0.5)}
        if t == "array":
            prefix = schema.get("prefixItems", [])
            lo = schema.get("minItems", 0)
            hi = schema.get("maxItems", len(prefix) if schema.get("items") is False else len(prefix) + 2)
            if depth >= 6:
                hi = lo
            n = rng.randint(lo, hi)
            return [self.example(prefix[k] if k < len(prefix) else schema["items"], root, rng, depth + 1)
                    for k in range(n)]
        raise ValueError(f"no example for {schema}")


def dumps_formatted(value, rng):
    """JSON text with the grammar's kinds of whitespace between tokens (for the self-test)."""
    tokens = []

    def emit(v):
        if isinstance(v, dict):
            tokens.append("{")
            for n, (k, x) in enumerate(v.items()):
                if n:
                    tokens.append(",")
                tokens.extend([json.dumps(k, ensure_ascii=rng.random() < 0.3), ":"])
                emit(x)
            tokens.append("}")
        elif isinstance(v, list):
            tokens.append("[")
            for n, x in enumerate(v):
                if n:
                    tokens.append(",")
                emit(x)
            tokens.append("]")
        elif isinstance(v, decimal.Decimal):
            tokens.append(str(v))
        else:
            tokens.append(json.dumps(v, ensure_ascii=rng.random() < 0.3))

    def ws():
        r = rng.random()
        return "" if r < 0.6 else " " if r < 0.8 else "\n" + "".join(rng.choice(" \t") for _ in range(rng.randint(0, 20)))

    emit(value)
    return "".join(t + (ws() if n + 1 < len(tokens) else "") for n, t in enumerate(tokens))


FEATURE_KEYWORDS = ["type", "enum", "const", "properties", "required", "additionalProperties", "items",
                    "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
                    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "$ref", "$defs"]


def keyword_counts(schemas):
    """How many schemas use each keyword (and each type and format) anywhere."""
    counts = {}

    def walk(node, seen):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in FEATURE_KEYWORDS:
                    seen.add(k)
                if k == "type":
                    for t in (v if isinstance(v, list) else [v]):
                        seen.add(f"type:{t}")
                    if isinstance(v, list):
                        seen.add("type:list")
                if k == "format":
                    seen.add(f"format:{v}")
                if k in ("properties", "$defs"):
                    for sub in v.values():
                        walk(sub, seen)
                elif k not in ("enum", "const"):
                    walk(v, seen)
        elif isinstance(node, list):
            for x in node:
                walk(x, seen)

    for s in schemas:
        seen = set()
        walk(s, seen)
        for defs_key in ("$defs", "definitions"):
            for name, sub in (s.get(defs_key) or {}).items() if isinstance(s, dict) else ():
                if f'"#/{defs_key}/{name}"' in json.dumps(sub):
                    seen.add("recursive")
        for k in seen:
            counts[k] = counts.get(k, 0) + 1
    return dict(sorted(counts.items()))


def self_test(count=1000, seed=1, verbose=True):
    """Every generated schema is a valid draft 2020-12 schema with valid instances (its
    examples, formatted as the grammar formats, pass check_json); regex examples match."""
    jsonschema, _ = _jsonschema()
    fuzzer = SchemaFuzzer(seed)
    cases = fuzzer.cases(count, extras=True)
    rng = random.Random(seed)
    problems = []
    for i, case in enumerate(cases):
        if "json_schema" in case:
            s = case["json_schema"]
            jsonschema.Draft202012Validator.check_schema(s)
            for k in range(3):
                ex = fuzzer.example(s, rng=rng)
                ok, why = check_json(s, dumps_formatted(ex, rng))
                if not ok:
                    problems.append((i, why, s, ex))
        elif "regex" in case:
            re.compile(python_regex(case["regex"]))
            for k in range(3):
                ex = fuzzer.pattern_examples[case["regex"]]()
                if not regex_matches(case["regex"], ex):
                    problems.append((i, "regex example does not match", case["regex"], ex))
    # Determinism: the same seed gives the same cases.
    again = SchemaFuzzer(seed).cases(count, extras=True)
    if json.dumps(again) != json.dumps(cases):
        problems.append((-1, "not deterministic", None, None))
    for g in GRAMMARS:
        for good in {"arithmetic": ["1", "(2+3)*4", "((1))", "999-1/2*3"],
                     "key_values": ["a=1", "ab=12,c=3"], "yes_no_reason": ["yes, because it is."],
                     "nested_list": ["[]", "[1,[2,[]],33]"], "greeting_unicode": ["h\u00e9llo \u00c9mile"],
                     "csv_row": ['"a",1,""']}[g["name"]]:
            if not g["check"](good):
                problems.append((-1, f"grammar {g['name']} refuses {good!r}", None, None))
        for bad in ["", "x", "1+", "[1,2,3,4,5]"]:
            if g["check"](bad):
                problems.append((-1, f"grammar {g['name']} accepts {bad!r}", None, None))
    if verbose:
        print(json.dumps({"cases": len(cases), "problems": len(problems),
                          "keywords": keyword_counts([c["json_schema"] for c in cases if "json_schema" in c]),
                          "formats_verified": verified_formats()}, indent=1))
        for p in problems[:20]:
            print("PROBLEM", json.dumps(p, default=str, ensure_ascii=True)[:2000])
    return problems


def check_results(cases, lines):
    """Checks `tessera constrain` output lines against `cases`: returns a report dict."""
    report = {"samples": 0, "complete": 0, "incomplete": 0, "invalid": [], "errors": [], "summary": None}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if "summary" in r:
            report["summary"] = r["summary"]
            continue
        case = cases[r["index"]]
        report["samples"] += 1
        if "error" in r:
            report["errors"].append({"index": r["index"], "error": r["error"], "case": case})
            continue
        if not r.get("complete"):
            report["incomplete"] += 1
            continue
        report["complete"] += 1
        ok, why = check_text(case, r["text"])
        if not ok:
            report["invalid"].append({"index": r["index"], "sample": r.get("sample"), "why": why,
                                      "text": r["text"], "case": case})
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extras", action="store_true", help="also regex, choice and grammar lines")
    p.add_argument("--self-test", action="store_true")
    p.add_argument("--check", nargs=2, metavar=("CASES_JSONL", "RESULTS_JSONL"))
    args = p.parse_args()
    if args.self_test:
        return 1 if self_test(args.count, args.seed) else 0
    if args.check:
        with open(args.check[0]) as f:
            cases = [json.loads(x) for x in f if x.strip()]
        with open(args.check[1]) as f:
            report = check_results(cases, f)
        print(json.dumps({k: (v if not isinstance(v, list) else len(v)) for k, v in report.items()}, indent=1))
        for bad in report["invalid"][:20] + report["errors"][:20]:
            print(json.dumps(bad, ensure_ascii=True))
        return 0 if not report["invalid"] and not report["errors"] else 1
    for case in SchemaFuzzer(args.seed).cases(args.count, extras=args.extras):
        print(json.dumps(case, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

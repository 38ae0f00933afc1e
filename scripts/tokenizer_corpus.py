#!/usr/bin/env python3
"""Writes the tokenizer exactness corpus: deterministic (seeded) text lines that cover
what byte-level BPE gets wrong when a detail is off.

English prose, code, numbers of every length, whitespace runs, tabs, CRLF and lone CR,
Unicode spaces (NBSP, U+0085, ideographic space), accents in NFC and NFD, CJK, Cyrillic,
Greek, Arabic, Hebrew, Devanagari, Thai, emoji with ZWJ sequences, skin tones, flags and
keycaps, contractions in every case, text spelling special tokens (which must stay
ordinary text), mixed scripts and long words.

  --out FILE.jsonl      one JSON string per line (texts may hold newlines), the default
  --english-bytes N     instead: N bytes of English prose as plain text (benchmarks)
"""
import argparse
import json
import random
import sys
import unicodedata

WORDS = (
    "the of and to in is was that for it as with be by on not he this are or his from at which "
    "but have an had they you were their one all we can her has there been if more when will "
    "would who so no she other its may these such than some into could them only time new "
    "people after also first years most over many two out made between before under know "
    "while state world during without against government however university system city "
    "through because example model server request tokenizer inference latency throughput "
    "memory attention layer weights distributed cluster coordinator worker kernel schedule "
    "history question answer language science water family country million important "
    "different following development general national international something children "
    "beautiful extraordinary misunderstanding responsibilities characterization"
).split()

NAMES = "Alice Bob Carol Dave Eve Mallory Trent Peggy Victor Walter London Paris Tokyo Berlin".split()

CODE = [
    "def {f}(x, y=None):\n    return x + (y or 0)\n",
    "for (int i = 0; i < n; ++i) {{\n\tsum += a[i] * b[i];\n}}",
    "if (ptr == nullptr) return absl::InvalidArgumentError(\"{f}: null\");",
    "const auto {f} = [&](const std::string& s) -> size_t {{ return s.size(); }};",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%{f}%';",
    "    x = np.array([[1, 2], [3, 4]]) @ w.T  # {f}\n",
    "fn {f}<'a>(s: &'a str) -> Option<&'a str> {{ s.split(' ').next() }}",
    "<div class=\"{f}\">&nbsp;<a href='https://example.com/?q=1&r=2'>link</a></div>",
    "{{\"key\": \"{f}\", \"values\": [1, 2.5, -3e10, null, true]}}",
    "#include <vector>\r\n#define MAX(a,b) ((a)>(b)?(a):(b))\r\n",
    "$ ./build.sh && ctest -R '{f}' --output-on-failure 2>&1 | tee log.txt",
    "    }}\n  }}\n}}\n\n\n// end of {f}",
    "x+=1;y-=2;z*=3;w/=4;v%=5;u<<=6;t>>=7;s&&=8;r||=9;q??=0;",
]

PROSE_END = [".", "!", "?", "...", ";", ":", " —", ",", ".\"", "?!"]

CONTRACTION_BASES = ["he", "she", "it", "they", "we", "you", "I", "don", "can", "won", "that", "who"]
CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]

SCRIPTS = {
    "cjk": "我们今天去北京大学学习中文。東京都の天気は晴れです。日本語のテキストを処理する。한국어 문장도 포함합니다。",
    "cyrillic": "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир! Ёлка",
    "greek": "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε",
    "arabic": "مرحبا بالعالم. هذه جملة باللغة العربية مع أرقام ١٢٣٤٥٦٧٨٩٠",
    "hebrew": "שלום עולם, זוהי שורה בעברית",
    "devanagari": "नमस्ते दुनिया। यह हिंदी में एक वाक्य है। क्षत्रिय ज्ञान",
    "thai": "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
}

EMOJI = [
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "👍🏻", "👍🏿", "🏳️‍🌈", "🇺🇸", "🇯🇵", "1️⃣", "❤️", "🧑‍🤝‍🧑", "😀", "🤖",
    "🙏🏼", "👁‍🗨", "🐈‍⬛", "✌🏾", "🫠", "💩",
]

ACCENTED = ["café", "naïve", "résumé", "Ångström", "jalapeño", "façade", "Dvořák", "Zürich", "crème brûlée", "São Paulo", "Łódź", "Ærøskøbing"]

SPECIAL_TEXT = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|start_header_id|>user<|end_header_id|>",
    "<|python_tag|>", "<|reserved_special_token_0|>", "<|reserved_special_token_300|>", "<|im_start|>",
    "<|im_end|>", "<|endoftext|>", "<|eot_id", "eot_id|>", "<<|eot_id|>>", "< |eot_id| >", "<|EOT_ID|>",
    "<s>", "</s>", "[INST]",
]

SPACES = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\u00a0", "\u2003", "\u3000", "\u0085", "\u200b", "\u2028"]


def sentence(rng, words=None):
    n = rng.randint(3, 18)
    ws = [rng.choice(words or WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        ws[rng.randrange(n)] = rng.choice(NAMES)
    ws[0] = ws[0].capitalize()
    return " ".join(ws) + rng.choice(PROSE_END)


def prose(rng):
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 4)))


def code(rng):
    return rng.choice(CODE).format(f=rng.choice(WORDS) + "_" + str(rng.randint(0, 99)))


def number(rng):
    kind = rng.randrange(7)
    length = rng.randint(1, 40)
    digits = "".join(rng.choice("0123456789") for _ in range(length))
    if kind == 0:
        return digits
    if kind == 1:
        return f"{rng.choice(WORDS)} {digits} {rng.choice(WORDS)}"
    if kind == 2:
        return f"{rng.randint(-10**6, 10**6):,}.{rng.randint(0, 99):02d}"
    if kind == 3:
        return f"{rng.choice(WORDS)}{digits}{rng.choice(WORDS)}"
    if kind == 4:
        return f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(1900, 2100)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    if kind == 5:
        return f"+1 ({rng.randint(200, 999)}) {rng.randint(100, 999)}-{rng.randint(1000, 9999)} x{digits[:3]}"
    return f"{rng.random() * 10 ** rng.randint(-5, 12):.{rng.randint(0, 9)}e} {rng.choice(['%', '$', '€', '°C'])}"


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(2, 6)):
        parts.append(rng.choice(WORDS))
        parts.append(rng.choice(SPACES) * rng.randint(1, 5))
    line = "".join(parts)
    variant = rng.randrange(5)
    if variant == 0:
        return " " * rng.randint(1, 12) + line
    if variant == 1:
        return line + " " * rng.randint(1, 12)
    if variant == 2:
        return "\r\n".join(sentence(rng) for _ in range(rng.randint(2, 4))) + "\r\n"
    if variant == 3:
        return "\n" * rng.randint(1, 4) + line + "\n \n\t\n" + "\r" + rng.choice(WORDS)
    return rng.choice(WORDS) + "\n" + " " * rng.randint(1, 8) + rng.choice(WORDS) + "   \n\n   " + rng.choice(WORDS)


def accents(rng):
    words = [rng.choice(ACCENTED) for _ in range(rng.randint(1, 5))]
    text = " ".join(words) + " " + sentence(rng)
    return unicodedata.normalize(rng.choice(["NFC", "NFD", "NFKD"]), text)


def script(rng):
    name = rng.choice(sorted(SCRIPTS))
    text = SCRIPTS[name]
    start = rng.randrange(len(text))
    return text[start:start + rng.randint(5, 60)] + rng.choice(["", " ", "。", ". ", "\n"]) + text[:rng.randint(1, 20)]


def emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(EMOJI))
        if rng.random() < 0.5:
            parts.append(rng.choice([" ", "", " " + rng.choice(WORDS) + " ", "!!"]))
    return "".join(parts)


def contraction(rng):
    parts = []
    for _ in range(rng.randint(1, 4)):
        base = rng.choice(CONTRACTION_BASES)
        suffix = "".join(c.upper() if rng.random() < 0.5 else c for c in rng.choice(CONTRACTIONS))
        quote = rng.choice(["'", "'", "'", "’"])
        parts.append(f"{base}{quote}{suffix} {rng.choice(WORDS)}")
    return " ".join(parts) + rng.choice([".", "", "'", "''", "'S'"])


def special_text(rng):
    parts = [rng.choice(SPECIAL_TEXT)]
    for _ in range(rng.randint(0, 3)):
        parts.append(rng.choice([sentence(rng), rng.choice(SPECIAL_TEXT), "\n\n", " "]))
    return "".join(parts)


def mixed(rng):
    pools = [rng.choice(WORDS), rng.choice(list(SCRIPTS.values()))[:8], rng.choice(EMOJI),
             str(rng.randint(0, 10 ** 6)), rng.choice(ACCENTED), rng.choice(["!?", "...", "--", "©®™", "½¾", "→←"])]
    rng.shuffle(pools)
    return rng.choice(["", " ", "_", "-"]).join(pools)


def long_word(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice("abcxyz") * rng.randint(50, 400)
    if kind == 1:
        return "".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
    if kind == 2:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(50, 500)))
    if kind == 3:
        return " " * rng.randint(50, 300) + rng.choice(WORDS)
    if kind == 4:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(10, 60)))
    return "Pneumonoultramicroscopicsilicovolcanoconiosis" * rng.randint(1, 6)


GENERATORS = [prose, prose, code, number, whitespace, accents, script, emoji, contraction,
              special_text, mixed, long_word]


def corpus(seed, lines):
    rng = random.Random(seed)
    out = []
    while len(out) < lines:
        for generate in GENERATORS:
            out.append(generate(rng))
    # A few fixed edge cases at the front.
    fixed = ["", " ", "\n", "\r\n", "a", "'s", "'S", "  \n", "\t", "🤖", "\u0085", "x\u0085 y",
             # Case folding (long s, Kelvin sign, dotted I), format and separator characters,
             # C0 controls, a recently assigned script (Kawi, Unicode 15).
             "he'ſ", "k\u212a'K", "\u0130'S", "ǅemal", "x'Ｓ", "a\u180eb", "x\u2029y", "\ufeffbom",
             "tab\x0bvt\x0cff", "nul\x00x", "\U000E0001tag", "\U00011F04\U00011F05 kawi", "\U0001F6DC wifi"]
    return fixed + out[:lines]


def english(seed, size):
    rng = random.Random(seed)
    parts, total = [], 0
    while total < size:
        paragraph = " ".join(sentence(rng) for _ in range(rng.randint(3, 8))) + "\n\n"
        parts.append(paragraph)
        total += len(paragraph.encode())
    return "".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="file to write")
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--lines", type=int, default=2400, help="corpus lines (at least 2000 for the tests)")
    parser.add_argument("--english-bytes", type=int, default=0, help="write this much English prose instead")
    args = parser.parse_args()
    if args.english_bytes > 0:
        with open(args.out, "w", encoding="utf-8", newline="") as f:
            f.write(english(args.seed, args.english_bytes))
        return
    with open(args.out, "w", encoding="utf-8", newline="") as f:
        for line in corpus(args.seed, args.lines):
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {args.lines} lines to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

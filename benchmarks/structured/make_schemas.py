#!/usr/bin/env python3
"""Typical structured-output schemas for the cost benchmark: objects of 10-20 properties
(strings with lengths, integers and numbers with ranges, booleans, enums, a date-time, an
email, a nested object and an array), as an extraction or classification service sends.

  make_schemas.py --count 20 --seed 1 --out-jsonl schemas.jsonl --out-first schema.json

Each schema differs in property names and counts, so each is its own grammar. Strings ask
for at least a few characters so that documents stay long enough to time decode inside
them."""
import argparse
import json
import random

WORDS = ["name", "title", "city", "country", "street", "company", "role", "summary", "note",
         "category", "label", "reason", "status", "owner", "product", "vendor", "model", "color",
         "size", "score", "age", "count", "price", "rating", "weight", "priority", "level",
         "active", "verified", "urgent", "email", "created_at", "tags", "address", "contact"]


def schema(rng: random.Random, index: int) -> dict:
    names = rng.sample(WORDS, rng.randint(10, 20))
    props = {}
    for i, name in enumerate(names):
        key = f"{name}_{index}" if i == 0 else name
        kind = rng.choice(["string", "string", "integer", "number", "boolean", "enum", "date-time",
                           "email", "object", "array"])
        if kind == "string":
            props[key] = {"type": "string", "minLength": 4, "maxLength": 48}
        elif kind == "integer":
            lo = rng.randint(-100, 100)
            props[key] = {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(10, 10000)}
        elif kind == "number":
            props[key] = {"type": "number", "minimum": 0, "maximum": 1000}
        elif kind == "boolean":
            props[key] = {"type": "boolean"}
        elif kind == "enum":
            props[key] = {"enum": ["low", "medium", "high", "critical"]}
        elif kind == "date-time":
            props[key] = {"type": "string", "format": "date-time"}
        elif kind == "email":
            props[key] = {"type": "string", "format": "email"}
        elif kind == "object":
            props[key] = {"type": "object", "properties": {
                "street": {"type": "string", "minLength": 4, "maxLength": 40},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "zip"], "additionalProperties": False}
        else:
            props[key] = {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 16},
                          "minItems": 1, "maxItems": 4}
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-jsonl", required=True)
    ap.add_argument("--out-first", required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    schemas = [schema(rng, i) for i in range(args.count)]
    with open(args.out_jsonl, "w") as f:
        for s in schemas:
            f.write(json.dumps({"json_schema": s}) + "\n")
    with open(args.out_first, "w") as f:
        json.dump(schemas[0], f)


if __name__ == "__main__":
    main()

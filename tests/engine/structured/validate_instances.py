"""Validates JSON texts against JSON schemas with the reference implementation (python3-jsonschema),
for the constrained-decoding tests: each input line is {"schema": ..., "text": "..."}; prints one
line per text that is not JSON or does not validate, and exits 1 if there was any.

    /usr/bin/python3 validate_instances.py FILE.jsonl
"""
import json
import sys

import jsonschema


def main(path):
    bad = 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            case = json.loads(line)
            try:
                instance = json.loads(case["text"])
            except ValueError as e:
                print(f"line {n}: not JSON ({e}): {case['text'][:200]!r}")
                bad += 1
                continue
            validator = jsonschema.Draft202012Validator(case["schema"])
            errors = list(validator.iter_errors(instance))
            if errors:
                print(f"line {n}: {errors[0].message}: {case['text'][:200]!r}")
                bad += 1
    print(f"{bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

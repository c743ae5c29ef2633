"""Validates JSON texts against JSON Schemas with Python's jsonschema (formats checked).

Reads one JSON object a line, {"schema": ..., "text": "..."}; prints one line each:
"ok", or "invalid <reason>" / "unparsable <reason>".
"""
import json
import sys

from jsonschema import Draft202012Validator

for line in sys.stdin:
    case = json.loads(line)
    try:
        instance = json.loads(case["text"])
    except ValueError as e:
        print("unparsable " + str(e).replace("\n", " "))
        continue
    validator = Draft202012Validator(case["schema"], format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = [e.message for e in validator.iter_errors(instance)]
    print("ok" if not errors else "invalid " + "; ".join(errors).replace("\n", " "))
sys.stdout.flush()

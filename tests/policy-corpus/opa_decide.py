#!/usr/bin/env python3
"""What OPA's own engine decides over an input (tests/policy_opa.rs): the workspace's policies
loaded into OPA (PyPI `opa-golib-python-bindings`, OPA's Go engine), each package's document
evaluated, and conftest's conventions applied to its rules — independently of mara, which lists
a package's rules from its syntax tree instead.

    python opa_decide.py WORKSPACE INPUT PACKAGE[,PACKAGE…]

Prints the messages as JSON: a sorted list of [level, rule, text, details].
"""

import glob
import json
import os
import re
import sys

from opa_bindings import OpaEngine, OpaUndefinedError


def level_of(rule):
    for prefix, level in (("deny", "deny"), ("violation", "deny"), ("warn", "warn")):
        if re.fullmatch(prefix + r"(_.+)?", rule):
            return level
    return None


def messages(value):
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, str):
            yield item, None
        elif item is True:
            yield "(no message)", None
        elif isinstance(item, dict):
            rest = {k: v for k, v in item.items() if k != "msg"}
            msg = item.get("msg")
            text = msg if isinstance(msg, str) else json.dumps(msg if "msg" in item else rest, separators=(",", ":"))
            yield text, (rest or None)
        elif item is None or item is False:
            continue
        else:
            yield json.dumps(item), None


def main():
    workspace, input_file, packages = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    engine = OpaEngine()
    for path in sorted(glob.glob(os.path.join(workspace, "policy", "**", "*.rego"), recursive=True)):
        with open(path) as f:
            engine.add_policy(os.path.relpath(path, workspace), f.read())
    with open(input_file) as f:
        document = json.load(f)
    found = []
    for package in packages:
        try:
            values = engine.eval_document(package, document)
        except OpaUndefinedError:
            continue
        for rule, value in values.items():
            level = level_of(rule)
            if level is None:
                continue
            for text, details in messages(value):
                found.append([level, f"data.{package}.{rule}", text, details])
    found.sort(key=lambda m: json.dumps(m, sort_keys=True))
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()

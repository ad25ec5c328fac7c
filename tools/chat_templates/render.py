#!/usr/bin/env python3
"""Reference chat-template rendering with Python Jinja2, the way Hugging Face
transformers renders tokenizer chat templates (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols; raise_exception, strftime_now and
transformers' tojson). Reads {"templates": [TEXT, ...], "contexts": [OBJECT, ...]}
as JSON on stdin and writes, per template, a list with per context
{"text": OUTPUT} or {"error": MESSAGE}. Used by tests/tokenizer/jinja_parity_test.cpp."""
import datetime
import json
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    # A fixed date, so both renderers agree (the C++ side is given the same one).
    return datetime.datetime(2024, 7, 26, 12, 0, 0).strftime(fmt)


class AssistantTracker(Extension):
    """transformers' {% generation %} tag (marks assistant text for masks): renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def main():
    req = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    out = []
    for text in req["templates"]:
        rows = []
        try:
            tmpl = env.from_string(text)
        except Exception as e:  # a template Jinja2 itself cannot parse
            out.append([{"error": "parse: %s" % e} for _ in req["contexts"]])
            continue
        for ctx in req["contexts"]:
            try:
                rows.append({"text": tmpl.render(**ctx)})
            except Exception as e:
                rows.append({"error": "%s: %s" % (type(e).__name__, e)})
        out.append(rows)
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()

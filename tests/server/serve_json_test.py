#!/usr/bin/env python3
"""response_format, logprobs, /v1/models/{id} and the new /metrics series of
`moestream serve`, end to end with the built-in tiny model (random weights:
its free text is noise, so every JSON answer here is the grammar's doing).

- json_schema and json_object answers, streamed and not, sampled at several
  seeds: each one that ends with finish_reason "stop" parses and validates
  against its schema with Python's `jsonschema` where it is installed, else
  with the validator below (the keywords the server supports).
- logprobs / top_logprobs: every token has a logprob <= 0 and at most N
  alternatives whose probabilities sum to <= 1; the sampled token's logprob
  is there; the tokens' bytes spell the content exactly.
- Refusals (400, fast, naming the field or keyword): unsupported keywords, $ref
  loops, schemas with no finite value, huge enums, deep nesting, bad shapes,
  top_logprobs out of range or without logprobs, logprobs on /v1/completions.
- GET /v1/models/{id}: 200 for the served id, 404 for another.

No timing assertions beyond hang guards (a refusal must come back within 10 s).
usage: serve_json_test.py PATH/TO/moestream
"""
import http.client
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

MOESTREAM = os.path.abspath(sys.argv[1])
FAILURES = []
CHECKS = [0]

try:
    import jsonschema  # Debian: python3-jsonschema
except ImportError:
    jsonschema = None


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def own_validate(v, s, root):
    """The supported keywords (server docs), independent of the server's code."""
    if s is True or s == {}:
        return True
    if s is False:
        return False
    if "$ref" in s:
        t = root
        for part in s["$ref"][2:].split("/") if s["$ref"] != "#" else []:
            t = t[part.replace("~1", "/").replace("~0", "~")]
        return own_validate(v, t, root)
    if "anyOf" in s:
        return any(own_validate(v, x, root) for x in s["anyOf"])
    if "oneOf" in s:
        return sum(own_validate(v, x, root) for x in s["oneOf"]) == 1
    if "const" in s:
        return v == s["const"] and type(v) == type(s["const"])
    if "enum" in s:
        return any(v == e and type(v) == type(e) for e in s["enum"])
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        ok = {"object": isinstance(v, dict), "array": isinstance(v, list), "string": isinstance(v, str),
              "number": isinstance(v, (int, float)) and not isinstance(v, bool),
              "integer": isinstance(v, int) and not isinstance(v, bool),
              "boolean": isinstance(v, bool), "null": v is None}
        if not any(ok[t] for t in types):
            return False
    if isinstance(v, dict):
        if any(r not in v for r in s.get("required", [])):
            return False
        for k, x in v.items():
            if k in s.get("properties", {}):
                if not own_validate(x, s["properties"][k], root):
                    return False
            elif "additionalProperties" in s and not own_validate(x, s["additionalProperties"], root):
                return False
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 60):
            return False
        if "items" in s and not all(own_validate(x, s["items"], root) for x in v):
            return False
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", 1 << 60):
            return False
    return True


def valid(value, schema):
    if jsonschema is not None:
        try:
            jsonschema.validate(value, schema)
            return True
        except jsonschema.ValidationError as e:
            print("jsonschema:", e.message)
            return False
    return own_validate(value, schema, schema)


class Server:
    def __init__(self, *args):
        self.proc = subprocess.Popen([MOESTREAM, "serve", "--port", "0", "-t", "2", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise SystemExit("server did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def stream(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        chunks = []
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line.startswith("data: "):
                if line[6:] == "[DONE]":
                    break
                chunks.append(json.loads(line[6:]))
        c.close()
        return r.status, chunks

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
                    "ok": {"type": "boolean"}},
     "required": ["name", "age", "tags"], "additionalProperties": False},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                      "required": ["x", "y"], "additionalProperties": False}},
     "type": "array", "items": {"$ref": "#/$defs/pt"}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "integer"}, {"type": "null"},
               {"type": "object", "properties": {"kind": {"const": "leaf"}, "v": {"type": ["string", "null"], "maxLength": 5}},
                "required": ["kind", "v"], "additionalProperties": False}]},
    {"type": "object", "properties": {"v": {"type": "integer"},
                                      "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}},
     "required": ["v"], "additionalProperties": False},
    # Bounds, multipleOf, pattern, formats, prefixItems, allOf (issue #44).
    {"allOf": [{"type": "object",
                "properties": {"id": {"type": "string", "format": "uuid"}, "when": {"type": "string", "format": "date"},
                               "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2}$"},
                               "n": {"type": "integer", "minimum": -5, "maximum": 120},
                               "pair": {"type": "array", "items": False, "minItems": 2,
                                        "prefixItems": [{"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 50},
                                                        {"type": "boolean"}]}},
                "required": ["id", "when", "code", "n", "pair"], "additionalProperties": False},
               {"properties": {"n": {"exclusiveMaximum": 100}}}]},
]


def body_for(schema, seed, **kw):
    b = {"messages": [{"role": "user", "content": "give me json"}], "temperature": 1.0, "seed": seed,
         "max_tokens": 400,
         "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}}
    b.update(kw)
    return b


def check_logprobs(entries, content, n_top, where):
    check(isinstance(entries, list) and len(entries) > 0, where + ": logprobs.content is a non-empty list")
    spelled = b""
    for e in entries:
        spelled += bytes(e["bytes"])
        check(isinstance(e["logprob"], (int, float)) and e["logprob"] <= 1e-6, where + ": logprob <= 0: %r" % e)
        check(len(e["top_logprobs"]) <= n_top, where + ": at most %d alternatives" % n_top)
        mass = sum(math.exp(t["logprob"]) for t in e["top_logprobs"])
        check(mass <= 1 + 1e-5, where + ": alternatives' mass %g <= 1" % mass)
        lps = [t["logprob"] for t in e["top_logprobs"]]
        check(lps == sorted(lps, reverse=True), where + ": alternatives best first")
        for t in e["top_logprobs"]:
            if t["bytes"] == e["bytes"]:
                check(abs(t["logprob"] - e["logprob"]) < 1e-5, where + ": the sampled token's logprob in its list")
        if n_top > 0 and lps:
            check(e["logprob"] <= lps[0] + 1e-6, where + ": no token beats the best alternative")
    check(spelled == content.encode(), where + ": tokens' bytes spell the content (%r vs %r)" % (spelled[:80], content[:80]))


def main():
    s = Server("--parallel", "2", "--ctx", "1024")
    try:
        # ---- schema-constrained answers
        stopped = 0
        for i, schema in enumerate(SCHEMAS):
            for seed in (1, 2, 3):
                streamed = seed == 3
                where = "schema %d seed %d%s" % (i, seed, " stream" if streamed else "")
                b = body_for(schema, seed, logprobs=True, top_logprobs=3)
                if streamed:
                    b["stream"] = True
                    st, chunks = s.stream("/v1/chat/completions", b)
                    check(st == 200, where + ": status %d" % st)
                    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c.get("choices"))
                    finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1]
                    entries = [e for c in chunks if c.get("choices") and c["choices"][0].get("logprobs")
                               for e in c["choices"][0]["logprobs"]["content"]]
                else:
                    st, r = s.request("POST", "/v1/chat/completions", b)
                    check(st == 200, where + ": status %d %s" % (st, r))
                    if st != 200:
                        continue
                    content = r["choices"][0]["message"]["content"]
                    finish = r["choices"][0]["finish_reason"]
                    entries = r["choices"][0]["logprobs"]["content"]
                check_logprobs(entries, content, 3, where)
                if finish != "stop":
                    check(finish == "length", where + ": finish_reason %r" % finish)
                    continue
                stopped += 1
                try:
                    value = json.loads(content)
                except ValueError:
                    check(False, where + ": not JSON: %r" % content)
                    continue
                check(valid(value, schema), where + ": invalid under its schema: %r" % content)
                check(content == content.strip() or content.strip().startswith(("{", "[")) or True, where)
        check(stopped >= len(SCHEMAS) * 3 // 2, "most constrained answers close their value (%d did)" % stopped)

        # json_object: any object.
        for seed in (5, 6):
            st, r = s.request("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "x"}], "temperature": 1.0, "seed": seed,
                               "max_tokens": 300, "response_format": {"type": "json_object"}})
            check(st == 200, "json_object: status %d" % st)
            if st == 200 and r["choices"][0]["finish_reason"] == "stop":
                check(isinstance(json.loads(r["choices"][0]["message"]["content"]), dict), "json_object gives an object")
            elif st == 200:
                check(r["choices"][0]["message"]["content"].lstrip().startswith("{"), "json_object starts an object")
        # Also on /v1/completions.
        st, r = s.request("POST", "/v1/completions",
                          {"prompt": "json:", "temperature": 0.7, "seed": 9, "max_tokens": 300,
                           "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMAS[2]}}})
        check(st == 200, "completions with a schema: %d %s" % (st, r))
        if st == 200 and r["choices"][0]["finish_reason"] == "stop":
            check(valid(json.loads(r["choices"][0]["text"]), SCHEMAS[2]), "completions: valid")

        # Plain logprobs without a schema; top_logprobs 0 gives empty lists.
        st, r = s.request("POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "logprobs": True,
                           "temperature": 0})
        check(st == 200, "logprobs alone: %d" % st)
        if st == 200:
            check_logprobs(r["choices"][0]["logprobs"]["content"], r["choices"][0]["message"]["content"], 0, "greedy")
        st, r = s.request("POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
        check(st == 200 and r["choices"][0]["logprobs"] is None, "no logprobs unless asked")

        # ---- refusals
        def refused(body, want, path="/v1/chat/completions"):
            t0 = time.time()
            st, r = s.request("POST", path, body)
            took = time.time() - t0
            msg = r["error"]["message"] if isinstance(r, dict) and "error" in r else str(r)
            check(st == 400 and want in msg, "refused (%s): got %d %s" % (want, st, msg[:300]))
            check(took < 10, "refusal of %s took %.1f s" % (want, took))

        def with_schema(schema):
            return body_for(schema, 1)

        refused(with_schema({"type": "string", "pattern": "(?=a)b"}), "'pattern'")
        refused(with_schema({"type": "array", "uniqueItems": True}), "'uniqueItems'")
        refused(with_schema({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7, "minimum": 1}}}), "'multipleOf'")
        refused(with_schema({"$ref": "#"}), "$ref loop")
        refused(with_schema({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
                "$ref loop")
        refused(with_schema({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
                "no finite value")
        refused(with_schema({"$ref": "#/$defs/nothing"}), "points to nothing")
        refused(with_schema({"enum": ["v%06d-%s" % (i, "x" * 20) for i in range(20000)]}), "enum")
        deep = {"type": "string"}
        for _ in range(70):
            deep = {"type": "array", "items": deep}
        refused(with_schema(deep), "nests")  # past the body's nesting limit (--max-depth of JSON bodies)
        chain = {"d%d" % i: {"type": "array", "items": {"$ref": "#/$defs/d%d" % (i + 1)}} for i in range(100)}
        chain["d100"] = {"type": "string"}
        refused(with_schema({"$defs": chain, "$ref": "#/$defs/d0"}), "deeper than")  # the schema's own limit
        wide = {"type": "string", "maxLength": 4000}
        for _ in range(6):
            wide = {"type": "object", "properties": {"a": wide, "b": wide, "c": wide}}
        refused(with_schema(wide), "exceed")
        refused(body_for({"type": "strng"}, 1), "strng")
        refused({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}, "yaml")
        refused({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}},
                "json_schema")
        refused({"messages": [{"role": "user", "content": "x"}], "response_format": "json"}, "response_format")
        refused({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs")
        refused({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs")
        refused({"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}, "logprobs")
        refused({"prompt": "x", "logprobs": 2}, "logprobs", "/v1/completions")
        refused({"messages": [{"role": "user", "content": "x"}], "n": 9}, "'n'")
        refused({"messages": [{"role": "user", "content": "x"}], "n": 3}, "'n'")  # the server holds 2 slots

        # ---- n choices: one prefill forked; choice i is the answer of seed + i
        def answer(body, path="/v1/chat/completions"):
            st, r = s.request("POST", path, body)
            check(st == 200, "%s: %d %s" % (path, st, r))
            return r if st == 200 else {"choices": []}
        ask = {"messages": [{"role": "user", "content": "Tell me about experts"}], "max_tokens": 12,
               "temperature": 1.0, "seed": 7}
        both = answer(dict(ask, n=2))
        texts = [c["message"]["content"] for c in both["choices"]]
        check([c["index"] for c in both["choices"]] == [0, 1], "n=2: indexes %s" % both["choices"])
        singles = [answer(dict(ask, seed=7 + i)) for i in range(2)]
        one = [r["choices"][0]["message"]["content"] if r["choices"] else None for r in singles]
        check(texts == one, "n=2: choice i is seed + i's answer: %r vs %r" % (texts, one))
        want_tokens = sum(r.get("usage", {}).get("completion_tokens", 0) for r in singles)
        check(both.get("usage", {}).get("completion_tokens") == want_tokens,
              "n=2: usage sums the choices: %s, want %d" % (both.get("usage"), want_tokens))
        # Streamed: each chunk names its choice; put together, the choices are the whole answer's.
        st, chunks = s.stream("/v1/chat/completions", dict(ask, n=2, stream=True,
                                                       stream_options={"include_usage": True}))
        streamed, finished = ["", ""], [None, None]
        usage = None
        for c in chunks:
            if c.get("usage"):
                usage = c["usage"]
            for ch in c.get("choices", []):
                streamed[ch["index"]] += ch.get("delta", {}).get("content") or ""
                if ch.get("finish_reason"):
                    finished[ch["index"]] = ch["finish_reason"]
        check(streamed == texts, "n=2 streamed: %r vs whole %r" % (streamed, texts))
        check(None not in finished, "n=2 streamed: each choice finishes: %s" % finished)
        check(usage is not None and usage.get("completion_tokens") == want_tokens,
              "n=2 streamed: usage sums the choices: %s" % usage)
        greedy = answer({"prompt": "The model", "max_tokens": 8, "temperature": 0, "n": 2}, "/v1/completions")
        gt = [c["text"] for c in greedy["choices"]]
        check(len(gt) == 2 and gt[0] == gt[1], "n=2 greedy on /v1/completions: identical choices %r" % gt)

        # ---- models
        st, r = s.request("GET", "/v1/models")
        mid = r["data"][0]["id"] if st == 200 else "?"
        st, r = s.request("GET", "/v1/models/" + mid)
        check(st == 200 and r.get("id") == mid and r.get("object") == "model", "/v1/models/{id}: %d %s" % (st, r))
        st, r = s.request("GET", "/v1/models/no-such-model")
        check(st == 404 and r["error"]["code"] == "model_not_found", "unknown model id: %d %s" % (st, r))

        # ---- metrics
        st, text = s.request("GET", "/metrics")
        for series in ("moestream_decode_batch_size_bucket{le=\"1\"}", "moestream_decode_batch_size_count",
                       "moestream_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
                       "moestream_time_to_first_token_seconds_sum", "moestream_slot_tokens_per_second{slot=",
                       "moestream_queue_depth"):
            check(series in text, "/metrics has " + series)
        m = re.search(r"^moestream_time_to_first_token_seconds_count (\d+)$", text, re.M)
        check(m is not None and int(m.group(1)) >= 12, "a first token counted per request")
    finally:
        s.stop()
    print("%d checks, %d failures%s" % (CHECKS[0], len(FAILURES),
                                        "" if jsonschema else " (validated without python3-jsonschema)"))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()

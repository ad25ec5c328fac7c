#!/usr/bin/env python3
"""`moestream serve --spec` end to end with the built-in tiny model (issue #42):
three concurrent greedy requests get the answers a plain server gives, with
--spec ngram, --spec oracle:1, --spec draft -md (a one-layer model of the same
vocabulary) and --spec dflash -md (a tiny DFlash drafter); /metrics counts the
verifies; --spec mtp on a model without an MTP block, --spec draft with a
missing file and controller flags without --spec are refused at start with a
message naming why.

No timing assertions beyond hang guards.
usage: serve_spec_test.py PATH/TO/moestream
"""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

MOESTREAM = os.path.abspath(sys.argv[1])
FAILURES = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


class Server:
    def __init__(self, *args):
        # The CPU backend: exact equality with plain decoding (a GPU's batched verify
        # rounds differently from its decode step; docs/speculative.md "On the GPU").
        self.proc = subprocess.Popen([MOESTREAM, "serve", "--port", "0", "-t", "2", "--parallel", "3",
                                      "--backend", "cpu", *args],
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

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


PROMPTS = ["Once upon a time", "The experts of the", "In a small village there lived"]


def answers(server):
    """The three prompts at once (greedy), each answer's text and usage."""
    out = [None] * len(PROMPTS)

    def one(i):
        st, r = server.request("POST", "/v1/completions",
                               {"prompt": PROMPTS[i], "max_tokens": 20 + i, "temperature": 0})
        out[i] = (st, r["choices"][0]["text"], r["choices"][0]["finish_reason"],
                  r["usage"]["completion_tokens"]) if st == 200 else (st, r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return out


def metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else -1


def main():
    plain = Server()
    try:
        want = answers(plain)
    finally:
        plain.stop()
    check(all(a[0] == 200 for a in want), "plain answers: %r" % want)
    for spec in (["--spec", "ngram", "--draft-max", "4"], ["--spec", "oracle:1", "--spec-fixed", "--draft-max", "6"]):
        s = Server(*spec)
        try:
            check(any("speculative decoding: " + spec[1] in l for l in s.log), "%s: the start-up line" % spec)
            got = answers(s)
            check(got == want, "%s: the plain server's answers\n  want %r\n  got  %r" % (spec, want, got))
            st, text = s.request("GET", "/metrics")
            check(st == 200 and "moestream_spec_drafted_tokens_total" in text, "%s: /metrics has the spec series" % spec)
            if spec[1].startswith("oracle"):
                v = metric(text, "moestream_spec_verifies_total")
                check(v > 0, "%s: verifies counted (%s)" % (spec, v))
                check(metric(text, "moestream_spec_accepted_tokens_total") > 0, "%s: accepted drafts counted" % spec)
        finally:
            s.stop()

    # --spec mtp on a tiny qwen35moe, which carries an MTP block.
    q35 = os.path.join(os.environ.get("TMPDIR", "/tmp"), "serve_spec_q35_%d.gguf" % os.getpid())
    r = subprocess.run([MOESTREAM, "gen", "--arch", "qwen35moe", "-q", "-t", "2", "-o", q35],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "gen qwen35moe: %s" % r.stderr[-300:])
    try:
        runs = {}
        for name, spec in (("plain", []), ("mtp", ["--spec", "mtp", "--spec-fixed", "--draft-max", "3"])):
            s = Server("-m", q35, *spec)
            try:
                runs[name] = answers(s)
                if name == "mtp":
                    st, text = s.request("GET", "/metrics")
                    check(metric(text, "moestream_spec_verifies_total") > 0, "mtp: verifies counted")
            finally:
                s.stop()
        check(all(a[0] == 200 for a in runs["plain"]) and runs["mtp"] == runs["plain"],
              "--spec mtp: the plain server's answers\n  want %r\n  got  %r" % (runs["plain"], runs["mtp"]))
    finally:
        if os.path.exists(q35):
            os.remove(q35)

    # --spec draft and --spec dflash read -md FILE: a draft model of the tiny
    # model's vocabulary (one layer, another seed) and a tiny DFlash drafter.
    tmp = os.environ.get("TMPDIR", "/tmp")
    files = {"draft": os.path.join(tmp, "serve_spec_draft_%d.gguf" % os.getpid()),
             "dflash": os.path.join(tmp, "serve_spec_dflash_%d.gguf" % os.getpid())}
    try:
        for kind, extra in (("draft", ["--layers", "1", "--seed", "9"]), ("dflash", ["--arch", "dflash"])):
            r = subprocess.run([MOESTREAM, "gen", "-q", "-t", "2", "-o", files[kind], *extra],
                               capture_output=True, text=True, timeout=120)
            check(r.returncode == 0, "gen %s: %s" % (kind, r.stderr[-300:]))
            spec = ["--spec", kind, "-md", files[kind], "--spec-fixed", "--draft-max", "4"]
            s = Server(*spec)
            try:
                check(any("speculative decoding: " + kind in l for l in s.log), "%s: the start-up line" % kind)
                got = answers(s)
                check(got == want, "%s: the plain server's answers\n  want %r\n  got  %r" % (kind, want, got))
                st, text = s.request("GET", "/metrics")
                check(metric(text, "moestream_spec_drafted_tokens_total") > 0, "%s: drafts counted" % kind)
            finally:
                s.stop()
    finally:
        for f in files.values():
            if os.path.exists(f):
                os.remove(f)

    for args, needle in ((["--spec", "mtp"], "no MTP block"),  # the default tiny model is a qwen3moe
                         (["--spec", "draft", "-md", "/nonexistent/x.gguf"], "/nonexistent/x.gguf"),
                         (["--spec", "draft"], "-md FILE"),
                         (["--draft-max", "4"], "apply with --spec"),
                         (["--spec", "ngram", "--draft-max", "0"], "--draft-max"),
                         (["--spec", "bogus"], "--spec")):
        r = subprocess.run([MOESTREAM, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and needle in r.stderr, "serve %s refused naming %r: rc %d, %r" %
              (" ".join(args), needle, r.returncode, r.stderr[-300:]))
    print("%d checks, %d failures" % (CHECKS[0], len(FAILURES)))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()

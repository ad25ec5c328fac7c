#!/usr/bin/env python3
"""`moestream serve` end to end (CTest: server_http): starts the server on a free
loopback port with the built-in tiny model and talks to it as a client would,
with Python's http.client (the `openai` package is not in Debian).

Covers: the flags of `run` and `serve` (out-of-range values are errors, serve takes
--vram); /health, /v1/models, /metrics; chat and text completions, streamed and
not; usage counts; stop strings; the API key; every error case (malformed JSON,
wrong types, unknown fields ignored, context overflow, empty messages, n != 1,
a body over the limit, unknown routes); greedy output equal to `moestream run`;
8 concurrent streaming clients with one disconnecting mid-stream (its slot is
freed); a clean exit on SIGINT and on SIGTERM (mid-stream) with the port closed.

No timing assertions: waits have generous deadlines and only guard against hangs.

usage: serve_test.py PATH/TO/moestream
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

MOESTREAM = os.path.abspath(sys.argv[1])
KEY = "test-key-123"
FAILURES = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


class Server:
    def __init__(self, *args):
        self.proc = subprocess.Popen([MOESTREAM, "serve", "--port", "0", "-t", "2", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 60
        self.port = None
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
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, key=KEY, raw=None, headers=None):
        c = self.conn()
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def stream(self, path, body, key=KEY, stop_after=None):
        """Returns the parsed data: chunks (and "[DONE]"); with stop_after=N,
        disconnects after N chunks."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(body),
                  headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
        r = c.getresponse()
        chunks = []
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            chunks.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
            if payload == "[DONE]":
                break
            if stop_after is not None and len(chunks) >= stop_after:
                c.sock.shutdown(socket.SHUT_RDWR)
                c.close()
                return chunks
        c.close()
        return chunks

    def metric(self, name):
        _, text = self.request("GET", "/metrics")
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self, sig):
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def chat(content, **kw):
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0}
    body.update(kw)
    return body


def content_of(chunks):
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks
                   if c != "[DONE]" and c.get("choices"))


def port_closed(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except OSError:
        return True


def check_flags():
    """Out-of-range flags of `run` and `serve` are clear errors (the same checks for
    both), -1 is "until end of text", and serve takes --vram like run does."""
    def fails(args, want):
        p = subprocess.run([MOESTREAM, *args], capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and want in p.stderr,
              "%s: wanted an error naming %r, got rc %d: %s" % (" ".join(args), want, p.returncode, p.stderr))

    for cmd in (["run", "-q"], ["serve", "-q", "--port", "0"]):
        fails(cmd + ["-t", "-3"], "--threads must be >= 0")
        fails(cmd + ["-b", "-1"], "--batch must be >= 0")  # 0: the pass size is chosen
        fails(cmd + ["-c", "-2"], "--ctx must be >= 0")
        fails(cmd + ["--vram", "8Q"], "--vram 8Q: not a size")
    fails(["run", "-q", "--temp", "-1"], "temperature must be a number >= 0")
    fails(["run", "-q", "-n", "-5"], '-1 for "until end of text"')
    fails(["run", "-q", "--top-p", "2"], "top-p must be in (0, 1]")
    fails(["run", "-q", "--top-k", "-1"], "top-k must be >= 0")
    fails(["serve", "-q", "--max-body", "-1"], "--max-body must be at least 1 byte")
    fails(["serve", "-q", "--parallel", "0"], "--parallel must be >= 1")
    # -n -1 runs until end of text (or, here, a context of 16 tokens).
    p = subprocess.run([MOESTREAM, "run", "-n", "-1", "-c", "16", "--temp", "0", "--backend", "cpu", "-t", "2"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and "stop: " in p.stderr, "run -n -1: rc %d %s" % (p.returncode, p.stderr[-300:]))
    # serve has --vram (and the tiered-expert options); the CPU backend says it ignores it.
    sv = Server("--vram", "8G", "--policy", "lru", "--backend", "cpu")
    check(sv.request("GET", "/health", key=None)[0] == 200, "serve --vram 8G --backend cpu answers")
    check(any("the CPU backend ignores it" in line for line in sv.log), "--vram on the CPU backend: a notice")
    check(sv.stop(signal.SIGTERM) == 0, "serve --vram exits 0")


def main():
    check_flags()
    s = Server("--api-key", KEY, "--parallel", "4", "--ctx", "256", "--max-body", "65536")

    # --- health, models, auth
    check(s.request("GET", "/health", key=None)[0] == 200, "/health without a key")
    st, body = s.request("GET", "/v1/models", key=None)
    check(st == 401 and body["error"]["type"] == "authentication_error", "401 without a key: %s" % body)
    check(s.request("GET", "/v1/models", key="wrong")[0] == 401, "401 with a wrong key")
    check(s.request("POST", "/v1/chat/completions", chat("x"), key=None)[0] == 401, "401 on completions")
    st, body = s.request("GET", "/v1/models")
    check(st == 200 and body["data"][0]["id"] == "tiny", "/v1/models lists the model: %s" % body)

    # --- a chat completion, and usage
    st, r = s.request("POST", "/v1/chat/completions", chat("Hello there", max_tokens=12))
    check(st == 200, "chat 200: %s" % r)
    answer = r["choices"][0]["message"]["content"]
    check(r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant", "chat shape")
    check(r["usage"]["completion_tokens"] <= 12 and r["usage"]["prompt_tokens"] > 3, "usage: %s" % r["usage"])
    check(r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"], "total")
    check(r["choices"][0]["finish_reason"] in ("length", "stop"), "finish_reason")
    if r["usage"]["completion_tokens"] == 12:
        check(r["choices"][0]["finish_reason"] == "length", "max_tokens reached: length")

    # --- streaming gives the same greedy text, then a usage chunk and [DONE]
    chunks = s.stream("/v1/chat/completions", chat("Hello there", max_tokens=12, stream=True,
                                                   stream_options={"include_usage": True}))
    check(chunks[-1] == "[DONE]", "stream ends with [DONE]")
    check(content_of(chunks) == answer, "streamed text = non-streamed: %r vs %r" % (content_of(chunks), answer))
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk has the role")
    fin = [c for c in chunks if c != "[DONE]" and c["choices"] and c["choices"][0]["finish_reason"]]
    check(len(fin) == 1, "one chunk with a finish_reason")
    usage = [c for c in chunks if c != "[DONE]" and c.get("usage")]
    check(len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == r["usage"]["completion_tokens"],
          "usage chunk")
    # The second identical request reused the prompt cache.
    check(usage[0]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, "prompt cache used: %s" % usage)

    # --- multi-turn: the next turn reuses the cached conversation
    turn1 = [{"role": "user", "content": "Tell me about experts."}]
    r1 = s.request("POST", "/v1/chat/completions", {"messages": turn1, "max_tokens": 10, "temperature": 0})[1]
    turn2 = turn1 + [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "And then?"}]
    r2 = s.request("POST", "/v1/chat/completions", {"messages": turn2, "max_tokens": 4, "temperature": 0})[1]
    check(r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= r1["usage"]["prompt_tokens"] - 1,
          "multi-turn prompt cache: %s after %s" % (r2["usage"], r1["usage"]))

    # --- greedy through the server = moestream run (text completion and chat)
    prompt = "Once upon a time"
    run = subprocess.run([MOESTREAM, "run", "-p", prompt, "-n", "24", "--temp", "0", "-q", "--backend", "cpu",
                          "-t", "2"], capture_output=True, text=True, timeout=120)
    st, r = s.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0})
    check(st == 200 and r["object"] == "text_completion", "completions 200: %s" % r)
    check(run.stdout[:-1] == r["choices"][0]["text"],
          "greedy = run: %r vs %r" % (r["choices"][0]["text"], run.stdout[:-1]))
    run_chat = subprocess.run([MOESTREAM, "run", "-p", prompt, "--chat", "-n", "24", "--temp", "0", "-q",
                               "--backend", "cpu", "-t", "2"], capture_output=True, text=True, timeout=120)
    st, r = s.request("POST", "/v1/chat/completions", chat(prompt, max_tokens=24))
    check(run_chat.stdout[:-1] == r["choices"][0]["message"]["content"], "chat greedy = run --chat")

    # --- stop strings: never emitted, finish_reason stop (streamed too)
    full = s.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0})[1]
    text = full["choices"][0]["text"]
    stop = text[5:8] if len(text) >= 8 else text[-1:]
    st, r = s.request("POST", "/v1/completions",
                      {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stop": [stop, "zzzz"]})
    check(r["choices"][0]["text"] == text[:text.find(stop)] and r["choices"][0]["finish_reason"] == "stop",
          "stop string: %r (stop %r, full %r)" % (r["choices"][0]["text"], stop, text))
    c = s.stream("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0, "stop": stop,
                                     "stream": True})
    streamed = "".join(x["choices"][0]["text"] for x in c if x != "[DONE]")
    check(streamed == text[:text.find(stop)], "streamed stop string: %r" % streamed)

    # --- sampling with a seed is reproducible
    a = s.request("POST", "/v1/chat/completions", chat("Hi", temperature=0.9, seed=42, max_tokens=10))[1]
    b = s.request("POST", "/v1/chat/completions", chat("Hi", temperature=0.9, seed=42, max_tokens=10,
                                                        presence_penalty=0.5, frequency_penalty=0.0))[1]
    check(a["choices"][0]["message"]["content"] is not None and b["usage"]["completion_tokens"] > 0, "seeded")

    # --- logit_bias: +100 on one token makes greedy decoding repeat it
    st, r = s.request("POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0,
                                                  "ignore_eos": True, "logit_bias": {"120": 100}})
    t = r["choices"][0]["text"] if st == 200 else ""
    check(st == 200 and t and len(t) % 4 == 0 and t == t[:len(t) // 4] * 4 and r["usage"]["completion_tokens"] == 4,
          "logit_bias +100 on token 120: four times the same piece: %r" % (r,))

    # --- errors: status, OpenAI's shape, the field
    def err(body=None, raw=None, path="/v1/chat/completions", want=400):
        st, r = s.request("POST", path, body, raw=raw)
        ok = st == want and isinstance(r, dict) and "message" in r.get("error", {}) and "type" in r["error"]
        check(ok, "error %d for %s: got %d %s" % (want, raw or body, st, r))
        return r.get("error", {}) if isinstance(r, dict) else {}

    err(raw="{not json")
    err(raw="[1, 2]")
    err(raw="[" * 60000)  # deep nesting: refused, not a crash
    err(raw=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')  # not UTF-8
    check(err(chat("x", temperature="hot"))["param"] == "temperature", "wrong type names the field")
    check(err(chat("x", max_tokens=-5))["param"] == "max_tokens", "max_tokens -5")
    check(err(chat("x", n=9))["param"] == "n", "n past 8")
    e = err(chat("x", logit_bias={"99999999": 5}))
    check(e.get("param") == "logit_bias" and "vocabulary" in e.get("message", ""), "logit_bias past the vocabulary: %s" % e)
    err({"messages": []})
    err({"messages": [{"role": "user"}], "n": 1, "stream": "maybe"})
    e = err(chat("word " * 400))
    check(e.get("code") == "context_length_exceeded" and "256" in e.get("message", ""), "context overflow: %s" % e)
    err({"prompt": 5}, path="/v1/completions")
    err(raw=json.dumps(chat("y" * 70000)), want=413)
    st, r = s.request("GET", "/v1/nothing")
    check(st == 404 and "error" in r, "404 in OpenAI's shape")
    st, r = s.request("POST", "/v1/chat/completions", chat("x", max_tokens=2, some_new_field={"a": 1}))
    check(st == 200, "unknown fields are ignored")
    # The server is still fine after all that.
    check(s.request("GET", "/health")[0] == 200, "healthy after bad requests")

    # --- 8 concurrent streaming clients; one disconnects after 3 chunks
    cancelled_before = s.metric("moestream_requests_cancelled_total")
    results = [None] * 8

    def client(i):
        if i == 3:
            results[i] = s.stream("/v1/chat/completions", chat("client %d" % i, stream=True), stop_after=3)
        else:
            results[i] = s.stream("/v1/chat/completions", chat("client %d" % i, stream=True, max_tokens=20))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for i, r in enumerate(results):
        if i == 3:
            check(r is not None and len(r) == 3, "client 3 disconnected after 3 chunks")
        else:
            check(r is not None and r[-1] == "[DONE]" and content_of(r) is not None, "client %d finished" % i)
    # The disconnected client's generation stops and its slot is freed.
    deadline = time.time() + 60
    while time.time() < deadline and s.metric("moestream_requests_cancelled_total") == cancelled_before:
        time.sleep(0.1)
    check(s.metric("moestream_requests_cancelled_total") == cancelled_before + 1, "the disconnect cancelled one job")
    while time.time() < deadline and s.metric("moestream_active_slots") != 0:
        time.sleep(0.1)
    check(s.metric("moestream_active_slots") == 0 and s.metric("moestream_queue_depth") == 0, "slots freed")
    check(s.metric("moestream_completion_tokens_total") > 0, "metrics count tokens")
    # The CPU backend does not tier experts: the expert telemetry is there, and 0.
    check(s.metric("moestream_expert_telemetry_available") == 0, "expert telemetry: not available on the CPU")
    for name in ("moestream_expert_hit_rate", "moestream_expert_h2d_bytes_total", "moestream_expert_cpu_share"):
        check(s.metric(name) == 0, "%s is 0 on the CPU backend" % name)

    # --- SIGINT: a clean exit, the port closed
    rc = s.stop(signal.SIGINT)
    check(rc == 0, "exit code 0 on SIGINT (got %s)" % rc)
    check(port_closed(s.port), "port closed after SIGINT")

    # --- SIGTERM while a client is streaming: the stream ends, the process exits
    # (Long enough to be running when the signal comes: a short one could end
    # before the poll below sees its slot, leaving nothing to interrupt.)
    s2 = Server("--ctx", "16384")
    got = []
    t = threading.Thread(target=lambda: got.extend(
        s2.stream("/v1/chat/completions", chat("go on", stream=True, max_tokens=16000, ignore_eos=True), key="")))
    t.start()
    deadline = time.time() + 60
    while time.time() < deadline and (s2.metric("moestream_active_slots") or 0) < 1:
        time.sleep(0.05)
    rc = s2.stop(signal.SIGTERM)
    t.join(timeout=60)
    check(rc == 0, "exit code 0 on SIGTERM (got %s)" % rc)
    check(not t.is_alive(), "the streaming client was released")
    check(port_closed(s2.port), "port closed after SIGTERM")

    if FAILURES:
        print("%d failures" % len(FAILURES))
        print("server log:\n" + "".join(s.log[-20:]))
        sys.exit(1)
    print("serve_test: all %d checks passed" % CHECKS[0])


if __name__ == "__main__":
    main()

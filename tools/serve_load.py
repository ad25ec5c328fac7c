#!/usr/bin/env python3
"""A bounded load test for an OpenAI-compatible chat server on loopback
(`moestream serve`, or llama.cpp's llama-server with --openai-compat): N
concurrent streaming clients, each sending R chat requests one after another.
Per client count it reports, as a markdown row: requests, failed requests,
time to first token (p50 and p99), aggregate decode tokens/s, tokens/s over
the wall clock, and tokens/s per client.

    tools/serve_load.py --moestream build/moestream [-m MODEL.gguf] [--clients 1,4,8]
                        [--requests 4] [--max-tokens 64] [--parallel 8] [-- extra serve args]
    tools/serve_load.py --url http://127.0.0.1:8080 [--openai-compat] ...   (a server already running)

Without --url it starts `moestream serve` itself (port 0) and stops it at the
end. Only loopback addresses are accepted. Every request's prompt is
different, so a prompt cache does not make later requests free.

Definitions (per client count):
  TTFT       seconds from sending a request to its first streamed token
             (content, or reasoning_content: llama-server may stream a
             thinking model's first tokens there); p50/p99 by nearest rank.
  failed     requests that got no 200, broke off, carried an error, or
             ended without [DONE].
  decode tok/s (aggregate)
             tokens after each request's first / the time during which at
             least one request was decoding (the union of the intervals
             from a request's first token to its last): the throughput of
             the decode steps, without the idle gaps between requests.
             Only requests whose tokens came in two chunks or more count
             (a server may send all of a short reply in one chunk when the
             client reads slower than it decodes); "n/a" when none did.
  tok/s (wall)  all completion tokens / the level's wall-clock time.
Completion tokens come from the stream's usage (stream_options.include_usage);
a server that sends none has its tokens counted as streamed chunks with text.

--json-out FILE appends one JSON object per client count (the same numbers,
plus --label), for scripts that assemble tables from several servers.
"""
import argparse
import http.client
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class RequestResult:
    def __init__(self):
        self.ok = False
        self.error = ""
        self.t_send = 0.0
        self.t_first = None  # first token (absolute, perf_counter)
        self.t_last = None   # last token
        self.t_end = 0.0
        self.tokens = 0


def stream_one(host, port, body, key, timeout):
    """One streaming chat request, timed; never raises (failures are recorded)."""
    res = RequestResult()
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    res.t_send = time.perf_counter()
    usage_tokens, chunk_tokens, done = None, 0, False
    try:
        c = http.client.HTTPConnection(host, port, timeout=timeout)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=h)
        r = c.getresponse()
        if r.status != 200:
            res.error = "HTTP %d: %s" % (r.status, r.read()[:300])
            return res
        while True:
            line = r.fp.readline()
            if not line:
                break
            line = line.decode("utf-8", errors="replace").strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[6:])
            if chunk.get("error"):
                res.error = "stream error: %s" % json.dumps(chunk["error"])[:300]
                break
            if chunk.get("usage"):
                usage_tokens = chunk["usage"].get("completion_tokens")
            for ch in chunk.get("choices") or []:
                d = ch.get("delta") or {}
                if d.get("content") or d.get("reasoning_content") or d.get("reasoning") or d.get("tool_calls"):
                    now = time.perf_counter()
                    if res.t_first is None:
                        res.t_first = now
                    res.t_last = now
                    chunk_tokens += 1
        c.close()
    except Exception as e:  # noqa: BLE001 - a failed request is a result
        res.error = "%s: %s" % (type(e).__name__, e)
    res.t_end = time.perf_counter()
    res.tokens = usage_tokens if usage_tokens is not None else chunk_tokens
    if not res.error and not done:
        res.error = "the stream ended without [DONE]"
    res.ok = not res.error
    return res


def nearest_rank(sorted_values, q):
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def union_seconds(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize(clients, results, wall):
    ok = [r for r in results if r.ok]
    ttfts = sorted(r.t_first - r.t_send for r in ok if r.t_first is not None)
    tokens = sum(r.tokens for r in ok)
    timed = [r for r in ok if r.t_first is not None and r.t_last > r.t_first]
    decode_tokens = sum(max(0, r.tokens - 1) for r in timed)
    window = union_seconds([(r.t_first, r.t_last) for r in timed])
    return {"clients": clients, "requests": len(results), "failed": len(results) - len(ok),
            "errors": sorted(set(r.error for r in results if not r.ok))[:5], "wall_s": wall,
            "ttft_p50_s": nearest_rank(ttfts, 0.50), "ttft_p99_s": nearest_rank(ttfts, 0.99),
            "tokens": tokens, "decode_tps": decode_tokens / window if window > 0 else None,
            "decode_timed_requests": len(timed),
            "wall_tps": tokens / wall if wall else 0.0, "tps_per_client": tokens / wall / clients if wall else 0.0}


def run_level(host, port, a, clients):
    results = []
    lock = threading.Lock()

    def client(ci):
        for ri in range(a.requests):
            body = {"messages": [{"role": "user", "content": "Client %d, request %d: tell me a story about experts."
                                  % (ci, ri)}],
                    "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True}
            if a.openai_compat:
                body["model"] = a.model_name
            r = stream_one(host, port, body, a.key, a.request_timeout)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarize(clients, results, time.perf_counter() - t0)


def wait_ready(host, port, seconds):
    """Polls GET /health until it answers 200 (llama-server answers 503 while loading)."""
    deadline = time.time() + seconds
    last = ""
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection(host, port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return
            last = "HTTP %d" % r.status
        except Exception as e:  # noqa: BLE001 - not up yet
            last = str(e)
        time.sleep(0.5)
    sys.exit("serve_load: the server at %s:%d was not ready within %d s (%s)" % (host, port, seconds, last))


HEADER = ("| server | clients | requests | failed | TTFT p50 (s) | TTFT p99 (s) | decode tok/s (aggregate) "
          "| tok/s (wall) | tok/s per client |\n|---|---|---|---|---|---|---|---|---|")


def row(label, r):
    decode = "n/a" if r["decode_tps"] is None else "%.1f" % r["decode_tps"]
    return "| %s | %d | %d | %d | %.3f | %.3f | %s | %.1f | %.1f |" % (
        label, r["clients"], r["requests"], r["failed"], r["ttft_p50_s"], r["ttft_p99_s"], decode,
        r["wall_tps"], r["tps_per_client"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server on loopback (default: start `moestream serve`)")
    ap.add_argument("--openai-compat", action="store_true",
                    help="the server is another OpenAI-compatible one (llama-server): send a model name, count "
                         "tokens from the stream when it sends no usage")
    ap.add_argument("--model-name", default="default", help="the request's model field with --openai-compat")
    ap.add_argument("--moestream", default="build/moestream")
    ap.add_argument("-m", "--model", help="GGUF model of the started server (default: the built-in tiny model)")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=8, help="--parallel of the started server")
    ap.add_argument("--key", default=os.environ.get("MOESTREAM_API_KEY", ""))
    ap.add_argument("--label", default="", help="the server column of the rows (default: moestream or the URL)")
    ap.add_argument("--no-header", action="store_true", help="rows only (to append to another table)")
    ap.add_argument("--json-out", help="append one JSON object per client count to this file")
    ap.add_argument("--ready-timeout", type=int, default=300, help="seconds to wait for the server's /health")
    ap.add_argument("--request-timeout", type=int, default=600, help="socket timeout of each request (s)")
    ap.add_argument("serve_args", nargs="*", help="extra arguments for `moestream serve` (after --)")
    a = ap.parse_args()
    if a.requests < 1 or a.max_tokens < 1:
        sys.exit("serve_load: --requests and --max-tokens must be >= 1")
    try:
        levels = [int(x) for x in a.clients.split(",")]
    except ValueError:
        sys.exit("serve_load: --clients takes a comma list of counts, e.g. 1,4,8")
    if not levels or min(levels) < 1:
        sys.exit("serve_load: every client count must be >= 1")

    proc = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
        if host not in LOOPBACK:
            sys.exit("serve_load: loopback servers only (got %s)" % host)
        label = a.label or a.url
    else:
        cmd = [a.moestream, "serve", "--port", "0", "--parallel", str(a.parallel)]
        if a.model:
            cmd += ["-m", a.model]
        cmd += a.serve_args
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        host, port, head = "127.0.0.1", None, []
        for line in proc.stderr:
            head.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("serve_load: the server did not start:\n" + "".join(head))
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        for line in head:
            if "| ctx" in line:
                print("server: " + line.strip().replace("moestream: ", ""))
        print("command: " + " ".join(cmd))
        label = a.label or "moestream"
    try:
        wait_ready(host, port, a.ready_timeout)
        # Warm-up (pages in the weights, builds graphs).
        body = {"messages": [{"role": "user", "content": "warm up"}], "max_tokens": 8, "stream": True}
        if a.openai_compat:
            body["model"] = a.model_name
        w = stream_one(host, port, body, a.key, a.request_timeout)
        if not w.ok:
            print("serve_load: the warm-up request failed: %s" % w.error, file=sys.stderr)
        if not a.no_header:
            print("\n" + HEADER)
        for n in levels:
            r = run_level(host, port, a, n)
            print(row(label, r), flush=True)
            if r["errors"]:
                print("serve_load: %d failed at %d clients: %s" % (r["failed"], n, "; ".join(r["errors"])),
                      file=sys.stderr)
            if a.json_out:
                with open(a.json_out, "a") as f:
                    f.write(json.dumps(dict(r, label=label)) + "\n")
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()

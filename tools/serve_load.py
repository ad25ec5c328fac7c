#!/usr/bin/env python3
"""A bounded load test for `moestream serve` (loopback only): N concurrent
streaming clients, each sending R chat requests one after another; reports
requests/s, time to first token (median and p90) and aggregate generated
tokens/s, per client count, as a markdown table.

    tools/serve_load.py --moestream build/moestream [-m MODEL.gguf] [--clients 1,4,8]
                        [--requests 4] [--max-tokens 64] [--parallel 8] [-- extra serve args]
    tools/serve_load.py --url http://127.0.0.1:8080 ...     (a server already running on loopback)

Without --url it starts the server itself (port 0) and stops it at the end.
Only loopback addresses are accepted. Every client's prompt is different, so
the prompt cache does not make later requests free.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse


def stream_one(host, port, body, key):
    """One streaming chat request: (seconds to the first content, seconds in all, completion tokens)."""
    c = http.client.HTTPConnection(host, port, timeout=600)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=h)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    ttft, tokens = None, 0
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if chunk.get("choices") and chunk["choices"][0]["delta"].get("content") and ttft is None:
            ttft = time.perf_counter() - t0
    c.close()
    return (ttft if ttft is not None else time.perf_counter() - t0), time.perf_counter() - t0, tokens


def run_level(host, port, key, clients, requests, max_tokens):
    results, errors = [], []
    lock = threading.Lock()

    def client(ci):
        for ri in range(requests):
            body = {"messages": [{"role": "user", "content": "Client %d, request %d: tell me a story about experts." % (ci, ri)}],
                    "max_tokens": max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True}
            try:
                res = stream_one(host, port, body, key)
                with lock:
                    results.append(res)
            except Exception as e:  # reported, not fatal
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[2] for r in results)
    p90 = ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))] if ttfts else 0
    return {"clients": clients, "requests": len(results), "errors": len(errors), "wall": wall,
            "rps": len(results) / wall if wall else 0, "ttft_med": statistics.median(ttfts) if ttfts else 0,
            "ttft_p90": p90, "tokens": tokens, "tps": tokens / wall if wall else 0,
            "tps_per_client": tokens / wall / clients if wall else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server on loopback (default: start one)")
    ap.add_argument("--moestream", default="build/moestream")
    ap.add_argument("-m", "--model", help="GGUF model (default: the built-in tiny model)")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=8, help="--parallel of the started server")
    ap.add_argument("--key", default=os.environ.get("MOESTREAM_API_KEY", ""))
    ap.add_argument("serve_args", nargs="*", help="extra arguments for `moestream serve` (after --)")
    a = ap.parse_args()

    proc = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("serve_load: loopback servers only (got %s)" % host)
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
    try:
        # Warm-up (pages in the weights).
        stream_one(host, port, {"messages": [{"role": "user", "content": "warm up"}], "max_tokens": 8,
                                "stream": True}, a.key)
        print("\n| clients | requests | errors | req/s | TTFT median (s) | TTFT p90 (s) | tokens/s (all) | tokens/s per client |")
        print("|---|---|---|---|---|---|---|---|")
        for n in [int(x) for x in a.clients.split(",")]:
            r = run_level(host, port, a.key, n, a.requests, a.max_tokens)
            print("| %d | %d | %d | %.2f | %.3f | %.3f | %.1f | %.1f |" % (
                r["clients"], r["requests"], r["errors"], r["rps"], r["ttft_med"], r["ttft_p90"], r["tps"],
                r["tps_per_client"]), flush=True)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`moestream serve` under load (CTest: server_load): every slot streams and more
requests queue behind them, while /health and /metrics are probed: each probe must
be answered within 1 s (issue #28: with 50 streaming clients /health took 28 s).
Loopback only; the tiny built-in model. Then tools/serve_load.py (the issue #31
load rows) runs against it: no failed request, every token counted.

usage: serve_load_test.py PATH/TO/moestream
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from serve_test import FAILURES, CHECKS, MOESTREAM, Server, check, chat, content_of

PARALLEL = 4
CLIENTS = 40  # all slots busy, the rest queued (more than the old fixed pool of 4 * parallel + 8 threads)


def check_load_tool():
    """tools/serve_load.py (the #31 load rows) against the tiny model: no failed
    request, every token counted, p50 <= p99, a decode rate."""
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "serve_load.py")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        p = subprocess.run([sys.executable, tool, "--moestream", MOESTREAM, "--clients", "1,3", "--requests", "2",
                            "--max-tokens", "8", "--parallel", "2", "--json-out", out, "--", "--ctx", "256"],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "serve_load.py exit 0: %s" % p.stderr[-500:])
        rows = [json.loads(l) for l in open(out)] if os.path.exists(out) else []
        check([r["clients"] for r in rows] == [1, 3], "serve_load.py rows for 1 and 3 clients: %r" % rows)
        for r in rows:
            check(r["failed"] == 0 and r["requests"] == 2 * r["clients"], "no failed request: %r" % r)
            check(r["tokens"] == 8 * r["requests"], "every completion token counted: %r" % r)
            check(0 < r["ttft_p50_s"] <= r["ttft_p99_s"], "TTFT p50 <= p99: %r" % r)
            check(r["wall_tps"] > 0, "a wall rate: %r" % r)
            # A reply may come in one chunk when the client reads slower than the
            # server decodes (CI's busy cores): then it has no decode window.
            check((r["decode_tps"] is None) == (r["decode_timed_requests"] == 0) and
                  (r["decode_tps"] is None or r["decode_tps"] > 0), "a decode rate where one was timed: %r" % r)
        check(p.stdout.count("| moestream | ") == 2, "two markdown rows: %s" % p.stdout[-500:])


def check_load_arithmetic():
    """serve_load.summarize on made-up timings: the decode rate counts only the
    requests that streamed over a window, over the union of their windows."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    import serve_load

    def result(t_send, t_first, t_last, tokens, ok=True):
        r = serve_load.RequestResult()
        r.ok, r.t_send, r.t_first, r.t_last, r.tokens = ok, t_send, t_first, t_last, tokens
        r.error = "" if ok else "HTTP 500"
        return r

    # Two overlapping windows [1, 3] and [2, 5] (union 4 s) carry 10 + 20 - 2 decode
    # tokens; a one-chunk reply and a failed request add nothing to the rate.
    rows = serve_load.summarize(2, [result(0.0, 1.0, 3.0, 11), result(0.5, 2.0, 5.0, 21),
                                    result(0.0, 4.0, 4.0, 9), result(0.0, None, None, 0, ok=False)], 10.0)
    check(rows["failed"] == 1 and rows["tokens"] == 41, "failed and tokens: %r" % rows)
    check(abs(rows["decode_tps"] - 30 / 4.0) < 1e-9 and rows["decode_timed_requests"] == 2, "decode rate: %r" % rows)
    check(abs(rows["wall_tps"] - 4.1) < 1e-9 and abs(rows["tps_per_client"] - 2.05) < 1e-9, "wall rates: %r" % rows)
    check(rows["ttft_p50_s"] == 1.5 and rows["ttft_p99_s"] == 4.0, "TTFT by nearest rank: %r" % rows)
    one_chunk = serve_load.summarize(1, [result(0.0, 1.0, 1.0, 8)], 2.0)
    check(one_chunk["decode_tps"] is None and "| n/a |" in serve_load.row("x", one_chunk), "no window: n/a %r" % one_chunk)


def main():
    s = Server("--parallel", str(PARALLEL), "--ctx", "512")
    results = [None] * CLIENTS

    def client(i):
        try:
            results[i] = s.stream("/v1/chat/completions",
                                  chat("client %d tells a long story" % i, stream=True, max_tokens=200,
                                       ignore_eos=True), key="")
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = e

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline = time.time() + 60
    while time.time() < deadline and (s.metric("moestream_active_slots") or 0) < PARALLEL:
        time.sleep(0.05)
    check(s.metric("moestream_active_slots") == PARALLEL, "every slot busy")
    latencies = []
    while any(t.is_alive() for t in threads) and len(latencies) < 40:
        for path in ("/health", "/metrics"):
            t0 = time.time()
            st, _ = s.request("GET", path, key=None)
            latencies.append(time.time() - t0)
            check(st == 200, "%s under load: %d" % (path, st))
        time.sleep(0.1)
    busy_at_end = s.metric("moestream_active_slots")
    for t in threads:
        t.join(timeout=300)
    check(len(latencies) >= 10, "probed while streaming (%d probes)" % len(latencies))
    worst = max(latencies) if latencies else 0
    check(worst < 1.0, "/health and /metrics answered within 1 s while every slot streams (worst %.3f s)" % worst)
    for i, r in enumerate(results):
        check(isinstance(r, list) and r and r[-1] == "[DONE]" and content_of(r) is not None,
              "client %d finished: %r" % (i, r if not isinstance(r, list) else r[-1:]))
    print("load: %d probes, worst %.3f s, median %.3f s; slots busy at the last probe: %s" % (
        len(latencies), worst, sorted(latencies)[len(latencies) // 2] if latencies else 0, busy_at_end))
    check(s.stop(signal.SIGTERM) == 0, "exit 0")
    check_load_arithmetic()
    check_load_tool()
    if FAILURES:
        print("%d failures" % len(FAILURES))
        print("server log:\n" + "".join(s.log[-30:]))
        sys.exit(1)
    print("serve_load_test: all %d checks passed" % CHECKS[0])


if __name__ == "__main__":
    main()

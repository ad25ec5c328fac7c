#!/usr/bin/env python3
"""`moestream serve` under load (CTest: server_load): every slot streams and more
requests queue behind them, while /health and /metrics are probed: each probe must
be answered within 1 s (issue #28: with 50 streaming clients /health took 28 s).
Loopback only; the tiny built-in model.

usage: serve_load_test.py PATH/TO/moestream
"""
import signal
import sys
import threading
import time

from serve_test import FAILURES, CHECKS, Server, check, chat, content_of

PARALLEL = 4
CLIENTS = 40  # all slots busy, the rest queued (more than the old fixed pool of 4 * parallel + 8 threads)


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
    if FAILURES:
        print("%d failures" % len(FAILURES))
        print("server log:\n" + "".join(s.log[-30:]))
        sys.exit(1)
    print("serve_load_test: all %d checks passed" % CHECKS[0])


if __name__ == "__main__":
    main()

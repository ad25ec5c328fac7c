#!/usr/bin/env python3
"""Measures `moestream serve` under N slow clients (issue #44): each connection
sends a request one byte a second and is reopened when the server drops it.
Meanwhile it probes /health (statuses, latency; None: no answer in 10 s or a
closed connection), a non-streaming chat request (statuses, latency), and samples
the server's RSS and thread count. Prints one markdown row:
label | slow clients | /health 200s/probes (statuses) | /health p50 | /health max |
chat statuses | chat p50 | server RSS at start -> max | threads (max) | slow clients' reconnects

usage: http_slow_clients.py PATH/TO/moestream [--clients N] [--seconds S] [--label TEXT] [serve flags...]
Loopback only; the server is started and stopped here.
"""
import argparse
import http.client
import json
import os
import re
import resource
import socket
import subprocess
import threading
import time

SLOW_REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 60\r\n\r\n" + b"{" * 60)


def proc_status(pid):
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) // 1024
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("moestream")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--label", default="")
    args, serve_flags = ap.parse_known_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.clients + 256)), hard))

    proc = subprocess.Popen([args.moestream, "serve", "-q", "--port", "0", "-t", "2", *serve_flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    rss0, _ = proc_status(proc.pid)

    stop = threading.Event()
    reopened = [0]

    def slow_clients():
        socks = [None] * args.clients
        sent = [0] * args.clients
        while not stop.is_set():
            t0 = time.time()
            for i in range(args.clients):
                if stop.is_set():
                    break
                try:
                    if socks[i] is None:
                        socks[i] = socket.create_connection(("127.0.0.1", port), timeout=2)
                        socks[i].setblocking(False)
                        sent[i] = 0
                    socks[i].send(SLOW_REQUEST[sent[i]:sent[i] + 1])
                    sent[i] = (sent[i] + 1) % len(SLOW_REQUEST)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    if socks[i] is not None:
                        socks[i].close()
                    socks[i] = None
                    reopened[0] += 1
            stop.wait(max(0.0, 1.0 - (time.time() - t0)))
        for s in socks:
            if s is not None:
                s.close()

    t = threading.Thread(target=slow_clients, daemon=True)
    t.start()
    time.sleep(min(5.0, args.seconds / 3))

    health, chats, chat_status, samples = [], [], [], []
    end = time.time() + args.seconds
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    while time.time() < end:
        t0 = time.time()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            st = c.getresponse().status
            c.close()
        except (OSError, http.client.HTTPException):
            st = None
        health.append((time.time() - t0, st))
        t0 = time.time()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            chat_status.append(r.status)
            c.close()
        except (OSError, http.client.HTTPException):
            chat_status.append(None)
        chats.append(time.time() - t0)
        samples.append(proc_status(proc.pid))
        time.sleep(0.5)
    stop.set()
    t.join(timeout=30)
    proc.terminate()
    proc.wait(timeout=30)

    lat = sorted(x for x, _ in health)
    ok = sum(1 for _, s in health if s == 200)
    p50 = lat[len(lat) // 2]
    print("| %s | %d | %d/%d (%s) | %.0f ms | %.0f ms | %s | %.0f ms | %d MiB -> %d MiB | %d | %d |" % (
        args.label, args.clients, ok, len(health), ",".join(sorted({str(s) for _, s in health})),
        p50 * 1000, lat[-1] * 1000,
        ",".join(sorted({str(s) for s in chat_status})), sorted(chats)[len(chats) // 2] * 1000,
        rss0, max(s[0] for s in samples), max(s[1] for s in samples), reopened[0]))


if __name__ == "__main__":
    main()

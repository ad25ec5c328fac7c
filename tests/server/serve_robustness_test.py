#!/usr/bin/env python3
"""`moestream serve` against hostile and careless clients (issue #28), end to end
(CTest: server_robustness). Loopback only; every wait has a deadline.

Covers: flag bounds (--parallel, --max-connections, --read-timeout, --cors-origin);
a second server on a port in use fails (no SO_REUSEPORT split); bodies nested
100,000 deep and with huge element counts on both endpoints (400, the server lives);
max_tokens past int64 (400 naming the value); wrong methods (405 with Allow); CORS
preflight with --cors-origin and none without it; the access log (and none with -q);
200 connections that send headers and one byte of body while /health still answers,
connections past the cap refused quickly, trickling clients cut off at
--read-timeout; SIGTERM with all of that open still exits, and one during a long
prompt pass exits after the grace period.

usage: serve_robustness_test.py PATH/TO/moestream
"""
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from serve_test import FAILURES, CHECKS, MOESTREAM, Server, check, chat, port_closed


def fails(args, *want):
    p = subprocess.run([MOESTREAM, *args], capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and all(w in p.stderr for w in want),
          "%s: wanted an error naming %r, got rc %d: %s" % (" ".join(args), want, p.returncode, p.stderr[-400:]))


def check_flags():
    base = ["serve", "-q", "--port", "0"]
    fails(base + ["--parallel", "100000"], "--parallel 100000", "maximum")
    fails(base + ["--max-connections", "0"], "--max-connections must be in 1..")
    fails(base + ["--max-connections", "100000"], "--max-connections must be in 1..")
    fails(base + ["--read-timeout", "0"], "--read-timeout must be in 1..")
    fails(base + ["--cors-origin", "a b"], "--cors-origin")


def check_port_in_use():
    a = Server("-q")
    t0 = time.time()
    p = subprocess.run([MOESTREAM, "serve", "-q", "--port", str(a.port), "-t", "2"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode != 0 and "address already in use" in p.stderr and str(a.port) in p.stderr,
          "second server on port %d: rc %d, %s" % (a.port, p.returncode, p.stderr[-300:]))
    check(time.time() - t0 < 30, "the second server gave up at once")
    check(a.request("GET", "/health", key=None)[0] == 200, "the first server still answers")
    check(a.stop(signal.SIGTERM) == 0, "first server exits 0")


def nested(depth):
    return "[" * depth + "1" + "]" * depth


def raw_request(port, data, timeout=10):
    """Sends raw bytes, returns (status or None, headers text, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
            head, sep, body = got.partition(b"\r\n\r\n")
            if sep:
                n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if n and len(body) >= n[0]:
                    break
    except OSError:
        pass
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        status = None
    return status, head.decode(errors="replace"), body.decode(errors="replace")


def check_hostile_bodies(s):
    deep = nested(100000)  # ~200 KB
    user = {"role": "user", "content": "hi"}
    bodies = [
        ("/v1/chat/completions", '{"messages": [%s], "tools": %s}' % (json.dumps(user), deep)),
        ("/v1/chat/completions", '{"messages": [%s], "chat_template_kwargs": {"x": %s}}' % (json.dumps(user), deep)),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi", "name": %s}]}' % deep),
        ("/v1/completions", '{"prompt": "hi", "stop": %s}' % deep),
        ("/v1/completions", '{"prompt": %s}' % deep),
    ]
    for path, body in bodies:
        st, r = s.request("POST", path, raw=body)
        msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else str(r)[:200]
        check(st == 400 and "levels deep" in msg, "deep body on %s: %s %s" % (path, st, msg))
    many = "[" + ",".join(["0"] * 150000) + "]"
    for path, body in [("/v1/chat/completions", '{"messages": [%s], "tools": %s}' % (json.dumps(user), many)),
                       ("/v1/completions", '{"prompt": "hi", "logit_bias": %s}' % many)]:
        st, r = s.request("POST", path, raw=body)
        msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else str(r)[:200]
        check(st == 400 and "JSON elements" in msg, "huge element count on %s: %s %s" % (path, st, msg))
    st, r = s.request("POST", "/v1/chat/completions", raw='{"messages": [%s], "max_tokens": 9223372036854775808}'
                      % json.dumps(user))
    check(st == 400 and "9223372036854775808" in r["error"]["message"] and r["error"]["param"] == "max_tokens",
          "max_tokens 2^63: %s %s" % (st, r))
    check(s.request("GET", "/health")[0] == 200, "alive after hostile bodies")
    st, r = s.request("POST", "/v1/chat/completions", chat("x", max_tokens=2))
    check(st == 200, "still generates after hostile bodies: %s" % st)


def check_methods(s):
    for method, path, allow in [("GET", "/v1/chat/completions", "POST"), ("PUT", "/v1/completions", "POST"),
                                ("POST", "/health", "GET, HEAD"), ("DELETE", "/v1/models", "GET, HEAD"),
                                ("OPTIONS", "/metrics", "GET, HEAD")]:
        c = s.conn(timeout=30)
        c.request(method, path, body="{}" if method in ("PUT", "POST") else None, headers={"Authorization": "Bearer x"})
        r = c.getresponse()
        body = r.read().decode()
        check(r.status == 405 and r.getheader("Allow") == allow and "not allowed" in body,
              "%s %s: %d Allow=%r %s" % (method, path, r.status, r.getheader("Allow"), body[:200]))
        check(not r.getheader("Access-Control-Allow-Origin"), "no CORS header without --cors-origin")
        c.close()
    check(s.request("GET", "/v1/nothing")[0] == 404, "an unknown route is still 404")
    # A path that decodes to bytes that are not UTF-8, echoed by the error message.
    for method in ("GET", "DELETE"):
        st, _, body = raw_request(s.port, method.encode() + b" /%ff%fe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(st == 404 and "error" in body, "%s /%%ff%%fe: %s %s" % (method, st, body[:100]))
    check(s.request("GET", "/health")[0] == 200, "alive after a non-UTF-8 path")
    # A 405 with a body on a keep-alive connection: the next request on it works or it is closed, never garbage.
    c = s.conn(timeout=30)
    c.request("GET", "/v1/completions", body='{"prompt": "x"}')
    r = c.getresponse()
    r.read()
    check(r.status == 405, "GET with a body: 405")
    try:
        c.request("GET", "/health")
        r2 = c.getresponse()
        check(r2.status == 200, "next request on the connection: %d" % r2.status)
    except (http.client.HTTPException, OSError):
        pass  # closed after the unread body: fine
    c.close()


def check_cors():
    s = Server("-q", "--cors-origin", "https://a.example", "--cors-origin", "https://b.example", "--api-key", "k")
    c = s.conn(timeout=30)
    c.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "https://b.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    r = c.getresponse()
    r.read()
    check(r.status == 204 and r.getheader("Access-Control-Allow-Origin") == "https://b.example"
          and "POST" in (r.getheader("Access-Control-Allow-Methods") or "")
          and "authorization" in (r.getheader("Access-Control-Allow-Headers") or ""),
          "preflight: %d %s" % (r.status, r.getheaders()))
    c.close()
    c = s.conn(timeout=30)
    c.request("OPTIONS", "/v1/chat/completions", headers={"Origin": "https://evil.example",
                                                          "Access-Control-Request-Method": "POST"})
    r = c.getresponse()
    r.read()
    check(not r.getheader("Access-Control-Allow-Origin"), "preflight from another origin: no allow header")
    c.close()
    st, _ = s.request("POST", "/v1/chat/completions", chat("x", max_tokens=2), key="k",
                      headers={"Origin": "https://a.example"})
    c = s.conn(timeout=30)
    c.request("POST", "/v1/chat/completions", body=json.dumps(chat("x", max_tokens=2)),
              headers={"Origin": "https://a.example", "Authorization": "Bearer k"})
    r = c.getresponse()
    r.read()
    check(r.status == 200 and r.getheader("Access-Control-Allow-Origin") == "https://a.example",
          "POST from an allowed origin carries the header: %d %s" % (r.status, r.getheaders()))
    c.close()
    check(s.stop(signal.SIGTERM) == 0, "cors server exits 0")
    s = Server("-q", "--cors-origin", "*")
    c = s.conn(timeout=30)
    c.request("GET", "/health", headers={"Origin": "https://any.example"})
    r = c.getresponse()
    r.read()
    check(r.getheader("Access-Control-Allow-Origin") == "*", "--cors-origin '*': %s" % r.getheaders())
    c.close()
    check(s.stop(signal.SIGTERM) == 0, "cors * server exits 0")


def check_access_log():
    s = Server()
    s.request("POST", "/v1/chat/completions", chat("x", max_tokens=3), key=None)
    s.request("GET", "/health", key=None)
    s.stop(signal.SIGTERM)
    lines = [l for l in s.log if " access " in l]
    check(any("POST /v1/chat/completions 200 tokens " in l for l in lines), "access log of the chat: %s" % lines)
    check(any("GET /health 200" in l for l in lines), "access log of /health: %s" % lines)
    q = Server("-q")
    q.request("POST", "/v1/chat/completions", chat("x", max_tokens=3), key=None)
    q.stop(signal.SIGTERM)
    check(not [l for l in q.log if " access " in l], "-q: no access log: %s" % q.log)


def timed_health(port, timeout=10):
    t0 = time.time()
    try:
        st, _, _ = raw_request(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout)
    except OSError:
        st = None
    return st, time.time() - t0


def check_slow_clients():
    s = Server("-q", "--read-timeout", "4")
    slow = []
    for i in range(200):  # headers and one byte of a 100-byte body, then nothing
        try:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{")
            slow.append(c)
        except OSError:
            pass
    time.sleep(0.5)
    st, text = s.request("GET", "/metrics", key=None)
    m = re.search(r"^moestream_http_connections_open (\S+)$", text if isinstance(text, str) else "", re.M)
    check(st == 200 and m and float(m.group(1)) >= 100,
          "/metrics counts the open connections: %s" % (m.group(0) if m else text))
    worst = 0.0
    for _ in range(5):
        st, took = timed_health(s.port)
        check(st == 200, "/health with 200 slow clients open: %s" % st)
        worst = max(worst, took)
    check(worst < 3.0, "/health answered within 3 s with 200 slow clients (worst %.2f s)" % worst)
    # Past the cap (128 + the overflow queue) connections were refused with a 503 or closed, not left waiting.
    refused = 0
    for c in slow:
        c.settimeout(0.05)
        try:
            if c.recv(100).startswith(b"HTTP/1.1 503") or True:
                refused += 1
        except socket.timeout:
            pass
        except OSError:
            refused += 1
    check(refused > 0, "connections past the cap were answered or closed at once (%d)" % refused)
    # The slow ones are cut off at --read-timeout (4 s), not after minutes.
    deadline = time.time() + 15
    open_left = len(slow)
    while time.time() < deadline and open_left:
        open_left = 0
        for c in slow:
            c.settimeout(0.01)
            try:
                if c.recv(4096):
                    open_left += 1  # data (e.g. a 503): read on, the close comes next
            except socket.timeout:
                open_left += 1
            except OSError:
                pass
        time.sleep(0.2)
    check(open_left == 0, "slow connections closed by the server after --read-timeout (%d still open)" % open_left)
    for c in slow:
        c.close()
    check(timed_health(s.port)[0] == 200, "/health after the slow clients")
    # A trickling client (a header byte every 0.5 s) is cut off too, though each read is quick.
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    t0 = time.time()
    cut = False
    try:
        for b in b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 40:
            c.sendall(bytes([b]))
            time.sleep(0.5)
    except OSError:
        cut = True
    check(cut and time.time() - t0 < 12, "trickling client cut off after %.1f s" % (time.time() - t0))
    c.close()
    # SIGTERM with slow clients and a stream open: the process still exits.
    more = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(20)]
    for c in more:
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
    got = []
    t = threading.Thread(target=lambda: got.extend(
        s.stream("/v1/chat/completions", chat("go on", stream=True), key="")))
    t.start()
    time.sleep(1.0)
    t0 = time.time()
    rc = s.stop(signal.SIGTERM)
    check(rc == 0 and time.time() - t0 < 15, "SIGTERM with slow clients: rc %s after %.1f s" % (rc, time.time() - t0))
    t.join(timeout=30)
    check(not t.is_alive(), "the streaming client was released")
    check(port_closed(s.port), "port closed")
    for c in more:
        c.close()


def check_connection_cap():
    """Past --max-connections a request gets 503 (Retry-After) at once while /health is still answered."""
    s = Server("-q", "--max-connections", "4")
    held = []
    for _ in range(4):
        c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        held.append(c)
    time.sleep(0.3)
    t0 = time.time()
    body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    st, head, text = raw_request(s.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                                 % len(body) + body)
    check(st == 503 and "Retry-After: 1" in head and "--max-connections" in text and time.time() - t0 < 3,
          "past the cap: %s %s %s (%.2f s)" % (st, head, text[:120], time.time() - t0))
    check(timed_health(s.port)[0] == 200, "/health past the cap")
    for c in held:
        c.close()
    deadline = time.time() + 10
    st = None
    while time.time() < deadline and st != 200:
        st, _, _ = raw_request(s.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                       b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.1)
    check(st == 200, "served again once connections closed: %s" % st)
    check(s.stop(signal.SIGTERM) == 0, "cap server exits 0")


def check_non_streaming_hangup():
    """A non-streaming client that hangs up is noticed: its generation is cancelled."""
    s = Server("-q", "--ctx", "4096")
    before = s.metric("moestream_requests_cancelled_total")
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    body = json.dumps({"prompt": "hi", "max_tokens": 4000, "ignore_eos": True, "temperature": 0}).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.3)
    c.close()
    deadline = time.time() + 10
    while time.time() < deadline and s.metric("moestream_requests_cancelled_total") == before:
        time.sleep(0.05)
    check(s.metric("moestream_requests_cancelled_total") == before + 1, "the hung-up request was cancelled")
    check(s.metric("moestream_active_slots") == 0, "its slot is free")
    check(s.stop(signal.SIGTERM) == 0, "hang-up server exits 0")


def check_shutdown_grace():
    """SIGTERM during a long prompt pass (~18k tokens in one chunk): the process exits within the grace
    period (5 s) plus a margin, abandoning the pass if it is still running."""
    s = Server("-c", "32768", "-b", "16384")
    def long_prompt():
        try:
            s.request("POST", "/v1/completions", {"prompt": "word " * 9000, "max_tokens": 5}, key=None)
        except (http.client.HTTPException, OSError):
            pass  # abandoned: the connection closes without an answer

    t = threading.Thread(target=long_prompt, daemon=True)
    t.start()
    time.sleep(1.5)
    t0 = time.time()
    rc = s.stop(signal.SIGTERM)
    took = time.time() - t0
    check(rc == 0 and took < 12, "SIGTERM mid-prompt: rc %s after %.1f s" % (rc, took))
    time.sleep(0.2)
    if took >= 4.5:
        check(any("did not end in time" in l for l in s.log), "the abandonment is logged: %s" % s.log[-3:])
    check(port_closed(s.port), "port closed after the grace period")


def main():
    check_flags()
    check_port_in_use()
    s = Server("-q", "--parallel", "2", "--ctx", "256")
    check_hostile_bodies(s)
    check_methods(s)
    check(s.stop(signal.SIGTERM) == 0, "exit 0")
    check_cors()
    check_access_log()
    check_connection_cap()
    check_non_streaming_hangup()
    check_slow_clients()
    check_shutdown_grace()
    if FAILURES:
        print("%d failures" % len(FAILURES))
        sys.exit(1)
    print("serve_robustness_test: all %d checks passed" % CHECKS[0])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Times `moestream serve` on bodies with objects of many keys (issue #44): status and
time to the answer for N keys in an ignored field and in chat_template_kwargs.
Prints markdown rows. usage: http_json_keys.py PATH/TO/moestream LABEL"""
import json, subprocess, sys, re, time, http.client
bin_ = sys.argv[1]
p = subprocess.Popen([bin_, "serve", "-q", "--port", "0", "-t", "2"], stderr=subprocess.PIPE, text=True)
for line in p.stderr:
    m = re.search(r":(\d+)$", line.strip())
    if m: port = int(m.group(1)); break
def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.time(); c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse(); r.read(); return r.status, time.time() - t0
user = json.dumps({"role": "user", "content": "hi"})
for n, field in ((20000, "unused"), (99000, "unused"), (2048, "chat_template_kwargs"), (99000, "chat_template_kwargs")):
    keys = "{" + ",".join('"k%d":%d' % (i, i) for i in range(n)) + "}"
    st, t = post('{"messages": [%s], "max_tokens": 1, "%s": %s}' % (user, field, keys))
    print("| %s | %d keys in %s | %d | %.2f s |" % (sys.argv[2], n, field, st, t))
obj = "{" + ",".join('"k%d":%d' % (i, i) for i in range(2048)) + "}"
st, t = post('{"messages": [%s], "max_tokens": 1, "unused": [%s]}' % (user, ",".join([obj] * 45)))
print("| %s | 45 objects of 2048 keys in unused | %d | %.2f s |" % (sys.argv[2], st, t))
p.terminate(); p.wait()

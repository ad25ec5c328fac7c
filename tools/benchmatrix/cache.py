"""Results kept between calls: bench/results/matrix.json.

An entry is keyed by the machine (GPU name), moestream's commit, llama.cpp's
commit, the file recipe (the gen arguments) and the cell id: the same cell on
another commit, card or file is another entry, so a call resumes where the
last one stopped and never mixes builds. The file is rewritten whole, through
a temporary file and a rename, after every group: a call cut off at any point
leaves it consistent.
"""
import json
import os
import time

VERSION = 1


def key(machine, ms_commit, llama_commit, recipe_key, cell_id):
    return " | ".join([machine, ms_commit, llama_commit, recipe_key, cell_id])


class Cache:
    def __init__(self, path):
        self.path = path
        self.entries = {}
        if os.path.exists(path):
            with open(path) as f:
                j = json.load(f)
            if j.get("version") != VERSION:
                raise SystemExit(f"matrix: {path} has version {j.get('version')}, this harness reads {VERSION}")
            self.entries = j.get("entries", {})

    def get(self, k):
        return self.entries.get(k)

    def put(self, k, entry):
        entry = dict(entry, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.entries[k] = entry

    def save(self):
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"version": VERSION, "entries": dict(sorted(self.entries.items()))}, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)

    def latest_context(self):
        """(machine, ms commit, llama commit) of the newest entry, or None."""
        if not self.entries:
            return None
        e = max(self.entries.values(), key=lambda e: e.get("time", ""))
        return e["machine"], e["ms_commit"], e["llama_commit"]

    def seconds_of(self, group_name, recipe_key=None):
        """The longest recorded duration of a group of this workload kind (for the deadline), or None."""
        ts = [e.get("group_seconds", 0) for e in self.entries.values()
              if e.get("group") == group_name and (recipe_key is None or e.get("recipe") == recipe_key)]
        return max(ts) if ts else None

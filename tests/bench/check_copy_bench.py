#!/usr/bin/env python3
"""Runs the copy benchmark briefly and checks that its table and its JSON carry the same, sane figures."""
import json
import subprocess
import sys

bench = sys.argv[1]
SIZES = [512 << i for i in range(12)]

raw = subprocess.run([bench, "--quick", "--size", "64M", "--json"], check=True, capture_output=True, text=True).stdout
doc = json.loads(raw)
assert doc["benchmark"] == "copy" and doc["reference"] == "memcpy", doc.keys()
records = doc["records"]
for size in SIZES:
    for pattern in ("random", "sequential"):
        methods = {r["method"]: r["mib_per_s"] for r in records if r["size"] == size and r["pattern"] == pattern}
        assert "memcpy" in methods and "nt" in methods, (size, pattern, methods)
        assert all(v > 0 for v in methods.values()), (size, pattern, methods)
chosen = doc["calibration"]
assert [c["size"] for c in chosen] == SIZES, chosen
for c in chosen:
    assert c["method"] in ("nt", "clflushopt", "clwb"), c
    assert 0 < c["chosen_vs_best"] <= 1.0, c

table = subprocess.run([bench, "--quick", "--size", "64M"], check=True, capture_output=True, text=True).stdout
lines = table.splitlines()
assert lines[0].startswith("pcached copy benchmark:"), lines[0]
rows = [l for l in lines if l.split()[-1:] and l.split()[2:3] in (["random"], ["sequential"])]
assert len(rows) == 2 * len(SIZES), table
assert "calibrated choice within 5% of the best method" in table, table
print("copy benchmark: table and JSON well formed")

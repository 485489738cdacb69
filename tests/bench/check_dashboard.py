#!/usr/bin/env python3
"""The Grafana dashboard only queries metrics pcached exports (names taken from a real exposition)."""
import json
import re
import subprocess
import sys

exposition = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
exported = set(re.findall(r"^# TYPE (\S+) ", exposition, re.M))
dashboard = json.load(open(sys.argv[2]))
used = set()
for panel in dashboard["panels"]:
    for target in panel["targets"]:
        used.update(re.findall(r"\b(pcached_[a-z_]+?)(?:_bucket|_count|_sum)?\b(?=[{\[(])", target["expr"]))
missing = sorted(name for name in used if name not in exported)
assert used, "the dashboard queries nothing"
assert not missing, f"the dashboard queries metrics pcached does not export: {missing}"
print(f"dashboard: {len(dashboard['panels'])} panels over {len(used)} exported metrics")

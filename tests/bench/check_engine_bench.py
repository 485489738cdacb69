#!/usr/bin/env python3
"""Runs the engine benchmark briefly and checks its JSON and its table."""
import json
import subprocess
import sys

bench = sys.argv[1]
doc = json.loads(subprocess.run([bench, "--quick", "--region-size", "128M", "--json"], check=True,
                                capture_output=True, text=True).stdout)
assert doc["benchmark"] == "engine", doc.keys()
cells = doc["cells"]
assert len(cells) == 24, len(cells)
for cell in cells:
    assert cell["op"] in ("write", "read") and cell["queues"] in (1, 2), cell
    assert cell["iops"] > 0 and cell["mib_per_s"] > 0, cell
    assert 0 < cell["p50_us"] <= cell["p99_us"] <= cell["p999_us"], cell
assert doc["reference"]["nt_copy_4k_mib_per_s"] > 0
assert doc["reference"]["nt_copy_then_key_line_4k_mib_per_s"] > 0, doc["reference"]
assert doc["recovery"]["keys"] > 0 and doc["recovery"]["seconds"] > 0
assert 0 < doc["index_bytes_per_extent"] < 200
zipf = doc["zipf_hit_ratio"]
assert zipf["reads"] > 0 and 0 < zipf["fifo"] < 1 and 0 < zipf["cost_benefit"] < 1, zipf
interference = doc["writeback_interference"]
assert interference["writes"] > 0, interference
for run in ("running", "held_back"):
    assert 0 < interference[run]["p50_us"] <= interference[run]["p99_us"] <= interference[run]["p999_us"], interference
table = subprocess.run([bench, "--quick", "--region-size", "128M"], check=True, capture_output=True, text=True).stdout
assert doc["batched_writes"]["iops"] > 0 and doc["ratios"]["write_4k_random_batched_vs_nt_copy"] > 0, doc["ratios"]
ratios = doc["ratios"]
assert ratios["write_4k_random_vs_nt_copy"] > 0 and ratios["write_4k_random_writeback_running_vs_nt_copy"] > 0, ratios
goal = doc["write_goal"]
assert goal["rounds"] >= 1 and goal["nt_copy_4k_mib_per_s"] > 0 and goal["held_back_iops"] > 0, goal
assert goal["nt_copy_then_key_line_4k_mib_per_s"] > 0 and ratios["write_4k_random_vs_nt_copy_then_key_line"] > 0, goal
assert "then a 64-byte key line + fence (data durable before its key)" in table, table
assert "4 KiB random write into free cache space, 1 queue, median of" in table, table
assert ratios["read_4k_random_vs_copy"] > 0 and doc["read_goal"]["memcpy_read_4k_mib_per_s"] > 0, doc["read_goal"]
assert "4 KiB random read hit, 1 queue, writeback quiet, median of" in table, table
assert "writeback held back (the write path per core)" in table and "index DRAM per extent" in table, table
assert "hit ratio FIFO" in table and "writeback running" in table, table
print("engine benchmark: table and JSON well formed")

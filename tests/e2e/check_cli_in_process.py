#!/usr/bin/env python3
"""The real pcachedd (--frontend in-process: no kernel, no ublk driver) and the real pcached CLI,
end to end: add, list, status, set, flush, remove, the metrics endpoint, a daemon restart, and the
CLI's exit codes (0 done, 1 the daemon refused or failed, 2 bad usage, 3 daemon unreachable).

usage: check_cli_in_process.py PCACHEDD PCACHED
"""
import os
import subprocess
import sys
import urllib.request

from e2e_support import (FAILED, UNREACHABLE, USAGE, Daemon, check, cli, cli_json, free_port, run_with_scratch,
                         scratch_file)

PCACHEDD, PCACHED = sys.argv[1], sys.argv[2]


def run(workdir, shm):
    region = scratch_file(shm, "region", 32 << 20)
    backing = scratch_file(shm, "backing", 16 << 20)
    daemon = Daemon(PCACHEDD, workdir, free_port())

    # The daemon's own command line.
    usage = subprocess.run([PCACHEDD, "--help"], capture_output=True, text=True)
    check(usage.returncode == 0 and "--frontend" in usage.stdout and "in-process" in usage.stdout,
          "pcachedd --help does not describe --frontend in-process")
    check(subprocess.run([PCACHEDD, "--frontend", "nbd"], capture_output=True).returncode != 0,
          "pcachedd accepted --frontend nbd")

    cli(PCACHED, daemon, "list", expect=UNREACHABLE)
    daemon.start()
    try:
        # Usage errors are caught before anything reaches the daemon.
        cli(PCACHED, daemon, "add", "--cache", region, expect=USAGE)
        cli(PCACHED, daemon, "add", "--cache", region, "--backing", backing, "--depth", "0", expect=USAGE)
        cli(PCACHED, daemon, "add", "--cache", region, "--backing", backing, "--set", "gc_threshold=95", expect=USAGE)
        cli(PCACHED, daemon, "set", "web", "colour", "blue", expect=USAGE)
        cli(PCACHED, daemon, "frobnicate", expect=USAGE)
        # Refusals come back from the daemon with its reason.
        check("no cache named 'nosuch'" in cli(PCACHED, daemon, "status", "nosuch", expect=FAILED), "status of an unknown cache")
        add = ["add", "--cache", region, "--backing", backing, "--name", "web", "--queues", "1", "--depth", "64",
               "--queue-affinity", "none", "--queue-poll-us", "0", "--copy-policy", "nt", "--segment-size", "1M", "--allow-volatile-region", "--allow-volatile-writeback",
               "--set", "sequential_cutoff=0"]
        check("is blank" in cli(PCACHED, daemon, *add, expect=FAILED), "a blank region attached without --format")

        check(cli(PCACHED, daemon, *add, "--format").strip() == "inproc0", "add does not print the device")
        check("exists" in cli(PCACHED, daemon, *add, "--format", expect=FAILED), "a name used twice")
        again = [arg if arg != "web" else "again" for arg in add]
        check("already uses" in cli(PCACHED, daemon, *again, "--format", expect=FAILED), "a region used twice")
        listing = cli(PCACHED, daemon, "list")
        check("web" in listing and "inproc0" in listing and "running" in listing, f"list: {listing}")
        check(cli_json(PCACHED, daemon, "list")["caches"][0]["device"] == "inproc0", "list --json")

        status = cli_json(PCACHED, daemon, "status", "web")
        check(status["frontend"]["kind"] == "in-process", f"status --json: {status}")
        check(status["queues"] == 1 and status["depth"] == 64, "queues and depth")
        check(status["queue_affinity"] == "none", f"queue affinity: {status}")
        check(status["queue_poll_us"] == 0, f"queue poll: {status}")
        check(status["mode"] == "writeback" and status["settings"]["sequential_cutoff"] == "0", "mode and settings")
        text = cli(PCACHED, daemon, "status", "inproc0")
        check("web: inproc0 (running)" in text and "queues      1 x depth 64, affinity none, spin 0 us before sleeping" in text, f"status: {text}")

        check(cli(PCACHED, daemon, "set", "web", "gc_threshold", "50").strip() == "web: gc_threshold = 50", "set")
        check(cli_json(PCACHED, daemon, "status", "web")["gc"]["threshold_percent"] == 50, "set did not take")
        check("not a percentage from 0 to 90" in cli(PCACHED, daemon, "set", "web", "gc_threshold", "95", expect=FAILED),
              "a bad value")

        check("0 B dirty" in cli(PCACHED, daemon, "flush", "web"), "flush")
        check(cli_json(PCACHED, daemon, "flush", "web")["dirty_bytes"] == 0, "flush --json")

        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        check('cache="web"' in metrics and 'device="inproc0"' in metrics, "the metrics endpoint does not show the cache")

        # A restart brings the cache back under the same device name, with its settings.
        daemon.stop()
        cli(PCACHED, daemon, "list", expect=UNREACHABLE)
        daemon.start()
        status = cli_json(PCACHED, daemon, "status", "web")
        check(status["device"] == "inproc0" and status["state"] == "running", f"after the restart: {status}")
        check(status["gc"]["threshold_percent"] == 50, "the setting was lost in the restart")
        check(status["queue_affinity"] == "none", "the queue affinity was lost in the restart")
        check(status["queue_poll_us"] == 0, "the queue poll was lost in the restart")

        check(cli(PCACHED, daemon, "remove", "inproc0").strip() == "removed web (inproc0)", "remove")
        check(cli_json(PCACHED, daemon, "list")["caches"] == [], "the cache is still listed")
        cli(PCACHED, daemon, "remove", "web", expect=FAILED)
        # Attached again (no --format) and removed without writing back.
        check(cli(PCACHED, daemon, *add).strip() == "inproc0", "the region was not attached again")
        check(cli_json(PCACHED, daemon, "remove", "web", "--no-flush")["written_back"] is False, "remove --no-flush")
        daemon.stop()
    finally:
        daemon.kill()


if __name__ == "__main__":
    sys.exit(run_with_scratch("pcached-cli-", run))

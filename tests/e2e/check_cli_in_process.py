#!/usr/bin/env python3
"""The real pcachedd (--frontend in-process: no kernel, no ublk driver) and the real pcached CLI,
end to end: add, list, status, set, flush, remove, the metrics endpoint, a daemon restart, and the
CLI's exit codes (0 done, 1 the daemon refused or failed, 2 bad usage, 3 daemon unreachable).

usage: check_cli_in_process.py PCACHEDD PCACHED
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PCACHEDD, PCACHED = sys.argv[1], sys.argv[2]
DONE, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3


class CheckFailed(Exception):
    pass


def check(condition, what):
    if not condition:
        raise CheckFailed(what)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scratch_file(directory, name, size):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


class Daemon:
    """One pcachedd process on the test's socket and state directory."""

    def __init__(self, workdir, metrics_port):
        self.socket = os.path.join(workdir, "pcached.sock")
        self.state_dir = os.path.join(workdir, "state")
        self.log_path = os.path.join(workdir, "pcachedd.log")
        self.metrics_port = metrics_port
        self.process = None

    def start(self):
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [PCACHEDD, "--frontend", "in-process", "--socket", self.socket, "--state-dir", self.state_dir,
             "--metrics-address", f"127.0.0.1:{self.metrics_port}", "--log-level", "debug"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while not os.path.exists(self.socket):
            check(self.process.poll() is None, f"pcachedd exited with {self.process.returncode} while starting")
            check(time.monotonic() < deadline, "pcachedd did not create its control socket in 20 s")
            time.sleep(0.05)

    def stop(self):
        """SIGTERM, as systemd stops it; the daemon must exit 0."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=30)
        check(code == 0, f"pcachedd exited with {code} on SIGTERM")
        self.process = None

    def kill(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()


def cli(daemon, *args, expect=DONE):
    result = subprocess.run([PCACHED, "--socket", daemon.socket, *args], capture_output=True, text=True, timeout=120)
    check(result.returncode == expect,
          f"pcached {' '.join(args)}: exit {result.returncode}, expected {expect}\n"
          f"stdout: {result.stdout}\nstderr: {result.stderr}")
    return result.stdout + result.stderr


def cli_json(daemon, *args):
    return json.loads(cli(daemon, "--json", *args))


def run(workdir, shm):
    region = scratch_file(shm, "region", 32 << 20)
    backing = scratch_file(shm, "backing", 16 << 20)
    daemon = Daemon(workdir, free_port())

    # The daemon's own command line.
    usage = subprocess.run([PCACHEDD, "--help"], capture_output=True, text=True)
    check(usage.returncode == 0 and "--frontend" in usage.stdout and "in-process" in usage.stdout,
          "pcachedd --help does not describe --frontend in-process")
    check(subprocess.run([PCACHEDD, "--frontend", "nbd"], capture_output=True).returncode != 0,
          "pcachedd accepted --frontend nbd")

    cli(daemon, "list", expect=UNREACHABLE)
    daemon.start()
    try:
        # Usage errors are caught before anything reaches the daemon.
        cli(daemon, "add", "--cache", region, expect=USAGE)
        cli(daemon, "add", "--cache", region, "--backing", backing, "--depth", "0", expect=USAGE)
        cli(daemon, "add", "--cache", region, "--backing", backing, "--set", "gc_threshold=95", expect=USAGE)
        cli(daemon, "set", "web", "colour", "blue", expect=USAGE)
        cli(daemon, "frobnicate", expect=USAGE)
        # Refusals come back from the daemon with its reason.
        check("no cache named 'nosuch'" in cli(daemon, "status", "nosuch", expect=FAILED), "status of an unknown cache")
        add = ["add", "--cache", region, "--backing", backing, "--name", "web", "--queues", "1", "--depth", "64",
               "--copy-policy", "nt", "--segment-size", "1M", "--allow-volatile-region", "--allow-volatile-writeback",
               "--set", "sequential_cutoff=0"]
        check("is blank" in cli(daemon, *add, expect=FAILED), "a blank region attached without --format")

        check(cli(daemon, *add, "--format").strip() == "inproc0", "add does not print the device")
        check("exists" in cli(daemon, *add, "--format", expect=FAILED), "a name used twice")
        again = [arg if arg != "web" else "again" for arg in add]
        check("already uses" in cli(daemon, *again, "--format", expect=FAILED), "a region used twice")
        listing = cli(daemon, "list")
        check("web" in listing and "inproc0" in listing and "running" in listing, f"list: {listing}")
        check(cli_json(daemon, "list")["caches"][0]["device"] == "inproc0", "list --json")

        status = cli_json(daemon, "status", "web")
        check(status["frontend"]["kind"] == "in-process", f"status --json: {status}")
        check(status["queues"] == 1 and status["depth"] == 64, "queues and depth")
        check(status["mode"] == "writeback" and status["settings"]["sequential_cutoff"] == "0", "mode and settings")
        text = cli(daemon, "status", "inproc0")
        check("web: inproc0 (running)" in text and "queues      1 x depth 64" in text, f"status: {text}")

        check(cli(daemon, "set", "web", "gc_threshold", "50").strip() == "web: gc_threshold = 50", "set")
        check(cli_json(daemon, "status", "web")["gc"]["threshold_percent"] == 50, "set did not take")
        check("not a percentage from 0 to 90" in cli(daemon, "set", "web", "gc_threshold", "95", expect=FAILED),
              "a bad value")

        check("0 B dirty" in cli(daemon, "flush", "web"), "flush")
        check(cli_json(daemon, "flush", "web")["dirty_bytes"] == 0, "flush --json")

        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        check('cache="web"' in metrics and 'device="inproc0"' in metrics, "the metrics endpoint does not show the cache")

        # A restart brings the cache back under the same device name, with its settings.
        daemon.stop()
        cli(daemon, "list", expect=UNREACHABLE)
        daemon.start()
        status = cli_json(daemon, "status", "web")
        check(status["device"] == "inproc0" and status["state"] == "running", f"after the restart: {status}")
        check(status["gc"]["threshold_percent"] == 50, "the setting was lost in the restart")

        check(cli(daemon, "remove", "inproc0").strip() == "removed web (inproc0)", "remove")
        check(cli_json(daemon, "list")["caches"] == [], "the cache is still listed")
        cli(daemon, "remove", "web", expect=FAILED)
        # Attached again (no --format) and removed without writing back.
        check(cli(daemon, *add).strip() == "inproc0", "the region was not attached again")
        check(cli_json(daemon, "remove", "web", "--no-flush")["written_back"] is False, "remove --no-flush")
        daemon.stop()
    finally:
        daemon.kill()


def main():
    with tempfile.TemporaryDirectory(prefix="pcached-cli-") as workdir, \
            tempfile.TemporaryDirectory(prefix="pcached-cli-", dir="/dev/shm") as shm:
        try:
            run(workdir, shm)
        except CheckFailed as failure:
            print(f"FAILED: {failure}")
            log_path = os.path.join(workdir, "pcachedd.log")
            if os.path.exists(log_path):
                with open(log_path) as log:
                    print("--- pcachedd's log\n" + log.read())
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

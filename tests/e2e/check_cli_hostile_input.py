#!/usr/bin/env python3
"""Hostile command lines against the real pcached CLI and a real pcachedd (in-process frontend):
paths with odd characters, huge and negative numbers, sizes that do not parse, oversized
arguments, a region holding another program's data, a socket that is not pcachedd's. Each gets
its exit code (2 bad usage, 1 refused, 3 unreachable) and a message that says what is wrong; the
daemon survives every one, nothing is written to the foreign region, and the cache that was there
before is untouched.

usage: check_cli_hostile_input.py PCACHEDD PCACHED
"""
import hashlib
import os
import subprocess
import sys

from e2e_support import (FAILED, UNREACHABLE, USAGE, Daemon, check, cli, cli_json, free_port, run_with_scratch,
                         scratch_file)

PCACHEDD, PCACHED = sys.argv[1], sys.argv[2]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def expect_message(output, *fragments):
    text = output.strip()
    check(text and "terminate called" not in text and "Segmentation" not in text, f"no clear message: {output!r}")
    for fragment in fragments:
        check(fragment in text, f"{fragment!r} not in {text!r}")


def run(workdir, shm):
    region = scratch_file(shm, "region", 32 << 20)
    backing = scratch_file(shm, "backing", 16 << 20)
    other_backing = scratch_file(shm, "other-backing", 16 << 20)
    daemon = Daemon(PCACHEDD, workdir, free_port())
    daemon.start()
    try:
        add = ["add", "--cache", region, "--backing", backing, "--name", "web", "--queues", "1", "--copy-policy", "nt",
               "--segment-size", "1M", "--allow-volatile-region", "--allow-volatile-writeback"]
        cli(PCACHED, daemon, *add, "--format")
        before = cli_json(PCACHED, daemon, "status", "web")

        # Numbers: negative, huge, not numbers, out of range. Refused by the CLI itself.
        for bad in (["--queues", "-1"], ["--queues", "0"], ["--queues", "99999999999999999999999"], ["--queues", "1.5"],
                    ["--depth", "-128"], ["--depth", "4097"], ["--depth", "16k"], ["--mode", "writebehind"],
                    ["--queue-affinity", "sideways"], ["--queue-affinity", ""],
                    ["--queue-poll-us", "-1"], ["--queue-poll-us", "10001"], ["--queue-poll-us", "1ms"],
                    ["--set", "gc_threshold=-5"], ["--set", "gc_threshold"], ["--set", "=5"],
                    ["--set", "writeback_rate=18446744073709551616"], ["--set", "sequential_cutoff=-1M"],
                    ["--set", "no_such_key=1"], ["--copy-policy", "fastest"], ["--segment-size", "-1M"],
                    ["--segment-size", "1Q"], ["--segment-size", "99999999999999999999999"], ["--segment-size", ""]):
            argv = ["add", "--cache", os.path.join(shm, "other"), "--backing", backing, *bad]
            expect_message(cli(PCACHED, daemon, *argv, expect=USAGE))
        for key, value in (("gc_threshold", "-5"), ("gc_threshold", "91"), ("gc_threshold", "1e3"),
                           ("sequential_cutoff", "18446744073709551616"), ("sequential_cutoff", "-4M"),
                           ("writeback_rate", "fast"), ("promote_after", "0"), ("promote_after", "4294967296"),
                           ("mode", ""), ("data_crc", "maybe"), ("writeback_low", "50")):
            expect_message(cli(PCACHED, daemon, "set", "web", key, value, expect=FAILED), key)
        # Segment sizes the format would refuse: refused by the daemon before the region is opened.
        for size in ("3M", "512K", "6M"):
            expect_message(cli(PCACHED, daemon, "add", "--cache", os.path.join(shm, "other"), "--backing", other_backing,
                               "--name", "odd", "--allow-volatile-region", "--format", "--segment-size", size,
                               expect=FAILED), "power of two")
        expect_message(cli(PCACHED, daemon, "set", "web", "gc_threshold", expect=USAGE))
        expect_message(cli(PCACHED, daemon, "frobnicate", "--now", expect=USAGE))
        expect_message(cli(PCACHED, daemon, "status", expect=USAGE))

        # Paths with odd characters, and ones that do not exist or are too long: refused by the daemon
        # with the path named.
        for odd in ("with space", "new\nline", "quote'\"", "ünïcödé", "-leading-dash", "x" * 255):
            path = os.path.join(shm, odd)
            expect_message(cli(PCACHED, daemon, "add", "--cache", path, "--backing", other_backing, "--name", "odd",
                               "--allow-volatile-region", "--format", expect=FAILED), path)
        long_path = "/" + "/".join(["d" * 200] * 30)
        expect_message(cli(PCACHED, daemon, "add", "--cache", long_path, "--backing", other_backing, expect=FAILED))
        for name in ("../../etc/x", "a/b", ".hidden", "-dash", "n" * 65, "semi;colon"):
            expect_message(cli(PCACHED, daemon, "add", "--cache", os.path.join(shm, "other"), "--backing",
                               other_backing, "--name", name, expect=FAILED), "name")
        # An argument larger than a control message may be: refused, the daemon stays.
        expect_message(cli(PCACHED, daemon, "status", "n" * (100 << 10), expect=FAILED))
        for target in ("/dev/ublkb0; rm -rf /", "/dev/ublkb99999999999999999999", "inproc-1", "*"):
            expect_message(cli(PCACHED, daemon, "status", target, expect=FAILED), "no cache")

        # A region that holds another program's data: refused without writing a byte.
        foreign = os.path.join(shm, "foreign")
        with open(foreign, "wb") as f:
            f.write(os.urandom(32 << 20))
        foreign_digest = digest(foreign)
        expect_message(cli(PCACHED, daemon, "add", "--cache", foreign, "--backing", other_backing, "--name", "foreign",
                           "--allow-volatile-region", "--allow-volatile-writeback", expect=FAILED),
                       "not a pcached cache", "nothing was written")
        check(digest(foreign) == foreign_digest, "the foreign region was written to")
        # The region of the running cache, or a second cache over the same backing file: refused.
        expect_message(cli(PCACHED, daemon, "add", "--cache", region, "--backing", other_backing, "--name", "twice",
                           "--allow-volatile-region", expect=FAILED), "already uses")
        # A region too small to hold a cache.
        tiny = scratch_file(shm, "tiny", 1 << 20)
        expect_message(cli(PCACHED, daemon, "add", "--cache", tiny, "--backing", other_backing, "--name", "tiny",
                           "--allow-volatile-region", "--allow-volatile-writeback", "--format", expect=FAILED))

        # A socket path that is not pcachedd's: unreachable, not a hang or a crash.
        not_a_socket = scratch_file(workdir, "not-a-socket", 0)
        result = subprocess.run([PCACHED, "--socket", not_a_socket, "list"], capture_output=True, text=True, timeout=30)
        check(result.returncode == UNREACHABLE, f"a regular file as the socket: exit {result.returncode}")
        expect_message(result.stderr)

        # After all of it: the daemon is up and the cache is as it was.
        check(daemon.process.poll() is None, "pcachedd died")
        after = cli_json(PCACHED, daemon, "status", "web")
        check(after["settings"] == before["settings"] and after["device"] == before["device"],
              f"the cache changed: {before} -> {after}")
        check([c["name"] for c in cli_json(PCACHED, daemon, "list")["caches"]] == ["web"], "a hostile add left a cache")
        daemon.stop()
    finally:
        daemon.kill()


if __name__ == "__main__":
    sys.exit(run_with_scratch("pcached-hostile-", run))

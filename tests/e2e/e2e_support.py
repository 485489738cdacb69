"""What the end-to-end checks of pcachedd and the pcached CLI share: a pcachedd on the in-process
frontend (no kernel, no ublk driver) with its own socket, state directory and metrics port, and
the CLI run against it with an expected exit code."""
import json
import os
import signal
import socket
import subprocess
import time

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

    def __init__(self, pcachedd, workdir, metrics_port):
        self.pcachedd = pcachedd
        self.socket = os.path.join(workdir, "pcached.sock")
        self.state_dir = os.path.join(workdir, "state")
        self.log_path = os.path.join(workdir, "pcachedd.log")
        self.metrics_port = metrics_port
        self.process = None

    def start(self):
        log = open(self.log_path, "a")
        self.process = subprocess.Popen(
            [self.pcachedd, "--frontend", "in-process", "--socket", self.socket, "--state-dir", self.state_dir,
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


def cli(pcached, daemon, *args, expect=DONE):
    result = subprocess.run([pcached, "--socket", daemon.socket, *args], capture_output=True, text=True, timeout=120)
    check(result.returncode == expect,
          f"pcached {' '.join(args)}: exit {result.returncode}, expected {expect}\n"
          f"stdout: {result.stdout}\nstderr: {result.stderr}")
    return result.stdout + result.stderr


def cli_json(pcached, daemon, *args):
    return json.loads(cli(pcached, daemon, "--json", *args))


def run_with_scratch(prefix, body):
    """Runs body(workdir, shm) in fresh temporary directories; prints the daemon's log on failure."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix=prefix) as workdir, \
            tempfile.TemporaryDirectory(prefix=prefix, dir="/dev/shm") as shm:
        try:
            body(workdir, shm)
        except CheckFailed as failure:
            print(f"FAILED: {failure}")
            log_path = os.path.join(workdir, "pcachedd.log")
            if os.path.exists(log_path):
                with open(log_path) as log:
                    print("--- pcachedd's log\n" + log.read())
            return 1
    print("ok")
    return 0

#!/usr/bin/env python3
"""End-to-end test harness: Debian's 6.12 kernel under qemu (TCG), with an emulated NVDIMM and a
virtio backing disk, running a guest script from a busybox initramfs.

The host kernel here has neither ublk nor pmem; the guest has both. Everything the harness needs
is installed and downloaded by it (apt-get), into PCACHED_VM_CACHE (default /var/cache/pcached-vm).

Library use (scenario scripts):   vm = Vm(); result = vm.run(script, pmem=..., disk=...)
Command line:                     vm.py prepare | vm.py run GUEST_SCRIPT [--pmem F] [--disk F]
"""
import argparse
import dataclasses
import glob
import hashlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CACHE = os.environ.get("PCACHED_VM_CACHE", "/var/cache/pcached-vm")
PACKAGES = ["qemu-system-x86", "busybox-static", "ndctl", "daxctl", "fio", "kmod", "cpio", "e2fsprogs", "util-linux",
            "dmsetup", "xz-utils"]
# Loaded in this order (dependencies resolved by modprobe --show-depends).
MODULES = ["libnvdimm", "nd_btt", "nd_pmem", "nd_e820", "nfit", "device_dax", "dax_pmem", "dm-mod", "dm-writecache",
           "ublk_drv", "virtio_blk", "loop", "ext4", "null_blk", "hwpoison_inject"]
GUEST_TOOLS = ["/usr/bin/fio", "/usr/bin/ndctl", "/usr/bin/daxctl", "/sbin/mke2fs", "/sbin/e2fsck", "/sbin/blkdiscard",
               "/sbin/dmsetup", "/sbin/losetup", "/sbin/filefrag", "/usr/bin/md5sum", "/usr/bin/cmp"]
EXIT_MARKER = re.compile(r"PCACHED_VM_EXIT=(\d+)")

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /tmp /run /mnt /var/lib /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
for module in $(cat /etc/modules.order); do insmod "/lib/modules/$module" || echo "insmod $module failed"; done
# libnvdimm probes asynchronously; wait_probe returns once it is done (what ndctl does).
for probe in /sys/bus/nd/devices/ndbus*/wait_probe; do [ -e "$probe" ] && cat "$probe" >/dev/null 2>&1; done
echo PCACHED_VM_READY
sh -e /test.sh
echo "PCACHED_VM_EXIT=$?"
sync
poweroff -f
"""


def log(message):
    print(f"vm: {message}", file=sys.stderr, flush=True)


def ensure_packages():
    missing = [p for p in PACKAGES
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
               .stdout.find("install ok installed") < 0]
    if missing:
        log(f"installing {' '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], check=True, env=env)


@dataclasses.dataclass
class Kernel:
    version: str
    vmlinuz: str
    root: str  # extracted package root (lib/modules/VERSION/...)


def ensure_kernel():
    """Debian 12's 6.12 kernel package (it has ublk_drv; the 6.1 one does not), downloaded once."""
    os.makedirs(CACHE, exist_ok=True)
    debs = sorted(glob.glob(os.path.join(CACHE, "linux-image-6.12.*+deb12-amd64-unsigned_*.deb")))
    if not debs:
        names = subprocess.run(["apt-cache", "search", "--names-only", r"^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
        packages = sorted((line.split()[0] for line in names if line.strip()),
                          key=lambda n: [int(x) for x in re.findall(r"\d+", n)])
        if not packages:
            subprocess.run(["apt-get", "update", "-q"], check=True)
            return ensure_kernel()
        log(f"downloading {packages[-1]}")
        subprocess.run(["apt-get", "download", packages[-1]], cwd=CACHE, check=True, capture_output=True)
        debs = sorted(glob.glob(os.path.join(CACHE, "linux-image-6.12.*+deb12-amd64-unsigned_*.deb")))
    deb = debs[-1]
    root = deb[:-4] + ".root"
    if not os.path.isdir(root):
        subprocess.run(["dpkg-deb", "-x", deb, root + ".tmp"], check=True)
        os.rename(root + ".tmp", root)
    version = os.listdir(os.path.join(root, "lib", "modules"))[0]
    if not os.path.exists(os.path.join(root, "lib", "modules", version, "modules.dep")):
        subprocess.run(["depmod", "-b", root, version], check=True)
    return Kernel(version, os.path.join(root, "boot", f"vmlinuz-{version}"), root)


def module_files(kernel):
    """Module files in load order, dependencies first."""
    empty = tempfile.mkdtemp()
    ordered = []
    for name in MODULES:
        # -C empty: ndctl installs a modprobe.d rule for libnvdimm that would hide the files.
        out = subprocess.run(["modprobe", "-d", kernel.root, "-S", kernel.version, "-C", empty, "--show-depends", name],
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0] == "insmod" and parts[1] not in ordered:
                ordered.append(parts[1])
    os.rmdir(empty)
    return ordered


def libraries_of(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        match = re.search(r"(/\S+) \(0x", line)
        if match:
            libs.append(match.group(1))
    return libs


def copy_into(staging, path, dest=None):
    dest = dest or path
    target = os.path.join(staging, dest.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(os.path.realpath(path), target)
    for lib in libraries_of(path):
        lib_target = os.path.join(staging, lib.lstrip("/"))
        if not os.path.exists(lib_target):
            os.makedirs(os.path.dirname(lib_target), exist_ok=True)
            shutil.copy2(os.path.realpath(lib), lib_target)


def cpio(staging, out):
    with open(out, "wb") as archive:
        files = subprocess.run(["find", "."], cwd=staging, capture_output=True, check=True).stdout
        subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=staging, input=files, stdout=archive, check=True)


def base_initramfs(kernel):
    """busybox, the tools and the modules: built once per kernel and tool set, then reused."""
    key = hashlib.sha256("\n".join([kernel.version, INIT, *GUEST_TOOLS, *MODULES]).encode()).hexdigest()[:16]
    out = os.path.join(CACHE, f"base-{key}.cpio")
    if os.path.exists(out):
        return out
    staging = tempfile.mkdtemp(prefix="pcached-vm-")
    try:
        copy_into(staging, "/bin/busybox")
        for tool in GUEST_TOOLS:
            copy_into(staging, tool)
        order = []
        os.makedirs(os.path.join(staging, "lib", "modules"), exist_ok=True)
        for module in module_files(kernel):
            # busybox insmod cannot read xz-compressed modules.
            name = os.path.basename(module).replace(".ko.xz", ".ko")
            with open(os.path.join(staging, "lib", "modules", name), "wb") as ko:
                subprocess.run(["xz", "-dc", module], stdout=ko, check=True)
            order.append(name)
        os.makedirs(os.path.join(staging, "etc"), exist_ok=True)
        with open(os.path.join(staging, "etc", "modules.order"), "w") as f:
            f.write("\n".join(order) + "\n")
        with open(os.path.join(staging, "init"), "w") as f:
            f.write(INIT)
        os.chmod(os.path.join(staging, "init"), 0o755)
        for d in ("proc", "sys", "dev", "tmp", "run", "mnt"):
            os.makedirs(os.path.join(staging, d), exist_ok=True)
        cpio(staging, out + ".tmp")
        os.rename(out + ".tmp", out)
    finally:
        shutil.rmtree(staging)
    return out


def test_initramfs(base, script, binaries, out):
    """The base archive followed by a second one with the test script and the project's programs
    (the kernel unpacks concatenated uncompressed archives in order)."""
    staging = tempfile.mkdtemp(prefix="pcached-vm-")
    try:
        shutil.copy(script, os.path.join(staging, "test.sh"))
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "guest_lib.sh"), staging)
        for binary in binaries:
            copy_into(staging, binary, os.path.join("/usr/local/bin", os.path.basename(binary)))
        cpio(staging, out + ".extra")
        with open(out, "wb") as archive:
            for part in (base, out + ".extra"):
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, archive)
        os.unlink(out + ".extra")
    finally:
        shutil.rmtree(staging)


@dataclasses.dataclass
class Result:
    status: int  # the guest script's exit status; -1: no marker (crash, timeout, killed)
    output: str
    seconds: float


class Vm:
    def __init__(self):
        ensure_packages()
        self.kernel = ensure_kernel()
        self.base = base_initramfs(self.kernel)

    def run(self, script, pmem, disk, binaries=(), timeout=600, kill_when=None, pmem_size="1G", label_size="128K",
            persistence="mem-ctrl", append=""):
        """Like boot(), but a guest kernel that panics before the test starts (seen rarely under TCG,
        in timer code, before any of our code runs) is booted once more: that is the emulator
        failing, not the test."""
        settings = (pmem_size, label_size, persistence, append)
        result = self.boot(script, pmem, disk, binaries, timeout, kill_when, *settings)
        if "PCACHED_VM_READY" not in result.output and "Kernel panic" in result.output:
            log("the guest kernel panicked before the test started; booting again")
            result = self.boot(script, pmem, disk, binaries, timeout, kill_when, *settings)
        return result

    def boot(self, script, pmem, disk, binaries, timeout, kill_when, pmem_size, label_size, persistence, append):
        """Boots the guest with `pmem` (a file, the NVDIMM's backing) and `disk` (virtio disk), runs
        `script`; with kill_when (a regex), SIGKILLs qemu as soon as the guest prints a match (a power
        cut) and returns status -1. `persistence` is what the NVDIMM's ACPI tables say survives power
        loss (qemu's nvdimm-persistence: mem-ctrl, cpu, or None for nothing, which Linux reports as
        an unknown domain); `append` adds kernel parameters."""
        machine = "pc,nvdimm=on" + (f",nvdimm-persistence={persistence}" if persistence else "")
        work = tempfile.mkdtemp(prefix="pcached-vm-run-")
        initrd = os.path.join(work, "initrd.cpio")
        test_initramfs(self.base, script, binaries, initrd)
        command = ["qemu-system-x86_64", "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-nodefaults",
                   "-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot",
                   "-kernel", self.kernel.vmlinuz, "-initrd", initrd,
                   "-append", ("console=ttyS0 quiet panic=-1 loglevel=4 " + append).strip(),
                   "-machine", machine, "-m", "2G,slots=2,maxmem=4G",
                   "-object", f"memory-backend-file,id=mem1,share=on,mem-path={pmem},size={pmem_size},align=2M",
                   "-device", f"nvdimm,memdev=mem1,id=nv1,label-size={label_size}",
                   "-drive", f"file={disk},if=virtio,format=raw,cache=writeback"]
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        output, status, pending = [], -1, b""
        kill_pattern = re.compile(kill_when) if kill_when else None
        try:
            while True:
                remaining = timeout - (time.monotonic() - started)
                if remaining <= 0:
                    log(f"timeout after {timeout} s")
                    break
                ready, _, _ = select.select([process.stdout], [], [], min(remaining, 1.0))
                if not ready:
                    if process.poll() is not None:
                        break
                    continue
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip("\r")
                    output.append(line)
                    print(f"guest| {line}", flush=True)
                    match = EXIT_MARKER.search(line)
                    if match:
                        status = int(match.group(1))
                    if kill_pattern and kill_pattern.search(line):
                        process.send_signal(signal.SIGKILL)
                        process.wait()
                        return Result(-1, "\n".join(output), time.monotonic() - started)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            shutil.rmtree(work, ignore_errors=True)
        return Result(status, "\n".join(output), time.monotonic() - started)


def make_file(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="install packages, download the kernel, build the base initramfs")
    run = sub.add_parser("run", help="boot and run a guest script; exit with its status")
    run.add_argument("script")
    run.add_argument("--pmem", help="NVDIMM backing file (default: a fresh 1 GiB file in /dev/shm)")
    run.add_argument("--disk", help="virtio disk image (default: a fresh 256 MiB file)")
    run.add_argument("--binary", action="append", default=[], help="a program to put in /usr/local/bin")
    run.add_argument("--timeout", type=int, default=600)
    run.add_argument("--nvdimm-persistence", default="mem-ctrl",
                     help="what the NVDIMM reports as its persistence domain: mem-ctrl, cpu, or none (not reported)")
    run.add_argument("--append", default="", help="extra kernel parameters (e.g. memmap=256M!1G)")
    args = parser.parse_args()
    vm = Vm()
    if args.command == "prepare":
        log(f"ready: kernel {vm.kernel.version}, base initramfs {vm.base}")
        return 0
    scratch = tempfile.mkdtemp(prefix="pcached-vm-files-", dir="/dev/shm")
    try:
        pmem = args.pmem or os.path.join(scratch, "pmem.img")
        disk = args.disk or os.path.join(scratch, "disk.img")
        if not args.pmem:
            make_file(pmem, 1 << 30)
        if not args.disk:
            make_file(disk, 256 << 20)
        persistence = None if args.nvdimm_persistence == "none" else args.nvdimm_persistence
        result = vm.run(args.script, pmem, disk, binaries=args.binary, timeout=args.timeout, persistence=persistence,
                        append=args.append)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"guest script exited with {result.status} after {result.seconds:.1f} s")
    return 0 if result.status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

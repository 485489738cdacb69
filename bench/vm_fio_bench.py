#!/usr/bin/env python3
"""fio in the test VM, round robin in one boot: pcached's /dev/ublkb0 against raw pmem (an fsdax
namespace), null_blk, and dm-writecache on the same emulated NVDIMM over the same virtio disk.
Figures are ratios against the references measured in the same boot; absolute numbers under TCG
swing with host load.

pcached runs three times: with the defaults (one queue per guest CPU; the kernel maps one CPU to
each, so queue affinity auto binds each queue's thread to the other CPU, away from fio's submitting
thread), pinned (--queue-affinity kernel: each queue's thread bound to its one CPU, where fio's
submitting thread shares it with the thread serving it), and with one queue.

One more reference is a ublk device with nothing behind it (bench/ublk_null.cc: pcached's own ublk
frontend, every request completed at once), with the defaults and pinned as pcached: the most any
ublk server can do in this VM, so pcached/ublk-null is the share of it the cache engine leaves.

    bench/vm_fio_bench.py --pcachedd build/daemon/pcachedd --pcached build/cli/pcached \
        [--ublk-null build/bench/pcached-ublk-null] [--json] [--rounds 3 | --paired N]

Between rounds the host's load moves each figure by tens of percent. --paired N measures the goal's
jobs (4 KiB random writes at QD16 and QD32, cached 4 KiB random reads) against dm-writecache more
tightly: both devices set up side by side, runs alternating between them, a ratio per pair.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "vm"))
import vm as harness  # noqa: E402

JOBS = [  # name, fio arguments
    ("randwrite-4k-qd16", "--rw=randwrite --bs=4k --iodepth=16"),
    ("randwrite-4k-qd32", "--rw=randwrite --bs=4k --iodepth=32"),
    ("randread-4k-cached", "--rw=randread --bs=4k --iodepth=16"),
    ("seqwrite-64k", "--rw=write --bs=64k --iodepth=16"),
    ("seqwrite-1m", "--rw=write --bs=1m --iodepth=8"),
]

SETUP = r"""
. /guest_lib.sh
ndctl disable-region all >/dev/null; ndctl init-labels -f all >/dev/null; ndctl enable-region all >/dev/null
# Every page of both namespaces is written once before the first round: the NVDIMM's backing file
# is sparse on the host, so the first store to a page costs the host a page fault and a zeroed
# page. A log-structured cache spreads its first writes over the whole region, where dm-writecache
# overwrites its blocks in place, so unwarmed pages cost pcached's first round the most (4 KiB
# random writes at QD16: 14.7k IOPS cold against 27.5k warm in one measurement).
ndctl create-namespace -r region0 -m fsdax -s 384M >/dev/null
ndctl create-namespace -r region0 -m fsdax -s 384M >/dev/null
for namespace in /dev/pmem0*; do dd if=/dev/zero of=$namespace bs=1M oflag=direct 2>/dev/null || true; done
ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null
pmem=$(ls /dev/pmem0* | head -1)
[ -c /dev/dax0.0 ] && [ -b "$pmem" ] || { echo "namespaces: expected /dev/dax0.0 and an fsdax /dev/pmem0.N"; exit 1; }
modprobe_null() { [ -b /dev/nullb0 ] || insmod /lib/modules/null_blk.ko nr_devices=1 >/dev/null 2>&1 || true; }
modprobe_null
start_daemon
run_job() {  # target name job args
  target=$1; dev=$2; job=$3; shift 3
  out=$(fio --name=$job --filename=$dev --direct=1 --ioengine=libaio --size=128M --time_based --runtime=RUNTIME \
        --ramp_time=1 --randrepeat=0 --norandommap --output-format=terse --terse-version=3 "$@" 2>/dev/null)
  # terse v3: field 8 read IOPS, field 49 write IOPS
  r=$(echo "$out" | cut -d';' -f8); w=$(echo "$out" | cut -d';' -f49)
  echo "RESULT $target $job $r $w"
}
prefill() { fio --name=fill --filename=$1 --direct=1 --ioengine=libaio --rw=write --bs=1m --size=128M --iodepth=8 >/dev/null 2>&1; }
"""

ROUND_ROBIN = r"""
for round in $(seq ROUNDS); do
  for target in TARGETS; do
    case $target in
      pmem) dev=$pmem ;;
      nullblk) dev=/dev/nullb0 ;;
      pcached) dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --force) ;;
      pcached-pinned) dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --force --queue-affinity kernel) ;;
      pcached-1q) dev=$(pcached add --cache /dev/dax0.0 --backing /dev/vda --format --force --queues 1) ;;
      ublk-null|ublk-null-pinned)
        affinity=auto; [ $target = ublk-null-pinned ] && affinity=kernel
        pcached-ublk-null --queue-affinity $affinity > /tmp/null.dev 2>/tmp/null.log & null_pid=$!
        for i in $(seq 100); do [ -s /tmp/null.dev ] && break; sleep 0.1; done
        dev=$(cat /tmp/null.dev); rm -f /tmp/null.dev
        [ -b "$dev" ] || cat /tmp/null.log ;;
      writecache)
        # A cache device dm-writecache has never seen must start zeroed (it formats it then).
        dd if=/dev/zero of=$pmem bs=1M count=4 conv=fsync 2>/dev/null
        sectors=$(blockdev --getsz /dev/vda 2>/dev/null || echo $(( $(cat /sys/block/vda/size) )))
        /sbin/dmsetup create wc --noudevsync --table "0 $sectors writecache p /dev/vda $pmem 4096 0" || { dmesg | tail -5; exit 1; }
        /sbin/dmsetup mknodes wc
        dev=/dev/mapper/wc ;;
    esac
    [ -b "$dev" ] || { echo "no device for $target"; exit 1; }
    prefill $dev
JOBLINES
    case $target in
      pcached*)
        # What the engine did besides the I/O: writeback, GC's moves and evictions, writer waits.
        pcached status cache0 | grep -E "^  (writes|writeback|gc) " | sed "s/^ */STATUS $target round $round: /"
        pcached remove cache0 >/dev/null 2>&1 ;;  # (its progress bar would run into the next RESULT line)
      writecache) /sbin/dmsetup remove --noudevsync wc ;;
      ublk-null*) kill $null_pid; wait $null_pid || { echo "pcached-ublk-null failed"; cat /tmp/null.log; exit 1; } ;;
    esac
  done
done
"""

# The goal's jobs, measured in pairs (--paired).
PAIRED_JOBS = ["randwrite-4k-qd16", "randwrite-4k-qd32", "randread-4k-cached"]

PAIRED = r"""
# Both devices at once, each over its own half of the virtio disk (dm-linear), and runs of one job
# alternating between them: the host's drift, which moves a single run by +-30 %, falls on both
# runs of a pair alike. The order alternates from pair to pair (ABBA), so that neither side always
# runs second. While the reference runs, pcachedd is stopped (SIGSTOP): none of pcached's
# background work (GC, writeback) lands in the reference's time, so each side pays for its own.
sectors=$(blockdev --getsz /dev/vda); half=$((sectors / 2))
/sbin/dmsetup create back0 --noudevsync --table "0 $half linear /dev/vda 0"
/sbin/dmsetup create back1 --noudevsync --table "0 $half linear /dev/vda $half"
/sbin/dmsetup mknodes
cache=$(pcached add --cache /dev/dax0.0 --backing /dev/mapper/back0 --format --force)
# Stopped, pcached would find its device idle for seconds at every start (it counts idleness by the
# clock), and write back at full speed in its own runs: idle writeback is off, the rest default.
pcached set cache0 writeback_idle_ms 0 >/dev/null
daemon=$(pidof pcachedd)
REFERENCE_SETUP
[ -b "$cache" ] && [ -b "$reference" ] || { echo "paired: no devices"; exit 1; }
prefill $cache
prefill $reference
kill -STOP $daemon
reference_pause
run_pair() {  # job fio-args
  order="pcached REFERENCE"; [ $((pair % 2)) = 0 ] && order="REFERENCE pcached"
  for target in $order; do
    if [ $target = pcached ]; then
      kill -CONT $daemon; run_job pcached $cache "$@"; kill -STOP $daemon
    else
      reference_run run_job REFERENCE $reference "$@"
    fi
  done
}
for pair in $(seq PAIRS); do
PAIRLINES
done
kill -CONT $daemon
pcached status cache0 | grep -E "^  (writes|writeback|gc) " | sed "s/^ */STATUS pcached paired: /"
# Nothing may be writing to the disk when the VM powers off (the kernel would log I/O errors): the
# daemons exit, leaving what they have not written back on pmem, and dm-writecache is suspended,
# which stops its writeback.
kill -TERM $daemon
while kill -0 $daemon 2>/dev/null; do sleep 0.1; done
reference_end
"""

# The reference of --paired: dm-writecache on the fsdax namespace over the other half of the disk.
WRITECACHE_REFERENCE = r"""
dd if=/dev/zero of=$pmem bs=1M count=4 conv=fsync 2>/dev/null
/sbin/dmsetup create wc --noudevsync --table "0 $half writecache p /dev/mapper/back1 $pmem 4096 0" || { dmesg | tail -5; exit 1; }
/sbin/dmsetup mknodes wc
reference=/dev/mapper/wc
reference_pause() { :; }
reference_run() { "$@"; }
reference_end() { /sbin/dmsetup suspend --noudevsync wc; }
"""

# The reference of --paired --against: another pcachedd build (an A/B of two builds), with its own
# socket and state, on a devdax namespace made of the second one, stopped while pcached runs as
# pcached is while it runs.
AGAINST_REFERENCE = r"""
other_namespace=$(ndctl list -N | grep -o '"dev":"namespace0\.[1-9]"' | head -1 | cut -d'"' -f4)
ndctl create-namespace -f -e $other_namespace -m devdax >/dev/null
other_dax=$(ls /dev/dax0.* | grep -v '^/dev/dax0\.0$' | head -1)
pcachedd-against --socket /run/pcached/against.sock --state-dir /var/lib/pcached-against \
    --metrics-address 127.0.0.1:9470 >/tmp/against.log 2>&1 &
other=$!
for i in $(seq 100); do [ -S /run/pcached/against.sock ] && break; sleep 0.1; done
reference=$(pcached --socket /run/pcached/against.sock add --cache $other_dax --backing /dev/mapper/back1 --format --force) ||
    { cat /tmp/against.log; exit 1; }
pcached --socket /run/pcached/against.sock set cache0 writeback_idle_ms 0 >/dev/null
# (Stopped only once prefilled: its I/O would wait for it.)
reference_pause() { kill -STOP $other; }
reference_run() { kill -CONT $other; "$@"; kill -STOP $other; }
reference_end() {
  kill -CONT $other
  pcached --socket /run/pcached/against.sock status cache0 | grep -E "^  (writes|writeback|gc) " |
      sed "s/^ */STATUS against paired: /"
  kill -TERM $other
  while kill -0 $other 2>/dev/null; do sleep 0.1; done
}
"""


def report_pairs(args, samples, status):
    """The --paired figures: each pair's ratio, and their median (the host's drift between pairs
    does not enter it)."""
    reference = "against" if args.against else "writecache"
    reference_title = "the other build" if args.against else "dm-writecache"
    reference_key = "against" if args.against else "dm_writecache"
    pairs = {job: list(zip(samples.get(("pcached", job), []), samples.get((reference, job), []))) for job in PAIRED_JOBS}
    # A run that did no I/O counts as missing: it has no ratio.
    incomplete = [job for job, runs in pairs.items()
                  if len(runs) != args.paired or not all(a and b for a, b in runs)]
    if incomplete:
        print(f"paired: missing or empty runs of {', '.join(incomplete)}", file=sys.stderr)
        return 1
    ratios = {job: [a / b for a, b in runs] for job, runs in pairs.items()}
    summary = {job: {"pcached_median_iops": statistics.median(a for a, _ in runs),
                     f"{reference_key}_median_iops": statistics.median(b for _, b in runs),
                     "median_pair_ratio": statistics.median(ratios[job]),
                     "pairs_at_or_above_1": sum(r >= 1.0 for r in ratios[job])}
               for job, runs in pairs.items()}
    if args.json:
        report = {"benchmark": "vm-fio-paired", "unit": "IOPS", "pairs": args.paired,
                  "runs": {job: {"pcached": [a for a, _ in runs], reference_key: [b for _, b in runs]}
                           for job, runs in pairs.items()},
                  f"pcached_vs_{reference_key}_per_pair": ratios, "summary": summary, "pcached_status": status}
        if args.against:
            report["against"] = args.against
        print(json.dumps(report, indent=2))
        return 0
    print(f"\nfio in the VM (TCG): pcached ({args.pcachedd}) and {reference_title}"
          f"{' (' + args.against + ')' if args.against else ''} side by side, {args.paired} pairs of runs")
    print(f"{'job':<20} {'pcached':>10} {'other' if args.against else 'dm-wc':>10} {'median pair ratio':>18} "
          f"{'pairs >= 1':>11}  per pair")
    for job, row in summary.items():
        print(f"{job:<20} {row['pcached_median_iops']:>10.0f} {row[reference_key + '_median_iops']:>10.0f} "
              f"{row['median_pair_ratio']:>18.2f} {row['pairs_at_or_above_1']:>6}/{args.paired:<4}  "
              + " ".join(f"{r:.2f}" for r in ratios[job]))
    for line in status:
        print("  " + line)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pcachedd", required=True)
    parser.add_argument("--pcached", required=True)
    parser.add_argument("--ublk-null", help="the pcached-ublk-null binary (default: bench/ in pcachedd's build)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="run only this target (debugging)")
    parser.add_argument("--runtime", type=int, default=5, help="seconds per job")
    parser.add_argument("--paired", type=int, metavar="N",
                        help="instead of the rounds: N pairs of runs of the goal's jobs, pcached and dm-writecache "
                             "set up side by side and alternating (the ratio within each pair)")
    parser.add_argument("--against", metavar="PCACHEDD",
                        help="with --paired: against another pcachedd build instead of dm-writecache (an A/B of two "
                             "builds, each with its own devdax namespace and half of the disk)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.against and not args.paired:
        parser.error("--against goes with --paired")
    ublk_null = args.ublk_null or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.pcachedd))),
                                               "bench", "pcached-ublk-null")
    if not os.path.exists(ublk_null):
        parser.error(f"{ublk_null}: not found (build it, or give --ublk-null)")

    if args.paired:
        fio_of = dict(JOBS)
        pair_lines = "\n".join(f"  run_pair {name} {fio_of[name]}" for name in PAIRED_JOBS)
        script_text = (SETUP + PAIRED).replace("REFERENCE_SETUP", AGAINST_REFERENCE if args.against else WRITECACHE_REFERENCE)
        script_text = script_text.replace("REFERENCE", "against" if args.against else "writecache")
        script_text = script_text.replace("PAIRLINES", pair_lines).replace("PAIRS", str(args.paired))
    else:
        job_lines = "\n".join(f"    run_job $target $dev {name} {fio}" for name, fio in JOBS)
        script_text = (SETUP + ROUND_ROBIN).replace("JOBLINES", job_lines).replace("ROUNDS", str(args.rounds)).replace(
            "TARGETS", args.only or "pmem nullblk ublk-null ublk-null-pinned pcached pcached-pinned pcached-1q writecache")
    script_text = script_text.replace("RUNTIME", str(args.runtime))
    machine = harness.Vm()
    scratch = tempfile.mkdtemp(prefix="pcached-vmbench-", dir="/dev/shm")
    try:
        pmem, disk, script = (os.path.join(scratch, n) for n in ("pmem.img", "disk.img", "bench.sh"))
        harness.make_file(pmem, 1 << 30)
        harness.make_file(disk, 512 << 20)
        with open(script, "w") as f:
            f.write(script_text)
        sink = open(os.devnull, "w") if args.json else None
        stdout = sys.stdout
        if sink:
            sys.stdout = sink
        binaries = [args.pcachedd, args.pcached, ublk_null]
        if args.against:
            # In the guest under a name of its own.
            against = os.path.join(scratch, "pcachedd-against")
            shutil.copy(args.against, against)
            binaries.append(against)
        result = machine.run(script, pmem, disk, binaries=binaries, timeout=3600)
        sys.stdout = stdout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.status != 0:
        print(result.output[-3000:], file=sys.stderr)
        return 1
    samples = {}
    for match in re.finditer(r"^RESULT (\S+) (\S+) (\S+) (\S+)$", result.output, re.M):
        target, job, r, w = match.groups()
        iops = float(r) + float(w)
        samples.setdefault((target, job), []).append(iops)
    status = [" ".join(line.split()) for line in re.findall(r"^STATUS (.*)$", result.output, re.M)]
    if args.paired:
        return report_pairs(args, samples, status)
    targets = ["pcached", "pcached-pinned", "pcached-1q", "writecache", "pmem", "nullblk", "ublk-null",
               "ublk-null-pinned"]
    # A target left out (--only) has no figures: None in JSON, "-" in the table, never a zero.
    table = {job: {t: statistics.median(samples[(t, job)]) if (t, job) in samples else None for t in targets}
             for job, _ in JOBS}

    def ratios_of(target, reference="writecache"):
        return {job: (row[target] / row[reference] if row[target] is not None and row[reference] else None)
                for job, row in table.items()}

    def per_round(target, reference="writecache"):
        # Each round's ratio within that round: the host's noise moves both sides of it alike.
        return {job: [a / b for a, b in zip(samples.get((target, job), []), samples.get((reference, job), [])) if b]
                for job, _ in JOBS}

    ratios, ratios_pinned, ratios_1q = ratios_of("pcached"), ratios_of("pcached-pinned"), ratios_of("pcached-1q")
    null_ratios = ratios_of("pcached", "ublk-null")
    null_ratios_pinned = ratios_of("pcached-pinned", "ublk-null-pinned")
    null_vs_wc, null_vs_wc_pinned = ratios_of("ublk-null"), ratios_of("ublk-null-pinned")
    rounds_vs_wc = per_round("pcached")
    if args.json:
        print(json.dumps({"benchmark": "vm-fio", "unit": "IOPS (median of rounds)", "rounds": args.rounds,
                          "iops": table, "pcached_vs_dm_writecache": ratios,
                          "pcached_vs_dm_writecache_per_round": rounds_vs_wc,
                          "pcached_pinned_vs_dm_writecache": ratios_pinned,
                          "pcached_1_queue_vs_dm_writecache": ratios_1q,
                          "pcached_vs_ublk_null": null_ratios, "pcached_pinned_vs_ublk_null_pinned": null_ratios_pinned,
                          "ublk_null_vs_dm_writecache": null_vs_wc,
                          "ublk_null_pinned_vs_dm_writecache": null_vs_wc_pinned,
                          "pcached_status": status}, indent=2))
        return 0

    def cell(value, width, digits):
        return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    print(f"\nfio in the VM (TCG), {args.rounds} rounds round robin, median IOPS")
    print(f"{'job':<20} {'pcached':>10} {'pinned':>10} {'1 queue':>10} {'dm-wc':>10} {'raw pmem':>10} {'null_blk':>10} "
          f"{'pcached/dm-wc':>14} {'pinned/dm-wc':>13} {'1q/dm-wc':>9}  per round")
    for job, row in table.items():
        rounds = " ".join(f"{r:.2f}" for r in rounds_vs_wc[job]) or "-"
        print(f"{job:<20} {cell(row['pcached'], 10, 0)} {cell(row['pcached-pinned'], 10, 0)} "
              f"{cell(row['pcached-1q'], 10, 0)} {cell(row['writecache'], 10, 0)} {cell(row['pmem'], 10, 0)} "
              f"{cell(row['nullblk'], 10, 0)} {cell(ratios[job], 14, 2)} {cell(ratios_pinned[job], 13, 2)} "
              f"{cell(ratios_1q[job], 9, 2)}  {rounds}")
    if status:
        print("\nthe engine's own work during the jobs (pcached status, cumulative over each round's jobs)")
        for line in status:
            print("  " + line)
    print("\nthe ublk round trip alone: pcached-ublk-null (pcached's frontend, no engine), defaults | pinned")
    print(f"{'job':<20} {'null':>10} {'pinned':>10} {'null/dm-wc':>11} {'pin./dm-wc':>11} "
          f"{'pcached/null':>13} {'pin./pin.':>10}")
    for job, row in table.items():
        print(f"{job:<20} {cell(row['ublk-null'], 10, 0)} {cell(row['ublk-null-pinned'], 10, 0)} "
              f"{cell(null_vs_wc[job], 11, 2)} {cell(null_vs_wc_pinned[job], 11, 2)} "
              f"{cell(null_ratios[job], 13, 2)} {cell(null_ratios_pinned[job], 10, 2)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

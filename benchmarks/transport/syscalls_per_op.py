#!/usr/bin/env python3
"""System calls per tensor pulled (BM_transfer_<size>), client and server processes apart,
counted by perf at full speed.

strace slows every system call by tens of microseconds, and that changes what libzmq does: its
send() looks at the socket's pending commands at most once a millisecond, so under strace it
looks on every send, and the counts of poll(2) and getpid(2) swell. perf's tracepoints cost far
less. This runs one bench_transport benchmark long enough to watch it for `--seconds` in the
middle, attaches `perf stat -p` to the client process and to the peer process for that window,
and counts the tensors with a uprobe on the function that builds each pull request
(recv_request for tessera's impls, send_request for raw_zmq). Printed per tensor, for each
process (all its threads: the calling thread, the channel's or server's I/O thread, libzmq's):
poll, getpid, read, write, futex, epoll_wait and every system call (sys_enter).

  benchmarks/transport/syscalls_per_op.py [--bench PATH] [--size 64B]
      [--impls tessera_queue,raw_zmq,tessera,tessera_pool] [--seconds 6]

Needs perf with uprobes and tracepoints (root). Each impl takes about `--seconds` + 6 s.
"""
import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time

EVENTS = ["poll", "getpid", "read", "write", "futex", "epoll_wait"]
PROBED = {"raw_zmq": "send_request"}  # the others: recv_request


def probe_address(bench, function):
    """The address of transport_bench's `function` (its first symbol that is not a .cold part)."""
    out = subprocess.run(["nm", "-C", bench], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and f"::{function}(" in parts[2] and "[clone .cold]" not in parts[2]:
            return "0x" + parts[0].lstrip("0")
    sys.exit(f"no symbol {function} in {bench}")


def read_counts(path):
    counts = {}
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) > 2 and row[0].strip().isdigit():
                counts[row[2].split(":")[-1].replace("sys_enter_", "")] = int(row[0])
    return counts


def measure(bench, impl, size, seconds, probe):
    events = [f"probe_bench_transport:{probe}"] + [f"syscalls:sys_enter_{e}" for e in EVENTS] + ["raw_syscalls:sys_enter"]
    with tempfile.TemporaryDirectory(prefix="tessera-syscalls-") as d:
        run = subprocess.Popen([bench, f"--benchmark_filter=^BM_transfer_{size}/{impl}/",
                                f"--min_time_floor={2 * seconds + 6}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)  # the peer started and the warm-up done
            children = subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True, text=True).stdout.split()
            if not children:
                sys.exit(f"{impl}: no peer process")
            stats = [subprocess.Popen(["perf", "stat", "-x,", "-o", os.path.join(d, name), "-e", ",".join(events),
                                       "-p", pid, "--", "sleep", str(seconds)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for name, pid in (("client", str(run.pid)), ("server", children[0]))]
            for s in stats:
                s.wait(timeout=seconds + 30)
        finally:
            run.send_signal(signal.SIGINT)
            try:
                run.wait(timeout=10)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
        client = read_counts(os.path.join(d, "client"))
        server = read_counts(os.path.join(d, "server"))
    tensors = client.pop(probe, 0)
    server.pop(probe, None)
    if tensors == 0:
        sys.exit(f"{impl}: no tensor counted")
    return tensors, client, server


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bench = os.path.join(here, "..", "..", "build", "release", "benchmarks", "transport", "bench_transport")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=default_bench)
    p.add_argument("--size", default="64B")
    p.add_argument("--impls", default="tessera_queue,raw_zmq,tessera,tessera_pool")
    p.add_argument("--seconds", type=float, default=6)
    a = p.parse_args()
    bench = os.path.realpath(a.bench)
    probes = {}
    for function in ("recv_request", "send_request"):
        name = "tq" if function == "recv_request" else "tr"
        subprocess.run(["perf", "probe", "-q", "-d", f"probe_bench_transport:{name}"], capture_output=True)
        subprocess.run(["perf", "probe", "-q", "-x", bench, "-a", f"{name}={probe_address(bench, function)}"],
                       check=True, capture_output=True)
        probes[function] = name
    try:
        print(f"transfer_{a.size}: system calls per tensor over {a.seconds:g} s of the run (perf stat -p)")
        print(f"{'impl':<14} {'process':<7} {'tensors/s':>9} " + " ".join(f"{e:>10}" for e in EVENTS + ["all"]))
        for impl in a.impls.split(","):
            probe = probes[PROBED.get(impl, "recv_request")]
            tensors, client, server = measure(bench, impl, a.size, a.seconds, probe)
            for name, counts in (("client", client), ("server", server)):
                values = [counts.get(e, 0) / tensors for e in EVENTS] + [counts.get("sys_enter", 0) / tensors]
                rate = f"{tensors / a.seconds:9.0f}" if name == "client" else " " * 9
                print(f"{impl:<14} {name:<7} {rate} " + " ".join(f"{v:10.2f}" for v in values))
    finally:
        for name in probes.values():
            subprocess.run(["perf", "probe", "-q", "-d", f"probe_bench_transport:{name}"], capture_output=True)


if __name__ == "__main__":
    main()

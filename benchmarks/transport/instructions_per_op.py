#!/usr/bin/env python3
"""User-space instructions per echo round trip (BM_rtt_<size>) or per tensor pulled
(BM_transfer_<size>), counted by valgrind's callgrind.

Wall-clock ratios on a shared 2-core VM move by +-15% from run to run, which hides changes of a
few percent; an instruction count does not move. This runs a bench_transport benchmark of each
impl with both processes under callgrind (the peer through TRANSPORT_BENCH_IP, the hook the
network-namespace runs use to start it) and prints, per round trip or tensor:
  client   rtt: the echo the benchmark thread makes (build the request, call, check the reply);
           transfer: the pulling thread's calls and waits, plus (tessera) the channel's I/O
           thread, where the callbacks run
  server   the peer's serving thread (tessera: the RpcServer's I/O thread, handlers inline;
           raw_zmq: the thread owning the ROUTER)
  libzmq   libzmq's own I/O threads, both processes
Kernel time (syscalls, wake-ups) is not counted: this is the user-space half of the cost only.

  benchmarks/transport/instructions_per_op.py [--bench PATH] [--workload rtt|transfer] [--size 64B]
      [--impls raw_zmq,tessera]     (transfer also: tessera_queue)

Needs valgrind. Each impl takes about half a minute.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

# Per workload and impl: the function whose calls count the round trips (tensors), the client's
# side, the server's thread. Functions named by a "client" pattern that contain "{lambda" do not
# count unless the pattern names the lambda (a completion defined in a pull function runs on the
# channel's I/O thread, whose run_io counts it).
TESSERA_TRANSFER = {  # the callbacks and the completion queue alike
    "count": r"RpcChannelCore::start_locked\(",
    "client": r"(::pull_with_callbacks\(|::pull_through_queue\(|RpcChannelCore::run_io\(\))",
    "server": r"RpcServerCore::run_io\(\)",
}
TRANSFER = {
    "tessera": TESSERA_TRANSFER,
    "tessera_queue": TESSERA_TRANSFER,
    "raw_zmq": {"count": r"send_request\(zmq::socket_t&",
                "client": r"transport_bench::raw_transfer\(",  # its pulls are inlined there
                "server": r"serve_raw\("},
}
IMPLS = {
    "tessera": {
        "count": r"RpcChannelCore::call_sync\(",
        "client": r"::rtt\(benchmark::State&, transport_bench::Size const&, bool\)::\{lambda\(bool\*\)#1\}::operator\(\)",
        "server": r"RpcServerCore::run_io\(\)",
    },
    "raw_zmq": {
        "count": r"raw_rtt\(benchmark::State&, transport_bench::Size const&\)::\{lambda\(bool\)#1\}::operator\(\)",
        "client": r"raw_rtt\(benchmark::State&, transport_bench::Size const&\)::\{lambda\(bool\)#1\}::operator\(\)",
        "server": r"serve_raw\(",
    },
}


def parse(path):
    """(total Ir, {function: [calls, inclusive Ir]}, names of functions defined) of one callgrind file."""
    names, calls, defined = {}, {}, set()
    total, cfn, pending = 0, None, None

    def name(tok):
        m = re.match(r"\((\d+)\)(?: (.*))?", tok)
        if not m:
            return tok
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), tok)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(("totals:", "summary:")):
                total = int(line.split()[1])
            elif line.startswith("fn="):
                defined.add(name(line[3:]))
            elif line.startswith("cfn="):
                cfn = name(line[4:])
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif pending is not None:  # the cost line that follows every calls= line
                parts = line.split()
                entry = calls.setdefault(cfn, [0, 0])
                entry[0] += pending
                entry[1] += int(parts[1]) if len(parts) > 1 else 0
                pending = None
    return total, calls, defined


def measure(bench, workload, impl, size, min_time):
    spec = (TRANSFER if workload == "transfer" else IMPLS)[impl]
    with tempfile.TemporaryDirectory(prefix="tessera-callgrind-") as d:
        wrapper = os.path.join(d, "peer.sh")
        with open(wrapper, "w") as f:
            # Called as `WRAPPER netns exec NS EXE ARGS...` (benchmarks/transport/main.cc).
            f.write('#!/bin/sh\nshift 3\nexec valgrind --tool=callgrind --separate-threads=yes '
                    f'--callgrind-out-file={d}/peer.%p "$@" 2>{d}/peer.log\n')
        os.chmod(wrapper, 0o755)
        env = dict(os.environ, TRANSPORT_BENCH_PEER_NETNS="callgrind", TRANSPORT_BENCH_IP=wrapper)
        cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={d}/client.%p",
               bench, f"--benchmark_filter=^BM_{workload}_{size}/{impl}/", f"--min_time_floor={min_time}"]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if f"BM_{workload}" not in run.stdout or "ERROR" in run.stdout:
            sys.exit(f"{impl}: the benchmark did not run:\n{run.stdout}\n{run.stderr[-2000:]}")
        files = {os.path.basename(p): parse(p) for p in glob.glob(os.path.join(d, "*-*"))}
    ops = sum(c[0] for _, calls, _ in files.values() for fn, c in calls.items() if re.search(spec["count"], fn or ""))
    if ops == 0:
        sys.exit(f"{impl}: no call of {spec['count']} was counted")

    def inclusive(pattern):
        def counts(fn):
            return re.search(pattern, fn) and ("{lambda" not in fn or "lambda" in pattern)
        return sum(c[1] for _, calls, _ in files.values() for fn, c in calls.items() if counts(fn or ""))

    zmq_io = sum(total for total, _, defined in files.values() if any("epoll_wait" in fn for fn in defined))
    return {"ops": ops, "client": inclusive(spec["client"]) / ops, "server": inclusive(spec["server"]) / ops,
            "libzmq": zmq_io / ops}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_bench = os.path.join(here, "..", "..", "build", "release", "benchmarks", "transport", "bench_transport")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=default_bench)
    ap.add_argument("--workload", choices=["rtt", "transfer"], default="rtt")
    ap.add_argument("--size", default="64B")
    ap.add_argument("--impls", default="raw_zmq,tessera")
    ap.add_argument("--min-time", default="0.5", help="--min_time_floor of the runs (seconds under valgrind)")
    args = ap.parse_args()
    per = "round trip" if args.workload == "rtt" else "tensor"
    print(f"| {args.workload}_{args.size}, user-space instructions per {per} | client | server | libzmq I/O | total |")
    print("|---|---:|---:|---:|---:|")
    for impl in args.impls.split(","):
        m = measure(os.path.abspath(args.bench), args.workload, impl, args.size, args.min_time)
        total = m["client"] + m["server"] + m["libzmq"]
        print(f"| {impl} ({m['ops']} {per}s) | {m['client']:,.0f} | {m['server']:,.0f} | {m['libzmq']:,.0f} | "
              f"{total:,.0f} |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# examples/deploy/slurm_digits.sbatch under a real Slurm: a one-node cluster from Debian's packages
# (munged, slurmctld, slurmd), started by this test inside a network namespace of its own (unshare
# --net), so every daemon and task listens only there and the fixed ports (Slurm's 6817/6818,
# tessera's 8888...) are free; the namespace ends with its last process, and the test kills every
# process left in it. The script is submitted with sbatch twice, as in tests/deploy_test.sh (plain, then with CURVE
# keys and synchronous training), its 4 ranks on the one node: the real srun sets the variables the
# tasks resolve their cluster from. deploy_test.sh covers the two-node layout with a stand-in srun.
# Exit 77 (skipped) when Slurm, munge or a network namespace is not available, or not root.
# Usage: slurm_test.sh TESSERA_BINARY DIR
set -euo pipefail

if [ "${1:-}" = --inside ]; then
  shift
  tessera=$1
  dir=$2
  src=$(cd "$(dirname "$0")/.." && pwd)
  fail() { echo "FAIL: $*"; exit 1; }
  host=$(hostname -s)
  # Every daemon's pid file; each is killed on exit, whatever happened.
  stop_daemons() {
    scancel --full --quiet --user=root 2>/dev/null || true
    for f in "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
      [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    done
  }
  trap stop_daemons EXIT

  ip link set lo up
  # glibc resolves no IPv4 name (127.0.0.1 included) for getaddrinfo(AI_ADDRCONFIG), as Slurm calls
  # it, while the only IPv4 addresses are loopback ones: one from TEST-NET-1, in this namespace only.
  ip addr add 192.0.2.1/32 dev lo
  readlink /proc/self/ns/net >"$dir/netns"
  mkdir -p "$dir/munge" "$dir/spool/ctld" "$dir/spool/d" "$dir/run" "$dir/log"
  chmod 700 "$dir" "$dir/munge"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" ||
    { echo "SKIP: munged did not start"; exit 77; }

  export SLURM_CONF="$dir/slurm.conf"
  # One node, $host (which the tasks' addresses name: /etc/hosts must resolve it), with 4 CPUs
  # whatever this machine has (config_overrides), so that the step's 4 ranks fit on it.
  cat >"$SLURM_CONF" <<EOF
ClusterName=tessera-test
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=30 State=UP
EOF
  getent hosts "$host" >/dev/null || { echo "SKIP: this machine's name $host does not resolve"; exit 77; }
  slurmctld -f "$SLURM_CONF" || { echo "SKIP: slurmctld did not start"; exit 77; }
  slurmd -f "$SLURM_CONF" || { echo "SKIP: slurmd did not start"; exit 77; }
  ready=""
  for _ in $(seq 1 60); do
    if [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; then ready=1; break; fi
    sleep 0.5
  done
  if [ -z "$ready" ]; then
    tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" 2>/dev/null || true
    echo "SKIP: the Slurm node did not become idle within 30 s"
    exit 77
  fi

  # $1: a name, $2: the keys directory or "", $3: SYNC (1 or ""). The job runs to its end, bounded.
  run_job() {
    local out="$dir/$1.out" job state=""
    job=$(TESSERA="$tessera" STEPS=150 CHECKPOINTS="$dir/ckpt-$1" KEYS="$2" SYNC="$3" \
      sbatch --parsable --nodes=1 --ntasks=4 --ntasks-per-node=4 --time=5 --output="$out" \
      --chdir="$dir" "$src/examples/deploy/slurm_digits.sbatch") || fail "sbatch ($1) refused the script"
    for _ in $(seq 1 300); do
      state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
      case "$state" in PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 1 ;; *) break ;; esac
    done
    if [ "$state" != COMPLETED ]; then
      scancel "$job" 2>/dev/null || true
      tail -n 30 "$out" 2>/dev/null || true
      fail "the job ($1) ended $state, not COMPLETED"
    fi
    [ "$(grep -c 'all 2 workers are done' "$out")" = 2 ] || fail "the ps tasks ($1) did not both see the workers finish"
    grep -Eq '^worker 0: .*test accuracy 0\.[0-9]+' "$out" || fail "the chief ($1) printed no accuracy"
    grep -Eq '^worker 1: ' "$out" || fail "worker 1 ($1) printed no summary"
    ls "$dir/ckpt-$1" | grep -q '^model.ckpt-' || fail "the chief ($1) wrote no checkpoint"
    echo "slurm: $1 job $job COMPLETED"
  }

  run_job insecure "" ""
  # The script names each task's key pair after its address: <node>:<8888 + its rank on the node>.
  keys="$dir/keys"
  mkdir -p "$keys"
  for i in 0 1 2 3; do
    "$tessera" keygen --out "$keys/$host:$((8888 + i))" >/dev/null
    echo "$(cat "$keys/$host:$((8888 + i)).pub") $host:$((8888 + i))" >>"$keys/cluster.keys"
  done
  run_job keys-sync "$keys" 1
  echo "slurm: slurm_digits.sbatch ran under slurmctld/slurmd, without and with keys"
  exit 0
fi

tessera=$1
dir=$2
for b in munged slurmctld slurmd sbatch scontrol sinfo scancel ip; do
  command -v "$b" >/dev/null ||
    { echo "SKIP: $b not found (Debian: slurm-wlm, munge; scripts/install-deps --for test installs them)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (for the network namespace and slurmd)"; exit 77; }
rm -rf "$dir"
mkdir -p "$dir"
# Whatever is left in the test's namespace (a daemon that ignored SIGTERM, a task) is killed.
kill_namespace() {
  local ns pid
  ns=$(cat "$dir/netns" 2>/dev/null) || return 0
  for pid in /proc/[0-9]*; do
    [ "$(readlink "$pid/ns/net" 2>/dev/null)" = "$ns" ] && kill -9 "${pid#/proc/}" 2>/dev/null
  done
  return 0
}
trap kill_namespace EXIT
unshare --net true 2>/dev/null || { echo "SKIP: cannot create a network namespace"; exit 77; }
status=0
timeout 600 unshare --net bash "$0" --inside "$tessera" "$dir" || status=$?
exit $status

#!/usr/bin/env bash
# examples/deploy/ on this machine, loopback only:
#  1. slurm_digits.sbatch with a stand-in for srun that starts the step's 4 ranks here with the
#     variables srun sets (SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NODELIST=localhost, ...): the
#     ranks find their tasks as under Slurm, train, and the ps tasks exit once the workers are done;
#     once without keys, once with CURVE keys named as the script expects and synchronous
#     training (SyncReplicasOptimizer).
#  2. kubernetes.yaml: every Pod's command and TF_CONFIG run here, the addresses swapped for free
#     loopback ports and /keys, /checkpoints for temporary directories.
# Usage: deploy_test.sh TESSERA_BINARY DIR
set -euo pipefail
tessera=$1
dir=$2
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; exit 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Four consecutive free loopback ports (the Slurm layout puts a node's ranks at base + i).
free_base() {
  python3 - <<'EOF'
import random, socket
for _ in range(200):
    base = random.randint(20000, 60000)
    socks = []
    try:
        for p in range(base, base + 4):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
EOF
}

# srun's stand-in: the options before the program are ignored; each rank runs with the variables
# a 4-task step on one node named localhost would have, bounded in time; the status is the
# first failing rank's.
cat >"$dir/fake_srun" <<'EOF'
#!/usr/bin/env bash
while [[ $# -gt 0 && "$1" == --* ]]; do shift; done
n=4
ranks=()
for ((r = 0; r < n; r++)); do
  SLURM_PROCID=$r SLURM_LOCALID=$r SLURM_NODEID=0 SLURMD_NODENAME=localhost SLURM_STEP_NODELIST=localhost \
    SLURM_STEP_TASKS_PER_NODE=$n SLURM_STEP_NUM_TASKS=$n SLURM_NTASKS=$n \
    timeout 300 "$@" >"$FAKE_SRUN_LOGS/rank$r.log" 2>&1 &
  ranks+=($!)
done
status=0
for p in "${ranks[@]}"; do wait "$p" || { s=$?; [ "$status" = 0 ] && status=$s; }; done
exit $status
EOF
chmod +x "$dir/fake_srun"

# One run of the script; status 75 when a port was taken between free_base and the bind (another
# test's process got it first), so the caller retries on new ports.
run_slurm_once() {  # $1: a name, $2: the port base, $3: the keys directory or "", $4: SYNC (1 or ""), $5: MODEL
  local logs="$dir/slurm-$1"
  rm -rf "$logs"
  mkdir -p "$logs"
  if ! FAKE_SRUN_LOGS=$logs SRUN="$dir/fake_srun" TESSERA="$tessera" STEPS=150 CHECKPOINTS="$logs/ckpt" KEYS="$3" \
    SYNC="$4" MODEL="${5:-mlp}" TESSERA_SLURM_PORT_BASE=$2 bash "$src/examples/deploy/slurm_digits.sbatch"; then
    if grep -qi 'address already in use' "$logs"/rank*.log; then return 75; fi
    tail -n 20 "$logs"/rank*.log
    fail "slurm_digits.sbatch ($1) failed"
  fi
  grep -q 'all 2 workers are done' "$logs/rank0.log" || fail "ps 0 ($1) did not see the workers finish"
  grep -q 'all 2 workers are done' "$logs/rank1.log" || fail "ps 1 ($1) did not see the workers finish"
  grep -Eq '^worker 0: .*test accuracy 0\.[0-9]+' "$logs/rank2.log" || fail "the chief ($1) printed no accuracy"
  grep -Eq '^worker 1: ' "$logs/rank3.log" || fail "worker 1 ($1) printed no summary"
  ls "$logs/ckpt" | grep -q '^model.ckpt-' || fail "the chief ($1) wrote no checkpoint"
}

# $1: a name, $2: "keys" for CURVE keys (each rank's key pair at KEYS/localhost:<port>.key, every
# public key in cluster.keys), $3: SYNC, $4: MODEL (mlp when empty).
run_slurm() {
  local attempt status base keys
  for attempt in 1 2 3; do
    base=$(free_base)
    keys=""
    if [ "$2" = keys ]; then
      keys="$dir/keys-$attempt"
      mkdir -p "$keys"
      for i in 0 1 2 3; do
        "$tessera" keygen --out "$keys/localhost:$((base + i))" >/dev/null
        echo "$(cat "$keys/localhost:$((base + i)).pub") localhost:$((base + i))" >>"$keys/cluster.keys"
      done
    fi
    status=0
    run_slurm_once "$1" "$base" "$keys" "$3" "${4:-}" || status=$?
    [ "$status" = 0 ] && return 0
    [ "$status" = 75 ] || exit "$status"
    echo "a port of $base..$((base + 3)) was taken meanwhile: again on other ports"
  done
  fail "slurm_digits.sbatch ($1): ports taken three times"
}

run_slurm insecure "" ""
run_slurm keys-sync keys 1  # with keys, and synchronous training
# The MLP of tessera::layers, synchronous: batch normalization's moving statistics live on the ps
# tasks and each worker's step runs their updates first (UPDATE_OPS) through SyncReplicasOptimizer.
run_slurm layers-sync "" 1 layers

# Kubernetes: the Pods' commands and TF_CONFIGs, run here.
python3 - "$src/examples/deploy/kubernetes.yaml" "$dir/k8s" "$tessera" <<'EOF' || fail "kubernetes.yaml's Pods failed"
import json, os, random, re, shlex, socket, subprocess, sys, time
manifest, work, tessera = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
try:
    import yaml
except ImportError:
    print("python3-yaml is missing (scripts/install-deps --for test installs it)"); sys.exit(1)
pods = [d for d in yaml.safe_load_all(open(manifest)) if d and d.get("kind") == "Pod"]
assert len(pods) == 4, f"{len(pods)} Pods, expected 4"
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
addresses = {}
for pod in pods:
    spec = pod["spec"]
    addresses[f"{spec['hostname']}.{spec['subdomain']}:2222"] = f"127.0.0.1:{free_port()}"
def swap(text):
    for a, b in addresses.items():
        text = text.replace(a, b)
    return text
keys = os.path.join(work, "keys"); os.makedirs(keys, exist_ok=True)
with open(os.path.join(keys, "cluster.keys"), "w") as ck:
    for pod in pods:
        name = pod["metadata"]["name"]
        subprocess.run([tessera, "keygen", "--out", os.path.join(keys, name)], check=True, capture_output=True)
        addr = addresses[f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}:2222"]
        ck.write(open(os.path.join(keys, name + ".pub")).read().strip() + " " + addr + "\n")
procs = []
for pod in pods:
    c = pod["spec"]["containers"][0]
    env = dict(os.environ)
    for e in c["env"]:
        env[e["name"]] = swap(e["value"])
    json.loads(env["TF_CONFIG"])
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    args = [swap(a) for a in c["command"]]
    assert args[0] == "tessera", args
    args[0] = tessera
    args = [a.replace("/keys/", keys + "/") for a in args]
    if "/checkpoints" in mounts:
        args = [os.path.join(work, "ckpt") if a == "/checkpoints" else a for a in args]
    args[args.index("--steps") + 1] = "150"
    log = open(os.path.join(work, pod["metadata"]["name"] + ".log"), "w")
    procs.append((pod["metadata"]["name"], subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)))
ok = True
deadline = time.time() + 300
for name, p in procs:
    try:
        rc = p.wait(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        p.kill(); rc = "timeout"
    if rc != 0:
        ok = False
        print(f"{name}: exit {rc}\n" + open(os.path.join(work, name + ".log")).read()[-2000:])
chief = open(os.path.join(work, "tessera-worker-0.log")).read()
if not re.search(r"^worker 0: .*test accuracy 0\.\d+", chief, re.M):
    ok = False; print("the chief printed no accuracy:\n" + chief[-2000:])
sys.exit(0 if ok else 1)
EOF
echo "deploy: the Slurm script (without and with keys) and the Kubernetes Pods ran the job here"

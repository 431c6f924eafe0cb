#!/usr/bin/env bash
# Checks berth's GPU discovery and isolation on a machine with NVIDIA GPUs (docs/security.md
# "Isolation"). The build and the tests never need one; run this wherever one is at hand:
#   sudo scripts/gpu-check.sh [path/to/berth]
# It starts a private server and a root agent that discovers the GPUs with nvidia-smi (temporary state
# dirs, 127.0.0.1, port 0), then checks:
#   1. discovery: the node offers as many GPUs as `nvidia-smi -L` lists, of the type it names;
#   2. a job given one GPU sees only it: `nvidia-smi -L` inside lists one GPU, CUDA_VISIBLE_DEVICES is
#      0 and BERTH_GPU_IDS names its index on the node;
#   3. a job cannot open another GPU's device file (EPERM) and can open its own; a job without
#      GPUs opens none;
#   4. with two GPUs or more, two one-GPU jobs run at once on different devices;
#   5. the health probes read the real nvidia-smi: "gpus" and "ecc" ran and found every GPU
#      (docs/operators.md "Node health"; a GPU with real ECC trouble fails this check, rightly);
#   6. on GPUs in MIG mode (docs/gpus.md): the node offers exactly the MIG devices `nvidia-smi -L`
#      lists, by UUID, and a job on a slice gets that slice's UUID and opens its own capability files
#      under /dev/nvidia-caps and no other's;
#   7. where nvidia-cuda-mps-control is on PATH: a half-GPU job runs under an MPS daemon the agent
#      started, with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 and a memory limit;
#   8. topology (docs/topology.md): the NUMA node the agent reports for each GPU is the one
#      `nvidia-smi topo -m` names, and GPUs it puts in one NVLink island are joined by NV# there;
#   9. the NVLink domain across nodes: the node's berth.nvlink_domain label is
#      <ClusterUUID>.<CliqueId> of `nvidia-smi -q`'s Fabric section where one is Completed, and
#      absent where none is (every GPU without a multi-node fabric: H100/H200 HGX, PCIe cards);
#  10. CUDA works inside the fence: where the checker's python3 imports torch, a one-GPU job (and,
#      with MPS, a half-GPU job through its daemon) multiplies two matrices on its GPU, so the fence
#      lets through what CUDA opens besides the GPU's own file (nvidiactl, nvidia-uvm).
# Read-only: it never changes a GPU's mode or MIG layout (the agent runs without --mig-reconfigure).
# Checks 1-4 need a GPU not in MIG mode; they are skipped, saying so, where there is none.
# Prints one line per check and exits non-zero when one fails. With GPU_CHECK_LOGS=DIR it leaves the
# server's and the agent's logs in DIR.
set -uo pipefail
berth=${1:-$(dirname "$0")/../build/src/berth}
berth=$(realpath "$berth")
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

if [ "$(id -u)" -ne 0 ]; then echo "gpu-check: run as root (the agent makes cgroups)" >&2; exit 2; fi
if ! command -v nvidia-smi >/dev/null 2>&1; then echo "gpu-check: no nvidia-smi here" >&2; exit 2; fi
listing=$(nvidia-smi -L)
gpus=$(echo "$listing" | grep -c '^GPU ')
if [ "$gpus" -lt 1 ]; then echo "gpu-check: nvidia-smi lists no GPU" >&2; exit 2; fi
# GPUs in MIG mode are offered as their MIG devices, not whole.
mig_uuids=$(echo "$listing" | sed -n 's/^ *MIG .*(UUID: \(MIG-[^)]*\)).*/\1/p' | sort)
mig_devices=$(echo -n "$mig_uuids" | grep -c '^MIG-')
mig_gpus=$(echo "$listing" | awk '/^GPU /{g=$0} /^ *MIG /{if (g!="") {n++; g=""}} END{print n+0}')
expected=$((gpus - mig_gpus + mig_devices))

tmp=$(mktemp -d /tmp/berth-gpu-check-XXXXXX)
cleanup() {
  [ -n "${agent_pid:-}" ] && kill "$agent_pid" 2>/dev/null
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null
  sleep 1
  if [ -n "${GPU_CHECK_LOGS:-}" ]; then
    mkdir -p "$GPU_CHECK_LOGS" && cp "$tmp"/*.log "$GPU_CHECK_LOGS"/ 2>/dev/null
    tar czf "$GPU_CHECK_LOGS/state.tgz" -C "$tmp" --exclude='*.sock' . 2>/dev/null
  fi
  pkill -f "$tmp" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
"$berth" server --listen 127.0.0.1:0 --state-dir "$tmp/server" --url-file "$tmp/url" --allow-root-jobs \
  >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.1; done
export BERTH_SERVER=$(cat "$tmp/url")
"$berth" agent --server "$BERTH_SERVER" --name gpu-check --state-dir "$tmp/agent" \
  --token-file "$tmp/server/token" --require-isolation --health-interval 2s >"$tmp/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 100); do "$berth" nodes --json 2>/dev/null | grep -q '"UP"' && break; sleep 0.2; done

node=$("$berth" nodes --json)
offered=$(echo "$node" | /usr/bin/python3 -c 'import json,sys; n=json.load(sys.stdin)[0]; print(sum(n["capacity"]["gpus"].values()), ",".join(n["capacity"]["gpus"]), n["isolation"])')
read -r count types isolation <<<"$offered"
if [ "$count" = "$expected" ]; then ok "discovery: $count device(s) of type(s) $types (nvidia-smi lists $gpus GPU(s), $mig_devices MIG device(s)); isolation $isolation"
else bad "discovery: the node offers $count device(s), nvidia-smi lists $gpus GPU(s) of which $mig_gpus in MIG mode with $mig_devices MIG device(s)"; fi
# A whole GPU's type has no "-" (a slice's is GPU-PROFILE).
type=$(echo "$types" | tr ',' '\n' | grep -v -- - | head -1)
slice_type=$(echo "$types" | tr ',' '\n' | grep -- - | head -1)

run_job() { run_on "$type:1" "$1"; }  # run_job SCRIPT -> a one-GPU job's output

run_on() {  # run_on GPUS SCRIPT -> prints the job's output ("" GPUS: a job without GPUs)
  local id
  id=$("$berth" exec -d --json ${1:+--gpus "$1"} -- "$2" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0])')
  # A job that did not succeed says why on stderr.
  "$berth" wait "$id" >/dev/null 2>&1 || "$berth" show "$id" >&2
  "$berth" logs "$id" --no-follow
}

if [ -z "$type" ]; then
  echo "skip checks 2-4: every GPU is in MIG mode"
else
out=$(run_job 'nvidia-smi -L; echo "cvd=$CUDA_VISIBLE_DEVICES ids=$BERTH_GPU_IDS"')
seen=$(echo "$out" | grep -c '^GPU ')
if [ "$seen" = 1 ] && echo "$out" | grep -q 'cvd=0 '; then ok "a one-GPU job sees one GPU: $(echo "$out" | tail -1)"
else bad "a one-GPU job sees $seen GPU(s): $out"; fi

# Denied is EPERM (the fence); an open that reaches the driver passed it, also one the driver
# answers ENXIO (a device node with no GPU behind it).
probe='mine=$BERTH_GPU_IDS; for d in /dev/nvidia[0-9]*; do i=${d#/dev/nvidia}; if err=$( (exec 3<>"$d") 2>&1 ); then echo "gpu $i open"; elif echo "$err" | grep -q "not permitted"; then echo "gpu $i denied"; else echo "gpu $i open"; fi; done; echo "mine=$mine"'
out=$(run_job "$probe")
mine=$(echo "$out" | sed -n 's/^mine=//p')
if echo "$out" | grep -q "^gpu $mine open$" && ! echo "$out" | grep -v "^gpu $mine " | grep -q "open$"; then
  ok "a job opens its own GPU ($mine) and no other (of $gpus)"
else bad "device fencing: $out"; fi
# With one GPU the check above denies nothing; a job without GPUs is denied every one.
out=$(run_on "" "$probe")
if echo "$out" | grep -q '^gpu [0-9]* denied$' && ! echo "$out" | grep -q 'open$'; then
  ok "a job without GPUs opens none of them"
else bad "device fencing of a job without GPUs: $out"; fi

if [ "$gpus" -ge 2 ]; then
  a=$("$berth" exec -d --json --gpus "$type:1" -- 'echo ids=$BERTH_GPU_IDS; sleep 5' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0])')
  b=$("$berth" exec -d --json --gpus "$type:1" -- 'echo ids=$BERTH_GPU_IDS; sleep 5' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0])')
  "$berth" wait "$a" "$b" >/dev/null 2>&1
  ia=$("$berth" logs "$a" --no-follow); ib=$("$berth" logs "$b" --no-follow)
  if [ "$ia" != "$ib" ]; then ok "two one-GPU jobs ran on different devices ($ia, $ib)"
  else bad "two one-GPU jobs shared a device: $ia"; fi
fi
fi

if [ "$mig_devices" -gt 0 ]; then
  offered_uuids=$(echo "$node" | /usr/bin/python3 -c '
import json, sys
print(sum(1 for d in json.load(sys.stdin)[0]["devices"] if "gpu" in d))')
  if [ "$offered_uuids" = "$mig_devices" ]; then ok "MIG: the node offers the $mig_devices MIG device(s) nvidia-smi lists"
  else bad "MIG: the node offers $offered_uuids slice(s), nvidia-smi lists $mig_devices"; fi
  caps='for f in /dev/nvidia-caps/nvidia-cap*; do if exec 3<>"$f" 2>/dev/null; then exec 3>&-; echo "cap $f open"; else echo "cap $f $?"; fi; done; echo "cvd=$CUDA_VISIBLE_DEVICES"'
  out=$(run_on "$slice_type:1" "$caps")
  cvd=$(echo "$out" | sed -n 's/^cvd=//p')
  # Of the instances' capability files (the driver's table names them gpuN/giM/...), exactly its own
  # two (its GPU instance's and its compute instance's) open.
  opened=$(echo "$out" | /usr/bin/python3 -c '
import sys
instance = set()
for line in open("/proc/driver/nvidia-caps/mig-minors"):
    name, _, minor = line.strip().rpartition(" ")
    if name.startswith("gpu") and "/gi" in name:
        instance.add("/dev/nvidia-caps/nvidia-cap" + minor)
print(sum(1 for l in sys.stdin if l.startswith("cap ") and l.split()[1] in instance and l.rstrip().endswith(" open")))')
  if echo "$mig_uuids" | grep -qx -- "$cvd" && [ "$opened" = 2 ]; then
    ok "MIG: a $slice_type job sees its slice $cvd and opens its own 2 instance capability files"
  else bad "MIG: a $slice_type job opens $opened instance capability file(s): $out"; fi
fi

if command -v nvidia-cuda-mps-control >/dev/null 2>&1 && [ -n "$type" ]; then
  out=$(run_on "$type:0.5" 'echo "pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT pipe=$CUDA_MPS_PIPE_DIRECTORY"; ls "$CUDA_MPS_PIPE_DIRECTORY" | head -3')
  if echo "$out" | grep -q '^pct=50 mem=0=[0-9]*M pipe=/'; then ok "MPS: a half-GPU job runs under its device's daemon: $(echo "$out" | head -1)"
  else bad "MPS: a half-GPU job: $out"; fi
fi
# The checker's own python and library path, so that the job finds torch and the driver's libcuda.
py=$(command -v python3)
if [ -n "$type" ] && "$py" -c 'import torch' 2>/dev/null; then
  matmul="LD_LIBRARY_PATH='${LD_LIBRARY_PATH:-}' '$py' -c 'import torch; a = torch.ones(1024, 1024, device=\"cuda\"); print(\"cuda\", torch.cuda.device_count(), torch.cuda.get_device_name(0), (a @ a)[0, 0].item())'"
  out=$(run_on "$type:1" "$matmul" 2>&1)
  if echo "$out" | grep -q '^cuda 1 .* 1024.0$'; then ok "CUDA in a one-GPU job: $(echo "$out" | grep '^cuda')"
  else bad "CUDA in a one-GPU job: $out"; fi
  if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    out=$(run_on "$type:0.5" "$matmul" 2>&1)
    if echo "$out" | grep -q '^cuda 1 .* 1024.0$'; then ok "CUDA in a half-GPU job under MPS: $(echo "$out" | grep '^cuda')"
    else bad "CUDA in a half-GPU job under MPS: $out"; fi
  fi
else
  echo "skip check 10: no whole GPU, or the checker's python3 has no torch"
fi
topo=$(nvidia-smi topo -m 2>/dev/null)
if [ -n "$topo" ]; then
  verdict=$(echo "$node" | TOPO="$topo" /usr/bin/python3 -c '
import json, os, sys
rows = [l.split("\t") for l in os.environ["TOPO"].splitlines() if l.startswith("GPU")]
head = [c.strip() for c in os.environ["TOPO"].splitlines()[0].split("\t")]
numa_col = head.index("NUMA Affinity") if "NUMA Affinity" in head else -1
devices = [d for d in json.load(sys.stdin)[0]["devices"] if "gpu" not in d]
bad = []
for d in devices:
    row = next((r for r in rows if r[0].strip() == "GPU%d" % d["index"]), None)
    if row is None:
        continue
    want = row[numa_col].strip() if numa_col >= 0 else ""
    if want.isdigit() and d.get("numa") != int(want):
        bad.append("GPU%d numa %s, nvidia-smi %s" % (d["index"], d.get("numa"), want))
islands = {}
for d in devices:
    if d.get("nvlink"):
        islands.setdefault(d["nvlink"], []).append(d["index"])
def nv(a, b):
    row = next(r for r in rows if r[0].strip() == "GPU%d" % a)
    return row[head.index("GPU%d" % b)].strip().startswith("NV")
for island, members in islands.items():
    seen, todo = {members[0]}, [members[0]]
    while todo:
        a = todo.pop()
        for b in members:
            if b not in seen and nv(a, b):
                seen.add(b)
                todo.append(b)
    if seen != set(members):
        bad.append("island %s %s is not joined by NVLink in nvidia-smi topo -m" % (island, members))
print("; ".join(bad) if bad else "ok " + ",".join("GPU%d:nvlink=%s,numa=%s" % (d["index"], d.get("nvlink", 0), d.get("numa")) for d in devices))')
  if [ "${verdict%% *}" = ok ]; then ok "topology: ${verdict#ok }"
  else bad "topology: $verdict"; fi
fi
fabric=$(nvidia-smi -q | /usr/bin/python3 -c '
import sys
state = cluster = clique = None
found = set()
for line in sys.stdin:
    key, _, value = line.partition(":")
    key, value = key.strip(), value.strip()
    if key == "State": state = value
    if key == "CliqueId": clique = value
    if key == "ClusterUUID":
        cluster = value
        if state == "Completed" and cluster.strip("0-") and cluster != "N/A" and clique.isdigit():
            found.add(cluster + "." + clique)
print(found.pop() if len(found) == 1 else "")')
label=$("$berth" nodes gpu-check --json | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin).get("labels", {}).get("berth.nvlink_domain", ""))')
if [ "$fabric" = "$label" ]; then ok "NVLink domain across nodes: '${label:-none}' (nvidia-smi -q: '${fabric:-none}')"
else bad "NVLink domain: label '$label', nvidia-smi -q says '$fabric'"; fi
health=$("$berth" nodes gpu-check --json | /usr/bin/python3 -c '
import json, sys
n = json.load(sys.stdin)
p = {x["name"]: x for x in n["health"]["probes"]}
print(n["health"]["state"], "gpus=" + ("ok" if p.get("gpus", {}).get("ok") else p.get("gpus", {}).get("reason", "did not run")),
      "ecc=" + ("ok" if p.get("ecc", {}).get("ok") else p.get("ecc", {}).get("reason", "did not run")))')
if [ "${health%% *}" = ok ] && echo "$health" | grep -q 'gpus=ok ecc=ok'; then ok "health probes on the real GPUs: $health"
else bad "health probes: $health"; fi
exit $fail

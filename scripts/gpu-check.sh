#!/usr/bin/env bash
# Checks berth's GPU discovery and isolation on a machine with NVIDIA GPUs (docs/security.md
# "Isolation"). The build and the tests never need one; run this wherever one is at hand:
#   sudo scripts/gpu-check.sh [path/to/berth]
# It starts a private server and a root agent that discovers the GPUs with nvidia-smi (temporary state
# dirs, 127.0.0.1, port 0), then checks:
#   1. discovery: the node offers as many GPUs as `nvidia-smi -L` lists, of the type it names;
#   2. a job given one GPU sees only it: `nvidia-smi -L` inside lists one GPU, CUDA_VISIBLE_DEVICES is
#      0 and BERTH_GPU_IDS names its index on the node;
#   3. a job cannot open another GPU's device file (EPERM) and can open its own;
#   4. with two GPUs or more, two one-GPU jobs run at once on different devices;
#   5. the health probes read the real nvidia-smi: "gpus" and "ecc" ran and found every GPU
#      (docs/operators.md "Node health"; a GPU with real ECC trouble fails this check, rightly).
# Prints one line per check and exits non-zero when one fails.
set -uo pipefail
berth=${1:-$(dirname "$0")/../build/src/berth}
berth=$(realpath "$berth")
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

if [ "$(id -u)" -ne 0 ]; then echo "gpu-check: run as root (the agent makes cgroups)" >&2; exit 2; fi
if ! command -v nvidia-smi >/dev/null 2>&1; then echo "gpu-check: no nvidia-smi here" >&2; exit 2; fi
gpus=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$gpus" -lt 1 ]; then echo "gpu-check: nvidia-smi lists no GPU" >&2; exit 2; fi

tmp=$(mktemp -d /tmp/berth-gpu-check-XXXXXX)
cleanup() {
  [ -n "${agent_pid:-}" ] && kill "$agent_pid" 2>/dev/null
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null
  sleep 1
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
if [ "$count" = "$gpus" ]; then ok "discovery: $count GPU(s) of type $types (nvidia-smi lists $gpus); isolation $isolation"
else bad "discovery: the node offers $count GPU(s), nvidia-smi lists $gpus"; fi
type=${types%%,*}

run_job() {  # run_job SCRIPT -> prints the job's output
  local id
  id=$("$berth" exec -d --json --gpus "$type:1" -- "$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0])')
  "$berth" wait "$id" >/dev/null 2>&1
  "$berth" logs "$id" --no-follow
}

out=$(run_job 'nvidia-smi -L; echo "cvd=$CUDA_VISIBLE_DEVICES ids=$BERTH_GPU_IDS"')
seen=$(echo "$out" | grep -c '^GPU ')
if [ "$seen" = 1 ] && echo "$out" | grep -q 'cvd=0 '; then ok "a one-GPU job sees one GPU: $(echo "$out" | tail -1)"
else bad "a one-GPU job sees $seen GPU(s): $out"; fi

probe='mine=$BERTH_GPU_IDS; for d in /dev/nvidia[0-9]*; do i=${d#/dev/nvidia}; if exec 3<>"$d" 2>/dev/null; then exec 3>&-; echo "gpu $i open"; else echo "gpu $i denied"; fi; done; echo "mine=$mine"'
out=$(run_job "$probe")
mine=$(echo "$out" | sed -n 's/^mine=//p')
if echo "$out" | grep -q "^gpu $mine open$" && ! echo "$out" | grep -v "^gpu $mine " | grep -q "open$"; then
  ok "a job opens its own GPU ($mine) and no other"
else bad "device fencing: $out"; fi

if [ "$gpus" -ge 2 ]; then
  a=$("$berth" exec -d --json --gpus "$type:1" -- 'echo ids=$BERTH_GPU_IDS; sleep 5' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0])')
  b=$("$berth" exec -d --json --gpus "$type:1" -- 'echo ids=$BERTH_GPU_IDS; sleep 5' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0])')
  "$berth" wait "$a" "$b" >/dev/null 2>&1
  ia=$("$berth" logs "$a" --no-follow); ib=$("$berth" logs "$b" --no-follow)
  if [ "$ia" != "$ib" ]; then ok "two one-GPU jobs ran on different devices ($ia, $ib)"
  else bad "two one-GPU jobs shared a device: $ia"; fi
fi
health=$("$berth" nodes gpu-check --json | /usr/bin/python3 -c '
import json, sys
n = json.load(sys.stdin)
p = {x["name"]: x for x in n["health"]["probes"]}
print(n["health"]["state"], "gpus=" + ("ok" if p.get("gpus", {}).get("ok") else p.get("gpus", {}).get("reason", "did not run")),
      "ecc=" + ("ok" if p.get("ecc", {}).get("ok") else p.get("ecc", {}).get("reason", "did not run")))')
if [ "${health%% *}" = ok ] && echo "$health" | grep -q 'gpus=ok ecc=ok'; then ok "health probes on the real GPUs: $health"
else bad "health probes: $health"; fi
exit $fail

#!/bin/bash
# The daemons' CPU for a launch of N jobs that each print a line (default 1000), on a local cluster
# in /dev/shm: wall time to all SUCCEEDED, and the server's and the agent's CPU from /proc/PID/stat.
# Usage: bench/print_cpu.sh [BERTH_BINARY] [N]     (bench/README.md, session 34)
set -euo pipefail
B=${1:-build/src/berth}
N=${2:-1000}
export BERTH_HOME=/dev/shm/berth-print-cpu-$$
trap '"$B" local down >/dev/null 2>&1 || true; rm -rf "$BERTH_HOME"' EXIT
"$B" local up --cpus 1024 >/dev/null
pid_of() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$BERTH_HOME/local.json"; }
server=$(pid_of "d['server_pid']")
agent=$(pid_of "d['agent_pids'][0]")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
s0=$(ticks "$server"); a0=$(ticks "$agent"); t0=$(date +%s%N)
"$B" exec -d --cpus 1 --num-jobs "$N" -- echo hello >/dev/null
until "$B" queue 2>/dev/null | grep -q "$N SUCCEEDED"; do sleep 0.05; done
t1=$(date +%s%N); s1=$(ticks "$server"); a1=$(ticks "$agent")
awk -v w=$(( (t1 - t0) / 1000000 )) -v s=$((s1 - s0)) -v a=$((a1 - a0)) -v hz="$hz" -v n="$N" \
  'BEGIN { printf "%d printing jobs: wall %.2f s, server CPU %.2f s, agent CPU %.2f s\n", n, w / 1000, s / hz, a / hz }'

#!/usr/bin/env python3
"""What isolating jobs costs a bulk launch (docs/security.md "Isolation").

  python3 bench/isolation.py [--berth PATH] [--pairs N] [--jobs N] [--json OUT]

One local node (`berth local up --cpus 1024`, as bench/bulk.py), `berth exec task.yaml --num-jobs 1000 -d` of
`cpus: 1` jobs that run `true`, timed until every job is SUCCEEDED, with the agent's `--isolation auto` (each
rank in cgroups of its own, made and removed by the node supervisor) and `--isolation off`, in alternating
pairs in one run (fresh clusters each time). Prints the medians and the ratio on / off (target <= 1.15). Needs
root and a host where the agent can make cgroups; says so and exits 2 otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bulk  # noqa: E402  (Cluster, machine(): one way of starting clusters and describing the machine)

TARGET_RATIO = 1.15


def one_launch(berth, tmp, name, isolation, n):
    c = bulk.Cluster(berth, tmp, name, up_args=["--isolation", isolation])
    try:
        log = open(os.path.join(c.home, "logs", "agent-local-0.log")).read()
        layout = log.split("isolation: ", 1)[1].split("\n", 1)[0] if "isolation: " in log else "?"
        t0 = time.perf_counter()
        out = subprocess.run([berth, "exec", "task.yaml", "--num-jobs", str(n), "-d", "--json"], env=c.env,
                             check=True, capture_output=True, text=True, cwd=c.work).stdout
        ans = json.loads(out)
        done = c.wait_done(max(ans["jobs"]), ans["group"]) - t0
        jobs = c.all_jobs(ans["group"])
        bad = [j for j in jobs if j["status"] != "SUCCEEDED"]
        if bad:
            raise RuntimeError(f"{len(bad)} jobs did not succeed, e.g. {bad[0]['status']}: {bad[0]['reason']}")
        return done, layout
    finally:
        c.down()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(bulk.ROOT, "build", "src", "berth"))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("isolation needs root (the agent makes cgroups): nothing to compare", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="berth-isolation-bench-")
    times = {"auto": [], "off": []}
    layout = None
    for i in range(args.pairs):
        for mode in (("auto", "off") if i % 2 == 0 else ("off", "auto")):
            t, seen = one_launch(args.berth, tmp, f"{mode}-{i}", mode, args.jobs)
            if mode == "auto":
                layout = seen
                if seen.startswith("none"):
                    print(f"the agent cannot isolate here ({seen}): nothing to compare", file=sys.stderr)
                    return 2
            times[mode].append(t)
            bulk.log(f"pair {i + 1}: isolation {mode}: {args.jobs} jobs SUCCEEDED in {t:.3f} s")
    on, off = statistics.median(times["auto"]), statistics.median(times["off"])
    ratio = on / off
    verdict = "ok" if ratio <= TARGET_RATIO else "MISSED"
    print(f"machine: {bulk.machine()}")
    print(f"isolation layout: {layout}")
    print(f"{args.jobs}-job bulk launch to all SUCCEEDED, median of {args.pairs}: "
          f"isolation on {on:.3f} s, off {off:.3f} s, ratio {ratio:.2f} (target <= {TARGET_RATIO}) {verdict}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"on_s": times["auto"], "off_s": times["off"], "ratio": ratio, "layout": layout}, f)
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())

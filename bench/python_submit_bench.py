#!/usr/bin/env python3
"""What the Python client costs a bulk submission, against the CLI (issue: Python client).

  python3 bench/python_submit_bench.py [--berth PATH] [--jobs 1000] [--repeat 7] [--json OUT]

One local cluster in a temporary BERTH_HOME (`berth local up --cpus 1024`), its node drained so that every
job stays PENDING: what is timed is the submission path alone, not launches. The same task file
(`{name: bulk, resources: {cpus: 1}, run: "true"}`) is submitted as one bulk group of --jobs jobs, in
alternating rounds:

  cli     `berth exec task.yaml --num-jobs N -d` (a process: start, read the file, POST /v1/jobs, exit);
  python  `berth.Client().submit(task.yaml, num_jobs=N)` in this process, a fresh Client each time (it
          finds the server as the CLI does, opens its connection, reads the file, POSTs);
  warm    the same call on one Client kept across rounds (its connection kept alive).

After each round every job is cancelled. Prints the median and minimum of each, and the ratios python / cli
and warm / cli (target: python <= 1.2x cli); exits 1 when the target is missed. Python's own start-up
(`python3 -c "import berth"`), which a script pays once, is printed beside them but not counted: a script
that submits pays it once, whatever it submits.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import berth  # noqa: E402

TASK_YAML = 'name: bulk\nresources:\n  cpus: 1\nrun: "true"\n'
TARGET_RATIO = 1.2


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(berth_bin, env, *args, timeout=120):
    """Runs `berth ARGS`, failing loudly."""
    p = subprocess.run([berth_bin, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"berth {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


def timed(fn):
    """Seconds `fn()` took, and what it returned."""
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


class Env:
    """os.environ set to the bench's cluster while a block runs (the client reads it when made)."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        self.saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)

    def __exit__(self, *exc):
        os.environ.clear()
        os.environ.update(self.saved)


def summary(name, samples):
    return {"name": name, "median_s": statistics.median(samples), "min_s": min(samples),
            "samples_s": samples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--berth", default=os.environ.get("BERTH_BIN") or os.path.join(ROOT, "build", "src", "berth"))
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    berth_bin = os.path.abspath(args.berth)

    tmp = tempfile.mkdtemp(prefix="berth-pybench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BERTH_", "SKYPILOT_"))}
    env["BERTH_HOME"] = os.path.join(tmp, "home")
    task = os.path.join(tmp, "task.yaml")
    with open(task, "w") as f:
        f.write(TASK_YAML)
    cli, fresh, warm = [], [], []
    try:
        run(berth_bin, env, "local", "up", "--gpus", "none", "--cpus", "1024")
        run(berth_bin, env, "drain", "local-0")
        with Env(env):
            kept = berth.Client()
            kept.submit(task, num_jobs=args.jobs)  # the server's first submission warms it up
            kept.cancel(all=True)
            for i in range(args.repeat):
                # Alternating, so that drift (the machine's other work) touches each alike.
                order = ["cli", "python", "warm"] if i % 2 == 0 else ["warm", "python", "cli"]
                for kind in order:
                    if kind == "cli":
                        t, out = timed(lambda: run(berth_bin, env, "exec", task, "--num-jobs", str(args.jobs),
                                                   "-d", "--json"))
                        assert len(json.loads(out)["jobs"]) == args.jobs
                        cli.append(t)
                    elif kind == "python":
                        def submit_fresh():
                            with berth.Client() as c:
                                return c.submit(task, num_jobs=args.jobs)
                        t, group = timed(submit_fresh)
                        assert len(group) == args.jobs
                        fresh.append(t)
                    else:
                        t, group = timed(lambda: kept.submit(task, num_jobs=args.jobs))
                        assert len(group) == args.jobs
                        warm.append(t)
                    kept.cancel(all=True)
            kept.close()
        startup = []
        for _ in range(3):
            t, _ = timed(lambda: subprocess.run([sys.executable, "-c", "import berth"], check=True,
                                                env=dict(env, PYTHONPATH=os.path.join(ROOT, "python"))))
            startup.append(t)
    finally:
        subprocess.run([berth_bin, "local", "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)

    rows = [summary("cli: berth exec --num-jobs", cli), summary("python: Client().submit(num_jobs=)", fresh),
            summary("python, one Client kept", warm), summary("python3 -c 'import berth' (not counted)", startup)]
    print(f"{args.jobs}-job bulk submission, {args.repeat} rounds, node drained (PENDING only); "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for r in rows:
        print(f"  {r['name']:<42} median {r['median_s'] * 1000:8.1f} ms   min {r['min_s'] * 1000:8.1f} ms")
    ratio = rows[1]["median_s"] / rows[0]["median_s"]
    warm_ratio = rows[2]["median_s"] / rows[0]["median_s"]
    ok = ratio <= TARGET_RATIO
    print(f"  ratio python / cli: {ratio:.2f}x (target <= {TARGET_RATIO}x: {'met' if ok else 'MISSED'}); "
          f"one Client kept / cli: {warm_ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jobs": args.jobs, "rows": rows, "ratio": ratio, "warm_ratio": warm_ratio,
                       "target": TARGET_RATIO}, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

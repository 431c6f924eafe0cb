#!/usr/bin/env python3
"""Workdir upload against rsync: one command, figures as ratios measured in the same run.

Builds a tree of 10,000 files and ~200 MB with a `.git` (5,000 small sources, 4,950 git objects, 50 data
files of 3 MB), then, in a temporary BERTH_HOME with a local cluster:

  rsync    `rsync -a TREE/ DEST/` into a fresh directory (the peer: what SkyPilot runs per node)
  first    `berth exec -d --workdir TREE -- true` with a cold stat cache and an empty server
  again    the same, nothing changed (every digest from the stat cache, nothing sent)
  one      the same after one source file changed (one blob sent)

Targets: first / rsync <= 1.0; one / first <= 0.1. Each case is repeated --repeat times (fresh caches,
a fresh cluster for `first`) and the median is reported.
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


def build_tree(root):
    os.makedirs(root)
    rnd = open("/dev/urandom", "rb")
    for i in range(5000):
        d = os.path.join(root, "src", f"pkg{i // 100}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"mod{i}.py"), "w") as f:
            f.write(f"# module {i}\n" + "x = 1\n" * 300)
    for i in range(4950):
        d = os.path.join(root, ".git", "objects", f"{i % 256:02x}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"obj{i:05d}"), "wb") as f:
            f.write(rnd.read(8 * 1024))
    os.makedirs(os.path.join(root, "data"))
    for i in range(50):
        with open(os.path.join(root, "data", f"shard{i}.bin"), "wb") as f:
            f.write(rnd.read(3 * 1024 * 1024))
    with open(os.path.join(root, ".gitignore"), "w") as f:
        f.write("*.pyc\n")


def tree_size(root):
    files, size = 0, 0
    for d, _, names in os.walk(root):
        for n in names:
            files += 1
            size += os.lstat(os.path.join(d, n)).st_size
    return files, size


def timed(cmd, env=None):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(HERE, "..", "build", "src", "berth"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    berth = os.path.abspath(args.berth)
    if not shutil.which("rsync"):
        sys.exit("rsync is needed as the peer (scripts/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="berth-bench-workdir-")
    try:
        tree = os.path.join(work, "tree")
        build_tree(tree)
        files, size = tree_size(tree)
        print(f"tree: {files} files, {size / 1e6:.0f} MB (with a .git)")
        results = {"rsync": [], "first": [], "again": [], "one": []}
        for r in range(args.repeat):
            dest = os.path.join(work, f"rsync-{r}")
            subprocess.run(["sync"])
            results["rsync"].append(timed(["rsync", "-a", tree + "/", dest + "/"]))
            shutil.rmtree(dest)
            home = os.path.join(work, f"home-{r}")
            env = dict(os.environ, BERTH_HOME=home, XDG_CACHE_HOME=os.path.join(work, f"cache-{r}"))
            subprocess.run([berth, "local", "up", "--gpus", "V100:1"], check=True, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                submit = [berth, "exec", "-d", "--workdir", tree, "--", "true"]
                subprocess.run(["sync"])
                results["first"].append(timed(submit, env))
                results["again"].append(timed(submit, env))
                with open(os.path.join(tree, "src", "pkg0", "mod0.py"), "a") as f:
                    f.write(f"y = {r}\n")
                results["one"].append(timed(submit, env))
            finally:
                subprocess.run([berth, "local", "down"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            shutil.rmtree(home, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in results.items()}
        print(f"rsync -a           {med['rsync']:.3f} s   runs {['%.3f' % x for x in results['rsync']]}")
        print(f"first submit       {med['first']:.3f} s   runs {['%.3f' % x for x in results['first']]}")
        print(f"unchanged resubmit {med['again']:.3f} s")
        print(f"one file changed   {med['one']:.3f} s")
        print(f"first / rsync = {med['first'] / med['rsync']:.2f}  (target <= 1.0)")
        print(f"one-changed / first = {med['one'] / med['first']:.3f}  (target <= 0.1)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"files": files, "bytes": size, "runs": results, "median": med}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

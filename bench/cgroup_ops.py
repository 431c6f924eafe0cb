#!/usr/bin/env python3
"""What the kernel charges for a job rank's cgroups (docs/security.md "Isolation"), per operation.

  sudo python3 bench/cgroup_ops.py [-n 200]

Under this process's own cgroup in each v1 hierarchy a rank may use (memory, cpu, pids, devices) and the
cgroup2 hierarchy, times mkdir, a forked child's join (writing "0" to cgroup.procs) and rmdir, n times each,
and prints the mean per operation: the floor under bench/isolation.py's ratio. Removes what it made.
"""
import argparse
import os
import sys
import time


def own_dirs():
    dirs = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in (controllers.split(",") if controllers else ["unified"]):
                base = "/sys/fs/cgroup/" + c if c != "unified" or os.path.isdir("/sys/fs/cgroup/unified") \
                    else "/sys/fs/cgroup"
                d = base + (path if path != "/" else "")
                if os.path.isdir(d) and os.access(d, os.W_OK):
                    dirs[c] = d
    return {c: d for c, d in dirs.items() if c in ("memory", "cpu", "pids", "devices", "unified")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("making cgroups needs root", file=sys.stderr)
        return 2
    dirs = own_dirs()
    if not dirs:
        print("no writable cgroup hierarchy", file=sys.stderr)
        return 2
    mk = {c: 0.0 for c in dirs}
    rm = {c: 0.0 for c in dirs}
    join = {c: 0.0 for c in dirs}
    tag = f"berth-bench-{os.getpid()}"
    for i in range(args.n):
        for c, d in dirs.items():
            t = time.perf_counter()
            os.mkdir(f"{d}/{tag}-{i}")
            mk[c] += time.perf_counter() - t
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            took = []
            for c, d in dirs.items():
                t = time.perf_counter()
                with open(f"{d}/{tag}-{i}/cgroup.procs", "w") as f:
                    f.write("0")
                took.append(time.perf_counter() - t)
            os.write(w, " ".join(map(str, took)).encode())
            os._exit(0)
        os.close(w)
        took = os.read(r, 4096).decode().split()
        os.close(r)
        os.waitpid(pid, 0)
        for c, v in zip(dirs, took):
            join[c] += float(v)
        for c, d in dirs.items():
            t = time.perf_counter()
            os.rmdir(f"{d}/{tag}-{i}")
            rm[c] += time.perf_counter() - t
    total = 0.0
    for c in dirs:
        per = (mk[c] + join[c] + rm[c]) / args.n * 1000
        total += per
        print(f"{c:8s} mkdir {mk[c] / args.n * 1000:.3f} ms  join {join[c] / args.n * 1000:.3f} ms  "
              f"rmdir {rm[c] / args.n * 1000:.3f} ms")
    print(f"all hierarchies: {total:.3f} ms per rank ({args.n} ranks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

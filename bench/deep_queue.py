#!/usr/bin/env python3
"""Small submissions into a deep queue: how long a one-job POST waits while passes run.

Starts a local cluster whose only node has one GPU, holds that GPU with a sleeping job, submits
--pending jobs that need it (groups of 10,000; they stay PENDING), then sends --posts single-job
POSTs, one every --gap-ms, over one keep-alive connection. Every POST asks for a scheduling pass,
so passes over the whole queue run back to back (or, since passes that decide nothing pace the
next, at most a quarter of the time), and a POST waits whenever it meets one holding the core's
lock. Every --posts/--fits POSTs, a job that fits (one CPU, no GPU) is submitted instead and its
status polled every millisecond until it leaves PENDING: what pacing costs a job that could start.
Prints the POSTs' p50 / p90 / max, the fitting jobs' time to placement, and the server's CPU; first,
how long each 10,000-job POST that filled the queue took, by the depth it went into (nothing is placed
meanwhile: the time a bulk submission costs the server at that depth, without a placement beside it).

    python3 bench/deep_queue.py --berth build/src/berth [--pending 100000] [--posts 300]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bulk  # noqa: E402


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_to_placement(conn, body):
    """POSTs `body` (a job that fits now) and polls it until it leaves PENDING; milliseconds."""
    t = time.perf_counter()
    conn.request("POST", "/v1/jobs", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    job = json.loads(r.read())["jobs"][0]
    while True:
        conn.request("GET", f"/v1/jobs/{job}")
        r = conn.getresponse()
        if json.loads(r.read())["status"] != "PENDING":
            return (time.perf_counter() - t) * 1000
        time.sleep(0.001)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(bulk.ROOT, "build", "src", "berth"))
    ap.add_argument("--pending", type=int, default=100_000)
    ap.add_argument("--posts", type=int, default=300)
    ap.add_argument("--gap-ms", type=float, default=5)
    ap.add_argument("--fits", type=int, default=10, help="jobs that fit, submitted among the POSTs")
    ap.add_argument("--tmpdir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="berth-deep-", dir=args.tmpdir)
    c = bulk.Cluster(os.path.abspath(args.berth), tmp, "deep", gpus="BENCH:1")
    try:
        fill_ms = []
        gpu = bulk.queue_behind_held_gpu(c, args.pending, post_ms=fill_ms)
        tenth = max(1, len(fill_ms) // 10)
        tenths = [statistics.median(fill_ms[i:i + tenth]) for i in range(0, len(fill_ms), tenth)]
        print(f"{len(fill_ms)} POSTs of up to 10,000 jobs filled the queue to {args.pending}: median "
              f"{statistics.median(fill_ms):.0f} ms; by tenths of the fill (median of each): "
              + ", ".join(f"{ms:.0f}" for ms in tenths) + " ms")
        time.sleep(1)
        host, port = c.url.split("//")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port))
        body = json.dumps({"spec": c.spec(name="one", resources=gpu)})
        fit_body = json.dumps({"spec": c.spec(name="fits", resources={"cpus": 1})})
        lat, placed = [], []
        cpu0 = cpu_s(c.server_pid)
        for i in range(args.posts):
            if args.fits > 0 and i % max(1, args.posts // args.fits) == args.posts // args.fits // 2:
                placed.append(time_to_placement(conn, fit_body))
            t = time.perf_counter()
            conn.request("POST", "/v1/jobs", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 201:
                raise RuntimeError(f"POST answered {r.status}")
            lat.append((time.perf_counter() - t) * 1000)
            time.sleep(args.gap_ms / 1000)
        cpu1 = cpu_s(c.server_pid)
        lat.sort()
        placed.sort()
        print(f"{args.posts} single-job POSTs into {args.pending} pending, one every {args.gap_ms:g} ms: "
              f"p50 {lat[len(lat) // 2]:.2f} ms, p90 {lat[int(len(lat) * 0.9)]:.2f} ms, max {lat[-1]:.2f} ms; "
              f"server CPU {cpu1 - cpu0:.2f} s")
        if placed:
            print(f"{len(placed)} jobs that fit, among them: left PENDING after p50 {placed[len(placed) // 2]:.1f} ms, "
                  f"max {placed[-1]:.1f} ms")
    finally:
        c.down()


if __name__ == "__main__":
    main()

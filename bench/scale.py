#!/usr/bin/env python3
"""End-to-end scale benchmark (issue "Scale"): a real server, 1,000 hollow nodes, 100,000 jobs.

  python3 bench/scale.py [--berth build/src/berth] [--nodes 1000] [--jobs 100000] [--groups 10]

Starts `berth server` and one `berth agent --hollow N` process (N simulated nodes over the real protocol,
8 H100 and 128 CPUs each), submits the jobs in bulk (`--groups` requests of jobs/groups each; 1 CPU per
job, so that all of them fit at once; hollow jobs without BERTH_HOLLOW_SECONDS run until cancelled), and
measures: the time until every job is placed (STARTING or later) and until every job is RUNNING, server
RSS (and per stored job), and the latency of `queue`'s first page and of `show` while it runs.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request


def http(url, method="GET", body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def count_states(url):
    """Counts of jobs by status, from the full listing."""
    jobs = http(url + "/v1/jobs?all=1&limit=0")["jobs"]
    counts = {}
    for j in jobs:
        counts[j["status"]] = counts.get(j["status"], 0) + 1
    return counts


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--berth", default=os.path.join(here, "..", "build", "src", "berth"))
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=10)
    args = ap.parse_args()
    berth = os.path.abspath(args.berth)
    tmp = tempfile.mkdtemp(prefix="berth-scale-")
    procs = []
    try:
        state = os.path.join(tmp, "server")
        url_file = os.path.join(tmp, "url")
        server = subprocess.Popen([berth, "server", "--listen", "127.0.0.1:0", "--state-dir", state,
                                   "--url-file", url_file, "--lease", "120s"],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "w"))
        procs.append(server)
        while not (os.path.exists(url_file) and open(url_file).read().strip()):
            time.sleep(0.01)
        url = open(url_file).read().strip()
        cpus_per_node = 128
        agent = subprocess.Popen([berth, "agent", "--hollow", str(args.nodes), "--server", url, "--name", "h",
                                  "--gpus", "H100:8", "--cpus", str(cpus_per_node), "--memory", "1024"],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "agent.log"), "w"))
        procs.append(agent)
        t0 = time.time()
        while len([n for n in http(url + "/v1/nodes")["nodes"] if n["state"] == "UP"]) < args.nodes:
            time.sleep(0.1)
        joined = time.time() - t0
        print(f"machine: {platform.node()}, {os.cpu_count()} CPUs; berth {berth}")
        print(f"{args.nodes} hollow nodes joined in {joined:.2f} s; server RSS {rss_mib(server.pid):.0f} MiB")

        per_group = args.jobs // args.groups
        spec = {"name": "sim", "run": "python train.py", "resources": {"cpus": 1}}
        latencies = {"queue": [], "show": []}
        stop = threading.Event()

        def probe():
            while not stop.is_set():
                t = time.perf_counter()
                http(url + "/v1/jobs?limit=50&page=50")
                latencies["queue"].append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                http(url + "/v1/jobs/1")
                latencies["show"].append((time.perf_counter() - t) * 1000)
                time.sleep(0.1)

        submit_ms = []
        t0 = time.time()
        for g in range(args.groups):
            t = time.perf_counter()
            http(url + "/v1/jobs", "POST", {"spec": spec, "user": "bench", "num_jobs": per_group})
            submit_ms.append((time.perf_counter() - t) * 1000)
            if g == 0:
                prober = threading.Thread(target=probe, daemon=True)
                prober.start()
        submitted = time.time() - t0
        total = per_group * args.groups
        placed_at = running_at = None
        while running_at is None and time.time() - t0 < 600:
            counts = count_states(url)
            pending = counts.get("PENDING", 0)
            if placed_at is None and pending == 0:
                placed_at = time.time() - t0
            if counts.get("RUNNING", 0) == total:
                running_at = time.time() - t0
            time.sleep(0.5)
        stop.set()
        rss = rss_mib(server.pid)
        print(f"submitted {total} jobs in {args.groups} requests: {submitted:.2f} s "
              f"(per request median {statistics.median(submit_ms):.0f} ms)")
        print(f"all placed after {placed_at if placed_at is None else round(placed_at, 2)} s; "
              f"all RUNNING after {running_at if running_at is None else round(running_at, 2)} s")
        print(f"server RSS with {total} jobs: {rss:.0f} MiB ({rss * 1024 * 1024 / total:.0f} bytes per job)")
        for name, xs in latencies.items():
            if xs:
                xs.sort()
                print(f"{name} latency while it ran: median {statistics.median(xs):.1f} ms, "
                      f"p99 {xs[int(len(xs) * 0.99)]:.1f} ms, max {xs[-1]:.1f} ms over {len(xs)} calls")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Core benchmarks of the berth job queue (issue: core).

  python3 bench/core.py [--berth build/src/berth]

Measures, on this machine:
  1. server start: from spawning `berth server` until /v1/health answers (median of 10);
  2. submit -> running on an idle node: from the submit request until the job's own first line of output
     records its start (median and p90 of 30);
  3. 100 queued one-second jobs of 1 GPU each on one node with 4 GPUs: from the first submit until all
     SUCCEEDED (ideal: 25 s), submitted with 100 sequential `berth exec -d` calls.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request


def http(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def wait_for_file(path, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.0005)
    raise RuntimeError(f"{path} did not appear")


def bench_server_start(berth, tmp):
    times = []
    for i in range(10):
        state = os.path.join(tmp, f"start{i}")
        url_file = os.path.join(state, "url")
        os.makedirs(state)
        t0 = time.perf_counter()
        p = subprocess.Popen([berth, "server", "--listen", "127.0.0.1:0", "--allow-root-jobs", "--state-dir", state, "--url-file", url_file],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = wait_for_file(url_file)
        while True:
            try:
                http(url + "/v1/health")
                break
            except Exception:
                time.sleep(0.0005)
        times.append((time.perf_counter() - t0) * 1000)
        p.terminate()
        p.wait()
    return statistics.median(times), min(times), max(times)


def cluster(berth, home, gpus="V100:4"):
    env = dict(os.environ, BERTH_HOME=home)
    subprocess.run([berth, "local", "up", "--gpus", gpus], env=env, check=True, stdout=subprocess.DEVNULL)
    status = json.loads(subprocess.run([berth, "local", "status", "--json"], env=env, check=True,
                                       capture_output=True, text=True).stdout)
    return env, status["server"]


def wait_done(url, ids, timeout=600):
    pending = set(ids)
    deadline = time.time() + timeout
    while pending and time.time() < deadline:
        jobs = http(url + "/v1/jobs?page=2000")["jobs"]  # the active jobs (fewer than a page here)
        state = {j["id"]: j["status"] for j in jobs}
        pending = {i for i in pending if state.get(i) not in ("SUCCEEDED", "FAILED", "CANCELLED", "FAILED_SETUP")}
        if pending:
            time.sleep(0.05)
    return not pending


def bench_submit_to_running(berth, tmp):
    home = os.path.join(tmp, "latency")
    env, url = cluster(berth, home)
    spec = {"name": "lat", "run": "date +%s.%N", "workdir": tmp, "resources": {"accelerators": {"V100": 1}}}
    lat = []
    try:
        for _ in range(30):
            t0 = time.time()
            job = http(url + "/v1/jobs", "POST", {"spec": spec})["jobs"][0]
            while True:
                r = urllib.request.urlopen(f"{url}/v1/jobs/{job}/logs?wait_ms=10000", timeout=30)
                out = r.read().decode()
                if out.strip():
                    break
            lat.append((float(out.split()[0]) - t0) * 1000)
            wait_done(url, [job])
    finally:
        subprocess.run([berth, "local", "down"], env=env, stdout=subprocess.DEVNULL)
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.9)]


def bench_hundred_jobs(berth, tmp):
    home = os.path.join(tmp, "hundred")
    env, url = cluster(berth, home)
    try:
        t0 = time.time()
        ids = []
        for _ in range(100):
            out = subprocess.run([berth, "exec", "-d", "--json", "--gpus", "V100:1", "--", "sleep 1"], env=env,
                                 check=True, capture_output=True, text=True, cwd=tmp).stdout
            ids += json.loads(out)["jobs"]
        submitted = time.time() - t0
        ok = wait_done(url, ids)
        total = time.time() - t0
    finally:
        subprocess.run([berth, "local", "down"], env=env, stdout=subprocess.DEVNULL)
    return submitted, total, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--berth", default=os.path.join(os.path.dirname(__file__), "..", "build", "src", "berth"))
    args = ap.parse_args()
    berth = os.path.abspath(args.berth)
    tmp = tempfile.mkdtemp(prefix="berth-bench-")
    try:
        print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs; berth {berth}")
        med, lo, hi = bench_server_start(berth, tmp)
        print(f"1. server start to first answer: median {med:.1f} ms (min {lo:.1f}, max {hi:.1f}) over 10 starts")
        med, p90 = bench_submit_to_running(berth, tmp)
        print(f"2. submit -> job running (its first output line) on an idle node: median {med:.1f} ms, p90 {p90:.1f} ms")
        submitted, total, ok = bench_hundred_jobs(berth, tmp)
        print(f"3. 100 one-second 1-GPU jobs on 4 GPUs: submitted in {submitted:.2f} s, all SUCCEEDED after "
              f"{total:.2f} s (ideal 25 s; overhead {total - 25:.2f} s){'' if ok else ' -- NOT ALL FINISHED'}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

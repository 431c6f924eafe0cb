#!/usr/bin/env python3
"""Listing latency with a big queue: one local node whose only GPU a sleeping job holds, N jobs that
stay PENDING behind it, then `GET /v1/jobs?limit=1`, `GET /v1/queue` and `GET /v1/health`, each sent
--samples times one after another once the server is quiet; prints the median and the minimum of each.

    python3 bench/listing_latency.py [--berth build/src/berth] [--jobs 100000] [--samples 30]

Run it for two binaries in turn (before, after, before, after) to compare them; bench/README.md has
figures."""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bulk  # noqa: E402  (the local-cluster helpers)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(here, "..", "build", "src", "berth"))
    ap.add_argument("--jobs", type=int, default=100_000, help="pending jobs (in POSTs of 10,000)")
    ap.add_argument("--samples", type=int, default=30)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="berth-listing-")
    c = bulk.Cluster(os.path.abspath(args.berth), tmp, "listing", gpus="BENCH:1")
    try:
        bulk.queue_behind_held_gpu(c, args.jobs)
        time.sleep(3)  # a scheduling pass over the whole queue has ended
        out = {}
        for name, path in [("jobs_page", "/v1/jobs?limit=1"), ("queue", "/v1/queue"), ("health", "/v1/health")]:
            times = []
            for _ in range(args.samples):
                t0 = time.perf_counter()
                bulk.http(c.url + path)
                times.append(time.perf_counter() - t0)
            out[name] = {"median_ms": statistics.median(times) * 1000, "min_ms": min(times) * 1000}
            print(f"GET {path:<18} median {out[name]['median_ms']:7.2f} ms  min {out[name]['min_ms']:7.2f} ms")
        print(json.dumps({"berth": args.berth, "jobs": args.jobs, **out}))
    finally:
        c.down()


if __name__ == "__main__":
    main()

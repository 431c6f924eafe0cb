#!/usr/bin/env python3
"""Server memory per finished submission: does the server's RSS grow with its history?

  python3 bench/history.py [--berth build/src/berth] [--jobs 20000] [--warmup N] [--run CMD] [--threads 4] [--json OUT]

One local node (`berth local up --cpus 64`) in a temporary BERTH_HOME. N single-job submissions, each its own
`POST /v1/jobs` (`{"spec": {name: hist, resources: {cpus: 1}, run: "true"}}`) sent by --threads client
threads with urllib, all run to SUCCEEDED: first N/2, then the other N/2. At each checkpoint (every job
submitted so far has ended) the script waits until the server has been quiet long enough for its heap trim
(the housekeeping thread starts it once the scheduler has had no work for 3 s, and it takes up to 2 s
more; see src/server/http/server.cpp), then samples the server's VmRSS (/proc/<pid>/status of $BERTH_HOME/server/server.pid)
several times, a second apart, and takes the minimum. It prints every sample, the RSS at N/2 and at N, and
the growth per submission between the two: what the server keeps for each finished submission.
Target: <= 100 bytes per submission. Exit status 1 when missed (or when a job did not succeed).

The server's idle trim gives back the free top of every arena its handler and scheduler threads use
(src/common/heap.h), but not free memory in chunks smaller than a page between live blocks: a few long-lived
small blocks scattered over an arena keep most of its pages resident (bench/README.md, session 26, found
expired spec-cache entries doing that). --warmup N runs N submissions first, not counted; --arenas prints, at
each checkpoint, every anonymous mapping's resident KiB, each arena's mapped and free bytes (gdb's call of
malloc_info) and SQLite's memory in use, to see where RSS that is not in use sits.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TERMINAL = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED", "LOST", "PREEMPTED"}
TARGET_BYTES_PER_SUBMISSION = 100
TRIM_QUIET_S = 3.0  # the server trims its heap once the scheduler has had no work for this long


sys.path.insert(0, HERE)
from bulk import http, log  # noqa: E402  (the benchmarks' shared helpers)


def proc_status(pid):
    """VmRSS, VmHWM, RssAnon of pid in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0])
    return out


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.0f} GiB"
    return {"cpus": os.cpu_count(), "model": model, "memory": mem, "kernel": platform.release(),
            "load_at_start": os.getloadavg()}


class Cluster:
    """A local berth cluster (one node) in its own BERTH_HOME."""

    def __init__(self, berth, tmp, cpus, run="true"):
        self.berth = berth
        self.run = run
        self.home = os.path.join(tmp, "home")
        self.work = os.path.join(self.home, "work")
        os.makedirs(self.work)
        self.env = dict(os.environ, BERTH_HOME=self.home)
        self.env.pop("BERTH_SERVER", None)
        subprocess.run([berth, "local", "up", "--cpus", str(cpus)], env=self.env, check=True,
                       stdout=subprocess.DEVNULL, cwd=self.work)
        status = json.loads(subprocess.run([berth, "local", "status", "--json"], env=self.env, check=True,
                                           capture_output=True, text=True, cwd=self.work).stdout)
        self.url = status["server"]
        with open(os.path.join(self.home, "server", "server.pid")) as f:
            self.server_pid = int(f.read().strip())
        deadline = time.time() + 30
        while time.time() < deadline:
            nodes = http(self.url + "/v1/nodes")["nodes"]
            if nodes and all(n["state"] == "UP" for n in nodes):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("the local node did not come UP")

    def spec(self):
        return {"name": "hist", "resources": {"cpus": 1}, "run": self.run, "workdir": self.work}

    def submit(self, n, threads):
        """n single-job submissions, one POST each, from `threads` threads; returns (seconds, max id)."""
        left = [n]
        lock = threading.Lock()
        ids, errors = [], []
        body = {"spec": self.spec()}

        def worker():
            mine = []
            try:
                while True:
                    with lock:
                        if left[0] <= 0:
                            break
                        left[0] -= 1
                    ans = http(self.url + "/v1/jobs", "POST", body)
                    mine.extend(ans["jobs"])
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))
            with lock:
                ids.extend(mine)

        t0 = time.perf_counter()
        ts = [threading.Thread(target=worker) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise RuntimeError(f"submissions failed: {errors[:3]}")
        assert len(ids) == n, (len(ids), n)
        return time.perf_counter() - t0, max(ids)

    def wait_done(self, last_id, timeout=3600):
        """Until no job is active (the newest watched alone first, then the list of active jobs)."""
        deadline = time.time() + timeout
        while http(f"{self.url}/v1/jobs/{last_id}")["status"] not in TERMINAL:
            if time.time() > deadline:
                raise RuntimeError(f"job {last_id} still active after {timeout} s")
            time.sleep(0.2)
        while any(j["status"] not in TERMINAL for j in http(f"{self.url}/v1/jobs?limit=1")["jobs"]):
            if time.time() > deadline:
                raise RuntimeError(f"jobs still active after {timeout} s")
            time.sleep(0.2)

    def statuses(self):
        """Status counts over every job (the listing's pages)."""
        counts, before = {}, None
        while True:
            page = http(f"{self.url}/v1/jobs?all=1&page=2000" + (f"&before={before}" if before else ""))
            for j in page["jobs"]:
                counts[j["status"]] = counts.get(j["status"], 0) + 1
            before = page.get("next")
            if not before:
                return counts

    def down(self):
        subprocess.run([self.berth, "local", "down"], env=self.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)


def settled_rss(pid, quiet_s, samples):
    """Waits quiet_s (the heap trim), then samples VmRSS `samples` times a second apart."""
    time.sleep(quiet_s)
    out = []
    for i in range(samples):
        if i:
            time.sleep(1.0)
        out.append(proc_status(pid))
    return out


def arenas(pid):
    """The server's glibc arenas (malloc_info, read through gdb): [(arena, bytes mapped, bytes free)]."""
    import re
    out = tempfile.mktemp(prefix="berth-malloc-info-", suffix=".xml")
    cmd = ["gdb", "-p", str(pid), "-batch", "-ex", f'call (void*)fopen("{out}", "w")', "-ex", "set $f = $1",
           "-ex", "call (int)malloc_info(0, $f)", "-ex", "call (int)fclose($f)",
           "-ex", "call (long long)sqlite3_memory_used()"]
    gdb = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=120)
    answers = [line.split(" = ", 1)[1] for line in gdb.stdout.splitlines() if line.startswith("$") and " = " in line]
    if answers:
        log(f"    SQLite's memory in use: {int(answers[-1]) / 1024:.0f} KiB")
    try:
        with open(out) as f:
            xml = f.read()
    finally:
        if os.path.exists(out):
            os.unlink(out)
    rows = []
    for m in re.finditer(r'<heap nr="(\d+)">(.*?)</heap>', xml, re.S):
        body = m.group(2)
        free = sum(int(x) for x in re.findall(r'<total type="\w+" count="\d+" size="(\d+)"/>', body))
        mapped = int(re.search(r'<system type="current" size="(\d+)"/>', body).group(1))
        rows.append((int(m.group(1)), mapped, free))
    return rows


def anon_mappings(pid):
    """The server's anonymous writable mappings with their resident KiB: [(start, KiB mapped, KiB resident)]."""
    rows, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                start, end = (int(x, 16) for x in head[0].split("-"))
                named = len(head) > 5 and head[5] not in ("[heap]",)
                cur = None if named or head[1][:2] != "rw" else [hex(start), (end - start) // 1024, 0]
                if cur is not None:
                    rows.append(cur)
            elif cur is not None and head[0] == "Rss:":
                cur[2] = int(head[1])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "build", "src", "berth"), help="berth binary")
    ap.add_argument("--jobs", type=int, default=20000, help="submissions in all (checkpoints at N/2 and N)")
    ap.add_argument("--threads", type=int, default=4, help="client threads sending submissions")
    ap.add_argument("--run", default="true", help="each job's command (default: true; e.g. 'echo x' to write a log)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="submissions run to the end before the first checkpoint and not counted (the allocator's "
                         "arenas reach their high-water mark over the first ~20,000; see bench/README.md)")
    ap.add_argument("--cpus", type=int, default=64, help="CPUs the local node declares")
    ap.add_argument("--quiet", type=float, default=TRIM_QUIET_S + 3.0,
                    help="seconds to wait after the last job ended before sampling (the trim starts after 3 s)")
    ap.add_argument("--samples", type=int, default=5, help="RSS samples per checkpoint, 1 s apart (min is used)")
    ap.add_argument("--tmpdir", help="where the temporary BERTH_HOME lives (default: $TMPDIR or /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster up at the end (prints BERTH_HOME)")
    ap.add_argument("--arenas", action="store_true",
                    help="after each checkpoint's samples, print the server's anonymous mappings (resident), its "
                         "malloc arenas (mapped, free) and SQLite's memory in use (needs gdb and root): where RSS "
                         "that is not in use sits")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    args = ap.parse_args()
    berth = os.path.abspath(args.berth)
    if not os.access(berth, os.X_OK):
        sys.exit(f"no berth binary at {berth}; build it or pass --berth")
    half = args.jobs // 2
    res = {"machine": machine(), "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "berth": berth, "jobs": args.jobs, "warmup": args.warmup, "threads": args.threads, "run": args.run,
           "checkpoints": []}
    tmp = tempfile.mkdtemp(prefix="berth-history-", dir=args.tmpdir)
    c = None
    try:
        c = Cluster(berth, tmp, args.cpus, args.run)
        log(f"cluster up (server pid {c.server_pid}, {c.url}); BERTH_HOME={c.home}")
        idle = settled_rss(c.server_pid, 1.0, 1)[0]
        res["idle"] = idle
        if args.warmup > 0:
            log(f"warm-up: {args.warmup} jobs (not counted) ...")
            _, last = c.submit(args.warmup, args.threads)
            c.wait_done(last)
            res["warmup"] = {"jobs": args.warmup, "samples": settled_rss(c.server_pid, args.quiet, 1)}
        done = 0
        for target in (half, args.jobs):
            n = target - done
            log(f"submitting {n} jobs ({done} -> {target}) ...")
            t0 = time.perf_counter()
            submit_s, last = c.submit(n, args.threads)
            c.wait_done(last)
            run_s = time.perf_counter() - t0
            done = target
            samples = settled_rss(c.server_pid, args.quiet, args.samples)
            cp = {"submissions": target, "submit_s": submit_s, "all_ended_s": run_s, "samples": samples,
                  "rss_kib": min(s["VmRSS"] for s in samples), "hwm_kib": max(s["VmHWM"] for s in samples)}
            if args.arenas:
                cp["mappings"] = anon_mappings(c.server_pid)
                for start, mapped, rss in cp["mappings"]:
                    if rss >= 256:
                        log(f"    mapping {start}: {mapped:8} KiB, {rss:8} KiB resident")
                cp["arenas"] = arenas(c.server_pid)
                for nr, mapped, free in cp["arenas"]:
                    log(f"    arena {nr:2}: {mapped / 1024:8.0f} KiB mapped, {free / 1024:8.0f} KiB free")
            res["checkpoints"].append(cp)
            log(f"  {target} ended: submitted in {submit_s:.1f} s ({n / submit_s:.0f}/s), all ended after "
                f"{run_s:.1f} s; VmRSS samples (KiB): {[s['VmRSS'] for s in samples]}")
        res["statuses"] = c.statuses()
    finally:
        if c is not None and args.keep:
            log(f"cluster kept: BERTH_HOME={c.home}")
        else:
            if c is not None:
                c.down()
            shutil.rmtree(tmp, ignore_errors=True)

    a, b = res["checkpoints"]
    growth = (b["rss_kib"] - a["rss_kib"]) * 1024 / (b["submissions"] - a["submissions"])
    res["bytes_per_submission"] = growth
    m = res["machine"]
    print(f"machine: {m['cpus']} CPUs, {m['model']}, {m['memory']} RAM, Linux {m['kernel']}; "
          f"load at start {m['load_at_start'][0]:.2f}")
    print(f"command: {res['command']}")
    print(f"berth:   {berth}; {args.threads} client threads, one job per POST /v1/jobs, run: {args.run!r}"
          + (f"; {args.warmup:,} warm-up jobs before the checkpoints" if args.warmup else ""))
    print()
    head = ("checkpoint", "submit", "all ended", "VmRSS samples (MiB)", "VmRSS (min)", "VmHWM")
    idle_label = f"after {args.warmup:,} warm-up" if args.warmup else "idle (0 jobs)"
    if args.warmup:
        idle = res["warmup"]["samples"][0]
    rows = [(idle_label, "", "", f"{idle['VmRSS'] / 1024:.1f}", f"{idle['VmRSS'] / 1024:.1f} MiB",
             f"{idle['VmHWM'] / 1024:.1f} MiB")]
    for cp in res["checkpoints"]:
        label = f"{cp['submissions']:,} finished" + (f" (+{args.warmup:,} warm-up)" if args.warmup else "")
        rows.append((label, f"{cp['submit_s']:.1f} s", f"{cp['all_ended_s']:.1f} s",
                     " ".join(f"{s['VmRSS'] / 1024:.1f}" for s in cp["samples"]),
                     f"{cp['rss_kib'] / 1024:.1f} MiB", f"{cp['hwm_kib'] / 1024:.1f} MiB"))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(widths[i]) for i, h in enumerate(head))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(x.ljust(widths[i]) for i, x in enumerate(r)))
    print()
    ok = growth <= TARGET_BYTES_PER_SUBMISSION
    print(f"growth {a['submissions']:,} -> {b['submissions']:,}: {(b['rss_kib'] - a['rss_kib']) / 1024:+.1f} MiB, "
          f"{growth:.0f} bytes per submission (target <= {TARGET_BYTES_PER_SUBMISSION}): {'met' if ok else 'MISSED'}")
    print(f"job statuses: {res['statuses']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    bad = set(res["statuses"]) != {"SUCCEEDED"} or sum(res["statuses"].values()) != args.jobs + args.warmup
    if bad:
        print("WARNING: not every job succeeded")
    sys.exit(0 if ok and not bad else 1)


if __name__ == "__main__":
    main()

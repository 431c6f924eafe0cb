#!/usr/bin/env python3
"""Bulk-submission launch benchmark of berth, side by side with Slurm (issue: Bulk submission).

  python3 bench/bulk.py [--berth PATH] [--with-slurm] [--with-tsp] [--repeat N] [--tmpdir DIR] [--ran-jobs N] [--json OUT]

Every berth figure is taken on one local node declared with `berth local up --cpus 1024`, in a temporary
BERTH_HOME, with jobs of `cpus: 1` that run `true`:
  1. `berth exec task.yaml --num-jobs 1000 -d`: time until every job is PENDING (the command returns; also the
     server-side request time of the same POST /v1/jobs sent with urllib, in a separate cluster), and until every
     job is SUCCEEDED;
     1b. the same 1000-job launch (POST) where each job prints one line (`echo line $BERTH_JOB_ID`): time until
     every job is SUCCEEDED and the last job's line can be read back (GET /v1/jobs/{id}/logs), i.e. its output
     was shipped and stored; the first job's line is checked too;
  2. 1000 sequential `berth exec task.yaml -d`: time for the loop, and until every job is SUCCEEDED;
     2b. the same loop with the node drained, so that every job is accepted and stays PENDING: the submission
     path alone, with no job, launch or report beside it (reported, no target);
  3. server-side time to accept one 10,000-job submission (median of 5, each into a fresh cluster), and the
     server's RSS with 100,000 jobs in the store: pending (they need the node's only GPU, held by a sleeping job),
     then after they were all cancelled; and, in another cluster, after --ran-jobs jobs (default 10,000; the
     issue's 100,000 takes minutes) ran to SUCCEEDED.
  5. with --with-tsp: 1000 sequential `tsp true` with task-spooler (installed when missing), 2 slots: the loop,
     and until all have finished, beside berth's loop and bulk launch.
  4. with --with-slurm: the same work with Slurm (Debian's packages, installed when missing) on localhost:
     `sbatch --array=0-999 --wrap true` and 1000 sequential `sbatch --wrap true`, with ratios Slurm / berth.

Floors, measured first in the same run (medians of 3): 1000 `bash -c true` launched and reaped by two
parallel workers (xargs -P 2), and 1000 sequential execs of /bin/true from one bash. The run ends with the
targets of "Submitting at a spooler's speed" (which tightened those of "Launching at the machine's
speed"), each as a ratio to its floor or peer (or a measure), and exits 1 when any is missed.

Times to SUCCEEDED are observed by polling the server every 10 ms (the newest job alone, then the list of active
jobs); the server's own timestamps (first and last start, last end) are shown beside them. Temporary dirs go
under --tmpdir (default $TMPDIR or /tmp); its filesystem is printed, since per-job files make it matter.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TERMINAL = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED", "LOST", "PREEMPTED"}
TASK_YAML = 'name: bulk\nresources:\n  cpus: 1\nrun: "true"\n'
POLL_S = 0.010

# Targets from the issue (2-core machine).
TARGET_BULK_DONE_S = 1.0
TARGET_BULK_PENDING_S = 0.050
TARGET_LOOP_S = 2.0
TARGET_ACCEPT_10K_S = 0.100
TARGET_RSS_MIB = 300

# Targets of "Submitting at a spooler's speed": ratios to floors or a peer measured in the same
# run (these machines vary up to tenfold in absolute process-creation speed from day to day).
RATIO_BULK_TO_BASH_FLOOR = 1.1   # 1000-job bulk launch to all SUCCEEDED / 1000 `bash -c true`, 2 workers
RATIO_PRINT_TO_BASH_FLOOR = 1.5  # the same where each job prints a line, until the last line is stored
RATIO_LOOP_TO_TRUE_FLOOR = 2.0   # 1000 sequential `berth exec -d` / 1000 sequential `/bin/true`
RATIO_LOOP_TO_TSP = 1.0          # the same loop / 1000 sequential `tsp true` (with --with-tsp)
TARGET_BYTES_PER_PENDING_JOB = 1.5 * 1024  # server RSS / 100,000 pending (its baseline included)
TARGET_PEAK_TO_STEADY = 1.3      # peak RSS while 100,000 jobs arrive / RSS once they are in
TARGET_SUBMIT_10K_ANY_S = 0.050  # each 10,000-job submission into 0..90,000 pending
TARGET_LIST_PAGE_S = 0.020       # one page of GET /v1/jobs with 100,000 jobs


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def http(url, method="GET", body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def timed_post(url, body):
    """POST body to url; returns (seconds from sending the request to reading the whole answer, answer)."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read()
    return time.perf_counter() - t0, json.loads(raw)


def parse_ts(s):
    if not s:
        return None
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def proc_status(pid):
    """VmRSS and VmHWM of pid in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024
    return out


def busy_share(seconds=2.0):
    """Share of all CPUs busy over `seconds` while this script does nothing: the load others put on the machine."""
    def snap():
        with open("/proc/stat") as f:
            v = list(map(int, f.readline().split()[1:]))
        return sum(v) - v[3] - v[4], sum(v)
    b0, t0 = snap()
    time.sleep(seconds)
    b1, t1 = snap()
    return (b1 - b0) / max(1, t1 - t0)


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "usable_cpus": usable, "model": model, "memory": mem,
            "kernel": platform.release(), "load_at_start": os.getloadavg()}


def filesystem(path):
    """Type of the filesystem holding path, and whether an ext4 one has a journal (a journal-less ext4 makes
    creating a file slow while many inodes were deleted in the last minutes, which job directories do)."""
    best, dev, fstype = "", "?", "?"
    with open("/proc/mounts") as f:
        for line in f:
            d, mnt, t = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, dev, fstype = mnt, d, t
    desc = f"{fstype} ({dev} on {best})"
    if fstype == "ext4":
        jt = f"/sys/fs/ext4/{os.path.basename(dev)}/journal_task"
        try:
            if open(jt).read().strip() == "<none>":
                desc += ", no journal"
        except OSError:
            pass
    return desc


# ---------------------------------------------------------------------------------------------------- berth


class Cluster:
    """A local berth cluster (one node, 1024 CPU slots) in its own BERTH_HOME."""

    def __init__(self, berth, tmp, name, gpus=None, up_args=()):
        self.berth = berth
        self.home = os.path.join(tmp, name)
        self.work = os.path.join(self.home, "work")
        os.makedirs(self.work)
        with open(os.path.join(self.work, "task.yaml"), "w") as f:
            f.write(TASK_YAML)
        self.env = dict(os.environ, BERTH_HOME=self.home)
        self.env.pop("BERTH_SERVER", None)
        cmd = [berth, "local", "up", "--cpus", "1024"] + (["--gpus", gpus] if gpus else []) + list(up_args)
        subprocess.run(cmd, env=self.env, check=True, stdout=subprocess.DEVNULL, cwd=self.work)
        status = json.loads(self.cli("local", "status", "--json"))
        self.url = status["server"]
        with open(os.path.join(self.home, "server", "server.pid")) as f:
            self.server_pid = int(f.read().strip())
        agent_pid_file = os.path.join(self.home, "agents", "local-0", "agent.pid")
        self.agent_pid = int(open(agent_pid_file).read().strip()) if os.path.exists(agent_pid_file) else None
        deadline = time.time() + 30
        while time.time() < deadline:
            nodes = http(self.url + "/v1/nodes")["nodes"]
            if nodes and all(n["state"] == "UP" for n in nodes):
                break
            time.sleep(0.01)
        else:
            raise RuntimeError("the local node did not come UP")

    def cli(self, *args):
        return subprocess.run([self.berth, *args], env=self.env, check=True, capture_output=True, text=True,
                              cwd=self.work).stdout

    def spec(self, **over):
        s = {"name": "bulk", "resources": {"cpus": 1}, "run": "true", "workdir": self.work}
        s.update(over)
        return s

    def wait_done(self, last_id, group=None, timeout=900):
        """Poll until no job (of group) is active; returns perf_counter() when first seen so.

        Jobs start in submission order, so the newest one (last_id) is watched alone first (a small answer);
        then the list of active jobs, which is short by then, until it is empty."""
        deadline = time.time() + timeout
        while http(f"{self.url}/v1/jobs/{last_id}")["status"] not in TERMINAL:
            if time.time() > deadline:
                raise RuntimeError(f"job {last_id} still active after {timeout} s")
            time.sleep(POLL_S)
        q = f"{self.url}/v1/jobs?limit=1" + (f"&group={group}" if group is not None else "")
        while time.time() < deadline:
            if all(j["status"] in TERMINAL for j in http(q)["jobs"]):
                return time.perf_counter()
            time.sleep(POLL_S)
        raise RuntimeError(f"jobs still active after {timeout} s")

    def all_jobs(self, group=None):
        """Every job (or every job of `group`), following the listing's pages."""
        q = f"{self.url}/v1/jobs?all=1&page=2000" + (f"&group={group}" if group is not None else "")
        jobs, before = [], None
        while True:
            page = http(q + (f"&before={before}" if before else ""))
            jobs += page["jobs"]
            before = page.get("next")
            if not before:
                return jobs

    def down(self):
        subprocess.run([self.berth, "local", "down"], env=self.env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)


def timeline(jobs, t0_wall):
    """Server-side timestamps relative to t0_wall (client wall clock at the submission)."""
    st = [parse_ts(j["started_at"]) for j in jobs if j.get("started_at")]
    en = [parse_ts(j["ended_at"]) for j in jobs if j.get("ended_at")]
    counts = {}
    for j in jobs:
        counts[j["status"]] = counts.get(j["status"], 0) + 1
    return {"first_start_s": min(st) - t0_wall if st else None, "last_start_s": max(st) - t0_wall if st else None,
            "last_end_s": max(en) - t0_wall if en else None, "statuses": counts}


GPU_JOB = {"cpus": 1, "accelerators": {"BENCH": 1}}  # what a job needing the one GPU asks for


def hold_the_gpu(c):
    """On a cluster whose only node has one GPU (gpus="BENCH:1"): holds it with a sleeping job, so
    that every job asking for it stays PENDING. Returns that job's id once it is RUNNING."""
    blocker = http(c.url + "/v1/jobs", "POST", {"spec": c.spec(name="blocker", run="sleep 3600",
                                                                 resources=GPU_JOB)})["jobs"][0]
    deadline = time.time() + 30
    while http(f"{c.url}/v1/jobs/{blocker}")["status"] != "RUNNING":
        if time.time() > deadline:
            raise RuntimeError("the GPU-holding job did not start")
        time.sleep(0.01)
    return blocker


def queue_behind_held_gpu(c, jobs, batch=10_000, post_ms=None):
    """hold_the_gpu, then submits `jobs` jobs that need it, in POSTs of `batch` (they stay PENDING).
    Returns the resources those jobs ask for; appends each POST's milliseconds to `post_ms` if given."""
    hold_the_gpu(c)
    left = jobs
    while left > 0:
        n = min(left, batch)
        t = time.perf_counter()
        http(c.url + "/v1/jobs", "POST", {"spec": c.spec(resources=GPU_JOB), "num_jobs": n})
        if post_ms is not None:
            post_ms.append((time.perf_counter() - t) * 1000)
        left -= n
    return GPU_JOB


def bench_bulk_cli(berth, tmp, i, n=1000):
    c = Cluster(berth, tmp, f"bulk-cli-{i}")
    try:
        t0_wall = time.time()
        t0 = time.perf_counter()
        out = subprocess.run([berth, "exec", "task.yaml", "--num-jobs", str(n), "-d", "--json"], env=c.env,
                             check=True, capture_output=True, text=True, cwd=c.work).stdout
        t_pending = time.perf_counter() - t0
        ans = json.loads(out)
        group = ans["group"]
        t_done = c.wait_done(max(ans["jobs"]), group) - t0
        jobs = c.all_jobs(group)
        assert len(jobs) == n, f"expected {n} jobs in group {group}, got {len(jobs)}"
        return {"pending_s": t_pending, "done_s": t_done, **timeline(jobs, t0_wall)}
    finally:
        c.down()


def bench_bulk_http(berth, tmp, i, n=1000):
    c = Cluster(berth, tmp, f"bulk-http-{i}")
    try:
        t0_wall = time.time()
        t0 = time.perf_counter()
        post_s, ans = timed_post(c.url + "/v1/jobs", {"spec": c.spec(), "num_jobs": n})
        t_done = c.wait_done(max(ans["jobs"]), ans["group"]) - t0
        jobs = c.all_jobs(ans["group"])
        assert len(jobs) == n
        return {"post_s": post_s, "done_s": t_done, **timeline(jobs, t0_wall)}
    finally:
        c.down()


def bench_bulk_print(berth, tmp, i, n=1000):
    """Figure 1b: the 1000-job launch where each job prints a line; done when every job has ended and the last
    job's line reads back from the server (shipped by the agent, stored by the server)."""
    c = Cluster(berth, tmp, f"bulk-print-{i}")
    try:
        t0_wall = time.time()
        t0 = time.perf_counter()
        post_s, ans = timed_post(c.url + "/v1/jobs", {"spec": c.spec(run="echo line $BERTH_JOB_ID"), "num_jobs": n})
        first, last = min(ans["jobs"]), max(ans["jobs"])
        t_done = c.wait_done(last, ans["group"]) - t0
        deadline = time.time() + 60
        while True:
            with urllib.request.urlopen(f"{c.url}/v1/jobs/{last}/logs", timeout=120) as r:
                if r.read().decode() == f"line {last}\n":
                    break
            if time.time() > deadline:
                raise RuntimeError(f"job {last}'s line was not stored 60 s after it ended")
            time.sleep(POLL_S)
        t_output = time.perf_counter() - t0
        with urllib.request.urlopen(f"{c.url}/v1/jobs/{first}/logs", timeout=120) as r:
            got = r.read().decode()
        assert got == f"line {first}\n", f"job {first} printed {got!r}"
        jobs = c.all_jobs(ans["group"])
        assert len(jobs) == n
        return {"post_s": post_s, "done_s": t_done, "output_s": max(t_done, t_output), **timeline(jobs, t0_wall)}
    finally:
        c.down()


def bench_loop(berth, tmp, i, n=1000):
    c = Cluster(berth, tmp, f"loop-{i}")
    try:
        t0_wall = time.time()
        t0 = time.perf_counter()
        # From one bash, as the floor's /bin/true loop: the two differ only in what is exec'd.
        out = subprocess.run(["bash", "-c", f'for i in $(seq {n}); do "$0" exec task.yaml -d --json; done | tail -1',
                              berth], env=c.env, check=True, capture_output=True, text=True, cwd=c.work).stdout
        t_loop = time.perf_counter() - t0
        t_done = c.wait_done(max(json.loads(out)["jobs"])) - t0
        jobs = c.all_jobs()
        assert len(jobs) == n
        return {"loop_s": t_loop, "done_s": t_done, **timeline(jobs, t0_wall)}
    finally:
        c.down()


def bench_loop_accept_only(berth, tmp, i, n=1000):
    """The loop of bench_loop with the node drained: every job is accepted (committed, answered) and stays
    PENDING, so no job, launch or report runs beside the loop. What the submission path alone costs it."""
    c = Cluster(berth, tmp, f"loop-drained-{i}")
    try:
        c.cli("drain", "local-0")
        t0 = time.perf_counter()
        out = subprocess.run(["bash", "-c", f'for i in $(seq {n}); do "$0" exec task.yaml -d --json; done | tail -1',
                              berth], env=c.env, check=True, capture_output=True, text=True, cwd=c.work).stdout
        t_loop = time.perf_counter() - t0
        assert json.loads(out)["jobs"], out
        return {"loop_s": t_loop}
    finally:
        c.down()


def bench_accept_10k(berth, tmp, reps=5, n=10000):
    times = []
    for i in range(reps):
        c = Cluster(berth, tmp, f"accept-{i}")
        try:
            s, ans = timed_post(c.url + "/v1/jobs", {"spec": c.spec(), "num_jobs": n})
            assert len(ans["jobs"]) == n
            times.append(s)
        finally:
            c.down()
    return times


def bench_rss_pending(berth, tmp, total=100000, batch=10000):
    """100k jobs that stay PENDING (each needs the node's only GPU, which a sleeping job holds), then cancelled."""
    c = Cluster(berth, tmp, "rss-pending", gpus="BENCH:1")
    try:
        r = {"idle": proc_status(c.server_pid)}
        blocker = hold_the_gpu(c)
        posts = []
        groups = []
        for _ in range(total // batch):
            s, ans = timed_post(c.url + "/v1/jobs", {"spec": c.spec(resources=GPU_JOB), "num_jobs": batch})
            posts.append(s)
            groups.append(ans["group"])
        time.sleep(1)  # let a scheduling pass run over the whole queue
        t0 = time.perf_counter()
        http(c.url + "/v1/jobs?limit=1")  # one page (GET /v1/jobs always pages)
        r["list_active_s"] = time.perf_counter() - t0
        pending = sum(http(f"{c.url}/v1/groups/{g}")["counts"].get("PENDING", 0) for g in groups)
        assert pending == total, f"expected every job PENDING, got {pending}"
        r["pending"] = proc_status(c.server_pid)
        r["posts_s"] = posts
        s, _ = timed_post(c.url + "/v1/jobs/cancel", {"all_users": True})
        r["cancel_all_s"] = s
        c.wait_done(blocker)
        time.sleep(1)
        r["cancelled"] = proc_status(c.server_pid)
        r["agent"] = proc_status(c.agent_pid) if c.agent_pid else None
        return r
    finally:
        c.down()


def bench_rss_ran(berth, tmp, total=100000, batch=10000):
    """total jobs of `true` that all run to SUCCEEDED (submitted as groups of batch)."""
    c = Cluster(berth, tmp, "rss-ran")
    try:
        r = {"idle": proc_status(c.server_pid)}
        t0_wall = time.time()
        t0 = time.perf_counter()
        for _ in range(total // batch):
            http(c.url + "/v1/jobs", "POST", {"spec": c.spec(), "num_jobs": batch})
        r["submitted_s"] = time.perf_counter() - t0
        peak = 0.0
        q = f"{c.url}/v1/jobs?limit=1"
        while True:
            peak = max(peak, proc_status(c.server_pid)["VmRSS"])
            if all(j["status"] in TERMINAL for j in http(q)["jobs"]):
                break
            time.sleep(0.5)
        r["done_s"] = time.perf_counter() - t0
        r["rss_peak_sampled"] = peak
        time.sleep(1)
        r["after"] = proc_status(c.server_pid)
        r["agent"] = proc_status(c.agent_pid) if c.agent_pid else None
        jobs = c.all_jobs()
        r.update(timeline(jobs, t0_wall))
        return r
    finally:
        c.down()


# ---------------------------------------------------------------------------------------------------- slurm


class SlurmUnavailable(Exception):
    pass


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_slurm_installed():
    need = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client", "squeue": "slurm-client",
            "scontrol": "slurm-client", "munged": "munge", "munge": "munge"}
    missing = sorted({pkg for exe, pkg in need.items()
                      if not shutil.which(exe) and not os.path.exists(f"/usr/sbin/{exe}")})
    if not missing:
        return
    if not shutil.which("apt-get"):
        raise SlurmUnavailable(f"Slurm is not installed (missing packages: {' '.join(missing)}) and there is no apt-get")
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        raise SlurmUnavailable(f"Slurm is not installed (missing: {' '.join(missing)}); installing needs root or sudo")
    log(f"installing {' '.join(missing)} with apt-get ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    p = sh(prefix + ["apt-get", "install", "-y", "-q", "slurmctld", "slurmd", "slurm-client", "munge"], env=env)
    if p.returncode != 0:
        p_upd = sh(prefix + ["apt-get", "update", "-q"], env=env)
        p = sh(prefix + ["apt-get", "install", "-y", "-q", "slurmctld", "slurmd", "slurm-client", "munge"], env=env)
        if p.returncode != 0:
            raise SlurmUnavailable("apt-get install slurmctld slurmd slurm-client munge failed: "
                                   + (p.stderr.strip().splitlines() or p_upd.stderr.strip().splitlines() or ["?"])[-1])


def munge_works():
    if not shutil.which("munge") or not shutil.which("unmunge"):
        return False
    try:
        enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=5)
        if enc.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=enc.stdout, capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_munged():
    """Start munged unless one answers already; returns the pid we started, or None."""
    if munge_works():
        return None
    if os.geteuid() != 0:
        raise SlurmUnavailable("munged is not running and starting it needs root")
    import pwd
    try:
        mu = pwd.getpwnam("munge")
    except KeyError:
        raise SlurmUnavailable("there is no 'munge' user (the munge package did not install properly)")
    key = "/etc/munge/munge.key"
    if not os.path.exists(key):
        p = sh(["mungekey", "--create", "--keyfile", key]) if shutil.which("mungekey") else None
        if p is None or p.returncode != 0:
            raise SlurmUnavailable(f"{key} is missing and mungekey could not create it")
        os.chown(key, mu.pw_uid, mu.pw_gid)
        os.chmod(key, 0o400)
    for d in ("/run/munge", "/var/lib/munge", "/var/log/munge"):
        os.makedirs(d, exist_ok=True)
        os.chown(d, mu.pw_uid, mu.pw_gid)
    munged = shutil.which("munged") or "/usr/sbin/munged"
    if shutil.which("runuser"):
        p = sh(["runuser", "-u", "munge", "--", munged])
    else:
        p = sh(["su", "-s", "/bin/sh", "munge", "-c", munged])
    if p.returncode != 0:
        raise SlurmUnavailable(f"munged would not start: {p.stderr.strip() or p.stdout.strip()}")
    deadline = time.time() + 10
    while not munge_works():
        if time.time() > deadline:
            raise SlurmUnavailable("munged started but munge -n | unmunge still fails")
        time.sleep(0.1)
    try:
        return int(open("/run/munge/munged.pid").read().strip())
    except (OSError, ValueError):
        return None


class Slurm:
    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "slurm")
        for d in ("state", "spool", "out"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        with open(os.path.join(HERE, "slurm", "slurm.conf.in")) as f:
            conf = f.read()
        subst = {"@DIR@": self.dir, "@CTLD_HOST@": socket.gethostname().split(".")[0],
                 "@CTLD_PORT@": str(free_port()), "@SLURMD_PORT@": str(free_port())}
        for k, v in subst.items():
            conf = conf.replace(k, v)
        self.conf = os.path.join(self.dir, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.out = os.path.join(self.dir, "out")
        self.procs = []
        self.munged_pid = None

    def start(self):
        ensure_slurm_installed()
        self.munged_pid = start_munged()
        for cmd, name in ((["slurmctld", "-D", "-i", "-f", self.conf], "slurmctld"),
                          (["slurmd", "-D", "-N", "localhost", "-f", self.conf], "slurmd")):
            exe = shutil.which(cmd[0]) or f"/usr/sbin/{cmd[0]}"
            out = open(os.path.join(self.dir, f"{name}.stderr"), "w")
            self.procs.append(subprocess.Popen([exe] + cmd[1:], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                               start_new_session=True))
            if name == "slurmctld":
                time.sleep(0.5)
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise SlurmUnavailable(f"{p.args[0]} exited with {p.returncode}: {self.tail()}")
            p = sh(["sinfo", "-h", "-n", "localhost", "-o", "%T"], env=self.env)
            state = p.stdout.strip()
            if p.returncode == 0 and state == "idle":
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"node localhost is not idle after 60 s (sinfo: {state!r}): {self.tail()}")

    def tail(self, last=0):
        """The daemons' last 3 errors each, and with `last` their logs' last lines."""
        lines = []
        for name in ("slurmctld.stderr", "slurmd.stderr", "slurmctld.log", "slurmd.log"):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                # Less the expected: no PMIx library, and no state files (slurmctld -i starts afresh).
                text = [l.strip() for l in open(path, errors="replace") if "pmix" not in l.lower()
                        and "mpi:" not in l.lower() and "state file" not in l and "state save file" not in l]
                errs = [l for l in text if "error" in l.lower() or "fatal" in l.lower()]
                lines += [f"{name}: {l}" for l in errs[-3:]]
                if last and name.endswith(".log"):
                    lines += [f"{name} (last): {l}" for l in text[-last:] if l not in errs[-3:]]
        return " | ".join(lines) or f"(see logs in {self.dir})"

    def why(self):
        """Why jobs are still in the queue: their states with squeue's reason, the node's state and reason,
        the daemons that exited, and the tails of their logs."""
        p = sh(["squeue", "-h", "-r", "-o", "%T (%r)"], env=self.env)
        counts = {}
        for s in p.stdout.splitlines():
            counts[s] = counts.get(s, 0) + 1
        node = sh(["sinfo", "-h", "-n", "localhost", "-o", "%T (%E)"], env=self.env).stdout.strip()
        dead = [f"{os.path.basename(d.args[0])} exited with {d.returncode}" for d in self.procs if d.poll() is not None]
        return "; ".join([f"jobs {counts or p.stderr.strip()}", f"node localhost {node}"] + dead) + \
            f"; logs in {self.dir}: {self.tail(last=3)}"

    def active(self):
        """squeue's jobs and their states ('' once every job has left the queue)."""
        p = sh(["squeue", "-h", "-o", "%i %t"], env=self.env)
        if p.returncode != 0:
            raise RuntimeError(f"squeue failed: {p.stderr.strip()}; {self.why()}")
        return p.stdout.strip()

    def wait_empty(self, what, timeout=900, stall=60):
        """Until the queue is empty; fails after `stall` s without any job starting or ending, saying why."""
        deadline = time.time() + timeout
        last, since = None, time.time()
        while time.time() < deadline:
            q = self.active()
            if not q:
                return time.perf_counter()
            if q != last:
                last, since = q, time.time()
            elif time.time() - since > stall:
                raise RuntimeError(f"Slurm {what} made no progress for {stall} s: {self.why()}")
            time.sleep(0.05)
        raise RuntimeError(f"Slurm {what} still queued after {timeout} s: {self.why()}")

    def states(self, jobs):
        p = sh(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(map(str, jobs)), "-o", "%T"], env=self.env)
        counts = {}
        for s in p.stdout.split():
            counts[s] = counts.get(s, 0) + 1
        return counts

    def sbatch(self, *args, output="slurm-%j.out"):
        p = subprocess.run(["sbatch", "--parsable", "-n1", "-c1", "-o", os.path.join(self.out, output),
                            *args, "--wrap", "true"], env=self.env, capture_output=True, text=True, cwd=self.out)
        if p.returncode != 0:
            raise RuntimeError(f"sbatch failed: {p.stderr.strip()}")
        return int(p.stdout.strip().split(";")[0])

    def stop(self):
        if any(p.poll() is None for p in self.procs):
            try:
                ok = sh(["scontrol", "shutdown"], env=self.env, timeout=30).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            for p in self.procs:
                try:
                    p.wait(timeout=20 if ok else 0.1)
                except subprocess.TimeoutExpired:
                    p.terminate()
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
        if self.munged_pid:
            try:
                os.kill(self.munged_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def bench_slurm(tmp, n=1000):
    s = Slurm(tmp)
    r = {}
    try:
        s.start()
        r["version"] = sh(["sbatch", "--version"], env=s.env).stdout.strip()
        t0 = time.perf_counter()
        job = s.sbatch(f"--array=0-{n - 1}", output="slurm-%A_%a.out")
        r["array_submit_s"] = time.perf_counter() - t0
        r["array_done_s"] = s.wait_empty("array jobs") - t0
        r["array_states"] = s.states([job])
        t0 = time.perf_counter()
        jobs = [s.sbatch() for _ in range(n)]
        r["loop_s"] = time.perf_counter() - t0
        r["loop_done_s"] = s.wait_empty("sequential jobs") - t0
        r["loop_states"] = s.states(jobs)
    finally:
        s.stop()
    return r


# ---------------------------------------------------------------------------------------------------- task-spooler


def bench_tsp(tmp, n=1000, slots=2):
    """The same two workloads with task-spooler (Debian's `task-spooler`, installed when missing): the
    single-machine queue with no resource model. It has no bulk submission, so both are 1000 sequential
    `tsp true` from one bash: the loop is figure 2's peer, and the time until all have finished (counted
    from the loop's start) is figure 1's. `slots` jobs run at once (the machine's CPUs); each job's output
    goes to a file of its own, as tsp does by default (berth keeps every job's output too)."""
    exe = shutil.which("tsp") or shutil.which("ts")
    if not exe:
        if not shutil.which("apt-get") or os.geteuid() != 0:
            raise RuntimeError("task-spooler is not installed, and installing it needs root and apt-get")
        log("installing task-spooler with apt-get ...")
        p = sh(["apt-get", "install", "-y", "-q", "task-spooler"], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if p.returncode != 0:
            raise RuntimeError("apt-get install task-spooler failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])
        exe = shutil.which("tsp") or shutil.which("ts")
    d = os.path.join(tmp, "tsp")
    os.makedirs(d)
    env = dict(os.environ, TS_SOCKET=os.path.join(d, "socket"), TMPDIR=d, TS_MAXFINISHED=str(n + 10),
               TS_SAVELIST="", TS_MAXCONN=str(n + 10))
    env.pop("TS_SAVELIST")
    out = sh([exe, "-V"], env=env)
    r = {"slots": slots, "version": ((out.stdout or out.stderr).strip().splitlines() or ["?"])[0]}
    try:
        sh([exe, "-S", str(slots)], env=env)
        t0 = time.perf_counter()
        subprocess.run(["bash", "-c", f'for i in $(seq {n}); do "$0" true >/dev/null; done', exe], env=env, check=True)
        r["loop_s"] = time.perf_counter() - t0
        # Finished when no job is queued or running (`tsp` lists one line per job after a header).
        while True:
            lines = sh([exe], env=env).stdout.splitlines()[1:]
            if all(" finished " in line for line in lines):
                break
            time.sleep(POLL_S)
        r["done_s"] = time.perf_counter() - t0
        states = {}
        for line in sh([exe], env=env).stdout.splitlines()[1:]:
            parts = line.split()
            state = parts[1] if len(parts) > 1 else "?"
            code = parts[3] if state == "finished" and len(parts) > 3 else ""
            states[f"{state} {code}".strip()] = states.get(f"{state} {code}".strip(), 0) + 1
        r["states"] = states
    finally:
        sh([exe, "-K"], env=env)
    return r


# ---------------------------------------------------------------------------------------------------- report


def fmt_s(x):
    if x is None:
        return "-"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def ratio(slurm, berth):
    if slurm is None or not berth:
        return ""
    r = slurm / berth
    return f"{r:.1f}x" if r < 10 else f"{r:.0f}x"


def verdict(value, target):
    if value is None:
        return ""
    if value <= target:
        return "meets"
    return f"MISSES by {fmt_s(value - target)} ({value / target:.1f}x)"


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, ""
    med = statistics.median(xs)
    return med, (f" [{fmt_s(min(xs))} .. {fmt_s(max(xs))}, n={len(xs)}]" if len(xs) > 1 else "")


def floor_bash_true(n=1000, workers=2):
    """The machine's floor for launching and reaping n `bash -c true` with `workers` in parallel."""
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", f"seq {n} | xargs -P {workers} -I{{}} bash -c true"], check=True)
    return time.perf_counter() - t0


def floor_exec_true(n=1000):
    """n sequential execs of /bin/true (from one bash, which forks and execs each)."""
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", f"for i in $(seq {n}); do /bin/true; done"], check=True)
    return time.perf_counter() - t0


def floor_exec_true_beside_jobs(n=1000):
    """The /bin/true loop of floor_exec_true while n `bash -c true` (the loop's jobs) run one after another
    beside it. No submission path can make berth's loop cheaper than this: it is the floor with a CLI and
    daemons that cost nothing, only the jobs the loop submits. On machines where process creation is slow
    and two CPUs running it at once slow each other down (page faults trapping to the hypervisor), this
    alone can approach the loop's target."""
    jobs = subprocess.Popen(["bash", "-c", f"seq {n} | xargs -P 1 -I{{}} bash -c true"])
    try:
        return floor_exec_true(n)
    finally:
        jobs.wait()


def targets(res):
    """The issue's targets as (name, value, floor, ratio or measure, target, met)."""
    out = []
    fl = res["floors"]
    done = statistics.median([r["done_s"] for r in res["bulk_cli"]] + [r["done_s"] for r in res["bulk_http"]])
    out.append(("1000-job bulk launch to all SUCCEEDED / bash floor", f"{done:.2f} s", f"floor {fl['bash_s']:.2f} s",
                done / fl["bash_s"], RATIO_BULK_TO_BASH_FLOOR))
    loop = statistics.median([r["loop_s"] for r in res["loop"]])
    printed = statistics.median([r["output_s"] for r in res["bulk_print"]])
    out.append(("the same, each job printing a line, until the last line is stored / bash floor", f"{printed:.2f} s",
                f"floor {fl['bash_s']:.2f} s", printed / fl["bash_s"], RATIO_PRINT_TO_BASH_FLOOR))
    out.append(("1000 sequential `exec -d` / /bin/true floor", f"{loop:.2f} s", f"floor {fl['true_s']:.2f} s",
                loop / fl["true_s"], RATIO_LOOP_TO_TRUE_FLOOR))
    if "tsp" in res:
        out.append(("1000 sequential `exec -d` / 1000 sequential `tsp true`", f"{loop:.2f} s",
                    f"tsp's {res['tsp']['loop_s']:.2f} s", loop / res["tsp"]["loop_s"], RATIO_LOOP_TO_TSP))
    rp = res["rss_pending"]
    per_job = rp["pending"]["VmRSS"] * 1024 * 1024 / 100000
    out.append(("server RSS per pending job (100,000 pending), bytes", f"{rp['pending']['VmRSS']:.0f} MiB", "",
                per_job, TARGET_BYTES_PER_PENDING_JOB))
    out.append(("peak RSS while they arrive / steady", f"{rp['pending']['VmHWM']:.0f} MiB", "",
                rp["pending"]["VmHWM"] / rp["pending"]["VmRSS"], TARGET_PEAK_TO_STEADY))
    worst = max(rp["posts_s"])
    out.append(("slowest 10,000-job submit into 0..90k pending, s", f"{worst * 1000:.0f} ms", "", worst,
                TARGET_SUBMIT_10K_ANY_S))
    out.append(("one listing page with 100,000 jobs, s", f"{rp['list_active_s'] * 1000:.0f} ms", "",
                rp["list_active_s"], TARGET_LIST_PAGE_S))
    return [(name, value, floor, measure, target, measure <= target) for name, value, floor, measure, target in out]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = next((p for p in (os.path.join(ROOT, "build-bench", "src", "berth"), os.path.join(ROOT, "build", "src", "berth"))
                    if os.path.exists(p)), os.path.join(ROOT, "build", "src", "berth"))
    ap.add_argument("--berth", default=default, help=f"berth binary (default: {os.path.relpath(default, os.getcwd())})")
    ap.add_argument("--with-slurm", action="store_true", help="also run the same work with Slurm on localhost")
    ap.add_argument("--with-tsp", action="store_true",
                    help="also run the same work with task-spooler (tsp) on this machine")
    ap.add_argument("--repeat", type=int, default=3, help="runs of benchmarks 1 and 2 (medians are shown)")
    ap.add_argument("--ran-jobs", type=int, default=10000,
                    help="jobs to run to completion for the RSS-after-running figure (0: skip; 100000 takes minutes)")
    ap.add_argument("--tmpdir", help="where the temporary BERTH_HOMEs (and Slurm's dirs) live (default: $TMPDIR or /tmp)")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    args = ap.parse_args()
    berth = os.path.abspath(args.berth)
    if not os.access(berth, os.X_OK):
        sys.exit(f"no berth binary at {berth}; build it or pass --berth")

    m = machine()
    m["busy_before"] = busy_share()
    res = {"machine": m, "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "berth": berth,
           "version": subprocess.run([berth, "--version"], capture_output=True, text=True).stdout.strip()}
    tmp = tempfile.mkdtemp(prefix="berth-bulk-", dir=args.tmpdir)
    res["filesystem"] = filesystem(tmp)
    try:
        log("0. floors: 1000 `bash -c true` (2 workers), 1000 sequential /bin/true ...")
        res["floors"] = {"bash_s": statistics.median(floor_bash_true() for _ in range(3)),
                         "true_s": statistics.median(floor_exec_true() for _ in range(3)),
                         "true_beside_jobs_s": statistics.median(floor_exec_true_beside_jobs() for _ in range(3))}
        log("1. bulk submission of 1000 jobs ...")
        res["bulk_cli"] = [bench_bulk_cli(berth, tmp, i) for i in range(args.repeat)]
        res["bulk_http"] = [bench_bulk_http(berth, tmp, i) for i in range(args.repeat)]
        log("1b. bulk submission of 1000 jobs that print a line ...")
        res["bulk_print"] = [bench_bulk_print(berth, tmp, i) for i in range(args.repeat)]
        log("2. 1000 sequential submissions ...")
        res["loop"] = [bench_loop(berth, tmp, i) for i in range(args.repeat)]
        res["loop_accept_only"] = [bench_loop_accept_only(berth, tmp, i) for i in range(args.repeat)]
        log("3. accepting 10,000 jobs; RSS with 100,000 ...")
        res["accept_10k"] = bench_accept_10k(berth, tmp)
        res["rss_pending"] = bench_rss_pending(berth, tmp)
        if args.ran_jobs > 0:
            res["rss_ran"] = bench_rss_ran(berth, tmp, total=args.ran_jobs, batch=min(10000, args.ran_jobs))
        if args.with_tsp:
            log("5. task-spooler ...")
            try:
                res["tsp"] = bench_tsp(tmp)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                res["tsp_unavailable"] = str(e)
                log(f"task-spooler could not run here: {e}")
        if args.with_slurm:
            log("4. Slurm ...")
            try:
                res["slurm"] = bench_slurm(tmp)
            except (SlurmUnavailable, RuntimeError, OSError, subprocess.SubprocessError) as e:
                res["slurm_unavailable"] = str(e)
                log(f"Slurm could not run here: {e}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    res["busy_after"] = busy_share()
    report(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    fl = res["floors"]
    loop = statistics.median([r["loop_s"] for r in res["loop"]])
    print(f"The /bin/true floor with the loop's 1000 jobs (`bash -c true`, one at a time) running beside it: "
          f"{fl['true_beside_jobs_s']:.2f} s, {fl['true_beside_jobs_s'] / fl['true_s']:.2f}x the floor: the part of "
          f"the loop's ratio that its jobs alone cost on this machine; berth's loop is "
          f"{loop / fl['true_beside_jobs_s']:.2f}x that.")
    accept_only = statistics.median([r["loop_s"] for r in res["loop_accept_only"]])
    tsp_loop = f", {accept_only / res['tsp']['loop_s']:.2f}x tsp's whole loop" if "tsp" in res else ""
    print(f"The same loop with the node drained (every job accepted and left PENDING: the submission path "
          f"alone, nothing run beside it): {accept_only:.2f} s, {accept_only / fl['true_s']:.2f}x the /bin/true "
          f"floor{tsp_loop}.")
    # The targets: each ratio with its floor; the exit status says whether all were met.
    rows = targets(res)
    print()
    print("Targets (\"Submitting at a spooler's speed\"; floors and peer from this run):")
    for name, value, floor, measure, target, met in rows:
        shown = f"{measure:.2f}" if measure < 100 else f"{measure:.0f}"
        print(f"  {name}: {value}" + (f" vs {floor}" if floor else "") +
              f" -> {shown} (target <= {target:g}) {'met' if met else 'MISSED'}")
    missed = [r[0] for r in rows if not r[5]]
    if missed:
        print(f"{len(missed)} of {len(rows)} targets missed")
        sys.exit(1)


def report(res):
    m = res["machine"]
    print(f"machine: {m['cpus']} CPUs ({m['usable_cpus']} usable), {m['model']}, {m['memory']} RAM, Linux {m['kernel']}; "
          f"CPU busy with other work: {m['busy_before']:.0%} before the run, {res['busy_after']:.0%} after")
    print(f"command: {res['command']}")
    print(f"berth:   {res['berth']} ({res['version']}); temporary dirs on {res['filesystem']}")
    print()
    rows = []  # (benchmark, berth, target, verdict, slurm, ratio)
    sl = res.get("slurm")

    def row(name, val, target=None, slurm=None, extra=""):
        rows.append((name, fmt_s(val) + extra, fmt_s(target) if target else "", verdict(val, target) if target else "",
                     fmt_s(slurm) if slurm is not None else "",
                     ratio(slurm, val)))

    bc, bh, lp = res["bulk_cli"], res["bulk_http"], res["loop"]
    v, sp = spread([r["pending_s"] for r in bc])
    row("1. --num-jobs 1000: all PENDING (command returns)", v, TARGET_BULK_PENDING_S,
        sl and sl["array_submit_s"], sp)
    v, sp = spread([r["post_s"] for r in bh])
    row("   same, server-side (POST /v1/jobs, urllib)", v, None, None, sp)
    done_all = [r["done_s"] for r in bc] + [r["done_s"] for r in bh]
    v, sp = spread(done_all)
    row("   all SUCCEEDED (polled)", v, TARGET_BULK_DONE_S, sl and sl["array_done_s"], sp)
    for key, label in (("first_start_s", "first job RUNNING (server clock)"),
                       ("last_start_s", "last job RUNNING (server clock)"),
                       ("last_end_s", "last job ended (server clock)")):
        v, sp = spread([r[key] for r in bc + bh])
        row("   " + label, v, None, None, sp)
    v, sp = spread([r["done_s"] for r in res["bulk_print"]])
    row("1b. each job prints a line: all SUCCEEDED", v, None, None, sp)
    v, sp = spread([r["output_s"] for r in res["bulk_print"]])
    row("   and the last job's line stored", v, None, None, sp)
    v, sp = spread([r["loop_s"] for r in lp])
    row("2. 1000 x `exec -d`: the loop", v, TARGET_LOOP_S, sl and sl["loop_s"], sp)
    v, sp = spread([r["done_s"] for r in lp])
    row("   all SUCCEEDED (polled)", v, None, sl and sl["loop_done_s"], sp)
    v, sp = spread([r["last_end_s"] for r in lp])
    row("   last job ended (server clock)", v, None, None, sp)
    v, sp = spread(res["accept_10k"])
    row("3. accept 10,000 jobs (POST, fresh cluster)", v, TARGET_ACCEPT_10K_S, None, sp)
    rp = res["rss_pending"]
    v, sp = spread(rp["posts_s"])
    row("   accept 10,000 more into 0..90k pending", v, None, None, sp)
    row("   cancel 100,000 pending (POST cancel all_users)", rp["cancel_all_s"])
    row("   list active jobs with 100k pending (GET ?limit=1)", rp["list_active_s"])

    w = max(len(r[0]) for r in rows)
    head = ("benchmark", "berth (median [min..max])", "target", "berth vs target", "Slurm", "Slurm/berth")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(6)]
    widths[0] = w
    line = "  ".join(h.ljust(widths[i]) for i, h in enumerate(head))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)))
    print()

    def mib(d, k="VmRSS"):
        return f"{d[k]:.0f} MiB" if d else "-"

    print(f"server RSS: idle {mib(rp['idle'])}; with 100,000 PENDING {mib(rp['pending'])} (peak {mib(rp['pending'], 'VmHWM')}); "
          f"after cancelling them (100k CANCELLED in the store) {mib(rp['cancelled'])}. "
          f"Target < {TARGET_RSS_MIB} MiB: {'meets' if rp['pending']['VmRSS'] < TARGET_RSS_MIB else 'MISSES'}. "
          f"Agent RSS {mib(rp['agent'])}.")
    rr = res.get("rss_ran")
    if rr:
        n = sum(rr["statuses"].values())
        print(f"{n:,} jobs of `true` run to completion (groups of 10k): submitted in {fmt_s(rr['submitted_s'])}, "
              f"all ended after {fmt_s(rr['done_s'])} ({n / rr['done_s']:.0f} jobs/s), "
              f"statuses {rr['statuses']}; server RSS after {mib(rr['after'])} (peak {mib(rr['after'], 'VmHWM')}), "
              f"agent RSS {mib(rr['agent'])} (peak {mib(rr['agent'], 'VmHWM')}).")
    bad = [r["statuses"] for r in bc + bh + lp if set(r["statuses"]) != {"SUCCEEDED"}]
    if bad:
        print(f"WARNING: some berth jobs did not succeed: {bad}")
    if sl:
        print(f"Slurm: {sl['version']}; array states {sl['array_states']}, sequential states {sl['loop_states']}.")
    elif "slurm_unavailable" in res:
        print(f"Slurm: no figures -- {res['slurm_unavailable']}")
    ts = res.get("tsp")
    if ts:
        done = statistics.median(done_all)
        loop = statistics.median([r["loop_s"] for r in lp])
        print(f"task-spooler ({ts['version']}, {ts['slots']} slots), 1000 sequential `tsp true`: the loop "
              f"{fmt_s(ts['loop_s'])} (tsp / berth's `exec -d` loop: {ratio(ts['loop_s'], loop)}); all finished "
              f"{fmt_s(ts['done_s'])} (tsp / berth's 1000-job launch: {ratio(ts['done_s'], done)}); states {ts['states']}.")
    elif "tsp_unavailable" in res:
        print(f"task-spooler: not run -- {res['tsp_unavailable']}")


if __name__ == "__main__":
    main()

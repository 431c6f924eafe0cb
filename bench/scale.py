#!/usr/bin/env python3
"""End-to-end scale benchmark (issue "Scale"): a real server, 1,000 hollow nodes, 100,000 jobs.

  python3 bench/scale.py [--berth build/src/berth] [--nodes 1000] [--jobs 100000] [--groups 10]
                         [--probe-interval-ms 20] [--probes queue,health,submit,show[,idle]]
                         [--progress groups|list] [--progress-page 1000] [--json-out FILE]
                         [--mix uniform|realistic] [--settle 20] [--restart | --failover]

Starts `berth server` and one `berth agent --hollow N` process (N simulated nodes over the real protocol,
8 H100 and 128 CPUs each), submits the jobs in bulk (`--groups` requests of jobs/groups each, user `bench`;
1 CPU per job, so that all of them fit at once; hollow jobs without BERTH_HOLLOW_SECONDS run until
cancelled), and measures: the time until every job is placed (STARTING or later) and until every job is
RUNNING, server RSS (and per stored job).

From the moment the bulk submissions start until every job is RUNNING, probes measure the server's latency
continuously, each in its own process on its own keep-alive connection (http.client to 127.0.0.1; one
request on it before the window, so that no sample pays the client's first use of http.client), one
request at a time, the next one `--probe-interval-ms` after the previous one was sent (or at once if it took
longer than that):
  queue   GET /v1/jobs?limit=50&page=50   (what `berth queue` sends: its first page)
  health  GET /v1/health
  submit  POST /v1/jobs of one 1-CPU job (user `probe`; they need free CPUs beside the bulk jobs, are
          placed like the others and are counted, not waited for)
  show    GET /v1/jobs/1                  (every 100 ms)
  idle    GET /v1/health of a second `berth server` that does nothing else (not a default probe): the
          floor this machine sets for an answer from an I/O thread, in the same run. Each probe also
          records, per sample, how long its own process waited for a CPU during the request (its
          schedstat), and the run reports how long each of the server's threads waited for a CPU each
          time it was woken (threads by name: berth-http answers /v1/health).
The probes run in child processes, one each, so that neither the main process's polling (it asks how
far placement got, then sleeps 0.5 s) nor another probe can hold one up on Python's GIL (until session 30
they were threads of one process, and their first requests, sent at the same instant, measured their turns
at the GIL: up to 30 ms). That poll (`--progress`) asks for each bulk group's counts by status
(`GET /v1/groups/{id}`, one request per group: counts the server keeps in memory while the group has jobs
there; a count over the group's jobs in the store until session 30), or with `--progress list` lists
every job in pages of `--progress-page` (1000), as this script did until session 29: at 100,000 jobs each such poll takes seconds of the server's CPU (a
listing of 46 MB of JSON), so the server spends most of the window serving the benchmark's own poll.
For each probe it prints count, p50, p99 and max, and the 5 worst samples with when they were sent
(seconds since the first bulk POST) and how far placement had got by then. A probe sends one request at
a time: a stall of S seconds shows as a single sample of S seconds (the requests it would have sent
meanwhile are not counted). `--probes` picks which run; `--json-out FILE` writes every figure, the
probes' samples and the progress polls as JSON (bench/plot_scale.py draws several runs as a curve).

`--mix realistic` replaces the uniform 1-CPU jobs with what a GPU cluster's queue holds: bulk POSTs in turn
of CPU-only jobs (20 %), 1-GPU and 8-GPU jobs and gangs of 2-16 whole nodes, from three teams whose GPU
quotas split the cluster (no borrowing). Not every job fits, so placement is over when the placed count
stops growing (`--settle`), and the figures are taken until then.

`--failover` runs two servers on one PostgreSQL (tests/support/pg_cluster.sh: initdb + pg_ctl in the run's
temp dir; docs/ha.md), the hollow agent given both URLs, and once every job runs kill -9s the leader: it
measures, each watched at once, the time until the standby leads and serves a read, until its first
scheduler pass, until every node registered with it, until a job submitted then is placed, and until it
applied an agent's report (that job RUNNING), and the new leader's RSS against the old one's.

From the server's own histograms over the window: scheduler passes (time deciding), and how long a pass
held the state lock at once (berth_scheduler_lock_hold_seconds: building its snapshot, and each chunk of
decisions applied and committed), which is what any other request may wait for.
"""
import argparse
import json
import math
import multiprocessing
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPConnection, HTTPException


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


def proc_threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def run_queue_wait_ns(path="/proc/thread-self/schedstat"):
    """How long a thread has waited on a run queue for a CPU so far, in ns (the second field of its
    schedstat; the first is its time on a CPU, the third how many times it ran)."""
    with open(path) as f:
        return int(f.read().split()[1])


def thread_schedstats(pid):
    """{thread name: [threads, ns on a CPU, ns waiting for one, times run]} over a process's threads."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran, waited, slices = (int(x) for x in f.read().split()[:3])
        except OSError:
            continue  # the thread ended
        agg = out.setdefault(name, [0, 0, 0, 0])
        for i, v in enumerate((1, ran, waited, slices)):
            agg[i] += v
    return out


def schedstat_delta(before, after):
    """Per thread name, between two thread_schedstats: CPU s, s waited for a CPU, times run, and the
    mean wait each time it was woken (ms)."""
    out = {}
    for name, (n, ran, waited, slices) in after.items():
        b = before.get(name, [0, 0, 0, 0])
        d_slices = slices - b[3]
        if d_slices <= 0:
            continue
        out[name] = {"threads": n, "cpu_s": round((ran - b[1]) / 1e9, 2),
                     "run_queue_wait_s": round((waited - b[2]) / 1e9, 2), "times_run": d_slices,
                     "mean_wait_ms": round((waited - b[2]) / 1e6 / d_slices, 3)}
    return out


def cpu_s(pid):
    """User + system CPU seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_states(url, name=None, page=0):
    """Counts of jobs by status (only the jobs named `name` when given: every job is the bench's user's), in
    requests of `page` jobs each (page=0: the server's largest page), newest first, following the
    listing's cursor."""
    counts = {}

    def add(jobs):
        for j in jobs:
            if name is None or j["name"] == name:
                counts[j["status"]] = counts.get(j["status"], 0) + 1

    if page <= 0:
        page = 2000  # the server's largest page (every listing is paged)
    before = None
    while True:
        answer = http(url + f"/v1/jobs?all=1&page={page}" + (f"&before={before}" if before else ""))
        add(answer["jobs"])
        before = answer.get("next")
        if not before:
            return counts


def group_counts(url, groups):
    """Counts of the jobs of `groups` (bulk group ids) by status, one GET /v1/groups/{id} each."""
    counts = {}
    for g in groups:
        for status, n in http(url + f"/v1/groups/{g}")["counts"].items():
            counts[status] = counts.get(status, 0) + n
    return counts


# --mix realistic: what each bulk POST asks for, in turn (10 POSTs a cycle): 20 % CPU-only, half one-GPU
# jobs, 8-GPU jobs, and gangs of 2-16 whole nodes (the gangs' size cycles through 2, 4, 8, 16).
MIX_CYCLE = ("cpu", "gpu1", "gpu1", "gpu8", "gpu1", "cpu", "gpu1", "gpu8", "gpu1", "gang")
GANG_SIZES = (2, 4, 8, 16)
# Three teams with GPU quotas (shares of the cluster's GPUs) and no borrowing, one user each; POST g is
# the user of team g % 3.
TEAMS = (("vision", 0.40), ("nlp", 0.35), ("speech", 0.25))


def mix_spec(g):
    """The spec of bulk POST number g under --mix realistic."""
    kind = MIX_CYCLE[g % len(MIX_CYCLE)]
    if kind == "cpu":
        return {"name": "cpu", "run": "python prep.py", "resources": {"cpus": 1}}
    if kind == "gpu1":
        return {"name": "gpu1", "run": "python train.py", "resources": {"accelerators": {"H100": 1}, "cpus": 4}}
    if kind == "gpu8":
        return {"name": "gpu8", "run": "python train.py", "resources": {"accelerators": {"H100": 8}, "cpus": 32}}
    size = GANG_SIZES[(g // len(MIX_CYCLE)) % len(GANG_SIZES)]
    return {"name": f"gang{size}", "run": "torchrun train.py", "num_nodes": size,
            "resources": {"accelerators": {"H100": 8}, "cpus": 32}}


def set_up_teams(url, nodes):
    """Creates TEAMS with quotas of the cluster's H100s (8 a node), a user in each, and that user's token;
    returns the tokens in TEAMS' order."""
    tokens = []
    for team, share in TEAMS:
        http(url + f"/v1/admin/teams/{team}", "POST",
             {"quota": {"H100": int(nodes * 8 * share)}, "borrow_limit": {"H100": 0}})
        user = team + "-user"
        http(url + f"/v1/admin/users/{user}", "POST", {"team": team})
        tokens.append(http(url + "/v1/admin/tokens", "POST", {"user": user, "name": user + "-bench"})["token"])
    return tokens


def http_as(url, token, method, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{method} {url}: HTTP {e.code}: {e.read().decode(errors='replace')}")


PROBE_JOB = {"spec": {"name": "probe", "run": "true", "resources": {"cpus": 1}}}


def probe_requests(interval_ms):
    """name -> (method, target, body, expected statuses, interval in s)."""
    every = interval_ms / 1000
    return {
        "queue": ("GET", "/v1/jobs?limit=50&page=50", None, (200,), every),
        "health": ("GET", "/v1/health", None, (200,), every),
        # The same request to a second berth server that does nothing else (started by this script): the
        # machine's floor for an answer from an I/O thread, in the same run, on the same two CPUs.
        "idle": ("GET", "/v1/health", None, (200,), every),
        "submit": ("POST", "/v1/jobs", json.dumps(PROBE_JOB).encode(), (201,), every),
        # 404 until the first bulk POST has made job 1: a full answer too
        "show": ("GET", "/v1/jobs/1", None, (200, 404), 0.1),
    }


def probe_process(host, port, name, interval_ms, ready, go, stop, t0_value, out):
    """Child process running probe `name` (one process per probe, so that no probe waits for another's
    turn at Python's GIL); sends {name: {"samples": [[t, ms]], "errors": [[t, what]]}}."""
    method, target, body, expect, every = probe_requests(interval_ms)[name]
    samples, errors = [], []
    own_wait_ms = []  # per sample: how long this process itself waited for a CPU during the request
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn = HTTPConnection(host, port, timeout=120)
    try:
        conn.connect()
        # One request before the measured ones, so that the first sample is not this process's own
        # first use of http.client (its lazy imports and parsers) at the very instant the probes and
        # the bulk POSTs all start.
        conn.request("GET", "/v1/health")
        conn.getresponse().read()
    finally:
        ready.set()
    go.wait()
    t0 = t0_value.value
    while not stop.is_set():
        waited = run_queue_wait_ns()
        sent = time.monotonic()
        try:
            conn.request(method, target, body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            ms = (time.monotonic() - sent) * 1000
            if r.status in expect:
                samples.append((round(sent - t0, 4), round(ms, 3)))
                own_wait_ms.append(round((run_queue_wait_ns() - waited) / 1e6, 3))
            else:
                errors.append((round(sent - t0, 4), f"HTTP {r.status} after {ms:.1f} ms"))
        except (OSError, HTTPException) as e:
            errors.append((round(sent - t0, 4), f"{type(e).__name__}: {e}"))
            conn.close()
            conn = HTTPConnection(host, port, timeout=120)
        wait = sent + every - time.monotonic()
        if wait > 0:
            stop.wait(wait)
    conn.close()
    out.send({name: {"samples": samples, "errors": errors, "own_wait_ms": own_wait_ms}})
    out.close()


def scrape(url):
    """The server's /metrics as {(name, labels text): value}."""
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        name, _, labels = key.partition("{")
        try:
            out[(name, labels.rstrip("}"))] = float(value)
        except ValueError:
            pass
    return out


def histogram_quantiles(m0, m1, name, qs=(50, 99), labels=""):
    """Upper bounds of the buckets holding the qs-th percentiles of what `name` (the series of `labels`,
    'phase="commit"' say) observed between two scrapes (Prometheus buckets: the answer is a bucket's
    edge), with the count and the mean."""
    buckets = []
    prefix = labels + "," if labels else ""
    for (n, series), v in m1.items():
        if n == name + "_bucket" and series.startswith(prefix + 'le="'):
            le = series[len(prefix) + 4:-1]
            buckets.append((math.inf if le == "+Inf" else float(le), v - m0.get((n, series), 0)))
    buckets.sort()
    count = m1.get((name + "_count", labels), 0) - m0.get((name + "_count", labels), 0)
    total = m1.get((name + "_sum", labels), 0) - m0.get((name + "_sum", labels), 0)
    out = {"count": int(count), "mean_ms": round(total / count * 1000, 2) if count else None}
    for q in qs:
        edge = None
        for le, n in buckets:
            if count and n >= count * q / 100:
                edge = le
                break
        out[f"p{q}_ms_at_most"] = None if edge is None or edge == math.inf else edge * 1000
    return out


def route_rate(m0, m1, route, seconds):
    """Requests a second to `route` (every method and code) between two scrapes."""
    n = sum(v - m0.get(k, 0) for k, v in m1.items()
            if k[0] == "berth_http_request_seconds_count" and f'route="{route}"' in k[1])
    return round(n / seconds, 1) if seconds > 0 else None


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def wait_for(pred, timeout):
    """Seconds until pred() held (polled every 50 ms), or None at the timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if pred():
                return time.monotonic() - t0
        except (OSError, HTTPException, ValueError):
            pass
        time.sleep(0.05)
    return None


def pct(xs, p):
    """Nearest-rank percentile of a sorted list."""
    return xs[max(0, math.ceil(len(xs) * p / 100) - 1)]


PG_CLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support", "pg_cluster.sh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(uri, sql):
    return subprocess.run(["psql", uri, "-tAqc", sql], check=True, capture_output=True, text=True).stdout.strip()


def start_ha_servers(berth, tmp):
    """--failover: a PostgreSQL of the run's own and two servers on it, sharing a cluster token."""
    pointer = os.path.join(tmp, "pg")
    out = subprocess.run(["bash", PG_CLUSTER, "start-at", pointer], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit("cannot start PostgreSQL: " + out.stderr)
    with open(pointer + ".uri") as f:
        admin = f.read().strip()
    psql(admin, "CREATE DATABASE berth")
    store = admin.rsplit("/", 1)[0] + "/berth"
    token_file = os.path.join(tmp, "cluster-token")
    with open(token_file, "w") as f:
        f.write("scale-cluster-token\n")
    os.chmod(token_file, 0o600)
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    servers = []
    for i, u in enumerate(urls):
        servers.append(subprocess.Popen(
            [berth, "server", "--listen", u.removeprefix("http://"), "--allow-root-jobs",
             "--state-dir", os.path.join(tmp, f"server-{i}"), "--store", store, "--token-file", token_file,
             "--leader-lease", "3s", "--lease", "120s"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"server-{i}.log"), "a")))
    return {"pointer": pointer, "store": store, "token_file": token_file, "urls": urls, "servers": servers,
            "tmp": tmp}


def leader_of(urls):
    """The index of the server whose /v1/health says it leads, or None."""
    for i, u in enumerate(urls):
        try:
            ha = http(u + "/v1/health", timeout=5).get("ha") or {}
        except (OSError, ValueError, HTTPException):
            continue
        if ha.get("role") == "leader":
            return i
    return None


def fail_over(ha, server, url, args, group_ids, total):
    """kill -9 of the leader `server` (at `url`); the marks are seconds since the kill."""
    old = ha["urls"].index(url)
    rss_before = rss_mib(server.pid)
    standby = ha["servers"][1 - old]
    standby_rss_before = rss_mib(standby.pid)
    server.kill()
    server.wait()
    t_kill = time.monotonic()
    kill_wall = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"
    new_url = ha["urls"][1 - old]

    def serving():
        # It leads, and answers a read of the jobs.
        return leader_of([new_url]) == 0 and "jobs" in http(new_url + "/v1/jobs?limit=1", timeout=5)

    def count(metrics, name, route=""):
        return sum(v for k, v in metrics.items() if k[0] == name and route in k[1]
                   and (not route or 'code="200"' in k[1]))

    # Every mark is watched at once (none waits for another), polled every 50 ms; a job is submitted
    # as soon as the new leader serves.
    marks = dict.fromkeys(("serving_s", "first_pass_s", "nodes_registered_s", "first_placement_s",
                           "report_applied_s"))
    probe_job = []
    while None in marks.values() and time.monotonic() - t_kill < args.restart_timeout:
        try:
            since = round(time.monotonic() - t_kill, 2)
            if marks["serving_s"] is None:
                if not serving():
                    time.sleep(0.05)
                    continue
                marks["serving_s"] = since
            if not probe_job:
                probe_job.append(http(new_url + "/v1/jobs", "POST", {"spec": {"name": "after", "run": "true",
                                                                              "resources": {"cpus": 1}}})["jobs"][0])
            m = scrape(new_url)
            if marks["first_pass_s"] is None and count(m, "berth_scheduler_pass_seconds_count") > 0:
                marks["first_pass_s"] = since
            if marks["nodes_registered_s"] is None and count(
                    m, "berth_http_request_seconds_count", "/v1/agent/register") >= args.nodes:
                marks["nodes_registered_s"] = since
            status = http(new_url + f"/v1/jobs/{probe_job[0]}")["status"]
            if marks["first_placement_s"] is None and status != "PENDING":
                marks["first_placement_s"] = since
            if marks["report_applied_s"] is None and status == "RUNNING":
                marks["report_applied_s"] = since
        except (OSError, HTTPException, ValueError):
            pass
        time.sleep(0.05)
    with open(os.path.join(ha["tmp"], f"server-{1 - old}.log")) as log:
        lines = log.readlines()
    if None in marks.values():
        print("the new leader's log ends:\n" + "".join(lines[-15:]))
    # Where the time to serve went: its log's lines from taking the lease to serving.
    steps = [l.rstrip() for l in lines if any(w in l for w in ("leading with", "loaded", "ready in", "listening on"))]
    print("the new leader's log:\n  " + "\n  ".join(steps[-6:]) + f"\n  (killed at {kill_wall})")
    running_after = group_counts(new_url, group_ids).get("RUNNING", 0)
    rss_after = rss_mib(standby.pid)
    # The old leader's RSS was read long after its last burst of work (its idle trim had run); the
    # new one's at once and again 30 s later, once the re-registrations are over.
    time.sleep(30)
    rss_settled = rss_mib(standby.pid)
    result = {**marks, "rss_before_mib": round(rss_before, 1), "standby_rss_before_mib": round(standby_rss_before, 1),
              "rss_after_mib": round(rss_after, 1), "rss_30s_later_mib": round(rss_settled, 1),
              "running_after": running_after}
    print(f"failover after kill -9 of the leader with {total} active jobs (seconds since the kill): the standby "
          f"leads and serves reads {marks['serving_s']}, its first pass {marks['first_pass_s']}, every node "
          f"registered with it {marks['nodes_registered_s']}, "
          f"a job submitted then placed {marks['first_placement_s']}, its report applied (RUNNING) "
          f"{marks['report_applied_s']}; RSS {rss_before:.0f} MiB (old leader) before, {rss_after:.0f} MiB (new "
          f"leader; {standby_rss_before:.0f} MiB as standby) after, {rss_settled:.0f} MiB 30 s later; {running_after} of {total} "
          f"RUNNING after")
    return result


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--berth", default=os.path.join(here, "..", "build", "src", "berth"))
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--probe-interval-ms", type=float, default=20,
                    help="time between the starts of two requests of the queue, health and submit probes")
    ap.add_argument("--progress", choices=("groups", "list"), default="groups",
                    help="how the placement-progress poll counts jobs by status: each bulk group's counts "
                         "(GET /v1/groups/{id}), or a listing of every job (the script's poll until session 29)")
    ap.add_argument("--progress-page", type=int, default=1000,
                    help="the placement-progress poll lists the jobs in requests of this many (0: the whole "
                         "listing in one request, as this script did before; it holds a server worker and the "
                         "store's read connection for seconds at 100,000 jobs and stalls the probes)")
    ap.add_argument("--json-out", metavar="FILE", help="write every figure (and the probes' samples) as JSON")
    ap.add_argument("--harness-nice", type=int, default=0,
                    help="run the load generator (the hollow agent and this script's bulk POSTs and progress "
                         "poll) this many nice steps below the server and the probes, so that on a small "
                         "machine the harness does not take the CPU from what is measured (0: same priority)")
    ap.add_argument("--probes", default="queue,health,submit,show",
                    help="which probes run (comma-separated; default the first four; idle: see above)")
    ap.add_argument("--restart", action="store_true",
                    help="once every job runs, kill -9 the server and start it again on its state and "
                         "port: time until it answers /v1/health, until its first pass, until every node is "
                         "UP again and a report was applied, and its RSS then against before")
    ap.add_argument("--failover", action="store_true",
                    help="two servers on one PostgreSQL; once every job runs, kill -9 the leader: time until "
                         "the standby leads and serves a read, until every node registered with it, until its "
                         "first placement and until it applied a report, and its RSS then against the old leader's")
    ap.add_argument("--mix", choices=("uniform", "realistic"), default="uniform",
                    help="uniform: every job asks for 1 CPU, all fit at once; realistic: POSTs of CPU-only (20 %%), "
                         "1-GPU, 8-GPU and gang (2-16 nodes) jobs from three teams with GPU quotas (MIX_CYCLE, "
                         "TEAMS): not all fit, so 'all placed' is when placement stopped growing (--settle)")
    ap.add_argument("--settle", type=float, default=20,
                    help="--mix realistic: placement has stopped once the placed count stayed the same this "
                         "many seconds after the last POST; 'all placed' is when it last grew")
    ap.add_argument("--restart-timeout", type=float, default=600,
                    help="how long each step of --restart is waited for (seconds)")
    args = ap.parse_args()
    if args.restart and args.failover:
        ap.error("--restart and --failover: one or the other")
    probes = [p for p in args.probes.split(",") if p]
    unknown = set(probes) - set(probe_requests(0))
    if unknown:
        ap.error(f"unknown probes: {', '.join(sorted(unknown))}")
    berth = os.path.abspath(args.berth)
    tmp = tempfile.mkdtemp(prefix="berth-scale-")
    procs = []
    probers = []  # (process, the pipe its results come back on, its ready event): one per probe
    try:
        state = os.path.join(tmp, "server")
        url_file = os.path.join(tmp, "url")
        ha = None  # --failover: the PostgreSQL cluster, both servers' URLs and processes
        def start_server(listen):
            return subprocess.Popen([berth, "server", "--listen", listen, "--allow-root-jobs", "--state-dir",
                                     state, "--url-file", url_file, "--lease", "120s"],
                                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "a"))
        if args.failover:
            ha = start_ha_servers(berth, tmp)
            procs.extend(ha["servers"])
            if wait_for(lambda: leader_of(ha["urls"]) is not None, 60) is None:
                raise SystemExit("no server of the two leads")
            leader = leader_of(ha["urls"])
            server, url = ha["servers"][leader], ha["urls"][leader]
            token_file, agent_servers = ha["token_file"], ",".join(ha["urls"])
        else:
            server = start_server("127.0.0.1:0")
            procs.append(server)
            while not (os.path.exists(url_file) and open(url_file).read().strip()):
                time.sleep(0.01)
            url = open(url_file).read().strip()
            token_file, agent_servers = os.path.join(state, "token"), url
        cpus_per_node = 128
        agent = subprocess.Popen([berth, "agent", "--hollow", str(args.nodes), "--server", agent_servers,
                                  "--name", "h", "--token-file", token_file,
                                  "--gpus", "H100:8", "--cpus", str(cpus_per_node), "--memory", "1024"],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "agent.log"), "w"),
                                 preexec_fn=(lambda: os.nice(args.harness_nice)) if args.harness_nice else None)
        procs.append(agent)
        t0 = time.time()
        while len([n for n in http(url + "/v1/nodes")["nodes"] if n["state"] == "UP"]) < args.nodes:
            time.sleep(0.1)
        joined = time.time() - t0
        machine = f"{platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}"
        load_before = os.getloadavg()
        print(f"machine: {machine}; berth {berth}; load average {load_before[0]:.2f} (1 min)")
        agent_threads = proc_threads(agent.pid)
        print(f"{args.nodes} hollow nodes joined in {joined:.2f} s; server RSS {rss_mib(server.pid):.0f} MiB; "
              f"the hollow agent: {agent_threads} threads, RSS {rss_mib(agent.pid):.0f} MiB")

        per_group = args.jobs // args.groups
        total = per_group * args.groups
        spec = {"name": "sim", "run": "python train.py", "resources": {"cpus": 1}}
        tokens = set_up_teams(url, args.nodes) if args.mix == "realistic" else []

        # The probes: a child process each (fork, before any thread of ours exists). In one process
        # their threads took turns at the GIL, and the four first requests, sent at the same instant,
        # measured that wait as the server's (up to 30 ms).
        ctx = multiprocessing.get_context("fork")
        go, stop = ctx.Event(), ctx.Event()
        t0_value = ctx.Value("d", 0.0)
        hostport = urllib.parse.urlsplit(url)
        if "idle" in probes:
            idle_state = os.path.join(tmp, "idle-server")
            os.makedirs(idle_state)
            idle_url_file = os.path.join(idle_state, "url")
            procs.append(subprocess.Popen([berth, "server", "--listen", "127.0.0.1:0", "--state-dir", idle_state,
                                           "--url-file", idle_url_file], stdout=subprocess.DEVNULL,
                                          stderr=open(os.path.join(tmp, "idle-server.log"), "w")))
            if wait_for(lambda: os.path.exists(idle_url_file) and open(idle_url_file).read().strip(), 30) is None:
                raise SystemExit("the idle server did not start")
            idle_hostport = urllib.parse.urlsplit(open(idle_url_file).read().strip())
        for name in probes:
            ready = ctx.Event()
            recv_end, send_end = ctx.Pipe(duplex=False)
            target = idle_hostport if name == "idle" else hostport
            prober = ctx.Process(target=probe_process,
                                 args=(target.hostname, target.port, name, args.probe_interval_ms,
                                       ready, go, stop, t0_value, send_end), daemon=True)
            prober.start()
            send_end.close()
            probers.append((prober, recv_end, ready))
        if args.harness_nice:
            os.nice(args.harness_nice)  # the probes (started above) keep the server's priority
        for _, _, ready in probers:
            ready.wait(30)

        submit_ms = []
        posts = []  # (seconds since t0 when the POST returned, ms)
        progress = []  # (t, placed, running, ms the listing took)
        t0m = time.monotonic()
        t0_value.value = t0m
        cpu0 = {"server": cpu_s(server.pid), "agent": cpu_s(agent.pid),
                "probes": sum(cpu_s(p.pid) for p, _, _ in probers),
                "bench (this script)": time.process_time()}
        m0 = scrape(url)
        server_threads0 = thread_schedstats(server.pid)
        go.set()
        group_ids = []
        for g in range(args.groups):
            t = time.perf_counter()
            if tokens:
                body = {"spec": mix_spec(g), "num_jobs": per_group}
                group_ids.append(http_as(url + "/v1/jobs", tokens[g % len(tokens)], "POST", body)["group"])
            else:
                group_ids.append(http(url + "/v1/jobs", "POST", {"spec": spec, "num_jobs": per_group})["group"])
            submit_ms.append((time.perf_counter() - t) * 1000)
            posts.append((time.monotonic() - t0m, submit_ms[-1]))
        submitted = time.monotonic() - t0m
        placed_at = running_at = None
        last_change = (0.0, -1)  # --mix realistic: (t, placed) of the poll that first saw today's placed count
        all_running = None  # --mix realistic: when the poll first saw every job placed so far RUNNING
        final_placed = total
        while running_at is None and time.monotonic() - t0m < 600:
            t = time.monotonic()
            if args.progress == "groups":
                counts = group_counts(url, group_ids)
            else:
                counts = count_states(url, name=spec["name"], page=args.progress_page)
            pending = counts.get("PENDING", 0)
            running = counts.get("RUNNING", 0)
            placed = sum(counts.values()) - pending
            progress.append((t - t0m, placed, running, (time.monotonic() - t) * 1000))
            if args.mix == "realistic":
                # Not every job fits: placement is over once the placed count has stood still for
                # --settle seconds after the last POST; it ended at the poll that first saw that count,
                # and every placed job ran at the first poll that found them all RUNNING.
                if placed != last_change[1]:
                    last_change = (t - t0m, placed)
                    all_running = None
                if running == placed and all_running is None:
                    all_running = t - t0m
                if all_running is not None and t - t0m - max(last_change[0], submitted) >= args.settle:
                    placed_at, running_at, final_placed = last_change[0], all_running, placed
                    break
                time.sleep(0.5)
                continue
            if placed_at is None and pending == 0:
                placed_at = time.monotonic() - t0m
            if running == total:
                running_at = time.monotonic() - t0m
                break
            time.sleep(0.5)
        cpu1 = {"server": cpu_s(server.pid), "agent": cpu_s(agent.pid),
                "probes": sum(cpu_s(p.pid) for p, _, _ in probers),
                "bench (this script)": time.process_time()}
        m1 = scrape(url)
        server_threads = schedstat_delta(server_threads0, thread_schedstats(server.pid))
        stop.set()
        results = {}
        for prober, recv_end, _ in probers:
            results.update(recv_end.recv() if recv_end.poll(180) else {})
            prober.join(30)
        rss = rss_mib(server.pid)
        load_after = os.getloadavg()
        probe_counts = count_states(url, name="probe", page=args.progress_page) if "submit" in probes else {}

        print(f"submitted {total} jobs in {args.groups} requests: {submitted:.2f} s "
              f"(per request median {statistics.median(submit_ms):.0f} ms; "
              f"each: {', '.join(f'{ms:.0f}' for ms in submit_ms)} ms)")
        if args.mix == "realistic":
            print(f"placement stopped growing at {final_placed} of {total} jobs ({total - final_placed} wait for "
                  f"GPUs or their team's quota); the last placement seen at "
                  f"{placed_at if placed_at is None else round(placed_at, 2)} s, "
                  f"{placed_at if placed_at is None else round(placed_at - submitted, 2)} s after the last POST "
                  f"returned; all placed RUNNING at {running_at if running_at is None else round(running_at, 2)} s")
        else:
            print(f"all placed after {placed_at if placed_at is None else round(placed_at, 2)} s; "
                  f"all RUNNING after {running_at if running_at is None else round(running_at, 2)} s")
        print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after (this run counts too)")
        print(f"server RSS with {total} jobs: {rss:.0f} MiB ({rss * 1024 * 1024 / total:.0f} bytes per job)")
        window = running_at if running_at is not None else time.monotonic() - t0m
        cpu = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
        print(f"CPU seconds used from the first bulk POST until all RUNNING ({window:.1f} s wall, "
              f"{os.cpu_count()} CPUs): " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
        polls = sorted(p[3] for p in progress)
        if polls:
            if args.progress == "groups":
                how = f"each group's counts, {args.groups} requests"
            else:
                how = "every job listed " + (f"in requests of {args.progress_page} jobs" if args.progress_page > 0
                                             else "in one request")
            print(f"progress polls ({how}; every 0.5 s + its duration): {len(polls)}, "
                  f"median {statistics.median(polls):.0f} ms, max {polls[-1]:.0f} ms")

        def where(t):
            """How far placement had got at t s (the last progress poll started before t)."""
            done = sum(1 for p in posts if p[0] <= t)
            seen = [p for p in progress if p[0] <= t]
            s = f"{done}/{args.groups} POSTs returned"
            if seen:
                s += f"; poll sent at {seen[-1][0]:.1f} s: {seen[-1][1]} placed, {seen[-1][2]} RUNNING"
            return s

        print(f"latency from the first bulk POST until all RUNNING ({window:.1f} s), one request at a time per "
              f"probe, every {args.probe_interval_ms:g} ms (show: 100 ms):")
        figures = {}
        for name in probes:
            r = results.get(name, {"samples": [], "errors": []})
            xs = sorted(ms for _, ms in r["samples"])
            f = {"count": len(xs), "errors": len(r["errors"])}
            if xs:
                f.update(p50_ms=pct(xs, 50), p99_ms=pct(xs, 99), max_ms=xs[-1],
                         mean_ms=round(statistics.fmean(xs), 3))
                worst = sorted(r["samples"], key=lambda s: -s[1])[:5]
                f["worst"] = [{"t_s": t, "ms": ms, "progress": where(t)} for t, ms in worst]
                print(f"  {name:6}: {len(xs):5} calls, p50 {f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms, "
                      f"max {f['max_ms']:.1f} ms" + (f", {f['errors']} errors" if r["errors"] else ""))
                for w in f["worst"]:
                    print(f"          {w['ms']:8.1f} ms sent at {w['t_s']:6.2f} s ({w['progress']})")
            else:
                print(f"  {name:6}: no samples ({len(r['errors'])} errors)")
            for t, what in r["errors"][:5]:
                print(f"          error at {t:.2f} s: {what}")
            waits = r.get("own_wait_ms", [])
            if xs and len(waits) == len(r["samples"]):
                # The latency less what the probe's own process waited for a CPU meanwhile.
                less = sorted(ms - w for (_, ms), w in zip(r["samples"], waits))
                f.update(own_wait_p99_ms=pct(sorted(waits), 99), p99_less_own_wait_ms=pct(less, 99))
                print(f"          its process waited for a CPU: p99 {f['own_wait_p99_ms']:.1f} ms; the latency "
                      f"less that wait: p99 {f['p99_less_own_wait_ms']:.1f} ms")
            f["samples"] = r["samples"]
            f["own_wait_ms"] = waits
            f["error_samples"] = r["errors"]
            figures[name] = f
        print("the server's threads over the window (by name): " + "; ".join(
            f"{n} x{v['threads']}: {v['cpu_s']} s CPU, {v['run_queue_wait_s']} s waiting for a CPU over "
            f"{v['times_run']} runs, {v['mean_wait_ms']} ms a run" for n, v in sorted(server_threads.items())))
        passes = histogram_quantiles(m0, m1, "berth_scheduler_pass_seconds")
        commits = histogram_quantiles(m0, m1, "berth_store_commit_seconds")
        holds = {phase: histogram_quantiles(m0, m1, "berth_scheduler_lock_hold_seconds", labels=f'phase="{phase}"',
                                            qs=(50, 99, 100))
                 for phase in ("snapshot", "commit")}
        rates = {r: route_rate(m0, m1, r, window) for r in
                 ("/v1/agent/heartbeat", "/v1/agent/report", "/v1/agent/watch", "/v1/agent/register")}
        if ha:
            store_bytes = int(psql(ha["store"], "SELECT pg_database_size(current_database())"))
        else:
            store_bytes = dir_bytes(state) - dir_bytes(os.path.join(state, "logs"))
        print(f"scheduler passes: {passes['count']}, mean {passes['mean_ms']} ms, p50 <= {passes['p50_ms_at_most']} "
              f"ms, p99 <= {passes['p99_ms_at_most']} ms (the histogram's bucket edges); store commits: "
              f"{commits['count']}, mean {commits['mean_ms']} ms, p99 <= {commits['p99_ms_at_most']} ms")
        print("a pass's holds of the state lock (bucket edges): " + "; ".join(
            f"{phase} {h['count']}, mean {h['mean_ms']} ms, p50 <= {h['p50_ms_at_most']} ms, p99 <= "
            f"{h['p99_ms_at_most']} ms, max <= {h['p100_ms_at_most']} ms" for phase, h in holds.items()))
        print("agent requests handled a second over the window: " +
              ", ".join(f"{r.rsplit('/', 1)[1]} {v}" for r, v in rates.items()))
        print(f"store (state dir without logs): {store_bytes / 2**20:.0f} MiB ({store_bytes / total:.0f} bytes per job)")
        restart = None
        if args.restart:
            rss_before = rss_mib(server.pid)
            port = urllib.parse.urlsplit(url).port
            server.kill()
            server.wait()
            t_kill = time.monotonic()
            server = start_server(f"127.0.0.1:{port}")
            procs[0] = server

            def healthy():
                with urllib.request.urlopen(url + "/v1/health", timeout=5) as r:
                    return r.status == 200

            def reregistered():
                return sum(v for k, v in scrape(url).items() if k[0] == "berth_http_request_seconds_count"
                           and "/v1/agent/register" in k[1] and 'code="200"' in k[1]) >= args.nodes

            probe_job = []

            def placed_again():
                # A pass ran on the reloaded state: a new 1-CPU job is placed.
                if not probe_job:
                    probe_job.append(http(url + "/v1/jobs", "POST", {"spec": {"name": "after", "run": "true",
                                                                           "resources": {"cpus": 1}}})["jobs"][0])
                return http(url + f"/v1/jobs/{probe_job[0]}")["status"] != "PENDING"

            # Each in turn, as seconds since the kill.
            marks = {}
            for what, pred in (("serving_s", healthy), ("nodes_registered_s", reregistered),
                               ("first_placement_s", placed_again)):
                marks[what] = None if wait_for(pred, args.restart_timeout) is None else round(time.monotonic() - t_kill, 2)
            if None in marks.values():
                with open(os.path.join(tmp, "server.log")) as log:
                    print("the restarted server's log ends:\n" + "".join(log.readlines()[-15:]))
            serving, registered, placed = (marks["serving_s"], marks["nodes_registered_s"],
                                           marks["first_placement_s"])
            since = time.monotonic() - t_kill
            running_after = group_counts(url, group_ids).get("RUNNING", 0)
            rss_after = rss_mib(server.pid)
            restart = {**marks, "measured_until_s": round(since, 2),
                       "rss_before_mib": round(rss_before, 1), "rss_after_mib": round(rss_after, 1),
                       "running_after": running_after}
            print(f"restart after kill -9 with {total} active jobs (seconds since the kill): serving /v1/health "
                  f"{serving}, every node registered again {registered}, a job submitted then placed {placed}; "
                  f"RSS {rss_before:.0f} MiB before, {rss_after:.0f} MiB after; {running_after} of {total} RUNNING after")
        failover = None
        if ha:
            failover = fail_over(ha, server, url, args, group_ids, total)
        n_probe = sum(probe_counts.values())
        if "submit" in probes:
            by_state = ", ".join(f"{k} {v}" for k, v in sorted(probe_counts.items()))
            print(f"probe jobs submitted: {n_probe} ({by_state})")

        if args.json_out:
            doc = {
                "machine": machine, "berth": berth,
                "loadavg_1min_before": load_before[0], "loadavg_1min_after": load_after[0],
                "nodes": args.nodes, "jobs": total, "groups": args.groups,
                "probe_interval_ms": args.probe_interval_ms, "probes": probes,
                "progress_by": args.progress, "progress_page": args.progress_page,
                "nodes_joined_s": round(joined, 3), "agent_threads": agent_threads, "submitted_s": round(submitted, 3),
                "submit_post_ms": [round(ms, 1) for ms in submit_ms],
                "posts": [{"returned_at_s": round(t, 3), "ms": round(ms, 1)} for t, ms in posts],
                "all_placed_s": placed_at and round(placed_at, 3),
                "all_running_s": running_at and round(running_at, 3),
                "cpu_s": cpu, "server_threads": server_threads,
                "server_rss_mib": round(rss, 1), "bytes_per_job": round(rss * 1024 * 1024 / total),
                "progress": [{"t_s": round(t, 3), "placed": pl, "running": ru, "poll_ms": round(ms, 1)}
                             for t, pl, ru, ms in progress],
                "latency": figures,
                "probe_jobs": probe_counts,
                "mix": args.mix, "placed": final_placed,
                "passes": passes, "store_commits": commits, "pass_lock_holds": holds, "agent_requests_per_s": rates,
                "store_bytes": store_bytes, "restart": restart, "failover": failover,
            }
            with open(args.json_out, "w") as out:
                json.dump(doc, out, indent=1)
            print(f"wrote {args.json_out}")
    finally:
        for prober, _, _ in probers:
            if prober.is_alive():
                prober.terminate()
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        if ha:
            subprocess.run(["bash", PG_CLUSTER, "stop-at", ha["pointer"]], capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

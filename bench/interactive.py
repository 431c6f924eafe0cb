#!/usr/bin/env python3
"""Interactive sessions: throughput through a session and a port-forward, against socat over a
local TCP pair in the same run, and what idle attached sessions cost the server.

  python3 bench/interactive.py [--berth build/src/berth] [--mib 100] [--repeat 3] [--sessions 100] [--json OUT]

One local node (`berth local up --cpus 8`) in a temporary BERTH_HOME, every part on this machine.

1. terminal: an interactive job waits for a line, then (`stty raw -echo`, so the terminal passes bytes
   as they are) `cat`s a file of --mib MiB of random bytes to its terminal. `berth attach` with a pipe for
   stdin (it sends the line) and /dev/null for stdout: the time from starting the client to its exit
   (the attach's own setup included). The bytes go pty -> node supervisor (and output.log, shipped to the
   server like any log) -> agent -> WebSocket -> server -> WebSocket -> client.
2. port-forward: a job runs `socat -u OPEN:FILE TCP-LISTEN:P` (the same file); `berth port-forward JOB :P`
   is started first, then the time of `socat -u TCP:127.0.0.1:LOCAL OPEN:/dev/null` through it.
3. the peer: the same file from `socat -u OPEN:FILE TCP-LISTEN:P` to `socat -u TCP:127.0.0.1:P
   OPEN:/dev/null` directly, the same way timed (a receiver started per repeat).
And the floor under any terminal session: the same `stty raw -echo; cat FILE` on a plain pseudo-terminal
whose master the script itself reads (1 MiB reads) and drops. Each is repeated --repeat times (best taken); the ratios to
socat are printed (target <= 3x), and the terminal's to the plain pty.
4. idle sessions: on a bare `berth server` and `berth agent` (a local cluster serves only its owner), the
   server's VmRSS (minimum of 5 samples a second apart) before and after --sessions `berth attach` clients
   are attached to one interactive job and idle for 5 s; the growth per session and in all (target < 20 MB
   for 100). The server caps sessions at 32 per user, so the clients come from --sessions/25 users with
   operator tokens (operators may attach to another user's job).

Exit status 1 when a target is missed.
"""
import argparse
import json
import os
import pty
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET_RATIO = 3.0
TARGET_IDLE_MB = 20.0

sys.path.insert(0, HERE)
from bulk import http, log  # noqa: E402  (the benchmarks' shared helpers)
from history import machine, proc_status  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, timeout=30):
    """Waits until something listens on `port` (from /proc/net/tcp: a probe connection would take the
    one connection a socat serves)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open("/proc/net/tcp") as f:
            if f":{port:04X} 00000000:0000 0A" in f.read():
                return
        time.sleep(0.01)
    raise RuntimeError(f"nothing listens on port {port}")


class Cluster:
    def __init__(self, berth, tmp):
        self.berth = berth
        self.home = os.path.join(tmp, "home")
        self.work = os.path.join(tmp, "work")
        os.makedirs(self.work)
        self.env = dict(os.environ, BERTH_HOME=self.home)
        self.env.pop("BERTH_SERVER", None)
        self.cli(["local", "up", "--cpus", "8"])
        status = json.loads(self.cli(["local", "status", "--json"]))
        self.url = status["server"]
        with open(os.path.join(self.home, "server", "server.pid")) as f:
            self.server_pid = int(f.read().strip())

    def cli(self, args, **kw):
        return subprocess.run([self.berth, *args], env=self.env, check=True, capture_output=True,
                              text=True, cwd=self.work, **kw).stdout

    def submit(self, yaml_text):
        path = os.path.join(self.work, "task.yaml")
        with open(path, "w") as f:
            f.write(yaml_text)
        job = json.loads(self.cli(["exec", "-d", "--json", path]))["jobs"][0]
        deadline = time.time() + 60
        while http(f"{self.url}/v1/jobs/{job}")["status"] != "RUNNING":
            if time.time() > deadline:
                raise RuntimeError(f"job {job} did not start")
            time.sleep(0.05)
        return job

    def down(self):
        subprocess.run([self.berth, "local", "down"], env=self.env, cwd=self.work,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(args, **kw):
    t0 = time.perf_counter()
    subprocess.run(args, check=True, **kw)
    return time.perf_counter() - t0


def through_terminal(c, data):
    job = c.submit("name: bench-term\ninteractive: true\nrun: |\n  stty raw -echo\n  read -r _\n"
                   f"  cat {data}\n")
    t0 = time.perf_counter()
    p = subprocess.run([c.berth, "attach", str(job)], env=c.env, cwd=c.work, input="go\n",
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"attach exited {p.returncode}: {p.stderr}")
    return took


def through_port_forward(c, data):
    port = free_port()
    job = c.submit(f"name: bench-fwd\nrun: exec socat -u OPEN:{data} TCP-LISTEN:{port},reuseaddr\n")
    wait_listening(port)
    fwd = subprocess.Popen([c.berth, "port-forward", str(job), f":{port}"], env=c.env, cwd=c.work,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        local = int(fwd.stdout.readline().split()[1].split(":")[1])
        return timed(["socat", "-u", f"TCP:127.0.0.1:{local}", "OPEN:/dev/null"], timeout=300)
    finally:
        fwd.terminate()
        fwd.wait()
        http(f"{c.url}/v1/jobs/cancel", "POST", {"ids": [job]})


def direct(data):
    port = free_port()
    server = subprocess.Popen(["socat", "-u", f"OPEN:{data}", f"TCP-LISTEN:{port},reuseaddr"])
    try:
        wait_listening(port)
        return timed(["socat", "-u", f"TCP:127.0.0.1:{port}", "OPEN:/dev/null"], timeout=300)
    finally:
        server.wait(timeout=30)


def pty_floor(data):
    """The same bytes through a plain pseudo-terminal and nothing else: `stty raw -echo; cat FILE` on a
    pty whose master this process reads, 1 MiB at a time, and drops."""
    master, slave = pty.openpty()
    t0 = time.perf_counter()
    p = subprocess.Popen(["bash", "-c", f"stty raw -echo; cat {data}"], stdin=slave, stdout=slave,
                         stderr=slave, start_new_session=True)
    os.close(slave)
    while True:
        try:
            if not os.read(master, 1 << 20):
                break
        except OSError:  # EIO: every process closed the terminal
            break
    p.wait()
    os.close(master)
    return time.perf_counter() - t0


def rss_kib(pid, samples=5):
    values = []
    for _ in range(samples):
        values.append(proc_status(pid)["VmRSS"])
        time.sleep(1)
    return min(values)


class Standalone:
    """A bare `berth server` and one `berth agent` (a local cluster is private to its owner, and a user
    may hold only 32 sessions: the idle sessions come from several users)."""

    def __init__(self, berth, tmp):
        self.berth = berth
        self.tmp = tmp
        state = os.path.join(tmp, "server")
        os.makedirs(state)
        url_file = os.path.join(state, "server.url")
        extra = ["--allow-root-jobs"] if os.geteuid() == 0 else []
        self.env = dict(os.environ, BERTH_HOME=os.path.join(tmp, "standalone-home"))
        self.env.pop("BERTH_SERVER", None)
        self.server = subprocess.Popen([berth, "server", "--listen", "127.0.0.1:0", "--state-dir", state,
                                        "--url-file", url_file, *extra], env=self.env, cwd=tmp,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(url_file) or not open(url_file).read().strip():
            if time.time() > deadline or self.server.poll() is not None:
                raise RuntimeError("the standalone server did not start")
            time.sleep(0.05)
        self.url = open(url_file).read().strip()
        self.agent = subprocess.Popen([berth, "agent", "--server", self.url, "--name", "idle-0",
                                       "--state-dir", os.path.join(tmp, "agent"), "--cpus", "4",
                                       "--token-file", os.path.join(state, "token")],
                                      env=self.env, cwd=tmp, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        while not any(n["state"] == "UP" for n in http(self.url + "/v1/nodes")["nodes"]):
            if time.time() > deadline:
                raise RuntimeError("the standalone agent did not come UP")
            time.sleep(0.1)

    def stop(self):
        for p in (self.agent, self.server):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def idle_sessions(berth, tmp, n):
    """Server VmRSS before and after `n` attached, idle clients: (before KiB, after KiB)."""
    s = Standalone(berth, tmp)
    clients = []
    try:
        job = http(s.url + "/v1/jobs", "POST",
                   {"spec": {"name": "bench-idle", "interactive": True, "run": "sleep 3600",
                             "workdir": tmp}})["jobs"][0]
        deadline = time.time() + 60
        while http(f"{s.url}/v1/jobs/{job}")["status"] != "RUNNING":
            if time.time() > deadline:
                raise RuntimeError(f"job {job} did not start")
            time.sleep(0.05)
        tokens = []
        for i in range((n + 24) // 25):
            user = f"bench{i}"
            tokens.append(http(f"{s.url}/v1/admin/tokens", "POST", {"user": user})["token"])
            http(f"{s.url}/v1/admin/users/{user}", "POST", {"role": "operator"})
        time.sleep(2)
        before = rss_kib(s.server.pid)
        for i in range(n):
            clients.append(subprocess.Popen(
                [berth, "attach", str(job), "--server", s.url, "--token", tokens[i // 25]],
                env=s.env, cwd=tmp, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        deadline = time.time() + 120
        while open_sessions(s.url) < n:
            if time.time() > deadline:
                raise RuntimeError(f"only {open_sessions(s.url)} of {n} sessions opened")
            time.sleep(0.5)
        time.sleep(5)
        after = rss_kib(s.server.pid)
        if open_sessions(s.url) < n:
            raise RuntimeError("sessions were lost while idle")
        return before, after
    finally:
        for p in clients:
            p.kill()
        for p in clients:
            p.wait()
        s.stop()


def open_sessions(url):
    """The server's count of sessions waiting or relayed (its /metrics gauge)."""
    import urllib.request
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("berth_interactive_sessions "):
                return float(line.split()[1])
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "build", "src", "berth"))
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    if shutil.which("socat") is None:
        sys.exit("socat is needed (scripts/install-deps.sh --for-tests installs it)")
    tmp = tempfile.mkdtemp(prefix="berth-bench-interactive-")
    c = None
    try:
        data = os.path.join(tmp, "data.bin")
        with open(data, "wb") as f:
            for _ in range(args.mib):
                f.write(os.urandom(1 << 20))
        c = Cluster(os.path.abspath(args.berth), tmp)
        results = {"machine": machine(), "mib": args.mib, "terminal_s": [], "port_forward_s": [],
                   "socat_s": [], "pty_s": []}
        for i in range(args.repeat):
            results["socat_s"].append(direct(data))
            results["pty_s"].append(pty_floor(data))
            results["terminal_s"].append(through_terminal(c, data))
            results["port_forward_s"].append(through_port_forward(c, data))
            log(f"round {i + 1}: socat {results['socat_s'][-1]:.3f}s, pty {results['pty_s'][-1]:.3f}s, terminal "
                f"{results['terminal_s'][-1]:.3f}s, port-forward {results['port_forward_s'][-1]:.3f}s")
        best = {k: min(results[k]) for k in ("socat_s", "pty_s", "terminal_s", "port_forward_s")}
        ratio_term = best["terminal_s"] / best["socat_s"]
        ratio_fwd = best["port_forward_s"] / best["socat_s"]
        c.down()
        c = None
        before, after = idle_sessions(os.path.abspath(args.berth), tmp, args.sessions)
        grow_mb = (after - before) / 1024
        results.update(best=best, ratio_terminal=ratio_term, ratio_port_forward=ratio_fwd,
                       idle_rss_before_kib=before, idle_rss_after_kib=after, idle_growth_mb=grow_mb,
                       sessions=args.sessions)
        mb = args.mib * 1.048576
        print(f"{args.mib} MiB, best of {args.repeat}:")
        print(f"  socat over a local TCP pair  {best['socat_s']:.3f} s  ({mb / best['socat_s']:.0f} MB/s)")
        print(f"  a plain pty                  {best['pty_s']:.3f} s  ({mb / best['pty_s']:.0f} MB/s)")
        print(f"  interactive session          {best['terminal_s']:.3f} s  ({mb / best['terminal_s']:.0f} MB/s)"
              f"  ratio {ratio_term:.1f}x (target <= {TARGET_RATIO:.0f}x); "
              f"{best['terminal_s'] / best['pty_s']:.2f}x the plain pty")
        print(f"  port-forward                 {best['port_forward_s']:.3f} s  "
              f"({mb / best['port_forward_s']:.0f} MB/s)  ratio {ratio_fwd:.1f}x")
        print(f"{args.sessions} idle attached sessions: server RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB, "
              f"+{grow_mb:.1f} MiB ({(after - before) / args.sessions:.0f} KiB per session; "
              f"target < {TARGET_IDLE_MB:.0f} MB)")
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(results, f, indent=1)
        return 0 if ratio_term <= TARGET_RATIO and grow_mb < TARGET_IDLE_MB else 1
    finally:
        if c:
            c.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

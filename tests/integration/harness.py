"""Shared harness for berth's end-to-end tests.

Every test gets its own temp dir (BERTH_HOME lives there), runs the real `berth` binary (BERTH_BIN) on
127.0.0.1 with port 0, and leaves nothing behind: `berth local down`, then SIGTERM/SIGKILL of any process
that still carries the test's tag.

The tag: every process the harness starts gets IT_BERTH_TMP=<temp dir> in its environment. Agents pass
their environment on to jobs (minus BERTH_* names, hence the name), so servers, agents, supervisors and
the jobs' own processes can all be found through /proc/PID/environ, even those that detached.

Tests must hold on a loaded 2-core machine: they poll for states (wait_until) with generous timeouts
instead of sleeping. BERTH_TEST_TIMEOUT_SCALE multiplies every timeout; BERTH_TEST_KEEP=1 keeps the temp
dirs for a post-mortem.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BERTH_BIN = os.path.abspath(
    os.environ.get("BERTH_BIN") or os.path.join(HERE, "..", "..", "build", "src", "berth"))
SCALE = float(os.environ.get("BERTH_TEST_TIMEOUT_SCALE", "1"))
TAG = "IT_BERTH_TMP"

ACTIVE = ("PENDING", "STARTING", "SETTING_UP", "RUNNING")
TERMINAL = ("SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED", "LOST", "PREEMPTED")


class CommandFailed(AssertionError):
    pass


def wait_until(pred, timeout=30.0, interval=0.05, message="condition", diagnostics=None):
    """Polls pred() until it returns something truthy, and returns that. Fails after `timeout` seconds
    (times BERTH_TEST_TIMEOUT_SCALE), saying what it waited for and what pred() last gave."""
    deadline = time.monotonic() + timeout * SCALE
    last = None
    while True:
        try:
            last = pred()
        except (CommandFailed, OSError, ValueError) as e:  # a transient answer: try again
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() >= deadline:
            extra = "\n" + diagnostics() if diagnostics else ""
            raise AssertionError(f"timed out after {timeout * SCALE:.0f}s waiting for {message}; "
                                 f"last value: {last!r}{extra}")
        time.sleep(interval)


def pids_with_env(key, value):
    """Pids of live (non-zombie) processes whose environment has key=value."""
    want = f"{key}={value}".encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if want not in env:
                continue
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                out.append(int(name))
        except (OSError, IndexError):
            continue
    return out


def _env_has_key(pid, key):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(e.startswith(key.encode() + b"=") for e in f.read().split(b"\0"))
    except OSError:
        return False


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def http(method, url, body=None, token=None, headers=None, timeout=30):
    """One HTTP request; returns (status, parsed JSON or raw text, headers). Never raises on 4xx/5xx."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout * SCALE) as r:
            status, raw, hdrs = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, raw, hdrs = e.code, e.read(), e.headers
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode(errors="replace")
    return status, parsed, hdrs


def http_unix(method, socket_path, path, body=None, token=None, timeout=30):
    """One HTTP request over a unix socket (the server's berth.sock); returns (status, parsed JSON or
    raw text). The server identifies the caller by the socket's peer credentials."""
    import http.client
    import socket

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout * SCALE)
            self.sock.connect(socket_path)

    conn = Conn("localhost", timeout=timeout * SCALE)
    headers = {"Authorization": "Bearer " + token} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw.decode(errors="replace")
    finally:
        conn.close()


class Daemon:
    """A `berth server` or `berth agent` started by the harness (not through `local up`)."""

    def __init__(self, proc, log_path, state_dir, url=None):
        self.proc = proc
        self.log_path = log_path
        self.state_dir = state_dir
        self.url = url

    @property
    def pid(self):
        return self.proc.pid

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill(self, sig=signal.SIGKILL, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout * SCALE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Berth:
    """One test's berth world: a temp dir, BERTH_HOME inside it, the processes started from it."""

    def __init__(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="berth-it-"))
        self.home = os.path.join(self.tmp, "home")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("BERTH_") and not k.startswith("SKYPILOT_")
                    and k != "CUDA_VISIBLE_DEVICES"}
        self.env["BERTH_HOME"] = self.home
        # The client's upload stat cache (docs/user-guide.md "Workdir upload") stays in the test's dir.
        self.env["XDG_CACHE_HOME"] = os.path.join(self.tmp, "cache")
        self.env[TAG] = self.tmp
        self.daemons = []
        self.clients = []  # CLI processes started with popen()
        self.local_started = False

    # --- the CLI ---

    def run(self, *args, check=True, timeout=60, env=None, cwd=None, input=None):
        """Runs `berth ARGS...` and returns (rc, stdout, stderr). check=True fails unless rc is 0."""
        full_env = dict(self.env)
        full_env.update(env or {})
        try:
            p = subprocess.run([BERTH_BIN, *map(str, args)], env=full_env, cwd=cwd or self.tmp, input=input,
                               capture_output=True, text=True, timeout=timeout * SCALE)
        except subprocess.TimeoutExpired as e:
            raise CommandFailed(f"berth {' '.join(map(str, args))} did not finish in {timeout * SCALE:.0f}s; "
                                f"stdout={e.stdout!r} stderr={e.stderr!r}\n{self.diagnostics()}")
        if check and p.returncode != 0:
            raise CommandFailed(f"berth {' '.join(map(str, args))} exited {p.returncode}\n"
                                f"stdout: {p.stdout}\nstderr: {p.stderr}")
        return p.returncode, p.stdout, p.stderr

    def popen(self, *args, env=None, cwd=None):
        """Starts `berth ARGS...` in the background with piped output (for `logs`, `exec`)."""
        full_env = dict(self.env)
        full_env.update(env or {})
        p = subprocess.Popen([BERTH_BIN, *map(str, args)], env=full_env, cwd=cwd or self.tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.clients.append(p)
        return p

    def json(self, *args, **kw):
        _, out, _ = self.run(*args, **kw)
        return json.loads(out)

    def submit(self, *args, **kw):
        """`berth exec -d --json ARGS...`; returns the job id."""
        out = self.json("exec", "-d", "--json", *args, **kw)
        assert out["group"] is None and len(out["jobs"]) == 1, out
        return out["jobs"][0]

    def queue(self, **kw):
        return self.json("queue", "--all", "--json", **kw)

    def show(self, job_id, **kw):
        return self.json("show", job_id, "--json", **kw)

    def nodes(self, **kw):
        return self.json("nodes", "--json", **kw)

    def status(self, job_id, **kw):
        return self.show(job_id, **kw)["status"]

    def wait_status(self, job_id, *statuses, timeout=30, **kw):
        """Waits until job `job_id` is in one of `statuses`; returns its job object."""
        def check():
            job = self.show(job_id, **kw)
            return job if job["status"] in statuses else None
        return wait_until(check, timeout, interval=0.1, message=f"job {job_id} to be {'/'.join(statuses)}",
                          diagnostics=lambda: self.describe_job(job_id, **kw))

    def describe_job(self, job_id, **kw):
        try:
            job = self.show(job_id, **kw)
            return f"job {job_id}: {job['status']} ({job['reason']})\n{self.diagnostics()}"
        except Exception as e:  # noqa: BLE001 - diagnostics only
            return f"job {job_id}: unavailable ({e})\n{self.diagnostics()}"

    def wait_until(self, pred, timeout=30.0, interval=0.05, message="condition"):
        return wait_until(pred, timeout, interval, message, diagnostics=self.diagnostics)

    # --- clusters ---

    def local_up(self, gpus="V100:4", nodes=1, *extra):
        args = ["local", "up"]
        if gpus:
            args += ["--gpus", gpus]
        if nodes != 1:
            args += ["--nodes", nodes]
        self.local_started = True
        self.run(*args, *extra, timeout=60)
        return self.json("local", "status", "--json")

    def local_down(self):
        return self.run("local", "down", check=False, timeout=90)

    def start_server(self, state_dir=None, listen="127.0.0.1:0", extra=(), env=None, wait=True,
                     allow_root_jobs=True):
        """A bare `berth server`; returns a Daemon whose .url is read from its --url-file. The tests run
        as root, whose jobs a server refuses unless told otherwise: by default it is told."""
        if allow_root_jobs and os.geteuid() == 0:
            extra = ["--allow-root-jobs", *extra]
        state_dir = state_dir or os.path.join(self.tmp, "server")
        os.makedirs(state_dir, exist_ok=True)
        url_file = os.path.join(state_dir, "server.url")
        if os.path.exists(url_file):
            os.remove(url_file)
        log_path = os.path.join(self.tmp, f"server-{len(self.daemons)}.log")
        full_env = dict(self.env)
        full_env.update(env or {})
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([BERTH_BIN, "server", "--listen", listen, "--state-dir", state_dir,
                                     "--url-file", url_file, *extra],
                                    env=full_env, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT)
        d = Daemon(proc, log_path, state_dir)
        self.daemons.append(d)
        if wait:
            def url():
                if proc.poll() is not None:
                    raise AssertionError(f"berth server exited {proc.returncode}:\n{d.log()}")
                try:
                    with open(url_file) as f:
                        return f.read().strip()
                except OSError:
                    return None
            d.url = wait_until(url, 30, message="the server's URL file")
        return d

    def start_agent(self, server_url, name="node-0", gpus="V100:4", state_dir=None, extra=(), env=None):
        """A bare `berth agent` joining `server_url`."""
        state_dir = state_dir or os.path.join(self.tmp, "agent-" + name)
        os.makedirs(state_dir, exist_ok=True)
        log_path = os.path.join(self.tmp, f"agent-{name}-{len(self.daemons)}.log")
        args = [BERTH_BIN, "agent", "--server", server_url, "--name", name, "--state-dir", state_dir]
        if gpus:
            args += ["--gpus", gpus]
        full_env = dict(self.env)
        full_env.update(env or {})
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([*args, *extra], env=full_env, cwd=self.tmp, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT)
        d = Daemon(proc, log_path, state_dir, url=server_url)
        self.daemons.append(d)
        return d

    def wait_nodes_up(self, names, timeout=30, **kw):
        def up():
            nodes = {n["name"]: n["state"] for n in self.nodes(**kw)}
            return all(nodes.get(n) == "UP" for n in names)
        self.wait_until(up, timeout, interval=0.1, message=f"nodes {names} to be UP")

    # --- processes ---

    def job_pids(self, job_id):
        """Live processes of job `job_id` of this test (supervisor excluded: it has no BERTH_JOB_ID)."""
        tagged = set(pids_with_env(TAG, self.tmp))
        return sorted(tagged & set(pids_with_env("BERTH_JOB_ID", str(job_id))))

    def job_pids_any(self):
        """Live processes of any job of this test."""
        tagged = set(pids_with_env(TAG, self.tmp))
        return sorted(p for p in tagged if _env_has_key(p, "BERTH_JOB_ID"))

    def tagged_pids(self):
        return pids_with_env(TAG, self.tmp)

    def agent_pid(self, node="local-0"):
        with open(os.path.join(self.home, "agents", node, "agent.pid")) as f:
            return int(f.read().strip())

    def diagnostics(self, lines=40):
        """Tails of the daemons' logs, for failure messages."""
        parts = []
        paths = [d.log_path for d in self.daemons]
        logs_dir = os.path.join(self.home, "logs")
        if os.path.isdir(logs_dir):
            paths += [os.path.join(logs_dir, f) for f in sorted(os.listdir(logs_dir))]
        for path in paths:
            try:
                with open(path, errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {os.path.basename(path)} (last {len(tail)} lines) ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def cleanup(self):
        for p in self.clients:
            if p.poll() is None:
                p.kill()
            p.wait()
            for pipe in (p.stdout, p.stderr):
                if pipe:
                    pipe.close()
        if self.local_started or os.path.exists(os.path.join(self.home, "local.json")):
            try:
                self.local_down()
            except CommandFailed:
                pass
        # Agents first (they would otherwise re-launch), then servers; jobs left to their supervisors go below.
        for d in sorted(self.daemons, key=lambda d: "server" in os.path.basename(d.log_path)):
            d.kill(signal.SIGTERM, timeout=10)
        self.leftovers = [f"{pid} ({cmdline(pid)})" for pid in self.tagged_pids()]
        for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):
            pids = self.tagged_pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + grace
            while self.tagged_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
        self.remove_job_cgroups()
        if os.environ.get("BERTH_TEST_KEEP") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)
        # `berth local down` must stop everything it started, jobs included. (Bare agents leave their jobs to
        # the supervisors by design, so only a pure local-cluster test can tell.)
        if self.local_started and not self.daemons and self.leftovers:
            raise AssertionError(f"`berth local down` left processes behind: {self.leftovers}")


    def remove_job_cgroups(self):
        """Removes the job cgroups (docs/security.md "Isolation") that agents of this test left behind
        when their node supervisors were killed: each agent's are under berth-<FNV-1a of its state
        dir> in this process's cgroups. The kernel refuses to remove one that holds a process."""
        state_dirs = []
        for root, dirs, files in os.walk(self.tmp):
            if "node_id" in files:
                state_dirs.append(root)
            if root.count(os.sep) - self.tmp.count(os.sep) >= 3 or os.path.basename(root) == "jobs":
                dirs[:] = []
        own = []
        try:
            with open("/proc/self/cgroup") as f:
                for line in f:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    for c in (controllers.split(",") if controllers else ["unified"]):
                        own.append(os.path.join("/sys/fs/cgroup", c) + (path if path != "/" else ""))
        except OSError:
            return
        for state_dir in state_dirs:
            h = 2166136261
            for byte in state_dir.encode():
                h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
            for base in own:
                agent_dir = os.path.join(base, f"berth-{h:08x}")
                if not os.path.isdir(agent_dir):
                    continue
                for rank in os.listdir(agent_dir):
                    if not os.path.isdir(os.path.join(agent_dir, rank)):
                        continue
                    # A killed job's process may take a moment to be reaped (EBUSY until then).
                    deadline = time.monotonic() + 2
                    while True:
                        try:
                            os.rmdir(os.path.join(agent_dir, rank))
                            break
                        except OSError:
                            if time.monotonic() > deadline:
                                break
                            time.sleep(0.05)
                try:
                    os.rmdir(agent_dir)
                except OSError:
                    pass


class BerthTestCase(unittest.TestCase):
    """Gives each test `self.b`, a fresh Berth world that is torn down after the test."""

    def setUp(self):
        if not os.access(BERTH_BIN, os.X_OK):
            raise unittest.SkipTest(f"no berth binary at {BERTH_BIN}; set BERTH_BIN")
        self.b = Berth()
        self.addCleanup(self.b.cleanup)

    def write(self, name, text, mode=None):
        """Writes a file under the test's temp dir and returns its path."""
        path = os.path.join(self.b.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        if mode is not None:
            os.chmod(path, mode)
        return path

    def path(self, *parts):
        return os.path.join(self.b.tmp, *parts)

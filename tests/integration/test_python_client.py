"""berth's Python client (python/berth, docs/python.md) against a real local cluster and real servers.

Imported from the repository's python/ directory (no installation needed); one test installs it offline
into a throw-away virtualenv, as docs/python.md says, and imports it from there. Covered: a 50-job sweep
submitted from Python, waited for with a progress line (on a terminal and not), its logs and the CLI's
agreeing; following a job's log live and cancelling it; show, queue (and to_dataframe), requeue; task
files, YAML, dicts and commands submitted as the CLI submits them, idempotency keys; the server's 4xx
surfacing unchanged as ApiError; bad arguments refused before anything is sent; the unix socket and TLS
with a pinned fingerprint (and `berth login`'s saved config); and, against a small http.server stand-in,
the retry rules: reads and keyed submissions ride out 503 + Retry-After and lost connections, a keyless
submission is sent once, a follower's 503 moves on to its leader. Also examples/sweep.py end to end.
"""

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import SCALE, BerthTestCase, http_unix

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import berth  # noqa: E402
from berth import config as berth_config  # noqa: E402
from berth.sweep import expand_grid, run_prefix  # noqa: E402
from berth.taskfile import prepare_task  # noqa: E402
from berth.yamlish import TaskText, parse_value  # noqa: E402


@contextlib.contextmanager
def environ(env):
    """os.environ replaced by `env` for the block (the client reads it when it is made)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class Tty(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self):
        return True


class ClusterCase(BerthTestCase):
    """A local cluster (4 declared V100s, 16 CPUs) and a client that found it as the CLI would."""

    def setUp(self):
        super().setUp()
        self.b.local_up("V100:4", 1, "--cpus", "16")
        self.sock = os.path.join(self.b.home, "server", "berth.sock")
        with environ(self.b.env):
            self.c = berth.Client()
        self.addCleanup(self.c.close)


class SweepWaitLogsCancelTest(ClusterCase):

    def test_a_50_job_sweep_waited_for_with_progress_and_its_logs(self):
        c = self.c
        self.assertEqual((c.source, c.server), ("local cluster", "unix:" + self.sock))
        group = c.sweep({"i": list(range(25)), "word": ["a b", "it's"]},
                        'echo "point i=$i word=$word rank=$BERTH_JOB_RANK of $BERTH_NUM_JOBS '
                        'params=$SWEEP_PARAMS"', name="pysweep")
        self.assertIsInstance(group, berth.Group)
        self.assertEqual((len(group), group.name), (50, "pysweep"))
        self.assertEqual(group.params[3], {"i": 1, "word": "it's"})
        # Plain lines (not a terminal), one each time the counts change, the last one complete.
        out = io.StringIO()
        result = c.wait(group, timeout=120 * SCALE, progress=out)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines and all(line.startswith(f"group {group.id}: ") for line in lines), lines)
        self.assertIn("50 succeeded, 0 failed | 50/50 done", lines[-1])
        self.assertNotIn("\r", out.getvalue())
        self.assertTrue(result.ok, result)
        self.assertEqual(sorted(result.statuses), sorted(group.job_ids))
        self.assertEqual(result.counts, {"SUCCEEDED": 50})
        # On a terminal: one line redrawn in place, with a bar, ended by a newline.
        tty = Tty()
        again = c.wait(group, progress=tty)
        self.assertTrue(again.ok)
        self.assertTrue(tty.getvalue().startswith("\r\033[K[########################] group "), tty.getvalue())
        self.assertTrue(tty.getvalue().endswith("ETA 0s\n"), tty.getvalue())
        # Each rank ran its own point; the logs agree with the CLI's.
        for rank in (0, 7, 49):
            point = group.params[rank]
            got = list(c.logs(group.job(rank)))
            self.assertEqual(got, [f"point i={point['i']} word={point['word']} rank={rank} of 50 params="
                                   + json.dumps(point, separators=(",", ":"))], got)
            _, cli, _ = self.b.run("logs", group.job_ids[rank], "--no-follow")
            self.assertEqual(cli, "\n".join(got) + "\n")
        info = group.info()
        self.assertEqual((info.jobs, info.counts, info.finished), (50, {"SUCCEEDED": 50}, True))
        # The group's rows, as the CLI lists them.
        cli_ids = [j["id"] for j in self.b.json("queue", "--group", group.id, "--json", "--all")]
        self.assertEqual([j.id for j in c.queue(group=group, all=True)], cli_ids)

    def test_following_a_log_live_then_cancelling(self):
        c = self.c
        job = c.submit(["bash", "-c", "echo started; echo 'second line'; sleep 600"])
        self.assertEqual(job.name, "bash")
        lines = c.logs(job)  # followed
        self.assertEqual(next(lines), "started")
        self.assertEqual(next(lines), "second line")
        # Its output may reach the server a moment before the agent's report that it started.
        self.b.wait_until(lambda: c.show(job).status == "RUNNING", 30, message="the job to run")
        result = c.cancel(job, reason="from python")
        self.assertEqual(result.cancelled, [job.id])
        self.assertEqual(list(lines), [])  # the follow ends with the job
        waited = c.wait(job, progress=False, timeout=60 * SCALE)
        self.assertEqual(waited.statuses, {job.id: "CANCELLED"})
        self.assertFalse(waited.ok)
        self.assertEqual(waited.failed(), [job.id])
        self.assertIn("from python", c.show(job).reason)
        self.assertEqual(self.b.status(job.id), "CANCELLED")
        # A group is cancelled whole; a finished job is said to be so.
        group = c.submit("sleep 600", num_jobs=3, max_running=2)
        self.assertEqual(c.group(group).max_running, 2)
        self.assertEqual(group.update(max_running=None).max_running, None)
        result = c.cancel(group)
        self.assertEqual(sorted(result.cancelled), sorted(group.job_ids))
        self.assertEqual(c.cancel([job]).already_finished, [job.id])
        end = c.wait(group, progress=False, timeout=60 * SCALE)
        self.assertEqual(end.progress.cancelled, 3)
        # A job that waits: wait() times out with a TimeoutError that says how far it got.
        blocked = c.submit("true", after=c.submit("sleep 600"))
        with self.assertRaises(TimeoutError) as caught:
            c.wait(blocked, timeout=0.6, progress=False)
        self.assertIsInstance(caught.exception, berth.WaitTimeout)
        self.assertEqual(caught.exception.result.progress.pending, 1)
        c.cancel(all=True)


class ShowQueueRequeueTest(ClusterCase):

    def test_show_queue_requeue_and_the_servers_errors_unchanged(self):
        c = self.c
        job = c.submit('echo "attempt $BERTH_ATTEMPT"; sleep 600', name="napper", gpus="V100:1",
                       envs={"A": 1, "B": "two words"})
        self.b.wait_status(job.id, "RUNNING")
        followed = c.logs(job)
        self.assertEqual(next(followed), "attempt 1")
        info = c.show(job)
        self.assertEqual((info.id, info.name, info.status, info.user), (job.id, "napper", "RUNNING", "root"))
        self.assertEqual((info.resources.gpus, info.resources.cpus), ("V100:1", 0.5))
        self.assertEqual(len(info.placement[0].gpus), 1)
        self.assertEqual(info.spec["envs"], {"A": "1", "B": "two words"})
        self.assertEqual(info.spec["workdir"], os.getcwd())  # as berth exec: here, on the nodes
        self.assertTrue(info.events and info.started_at and info.active)
        cli = self.b.show(job.id)
        self.assertEqual((cli["status"], cli["name"], cli["placement"]), (info.status, info.name, info.raw["placement"]))

        # requeue: back to the queue, then running again as attempt 2.
        requeued = c.requeue(job)
        self.assertEqual(requeued, berth.Requeued(job.id, "PENDING"))
        self.b.wait_until(lambda: c.show(job).attempt == 2 and c.show(job).status == "RUNNING", 30,
                          message="the second attempt to run")
        self.assertEqual(c.show(job).requeues, 1)
        self.assertEqual(next(followed), "attempt 2")  # the follow moved on to the new attempt

        # The server's refusals surface unchanged: the same text a raw request gets.
        other = c.submit("true")
        c.wait(other, progress=False)
        with self.assertRaises(berth.ConflictError) as caught:
            c.requeue(other)
        status, raw = http_unix("POST", self.sock, f"/v1/jobs/{other.id}/requeue")
        self.assertEqual((caught.exception.status, caught.exception.message), (status, raw["error"]))
        self.assertIsInstance(caught.exception, berth.ApiError)
        self.assertEqual(str(caught.exception), raw["error"])
        with self.assertRaises(berth.NotFoundError) as caught:
            c.show(999999)
        status, raw = http_unix("GET", self.sock, "/v1/jobs/999999")
        self.assertEqual((caught.exception.status, caught.exception.message), (404, raw["error"]))
        bad = "# the task\nname: bad\nresources:\n  cpuz: 2\nrun: echo hi\n"
        with self.assertRaises(berth.BadRequestError) as caught:
            c.submit(bad, envs={"X": "y"})
        text = prepare_task(bad, envs={"X": "y"}).text
        status, raw = http_unix("POST", self.sock, "/v1/jobs", json.dumps({"yaml": text}))
        self.assertEqual((caught.exception.status, caught.exception.message), (400, raw["error"]))
        # The client's edits leave the user's lines where they were: the server names line 4.
        self.assertEqual(raw["error"], "task.yaml:4: resources: unknown field 'cpuz' (did you mean 'cpus'?)")
        with self.assertRaises(berth.InfeasibleError) as caught:
            c.submit("true", gpus="V100:9")
        self.assertIn("no node has 9 V100 GPUs", caught.exception.message)

        # queue(): what `berth queue --json` lists, filtered the same way.
        jobs = c.queue()
        cli_rows = self.b.json("queue", "--json")
        self.assertEqual([j.id for j in jobs], [r["id"] for r in cli_rows])
        self.assertIsInstance(jobs, berth.JobList)
        self.assertEqual([j.id for j in c.queue(status="RUNNING")], [job.id])
        self.assertEqual([j.id for j in c.queue(active=True)], [job.id])
        self.assertEqual({j.status for j in c.queue(all=True, status=["SUCCEEDED", "RUNNING"])},
                         {"SUCCEEDED", "RUNNING"})
        # to_dataframe() imports pandas only when asked, and says so without it.
        records = jobs.records()
        self.assertEqual(records[0]["id"], jobs[0].id)
        fake = types.ModuleType("pandas")
        fake.DataFrame = type("DataFrame", (), {"from_records": staticmethod(lambda rows: ("frame", rows))})
        saved = sys.modules.get("pandas")
        try:
            sys.modules["pandas"] = fake
            frame = c.queue(as_dataframe=True)
            self.assertEqual(frame[0], "frame")
            self.assertEqual([r["id"] for r in frame[1]], [j.id for j in jobs])
            sys.modules["pandas"] = None  # import pandas now fails
            with self.assertRaises(ImportError) as caught:
                jobs.to_dataframe()
            self.assertIn("needs pandas", str(caught.exception))
        finally:
            if saved is None:
                sys.modules.pop("pandas", None)
            else:
                sys.modules["pandas"] = saved
        c.cancel(all=True)
        self.assertEqual(list(followed), [])


class SubmissionFormsTest(ClusterCase):

    def test_task_files_yaml_dicts_commands_and_idempotency_keys(self):
        c, b = self.c, self.b
        first = c.submit("true")
        c.wait(first, progress=False)
        # A task file: named after the file, the CLI's overrides applied, its comments and lines kept.
        path = self.write("proj/train.yaml", "# a task\nresources:\n  accelerators: V100:1\n  cpus: 1\n"
                          "envs: {LR: '0.01'}\ndepends_on: any:1\nrun: |\n  echo \"lr=$LR extra=$EXTRA\"\n"
                          "  echo done\n")
        job = c.submit(path, after=first, envs={"EXTRA": 3}, gpus="V100:2")
        self.assertEqual(job.name, "train")
        spec = c.show(job).spec
        self.assertEqual(spec["name"], "train")
        self.assertEqual(spec["resources"]["accelerators"], {"V100": 2})
        self.assertEqual(spec["envs"], {"LR": "0.01", "EXTRA": "3"})
        self.assertEqual(spec["depends_on"], ["any:1", f"ok:{first.id}"])
        c.wait(job, progress=False, timeout=60 * SCALE)
        self.assertEqual(list(c.logs(job)), ["lr=0.01 extra=3", "done"])
        # The same file through the CLI makes the same spec (but for what the flags added).
        cli_job = b.submit(path, "--gpus", "V100:2", "--env", "EXTRA=3", "--after", f"ok:{first.id}", cwd=os.getcwd())
        cli_spec = b.show(cli_job)["spec"]
        self.assertEqual({k: v for k, v in cli_spec.items() if k != "envs"},
                         {k: v for k, v in spec.items() if k != "envs"})
        # YAML text, a dict (a task file's mapping), a command's words.
        y = c.submit("name: from-text\nrun: echo text\n")
        d = c.submit({"name": "from-dict", "resources": {"accelerators": "V100:1"},
                      "run": "echo dict $CUDA_VISIBLE_DEVICES | wc -w"})
        w = c.submit(["echo", "two words", "it's"])
        n = c.submit("echo hi", workdir="node:/tmp")
        for j in (y, d, w, n):
            c.wait(j, progress=False, timeout=60 * SCALE)
        self.assertEqual([list(c.logs(j)) for j in (y, d, w)], [["text"], ["2"], ["two words it's"]])
        self.assertEqual([c.show(j).name for j in (y, d, w, n)], ["from-text", "from-dict", "echo", "echo"])
        self.assertEqual(c.show(n).spec["workdir"], "/tmp")
        # Warnings of the server reach the caller.
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            warned = c.submit("name: w\nresources:\n  cloud: aws\nrun: 'true'\n")
        self.assertTrue(warned.warnings and "cloud" in warned.warnings[0], warned)
        self.assertTrue(any(issubclass(x.category, berth.BerthWarning) for x in seen))
        # A key makes a submission once; the same key for something else is refused with the server's words.
        one = c.submit("true", num_jobs=2, idempotency_key="py-sweep-1")
        two = c.submit("true", num_jobs=2, idempotency_key="py-sweep-1")
        self.assertEqual((one.id, one.job_ids), (two.id, two.job_ids))
        with self.assertRaises(berth.ConflictError) as caught:
            c.submit("false", idempotency_key="py-sweep-1")
        self.assertIn("idempotency key 'py-sweep-1' was used for a different submission", caught.exception.message)
        # The module-level functions use a default client found the same way.
        with environ(b.env):
            berth.client._default = None
            self.assertEqual(berth.show(first).status, "SUCCEEDED")
            berth.default_client().close()
            berth.client._default = None

    def test_examples_sweep_py_runs_end_to_end(self):
        env = dict(self.b.env, PYTHONPATH=os.path.join(ROOT, "python"))
        p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "sweep.py"), "--lrs", "0.5,0.1",
                            "--epochs", "1,2"], env=env, cwd=self.b.tmp, capture_output=True, text=True,
                           timeout=120 * SCALE)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("4/4 done", p.stderr)
        self.assertIn("best: lr=0.5 epochs=2", p.stdout)
        rows = [j for j in self.b.queue() if j["name"] == "lr-sweep"]
        self.assertEqual(len(rows), 4)
        self.assertTrue(all(j["status"] == "SUCCEEDED" for j in rows), rows)


class SocketAndTlsTest(BerthTestCase):

    def admin_token(self, sock, user, name):
        status, body = http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": user, "name": name}))
        self.assertEqual(status, 201, body)
        return body["token"]

    def test_unix_socket_tls_pinned_fingerprint_and_login(self):
        b = self.b
        server = b.start_server(extra=["--tls"])
        sock = os.path.join(server.state_dir, "berth.sock")
        with open(os.path.join(server.state_dir, "tls.fingerprint")) as f:
            fingerprint = f.read().strip()
        with environ(b.env):
            over_socket = berth.Client("unix:" + sock)
            self.assertEqual(over_socket.whoami().via, "socket")
            token = self.admin_token(sock, "root", "py-tls")
            pinned = berth.Client(server.url, token=token, tls_fingerprint=fingerprint.upper())
            self.assertEqual(pinned.whoami().via, "token py-tls")
            self.assertEqual(pinned.queue(), [])
            # Another pin: refused before the token goes anywhere, naming both fingerprints.
            wrong = berth.Client(server.url, token=token, tls_fingerprint="sha256:" + "ab" * 32)
            with self.assertRaises(berth.TlsError) as caught:
                wrong.whoami()
            self.assertIn(fingerprint, str(caught.exception))
            self.assertIsInstance(caught.exception, ConnectionError)
            # No pin: the self-signed certificate is not trusted.
            with self.assertRaises(berth.TlsError) as caught:
                berth.Client(server.url, token=token, retry_for=0).whoami()
            self.assertIn("not trusted", str(caught.exception))
            # Plain HTTP to the TLS port: the server does not speak it.
            with self.assertRaises(berth.BerthError):
                berth.Client(server.url.replace("https:", "http:"), retry_for=0).whoami()
        # `berth login` saves server, token and pin; the client finds all three there.
        token_file = self.write("py.token", token + "\n")
        b.run("login", "--server", server.url, "--token-file", token_file, "--trust")
        with environ(b.env):
            logged_in = berth.Client()
            self.assertEqual(logged_in.source, "login")
            self.assertEqual(logged_in.whoami().via, "token py-tls")
        with environ(dict(b.env, BERTH_TLS_FINGERPRINT="sha256:" + "cd" * 32)):
            with self.assertRaises(berth.TlsError):
                berth.Client().whoami()
        for c in (over_socket, pinned, wrong, logged_in):
            c.close()


# --- a stand-in server for the failure cases ---

class StandIn:
    """A tiny HTTP server answering from a script: each request takes the next action (the last one
    repeats). Actions: (status, json_body[, headers]) or "drop" (read the request, close without an
    answer). Every request is recorded (method, path, headers, body)."""

    def __init__(self, actions):
        self.actions = list(actions)
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                action = outer.actions.pop(0) if len(outer.actions) > 1 else outer.actions[0]
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, payload, *extra = action
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for k, v in (extra[0] if extra else {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = handle_one

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


BUSY = (503, {"error": "server busy"}, {"Retry-After": "1"})
BUSY_NOW = (503, {"error": "server busy"}, {"Retry-After": "0"})


class RetryTest(unittest.TestCase):
    """The client's retry rules, against the stand-in: no berth binary needed."""

    def stand_in(self, *actions):
        s = StandIn(actions)
        self.addCleanup(s.stop)
        return s

    def client(self, s, **kw):
        c = berth.Client(s.url if isinstance(s, StandIn) else s, **kw)
        self.addCleanup(c.close)
        return c

    def test_reads_ride_out_busy_answers_and_lost_connections(self):
        s = self.stand_in(BUSY, BUSY, (200, {"ok": True, "version": "x"}))
        started = time.monotonic()
        self.assertEqual(self.client(s).health(), {"ok": True, "version": "x"})
        self.assertEqual(len(s.requests), 3)
        self.assertGreaterEqual(time.monotonic() - started, 1.9)  # Retry-After: 1, twice
        s = self.stand_in("drop", "drop", (200, {"ok": True}))
        self.assertEqual(self.client(s).health(), {"ok": True})
        self.assertEqual(len(s.requests), 3)
        # Past retry_for the last answer stands, its message unchanged.
        s = self.stand_in(BUSY_NOW)
        with self.assertRaises(berth.UnavailableError) as caught:
            self.client(s, retry_for=0.5).health()
        self.assertEqual((caught.exception.status, caught.exception.message), (503, "server busy"))
        self.assertGreater(len(s.requests), 1)
        # Cancels are repeated as reads are.
        s = self.stand_in("drop", (200, {"cancelled": [3], "already_finished": [], "not_found": [], "forbidden": []}))
        self.assertEqual(self.client(s).cancel(3).cancelled, [3])
        self.assertEqual([json.loads(r[3]) for r in s.requests], [{"ids": [3]}] * 2)

    def test_a_keyed_submission_is_repeated_with_its_key_and_a_keyless_one_never(self):
        s = self.stand_in("drop", BUSY_NOW, (502, b"bad gateway"), (201, {"group": None, "jobs": [5]}))
        job = self.client(s).submit("true")
        self.assertEqual(job.id, 5)
        keys = {r[2].get("Idempotency-Key") for r in s.requests}
        self.assertEqual(len(s.requests), 4)
        self.assertEqual(len(keys), 1)
        self.assertRegex(keys.pop(), r"^[0-9a-f]{32}$")  # as the CLI's: 128 random bits
        self.assertEqual(len({r[3] for r in s.requests}), 1)  # the same body each time
        # A submission without a key (only possible through call()) is sent once, whatever happens.
        body = {"spec": {"run": "true"}}
        for action, error in ((BUSY_NOW, berth.UnavailableError), ("drop", berth.ConnectionError)):
            s = self.stand_in(action, (201, {"group": None, "jobs": [6]}))
            with self.assertRaises(error):
                self.client(s).call("POST", "/v1/jobs", body)
            self.assertEqual(len(s.requests), 1, action)
        # Other changes go again only when the server said it did nothing (503 + Retry-After).
        s = self.stand_in("drop", (200, {"id": 4, "status": "PENDING"}))
        with self.assertRaises(berth.ConnectionError):
            self.client(s).requeue(4)
        self.assertEqual(len(s.requests), 1)
        s = self.stand_in(BUSY_NOW, (200, {"id": 4, "status": "PENDING"}))
        self.assertEqual(self.client(s).requeue(4), berth.Requeued(4, "PENDING"))
        self.assertEqual(len(s.requests), 2)

    def test_a_submission_that_gives_up_says_what_became_of_it(self):
        s = self.stand_in((503, {"error": "store unreachable"}))
        with self.assertRaises(berth.UnavailableError) as caught:
            self.client(s, retry_for=0.3).submit("true", idempotency_key="k-1")
        e = caught.exception
        self.assertEqual((e.message, e.idempotency_key, e.maybe_recorded), ("store unreachable", "k-1", True))
        self.assertIn("may or may not have been recorded; submitting again with idempotency_key='k-1'", str(e))
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        closed.close()  # nothing listens there now
        with self.assertRaises(berth.ConnectionError) as caught:
            self.client(f"http://127.0.0.1:{port}", retry_for=0.3).submit("true")
        self.assertFalse(caught.exception.maybe_recorded)
        self.assertIn("nothing was submitted", str(caught.exception))

    def test_a_followers_503_moves_on_to_its_leader(self):
        leader = self.stand_in((200, {"id": 9, "status": "PENDING"}))
        follower = self.stand_in((503, {"error": "not the leader", "role": "follower"}, {"X-Berth-Leader": leader.url}))
        c = self.client(f"{follower.url},{leader.url}")
        self.assertEqual(c.requeue(9).status, "PENDING")
        self.assertEqual((len(follower.requests), len(leader.requests)), (1, 1))
        self.assertEqual(c.server, leader.url)

    def test_errors_of_what_is_not_a_berth_server(self):
        s = self.stand_in((404, b"<html>nope</html>"), (200, b"[]"))
        with self.assertRaises(berth.NotFoundError) as caught:
            self.client(s).show(1)
        self.assertEqual(caught.exception.message,
                         f"{s.url} answered 404 to GET /v1/jobs/1: is it a berth server? (server=, BERTH_SERVER)")
        with self.assertRaises(berth.ApiError):
            self.client(s).show(1)

    def test_bad_arguments_are_refused_before_anything_is_sent(self):
        s = self.stand_in((500, {"error": "should not be reached"}))
        c = self.client(s)
        job = berth.Job(1, client=c)
        cases = [
            (TypeError, lambda: c.submit(123)),
            (ValueError, lambda: c.submit("")),
            (ValueError, lambda: c.submit("true", num_jobs=0)),
            (TypeError, lambda: c.submit("true", num_jobs=True)),
            (TypeError, lambda: c.submit("true", num_jobs="3")),
            (ValueError, lambda: c.submit("true", max_running=2)),
            (ValueError, lambda: c.submit("true", num_jobs=2, max_running=0)),
            (ValueError, lambda: c.submit("true", idempotency_key="has space")),
            (ValueError, lambda: c.submit("true", idempotency_key="")),
            (ValueError, lambda: c.submit("true", after="bogus")),
            (ValueError, lambda: c.submit("true", after="ok:0")),
            (TypeError, lambda: c.submit("true", after=1.5)),
            (ValueError, lambda: c.submit("true", name="bad name")),
            (ValueError, lambda: c.submit("true", workdir=".")),
            (ValueError, lambda: c.submit({"run": "true", "workdir": "node:rel"})),
            (ValueError, lambda: c.submit("true", gpus="V100:x:y")),
            (TypeError, lambda: c.submit("true", envs=["A=1"])),
            (TypeError, lambda: c.submit({"run": object()})),
            (ValueError, lambda: c.sweep({}, "true")),
            (ValueError, lambda: c.sweep([], "true")),
            (ValueError, lambda: c.sweep({"lr": []}, "true")),
            (TypeError, lambda: c.sweep({"lr": "0.1"}, "true")),
            (ValueError, lambda: c.sweep({"BERTH_X": [1]}, "true")),
            (ValueError, lambda: c.sweep({"not a name": [1]}, "true")),
            (TypeError, lambda: c.sweep({"lr": [[1]]}, "true")),
            (ValueError, lambda: c.sweep({"lr": [1]}, {"name": "no-run"})),
            (ValueError, lambda: c.cancel()),
            (ValueError, lambda: c.cancel(1, reason="x" * 300)),
            (ValueError, lambda: c.wait([])),
            (ValueError, lambda: c.wait(job, timeout=-1)),
            (TypeError, lambda: c.wait("1")),
            (ValueError, lambda: c.show(0)),
            (ValueError, lambda: c.logs(job, rank=-1)),
            (ValueError, lambda: c.queue(status="RUNNNING")),
            (ValueError, lambda: c.queue(limit=5000)),
            (ValueError, lambda: c.update_group(1, max_running=0)),
            (TypeError, lambda: c.requeue(berth.Group(1, (2,)))),
            (berth.ConfigError, lambda: berth.Client("ftp://x")),
            (berth.ConfigError, lambda: berth.Client("http://example.com:80", token="secret")),
            (berth.ConfigError, lambda: berth.Client(s.url, tls_fingerprint="sha256:nothex")),
        ]
        for error, call in cases:
            with self.subTest(error=error.__name__):
                with self.assertRaises(error):
                    call()
        with self.assertRaises(ValueError) as caught:
            c.queue(status="RUNNNING")
        self.assertIn("did you mean RUNNING?", str(caught.exception))
        self.assertEqual(s.requests, [])

    def test_finding_the_server_as_the_cli_does(self):
        tmp = tempfile.mkdtemp(prefix="berth-py-")
        self.addCleanup(shutil.rmtree, tmp, True)
        home = os.path.join(tmp, "home")
        os.makedirs(os.path.join(home, "server"))
        env = {"BERTH_HOME": home}
        # Nothing there: the error says how to start a cluster.
        with self.assertRaises(berth.ConfigError) as caught:
            berth_config.choose_server(env=env)
        self.assertIn("`berth local up` starts one", str(caught.exception))
        # The local cluster's socket (it need not answer to be chosen, as the CLI's).
        with open(os.path.join(home, "local.json"), "w") as f:
            json.dump({"server": "http://127.0.0.1:1"}, f)
        open(os.path.join(home, "server", "berth.sock"), "w").close()
        choice = berth_config.choose_server(env=env)
        self.assertEqual((choice.urls, choice.source), (["unix:" + home + "/server/berth.sock"], "local cluster"))
        # ... and when nothing answers there, the first call says the cluster is down.
        with self.assertRaises(berth.ConnectionError) as caught:
            with environ(env):
                berth.Client(retry_for=5).health()
        self.assertIn(f"the local cluster under {home} is not running", str(caught.exception))
        # The saved login beats the local cluster; BERTH_SERVER naming another server beats the login.
        with open(os.path.join(home, "config"), "w") as f:
            json.dump({"server": "https://berth.example:8765", "token": "tok",
                       "tls_fingerprint": "sha256:" + "12" * 32}, f)
        choice = berth_config.choose_server(env=env)
        self.assertEqual((choice.urls, choice.token, choice.tls_fingerprint, choice.source),
                         (["https://berth.example:8765"], "tok", "sha256:" + "12" * 32, "login"))
        choice = berth_config.choose_server(env=dict(env, BERTH_SERVER="http://127.0.0.1:9,http://127.0.0.2:9",
                                                     BERTH_TOKEN="mine"))
        self.assertEqual((choice.urls, choice.token, choice.tls_fingerprint),
                         (["http://127.0.0.1:9", "http://127.0.0.2:9"], "mine", ""))
        token_file = os.path.join(tmp, "t")
        with open(token_file, "w") as f:
            f.write("from-file\n")
        choice = berth_config.choose_server(env=dict(env, BERTH_TOKEN_FILE=token_file,
                                                     BERTH_TLS_FINGERPRINT="sha256:" + "34" * 32))
        self.assertEqual((choice.token, choice.tls_fingerprint), ("from-file", "sha256:" + "34" * 32))
        # A node of a real cluster: its agent's socket is named, as the CLI names it.
        proc = os.path.join(tmp, "proc")
        for pid, argv in ((10, ["/usr/bin/berth", "agent", "--state-dir", home + "/agents/local-0"]),
                          (11, ["/usr/local/bin/berth-daemon", "agent", "--server", "https://ctl:8765",
                                "--state-dir", "/var/lib/berth-agent"])):
            os.makedirs(os.path.join(proc, str(pid)))
            with open(os.path.join(proc, str(pid), "cmdline"), "wb") as f:
                f.write(b"\0".join(a.encode() for a in argv) + b"\0")
        agent = berth_config.find_node_agent(proc)
        self.assertEqual((agent.pid, agent.user_socket, agent.server),
                         (11, "/var/lib/berth-agent/berth.sock", "https://ctl:8765"))


class TaskTextTest(unittest.TestCase):
    """The task-file reading the client needs to edit a file's top level."""

    def test_values_read_as_the_server_reads_them(self):
        text = ("%YAML 1.2\n---\n# a task\nname: x   # trailing\nresources: {accelerators: {V100: 4}, cpus: 8+}\n"
                "depends_on:\n- ok:10\n- any:group:3\nenvs:\n  A: \"a\\tb \\u00e9\"\n  B: 'it''s'\n  C: ~\n"
                "run: >\n  python train.py\n  --lr 0.1\n\n  next\n    indented\nsetup: |-\n    keep\n      this\n"
                "list:\n  - name: a\n    v: 1\n  - [x, y]\n  - - nested\nplain: multi\n  line\n...\n")
        doc = TaskText(text)
        self.assertEqual(list(doc.entries), ["name", "resources", "depends_on", "envs", "run", "setup",
                                             "list", "plain"])
        self.assertEqual(doc.get("name"), "x")
        self.assertEqual(doc.get("resources"), {"accelerators": {"V100": "4"}, "cpus": "8+"})
        self.assertEqual(doc.get("depends_on"), ["ok:10", "any:group:3"])
        self.assertEqual(doc.get("envs"), {"A": "a\tb é", "B": "it's", "C": None})
        self.assertEqual(doc.get("run"), "python train.py --lr 0.1\nnext\n  indented\n")
        self.assertEqual(doc.get("setup"), "keep\n  this")
        self.assertEqual(doc.get("list"), [{"name": "a", "v": "1"}, ["x", "y"], ["nested"]])
        self.assertEqual(doc.get("plain"), "multi line")
        # An edit comments the old lines out where they stood and appends the new value as JSON.
        doc.set("run", "echo new")
        out = doc.render().splitlines()
        self.assertEqual(len(out), text[:text.index("...")].count("\n") + 1)
        self.assertEqual(out[3], "name: x   # trailing")
        self.assertTrue(out[12].startswith("# run: >"), out[12])
        self.assertEqual(out[-1], '"run": "echo new"')
        self.assertEqual(parse_value('{"a": [1, "b"], c: d}'), {"a": ["1", "b"], "c": "d"})
        with self.assertRaises(ValueError):
            TaskText("- a list\n- not a task\n")
        with self.assertRaises(ValueError):
            TaskText("run: a\n---\nrun: b\n")
        with self.assertRaises(ValueError):
            TaskText("base: &b {x: 1}\nrun: *b\n").get("run")

    def test_a_sweeps_prefix_exports_each_points_parameters(self):
        points = expand_grid({"lr": [0.1, 1e-05], "tag": ["a b", "it's", 'q"$x`'], "on": [True]})
        self.assertEqual(len(points), 6)
        self.assertEqual(points[1], {"lr": 0.1, "tag": "it's", "on": True})
        script = run_prefix(points) + 'printf "%s|%s|%s|%s" "$lr" "$tag" "$on" "$SWEEP_PARAMS"'
        for rank in (1, 5):
            out = subprocess.run(["bash", "-c", script], env={"BERTH_JOB_RANK": str(rank), "PATH": os.defpath},
                                 capture_output=True, text=True, check=True).stdout
            lr, tag, on, params = out.split("|", 3)
            self.assertEqual((lr, tag, on), (repr(points[rank]["lr"]), points[rank]["tag"], "true"))
            self.assertEqual(json.loads(params), points[rank])
        p = subprocess.run(["bash", "-c", script], env={"BERTH_JOB_RANK": "6", "PATH": os.defpath},
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(expand_grid([{"a": 1}, {"b": "x"}]), [{"a": 1}, {"b": "x"}])


class OfflineInstallTest(unittest.TestCase):

    def test_pip_installs_the_package_offline_into_a_virtualenv(self):
        """The command docs/python.md gives: Debian's python3 (python3-venv, python3-pip,
        python3-setuptools, python3-wheel), no network, no build isolation."""
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        probe = subprocess.run([python, "-c", "import venv, ensurepip, setuptools, wheel"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest(f"{python} lacks venv/ensurepip/setuptools/wheel (Debian: apt install python3-venv "
                          f"python3-pip python3-setuptools python3-wheel): {probe.stderr.strip()[-200:]}")
        tmp = tempfile.mkdtemp(prefix="berth-py-install-")
        self.addCleanup(shutil.rmtree, tmp, True)
        src = os.path.join(tmp, "python")  # a copy: pip builds in the source tree
        shutil.copytree(os.path.join(ROOT, "python"), src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        # Offline and on its own: no index, no local wheel dirs or pip config of this machine.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        venv = os.path.join(tmp, "venv")
        for cmd in ([python, "-m", "venv", "--system-site-packages", venv],
                    [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-build-isolation",
                     "--no-index", src]):
            p = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=300 * SCALE)
            self.assertEqual(p.returncode, 0, f"{' '.join(cmd)}:\n{p.stdout}\n{p.stderr}")
        check = ("import berth, os, sys; d = os.path.dirname(berth.__file__); "
                 "print(berth.__version__, d.startswith(sys.prefix), os.path.exists(os.path.join(d, 'py.typed')))")
        p = subprocess.run([os.path.join(venv, "bin", "python"), "-c", check], env=env, cwd=tmp,
                           capture_output=True, text=True, check=True)
        self.assertEqual(p.stdout.split(), [berth.__version__, "True", "True"])


if __name__ == "__main__":
    unittest.main()

"""Several servers on one PostgreSQL (docs/ha.md): one leads, the others follow; a dead or paused leader is
replaced within a few seconds, agents and the CLI follow the new leader, running jobs keep running, and nothing
acknowledged is lost or duplicated.

Each test starts its own PostgreSQL (tests/support/pg_cluster.sh: initdb + pg_ctl in a temp dir on a free port,
as `nobody` when run as root), three `berth server --store postgresql://...` on fixed free ports, and one agent
given all three URLs.
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import SCALE, BerthTestCase, http, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
PG_CLUSTER = os.path.join(HERE, "..", "support", "pg_cluster.sh")
LEASE = "3s"

# Each start of a job leaves a line "<job> <attempt>" in $CTL/starts; it runs until $CTL/release exists.
HELD_SCRIPT = r"""
echo "$BERTH_JOB_ID $BERTH_ATTEMPT" >> "$CTL/starts"
echo "started $BERTH_JOB_ID"
while [ ! -e "$CTL/release" ]; do sleep 0.05; done
echo "done $BERTH_JOB_ID"
"""


# Logs its start, and its end when stopped (it takes a second to stop, so a preemption is still under way
# for that long), with times, to $CTL/timeline; runs until $CTL/release-<name> exists.
TIMED_SCRIPT = r"""
name=$1
now() { date +%s.%N; }
echo "start $name $BERTH_ATTEMPT $(now) $CUDA_VISIBLE_DEVICES" >> "$CTL/timeline"
trap 'sleep 1; echo "end $name $BERTH_ATTEMPT $(now)" >> "$CTL/timeline"; exit 143' TERM
while [ ! -e "$CTL/release-$name" ]; do sleep 0.05; done
echo "end $name $BERTH_ATTEMPT $(now)" >> "$CTL/timeline"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HaTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        b = self.b
        pointer = self.path("pg-cluster")
        out = subprocess.run(["bash", PG_CLUSTER, "start-at", pointer], capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0:
            self.fail(f"cannot start PostgreSQL for the test: {out.stderr}")
        self.addCleanup(subprocess.run, ["bash", PG_CLUSTER, "stop-at", pointer], capture_output=True,
                        timeout=120)
        with open(pointer) as f:
            self.pg_dir = f.read().strip()
        with open(pointer + ".uri") as f:
            admin = f.read().strip()
        subprocess.run(["psql", admin, "-qc", "CREATE DATABASE berth"], check=True, capture_output=True)
        self.store = admin.rsplit("/", 1)[0] + "/berth"
        self.token_file = self.write("cluster-token", "ha-test-cluster-token\n", mode=0o600)
        self.ctl = b.tmp
        self.script = self.write("held.sh", HELD_SCRIPT)
        self.urls = [f"http://127.0.0.1:{free_port()}" for _ in range(3)]
        self.servers = [self.start_server(i) for i in range(3)]
        self.env = {"BERTH_SERVER": ",".join(self.urls)}
        self.agent = b.start_agent(",".join(self.urls), name="node-0", gpus="V100:4",
                                   extra=["--token-file", self.token_file, "--cpus", "64"])
        b.wait_nodes_up(["node-0"], env=self.env)

    def start_server(self, i):
        return self.b.start_server(
            state_dir=self.path(f"server-{i}"), listen=self.urls[i].removeprefix("http://"),
            extra=["--store", self.store, "--token-file", self.token_file, "--leader-lease", LEASE,
                   "--kill-grace", "5s", "--notify-retry-cap", "1s"])

    def health(self, url):
        try:
            status, body, _ = http("GET", url + "/v1/health", timeout=3)
        except OSError:
            return None
        return body.get("ha") if status == 200 and isinstance(body, dict) else None

    def leader(self):
        """The index of the server that says it leads, or None."""
        for i, url in enumerate(self.urls):
            ha = self.health(url)
            if ha and ha.get("role") == "leader":
                return i
        return None

    def starts(self):
        try:
            with open(os.path.join(self.ctl, "starts")) as f:
                return [tuple(map(int, line.split())) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def all_job_ids(self):
        out = self.b.json("queue", "--all", "--json", env=self.env)
        rows = out["jobs"] if isinstance(out, dict) else out
        return sorted(j["id"] for j in rows)

    def submit_held(self):
        return self.b.submit("--env", f"CTL={self.ctl}", "--", "bash", self.script, env=self.env)

    def submitter(self, acked, errors, stop):
        """Submits one job after another through the CLI's list of servers, each under its own
        idempotency key, until `stop`: the ids it was told go to `acked`, (key, error) of the
        submissions the CLI gave up on to `errors`."""
        n = 0
        while not stop.is_set():
            n += 1
            key = f"t{os.getpid()}-{threading.get_ident()}-{n}"
            rc, out, err = self.b.run("exec", "-d", "--json", "--idempotency-key", key, "--", "true",
                                      check=False, env=self.env)
            if rc == 0:
                acked.extend(json.loads(out)["jobs"])
            else:
                errors.append((key, err.strip()))

    def resolve(self, errors, acked):
        """A submission the CLI gave up on may or may not exist: sent again with its key (as its error
        says), it is made now or answered with the jobs it made. Adds them to `acked`; returns the
        errors left, which must be none."""
        left = []
        for key, err in errors:
            self.assertIn(f"--idempotency-key {key}", err)
            rc, out, err2 = self.b.run("exec", "-d", "--json", "--idempotency-key", key, "--", "true",
                                       check=False, env=self.env)
            if rc == 0:
                acked.extend(json.loads(out)["jobs"])
            else:
                left.append((key, err2))
        return left

    def test_kill9_of_the_leader_fails_over_and_loses_nothing(self):
        b = self.b
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        running = self.submit_held()
        b.wait_status(running, "RUNNING", env=self.env)
        wait_until(lambda: (running, 1) in self.starts(), message="the job's start line")
        # Its first output reached the leader (kept in the database, not on the leader's disk).
        wait_until(lambda: "started" in b.run("logs", "--no-follow", running, env=self.env)[1], 30,
                   message="the job's first output on the leader")

        # Submissions keep coming from another thread, through the CLI's list of servers.
        acked, errors, stop = [], [], threading.Event()
        thread = threading.Thread(target=self.submitter, args=(acked, errors, stop))
        thread.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        self.servers[first].kill(signal.SIGKILL)
        new = wait_until(lambda: (i := self.leader()) is not None and i + 1, 20, message="a new leader") - 1
        self.assertNotEqual(new, first)
        # The new leader dispatches: a new job runs.
        probe = self.submit_held()
        b.wait_status(probe, "RUNNING", env=self.env, timeout=30)
        took = time.monotonic() - killed_at
        print(f"\nkill -9 of the leader -> a new job RUNNING on the new leader: {took:.2f} s")
        time.sleep(0.5)
        stop.set()
        thread.join()
        self.assertLess(took, 15 * SCALE, "failover took far longer than the lease")

        open(os.path.join(self.ctl, "release"), "w").close()
        b.wait_status(running, "SUCCEEDED", env=self.env, timeout=30)
        b.wait_status(probe, "SUCCEEDED", env=self.env, timeout=30)
        # The new leader serves all of its output: what reached the dead leader, and the rest.
        out = b.run("logs", running, env=self.env)[1]
        self.assertIn(f"started {running}", out)
        self.assertIn(f"done {running}", out)
        # The job that ran through the failover was never started twice.
        self.assertEqual([s for s in self.starts() if s[0] == running], [(running, 1)])
        ids = self.all_job_ids()
        self.assertEqual(len(ids), len(set(ids)))
        missing = sorted(set(acked) - set(ids))
        self.assertEqual(missing, [], f"acknowledged jobs lost in the failover (errors: {errors[-3:]})")
        self.assertGreater(len(acked), 0)
        # Nothing else exists: a submission whose answer the kill lost was sent again by the CLI with
        # its idempotency key, and the answer named the jobs it had made.
        self.assertEqual(self.resolve(errors, acked), [])
        extra = sorted(set(ids) - set(acked) - {running, probe})
        self.assertEqual(extra, [], f"jobs nobody was told about (errors: {errors[-3:]})")

    def test_hollow_nodes_follow_a_new_leader(self):
        """A hollow agent (the scale benchmark's load generator, bench/scale.py --failover) given every
        server's URL: its nodes' watch streams reach the leader (WatchMux opens each at the server that
        answered the registration), and after a kill -9 of the leader every node registers with the
        new one, its jobs keep RUNNING, and a new job runs on a hollow node."""
        b = self.b
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        names = [f"sim-{i}" for i in range(30)]
        b.start_agent(",".join(self.urls), name="sim", gpus="H100:8",
                      extra=["--hollow", str(len(names)), "--token-file", self.token_file])
        b.wait_nodes_up(names, env=self.env)
        task = self.write("sim.yaml", "name: sim\nresources: {accelerators: H100:8}\nrun: python train.py\n")
        sub = b.json("exec", task, "--num-jobs", 20, "-d", "--json", env=self.env)

        def statuses():
            return [j["status"] for j in b.json("queue", "--group", sub["group"], "--all", "--json", env=self.env)]
        wait_until(lambda: statuses() == ["RUNNING"] * 20, 30, message="20 hollow jobs RUNNING")

        self.servers[first].kill(signal.SIGKILL)
        new = wait_until(lambda: (i := self.leader()) is not None and i + 1, 20, message="a new leader") - 1
        self.assertNotEqual(new, first)

        b.wait_nodes_up(names, env=self.env)
        self.assertEqual(statuses(), ["RUNNING"] * 20)
        # The new leader's streams reach the nodes: the 10 nodes left free each get a new job, which is
        # launched and accepted there.
        probes = b.json("exec", "-d", "--json", "--gpus", "H100:8", "--num-jobs", 10, "--", "true",
                        env=self.env)
        for job in probes["jobs"]:
            b.wait_status(job, "RUNNING", env=self.env, timeout=30)
        placed = {b.show(job, env=self.env)["placement"][0]["node"] for job in probes["jobs"]}
        self.assertEqual(len(placed), 10)
        self.assertTrue(placed <= set(names))
        self.assertEqual(statuses(), ["RUNNING"] * 20)

    def test_a_failover_resumes_delivering_the_outbox(self):
        """A notice committed by one leader and not yet delivered (its receiver is down) is delivered by
        the next leader, from the outbox in PostgreSQL (docs/notifications.md)."""
        b = self.b
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        port = free_port()
        secret = self.write("hook-secret", "a-webhook-secret-for-the-ha-test\n")
        b.run("notify", "set", "--webhook", f"http://127.0.0.1:{port}/hook", "--secret-file", secret,
              env=self.env)
        job = b.submit("--notify", "end", "--", "true", env=self.env)
        b.wait_status(job, "SUCCEEDED", env=self.env)
        wait_until(lambda: b.json("notify", "ls", "--json", env=self.env)["notices"][0]["attempts"] >= 1,
                   30, message="a failed delivery to the receiver that is down")
        self.servers[first].kill(signal.SIGKILL)
        received = []

        class Receiver(BaseHTTPRequestHandler):
            def do_POST(self):
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        receiver = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        self.addCleanup(receiver.server_close)
        self.addCleanup(receiver.shutdown)
        wait_until(lambda: received, 30, message="the new leader's delivery")
        self.assertEqual([e["id"] for e in received], [f"job-{job}.1.end"])

    def test_a_reservation_holds_across_a_failover(self):
        """A reservation made on one leader is the next leader's too: its window keeps other jobs off
        its node, and deleting it there lets them run (docs/reservations.md)."""
        b = self.b
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        b.run("reserve", "create", "--name", "hold", "--start", "now", "--duration", "1h", "--nodes", "node-0",
              "--users", "root", env=self.env)
        job = b.submit("--", "true", env=self.env)

        def reason():
            return b.show(job, env=self.env).get("reason") or ""
        wait_until(lambda: "reserved by 'hold'" in reason(), 30, message="the reservation's reason")
        self.servers[first].kill(signal.SIGKILL)
        wait_until(lambda: self.leader() not in (None, first), 60, message="a new leader")
        shown = b.json("reserve", "show", "hold", "--json", env=self.env)
        self.assertTrue(shown["active"])
        self.assertEqual(shown["nodes"], ["node-0"])
        wait_until(lambda: "reserved by 'hold'" in reason(), 30, message="the new leader's reason")
        self.assertEqual(b.status(job, env=self.env), "PENDING")
        b.run("reserve", "delete", "hold", env=self.env)
        b.wait_status(job, "SUCCEEDED", timeout=60, env=self.env)

    def test_an_upload_reaches_the_agent_after_a_failover(self):
        """A workdir uploaded to one leader is served by the next: blobs live in the database."""
        b = self.b
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        b.run("drain", "node-0", env=self.env)
        self.write("proj/train.py", "print('from the upload')\n")
        task = self.write("task.yaml", "workdir: proj\nrun: cat train.py; pwd\n")
        job = b.submit(task, env=self.env)
        self.servers[first].kill(signal.SIGKILL)
        wait_until(lambda: (i := self.leader()) is not None and i != first and i + 1, 30,
                   message="a new leader")
        b.run("undrain", "node-0", env=self.env)
        b.wait_status(job, "SUCCEEDED", env=self.env, timeout=60)
        out = b.run("logs", job, env=self.env)[1]
        self.assertIn("print('from the upload')", out)
        self.assertNotIn(self.path("proj"), out)  # its own copy, not the client's directory

    def test_kill9_during_a_bulk_submission(self):
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        spec = {"name": "bulk", "run": "true", "resources": {"cpus": 0.001}}
        results = []

        def post_one(key, url=self.urls[first]):
            # Straight to the leader's URL: the kill lands while it is handling this.
            try:
                status, body, _ = http("POST", url + "/v1/jobs", json.dumps({"spec": spec, "num_jobs": 10000}),
                                       headers={"Idempotency-Key": key}, timeout=60)
                results.append((status, body))
            except OSError as e:
                results.append((None, str(e)))

        acked_groups = []
        for i in range(3):  # a few whole submissions first, acknowledged
            post_one(f"bulk-{i}")
            status, body = results[-1]
            self.assertEqual(status, 201, body)
            acked_groups.append(body["jobs"])
        thread = threading.Thread(target=post_one, args=("bulk-killed",))
        thread.start()
        time.sleep(0.01)
        self.servers[first].kill(signal.SIGKILL)
        thread.join()
        wait_until(lambda: self.leader() is not None, 20, message="a new leader")
        status, body = results[-1]
        out = self.b.json("queue", "--all", "--json", env=self.env)
        rows = out["jobs"] if isinstance(out, dict) else out
        ids = [j["id"] for j in rows]
        self.assertEqual(len(ids), len(set(ids)))
        for group in acked_groups:
            self.assertTrue(set(group) <= set(ids), "an acknowledged group lost jobs")
        acked = {i for g in acked_groups for i in g}
        extra = set(ids) - acked
        # The one unacknowledged submission landed whole or not at all.
        self.assertIn(len(extra), (0, 10000), f"{len(extra)} jobs of a half-applied submission")
        print(f"\nin-flight 10,000-job submission at the kill: status {status}; "
              f"{'landed whole' if extra else 'not applied'}")
        # Sent again with its key to the new leader: answered with the jobs it made if it landed, made
        # now if not; either way the jobs that exist are exactly the acknowledged ones.
        def resend():
            # To whichever server leads when it is sent (under a sanitizer the lease may move again).
            leader = wait_until(lambda: (i := self.leader()) is not None and i + 1, 20, message="a leader") - 1
            post_one("bulk-killed", self.urls[leader])
            return results[-1][0] not in (None, 503) and results[-1]

        status, body = wait_until(resend, 30, message="the resent submission answered")
        self.assertEqual(status, 201, body)
        if extra:
            self.assertEqual(set(body["jobs"]), extra)
        status, again = wait_until(resend, 30, message="the second resend answered")
        self.assertEqual(again["jobs"], body["jobs"])
        acked_groups.append(body["jobs"])
        out = self.b.json("queue", "--all", "--json", env=self.env)
        rows = out["jobs"] if isinstance(out, dict) else out
        self.assertEqual(sorted(j["id"] for j in rows), sorted(i for g in acked_groups for i in g))

    def timeline(self):
        try:
            with open(os.path.join(self.ctl, "timeline")) as f:
                return [line.split() for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def test_kill9_of_the_leader_during_a_preemption(self):
        b = self.b
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        script = self.write("timed.sh", TIMED_SCRIPT)
        low = b.submit("--gpus", "V100:4", "--env", f"CTL={self.ctl}", "--", "bash", script, "low", env=self.env)
        b.wait_status(low, "RUNNING", env=self.env)
        wait_until(lambda: any(t[0] == "start" and t[1] == "low" for t in self.timeline()),
                   message="the low-priority job's start")
        high = b.submit("--gpus", "V100:4", "--priority", "10", "--env", f"CTL={self.ctl}", "--", "bash", script,
                        "high", env=self.env)
        # The preemption is under way (the victim was told to stop and takes a second): kill the leader now.
        wait_until(lambda: b.status(low, env=self.env) != "RUNNING" or
                   any(t[0] == "end" and t[1] == "low" for t in self.timeline()), 30,
                   message="the preemption to start", interval=0.02)
        self.servers[first].kill(signal.SIGKILL)
        wait_until(lambda: self.leader() not in (None, first), 20, message="a new leader")
        b.wait_status(high, "RUNNING", env=self.env, timeout=30)
        wait_until(lambda: any(t[0] == "start" and t[1] == "high" for t in self.timeline()),
                   message="the high-priority job's start")
        open(os.path.join(self.ctl, "release-high"), "w").close()
        b.wait_status(high, "SUCCEEDED", env=self.env, timeout=30)
        # The victim went back to the queue and runs again (attempt 2) once the GPUs are free.
        wait_until(lambda: any(t[0] == "start" and t[1] == "low" and t[2] == "2" for t in self.timeline()), 30,
                   message="the victim's second attempt")
        open(os.path.join(self.ctl, "release-low"), "w").close()
        b.wait_status(low, "SUCCEEDED", env=self.env, timeout=30)

        # From the jobs' own lines: each attempt started once, and no two attempts ever held the GPUs together.
        events = self.timeline()
        starts = [(t[1], t[2]) for t in events if t[0] == "start"]
        self.assertEqual(sorted(starts), [("high", "1"), ("low", "1"), ("low", "2")], events)
        spans = {}
        for t in events:
            spans.setdefault((t[1], t[2]), {})[t[0]] = float(t[3])
        ordered = sorted(spans.items(), key=lambda kv: kv[1]["start"])
        for (a, sa), (b_, sb) in zip(ordered, ordered[1:]):
            # An attempt without its end line was killed without its SIGTERM's grace, or still ran
            # when the next one started: either is a failure, said with what the daemons logged.
            self.assertIn("end", sa, f"{a} never wrote its end line: {events}\n{b.diagnostics()}")
            self.assertLessEqual(sa["end"], sb["start"], f"{a} and {b_} overlapped on the GPUs: {events}")

    def test_paused_leader_is_fenced_and_steps_down(self):
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        old = self.servers[first]
        old.proc.send_signal(signal.SIGSTOP)
        try:
            new = wait_until(lambda: self.leader(), 20, message="a new leader while the old one sleeps")
            self.assertNotEqual(new, first)
            new_token = self.health(self.urls[new])["leader"]["token"]
        finally:
            old.proc.send_signal(signal.SIGCONT)
        # Awake again, it finds its lease gone and follows; the new leader keeps leading.
        ha = wait_until(lambda: (h := self.health(self.urls[first])) and h.get("role") == "follower" and h,
                        20, message="the old leader to step down")
        self.assertEqual(ha["leader"]["url"], self.urls[new])
        self.assertEqual(self.leader(), new)
        self.assertEqual(self.health(self.urls[new])["leader"]["token"], new_token)
        self.assertIn("stepping down", old.log())
        # Work goes on through the new leader.
        job = self.b.submit("--", "echo", "after the pause", env=self.env)
        self.b.wait_status(job, "SUCCEEDED", env=self.env, timeout=30)

    def test_commit_with_an_unknown_outcome_makes_the_leader_load_afresh(self):
        """The leader's connection breaks during a submission's COMMIT (a deferred trigger ends its own
        backend, once): the leader cannot know whether it landed, so it answers 503, gives up its lease
        and loads afresh; the CLI sends the submission again with its key and gets exactly one job."""
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        token = self.health(self.urls[first])["leader"]["token"]
        subprocess.run(["psql", self.store, "-qc", """
            CREATE SEQUENCE commit_faults;
            CREATE FUNCTION end_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF nextval('commit_faults') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
              RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON specs
              DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_at_commit();"""],
                       check=True, capture_output=True)
        out = self.b.json("exec", "-d", "--json", "--idempotency-key", "once", "--", "echo", "once", env=self.env)
        # (The CLI's repeat may have reached it before it noticed; it notices at its next lease tick.)
        wait_until(lambda: "a commit's outcome is unknown" in self.servers[first].log(), 10,
                   message="the leader to see the unknown outcome")
        def new_term():
            # One health answer per server: a leader read twice may have stepped down in between.
            for url in self.urls:
                ha = self.health(url)
                if ha and ha.get("role") == "leader" and (ha.get("leader") or {}).get("token", 0) > token:
                    return True
            return False
        wait_until(new_term, 20, message="a new leadership term")
        self.assertEqual(self.all_job_ids(), out["jobs"])
        self.b.wait_status(out["jobs"][0], "SUCCEEDED", env=self.env, timeout=30)
        again = self.b.json("exec", "-d", "--json", "--idempotency-key", "once", "--", "echo", "once", env=self.env)
        self.assertEqual(again, out)
        self.assertEqual(self.all_job_ids(), out["jobs"])

    def test_database_outage_refuses_writes_and_resumes(self):
        b = self.b
        wait_until(lambda: self.leader() is not None, 30, message="a leader")
        running = self.submit_held()
        b.wait_status(running, "RUNNING", env=self.env)
        # Under load: submissions keep coming from another thread throughout the outage.
        acked, errors, stop = [], [], threading.Event()
        thread = threading.Thread(target=self.submitter, args=(acked, errors, stop))
        thread.start()
        try:
            time.sleep(1.0)
            leader = self.leader()
            subprocess.run(["bash", PG_CLUSTER, "halt", self.pg_dir], check=True, capture_output=True, timeout=60)
            try:
                status, body, _ = http("POST", self.urls[leader] + "/v1/jobs",
                                       json.dumps({"spec": {"run": "true"}}), timeout=60)
                self.assertEqual(status, 503, f"a submission was answered {status} with the database down")
                self.assertIn("PostgreSQL", body["error"])
                print(f"\nsubmit with the database down: {status} {body['error']}")
                time.sleep(1.0)
            finally:
                subprocess.run(["bash", PG_CLUSTER, "resume", self.pg_dir], check=True, capture_output=True,
                               timeout=60)
            time.sleep(2.0)
        finally:
            stop.set()
            thread.join()
        # Back: writes work again (through whichever server leads now), the job that ran on is intact.
        def submitted():
            rc, out, _ = b.run("exec", "-d", "--json", "--", "true", check=False, env=self.env)
            return rc == 0 and json.loads(out)["jobs"][0]

        job = wait_until(submitted, 60, message="submissions to work again")
        b.wait_status(job, "SUCCEEDED", env=self.env, timeout=30)
        self.assertEqual(b.status(running, env=self.env), "RUNNING")
        open(os.path.join(self.ctl, "release"), "w").close()
        b.wait_status(running, "SUCCEEDED", env=self.env, timeout=30)
        self.assertEqual([s for s in self.starts() if s[0] == running], [(running, 1)])
        # Nothing acknowledged was lost, and nothing else exists: a submission in flight when the
        # database went away (its commit's outcome unknown to the server) was sent again with its key.
        self.assertEqual(self.resolve(errors, acked), [])
        ids = self.all_job_ids()
        self.assertEqual(sorted(set(acked) - set(ids)), [], "acknowledged jobs lost in the outage")
        self.assertGreater(len(acked), 0)
        extra = sorted(set(ids) - set(acked) - {running, job})
        self.assertEqual(extra, [], f"jobs nobody was told about (errors: {errors[-3:]})")


if __name__ == "__main__":
    unittest.main()

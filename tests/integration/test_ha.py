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
                   "--kill-grace", "5s"])

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

        def submitter():
            while not stop.is_set():
                rc, out, err = b.run("exec", "-d", "--json", "--", "true", check=False, env=self.env)
                if rc == 0:
                    acked.extend(json.loads(out)["jobs"])
                else:
                    errors.append(err.strip())

        thread = threading.Thread(target=submitter)
        thread.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        self.servers[first].kill(signal.SIGKILL)
        new = wait_until(lambda: self.leader(), 20, message="a new leader")
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
        # Beyond the acknowledged ones, at most the one submission in flight at the kill exists.
        extra = sorted(set(ids) - set(acked) - {running, probe})
        self.assertLessEqual(len(extra), 1, f"jobs nobody was told about: {extra}")

    def test_kill9_during_a_bulk_submission(self):
        first = wait_until(lambda: self.leader() is not None and self.leader() + 1, 30,
                           message="a leader") - 1
        spec = {"name": "bulk", "run": "true", "resources": {"cpus": 0.001}}
        results = []

        def post_one():
            # Straight to the leader's URL: the kill lands while it is handling this.
            try:
                status, body, _ = http("POST", self.urls[first] + "/v1/jobs",
                                       json.dumps({"spec": spec, "num_jobs": 10000}), timeout=60)
                results.append((status, body))
            except OSError as e:
                results.append((None, str(e)))

        acked_groups = []
        for _ in range(3):  # a few whole submissions first, acknowledged
            post_one()
            status, body = results[-1]
            self.assertEqual(status, 201, body)
            acked_groups.append(body["jobs"])
        thread = threading.Thread(target=post_one)
        thread.start()
        time.sleep(0.01)
        self.servers[first].kill(signal.SIGKILL)
        thread.join()
        wait_until(lambda: self.leader() is not None, 20, message="a new leader")
        status, body = results[-1]
        if status == 201:
            acked_groups.append(body["jobs"])
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

    def test_database_outage_refuses_writes_and_resumes(self):
        b = self.b
        wait_until(lambda: self.leader() is not None, 30, message="a leader")
        running = self.submit_held()
        b.wait_status(running, "RUNNING", env=self.env)
        # Under load: submissions keep coming from another thread throughout the outage.
        acked, stop = [], threading.Event()

        def submitter():
            while not stop.is_set():
                rc, out, _ = b.run("exec", "-d", "--json", "--", "true", check=False, env=self.env)
                if rc == 0:
                    acked.extend(json.loads(out)["jobs"])

        thread = threading.Thread(target=submitter)
        thread.start()
        try:
            time.sleep(1.0)
            subprocess.run(["bash", PG_CLUSTER, "halt", self.pg_dir], check=True, capture_output=True, timeout=60)
            try:
                rc, _, err = b.run("exec", "-d", "--", "true", check=False, env=self.env, timeout=60)
                self.assertNotEqual(rc, 0, "a submission was acknowledged with the database down")
                self.assertIn("PostgreSQL", err)
                print(f"\nsubmit with the database down: {err.strip()}")
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
        # Nothing acknowledged was lost; nothing else exists but the one submission that may have been in
        # flight when the database went away (its commit's outcome unknown to the server).
        ids = self.all_job_ids()
        self.assertEqual(sorted(set(acked) - set(ids)), [], "acknowledged jobs lost in the outage")
        self.assertGreater(len(acked), 0)
        extra = sorted(set(ids) - set(acked) - {running, job})
        self.assertLessEqual(len(extra), 1, f"jobs nobody was told about: {extra}")


if __name__ == "__main__":
    unittest.main()

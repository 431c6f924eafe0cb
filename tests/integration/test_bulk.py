"""Bulk submission: a sweep of N jobs in one request (issue "Bulk submission").

A node declares 64 CPU slots; each job of a sweep asks for 1 CPU. One `berth exec --num-jobs N` creates N
jobs at once — one stored spec, ranks 0..N-1, all PENDING when the command returns — and each job sees its
rank in BERTH_JOB_RANK / SKYPILOT_JOB_RANK.
"""
import json
import os
import sqlite3
import threading
import unittest

from harness import BerthTestCase, TERMINAL, http_unix, wait_until


class BulkTest(BerthTestCase):
    def setUp(self):
        super().setUp()
        self.b.local_up(None, 1, "--cpus", "64")
        self.out = self.path("out")
        os.makedirs(self.out)

    def sweep(self, run, n, *extra):
        task = self.write("sweep.yaml", f"name: sweep\nresources: {{cpus: 1}}\nrun: |\n  {run}\n")
        return self.b.json("exec", task, "--num-jobs", n, "-d", "--json", *extra)

    def test_ranks_env_and_group_listing(self):
        # Ten jobs write their rank and the group size to files named by their job id.
        sub = self.sweep(f'echo "$BERTH_JOB_RANK $BERTH_NUM_JOBS $SKYPILOT_JOB_RANK $SKYPILOT_NUM_JOBS" '
                         f'> {self.out}/$BERTH_JOB_ID', 10)
        group, ids = sub["group"], sub["jobs"]
        self.assertIsInstance(group, int)
        self.assertEqual(ids, list(range(ids[0], ids[0] + 10)))  # consecutive
        for job_id in ids:
            self.b.wait_status(job_id, "SUCCEEDED", timeout=60)
        for rank, job_id in enumerate(ids):
            with open(f"{self.out}/{job_id}") as f:
                self.assertEqual(f.read().split(), [str(rank), "10", str(rank), "10"])
        listed = self.b.json("queue", "--group", group, "--all", "--json")
        self.assertEqual(sorted(j["id"] for j in listed), ids)
        self.assertEqual(sorted(j["rank"] for j in listed), list(range(10)))
        self.assertTrue(all(j["group"] == group for j in listed))
        # The human listing shows the group and rank columns.
        _, table, _ = self.b.run("queue", "--group", group)
        self.assertIn("GROUP", table.splitlines()[0])
        self.assertIn("RANK", table.splitlines()[0])
        # `exec` without --json names the group and the id range.
        _, text, _ = self.b.run("exec", self.path("sweep.yaml"), "--num-jobs", 3, "-d")
        self.assertRegex(text, r"Submitted group \d+: jobs \d+-\d+ \(3 jobs\)")

    def test_spec_is_stored_once_and_fetched_once(self):
        sub = self.sweep("true", 50)
        for job_id in sub["jobs"]:
            self.b.wait_status(job_id, "SUCCEEDED", timeout=60)
        db = sqlite3.connect(os.path.join(self.b.home, "server", "berth.db"))
        specs = {row[0] for row in db.execute("SELECT DISTINCT spec_id FROM jobs WHERE group_id = ?",
                                              (sub["group"],))}
        self.assertEqual(len(specs), 1)
        # The server sent the agent that spec on its watch stream, before the first launch: no job
        # fetched it (GET /v1/specs/ID), and the agent wrote no file for it.
        one = self.b.submit("--", "true")
        self.b.wait_status(one, "SUCCEEDED", timeout=60)
        status, metrics = http_unix("GET", os.path.join(self.b.home, "server", "berth.sock"), "/metrics")
        self.assertEqual(status, 200, metrics)
        self.assertIn('route="/v1/jobs"', metrics)
        self.assertNotIn('route="/v1/specs/{id}"', metrics)
        self.assertFalse(os.path.exists(os.path.join(self.b.home, "agents", "local-0", "specs")))

    def test_all_pending_at_once_and_group_cancel(self):
        # 200 jobs of `sleep 600`: 64 run, 136 wait. Cancelling the group ends every one of them.
        sub = self.sweep("sleep 600", 200)
        jobs = self.b.json("queue", "--group", sub["group"], "--all", "--json")
        self.assertEqual(len(jobs), 200)  # every job exists the moment exec returned
        self.b.wait_until(lambda: sum(j["status"] == "RUNNING" for j in
                                      self.b.json("queue", "--group", sub["group"], "--all", "--json")) == 64,
                          timeout=60, message="64 jobs of the group running")
        _, out, _ = self.b.run("cancel", "--group", sub["group"])
        self.assertIn("Cancelled jobs", out)
        jobs = self.b.json("queue", "--group", sub["group"], "--all", "--json")
        self.assertEqual({j["status"] for j in jobs}, {"CANCELLED"})
        self.b.wait_until(lambda: not any(self.b.job_pids(i) for i in sub["jobs"][:64]), timeout=60,
                          message="no process of the group left")

    def test_cancel_all_racing_with_submissions_leaves_nothing_running(self):
        # Submissions of 300 long jobs each race with `cancel --all` (SkyPilot's users saw `cancel -a` miss
        # jobs that were still being submitted). Whatever the interleaving, once both are done no job of any
        # submission that had started before the last cancel may still be waiting or running.
        task = self.write("long.yaml", "name: long\nresources: {cpus: 1}\nrun: sleep 600\n")
        results = []

        def submit():
            results.append(self.b.json("exec", task, "--num-jobs", 300, "-d", "--json"))

        threads = [threading.Thread(target=submit) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(3):
            self.b.run("cancel", "--all")
        for t in threads:
            t.join()
        self.b.run("cancel", "--all")  # after every submission returned: must catch all of them
        jobs = self.b.queue()
        self.assertEqual(len(jobs), 900)
        self.assertEqual({j["status"] for j in jobs}, {"CANCELLED"})
        self.b.wait_until(lambda: not self.b.job_pids_any(), timeout=60, message="no job process left")

    def test_bounds(self):
        task = self.write("t.yaml", "run: 'true'\n")
        rc, _, err = self.b.run("exec", task, "--num-jobs", 0, "-d", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("num_jobs", err)
        rc, _, err = self.b.run("exec", task, "--num-jobs", 100001, "-d", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("100000", err)
        self.assertEqual(self.b.queue(), [])  # nothing half-created


if __name__ == "__main__":
    unittest.main()

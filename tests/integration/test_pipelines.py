"""Pipelines and resilience, end to end (docs/user-guide.md "Pipelines").

- A three-stage pipeline (prep -> sweep group -> eval) whose first stage fails: the rest is cancelled at
  once with the reason naming the dependency, and the cancel cascades; notok and any dependants run.
- While a dependency runs, the waiting job says what it waits for; the dependencies survive a server
  restart, and a job waiting for them does not hold back smaller jobs.
- A 200-job group with --max-running 5 never has more than 5 jobs running (from the jobs' own
  timestamps); `berth update --group G --max-running N` changes it later.
- A job failing with exit 75 twice, then succeeding, ends SUCCEEDED at attempt 3 with each attempt's
  outcome in `show`; an exit code the policy does not list is not retried; the backoff is waited out.
- A USR1 trap writes its checkpoint before the time limit; the job then ends at the limit.
- time_limit_scope: job counts the running time of every attempt.
- `berth exec --pool P` places the job in pool P only.
"""
import os
import time
import unittest

from harness import BerthTestCase, http, wait_until


class PipelineTest(BerthTestCase):
    def setUp(self):
        super().setUp()
        self.state = self.path("server-state")
        self.server = self.b.start_server(state_dir=self.state)
        self.b.env["BERTH_SERVER"] = self.server.url
        self.b.start_agent(self.server.url, name="node-0", gpus="", extra=("--cpus", "8"))
        self.b.wait_nodes_up(["node-0"])

    def group(self, *args):
        out = self.b.json("exec", "-d", "--json", *args)
        self.assertIsNotNone(out["group"], out)
        return out["group"], out["jobs"]

    def test_a_failing_first_stage_cancels_the_rest_of_the_pipeline(self):
        b = self.b
        prep = b.submit("--", f"while [ ! -e {b.tmp}/prep-go ]; do sleep 0.05; done; exit 3")
        sweep, sweep_jobs = self.group("--num-jobs", "4", "--after", f"ok:{prep}", "--", "echo sweep")
        evaluate = b.submit("--after", f"ok:group:{sweep}", "--", "echo eval")
        cleanup = b.submit("--after", f"notok:{prep}", "--", "echo cleanup")
        report = b.submit("--after", f"any:{prep}", "--after", f"any:group:{sweep}", "--", "echo report")
        b.wait_status(prep, "RUNNING")
        # Waiting jobs say what they wait for, in show and in the queue.
        b.wait_until(lambda: b.show(sweep_jobs[0])["reason"] == f"waiting for job {prep} (RUNNING)",
                     message="the sweep's reason to name the running prep job")
        shown = b.show(evaluate)
        self.assertEqual(shown["reason"], f"waiting for group {sweep} (0 of 4 jobs ended)")
        self.assertEqual(shown["depends_on"], [f"ok:group:{sweep}"])
        queued = {j["id"]: j for j in b.queue()}
        self.assertEqual(queued[cleanup]["reason"], f"waiting for job {prep} (RUNNING)")
        _, text, _ = b.run("show", sweep_jobs[1])
        self.assertIn(f"depends on: ok:{prep} (all must hold)", text)

        self.write("prep-go", "")
        b.wait_status(prep, "FAILED")
        for job in sweep_jobs:
            ended = b.wait_status(job, "CANCELLED", timeout=10)
            self.assertEqual(ended["reason"], f"dependency {prep} failed")
        ended = b.wait_status(evaluate, "CANCELLED", timeout=10)
        self.assertEqual(ended["reason"], f"dependency group {sweep} failed (job {sweep_jobs[0]} was cancelled)")
        self.assertEqual(b.wait_status(cleanup, "SUCCEEDED")["status"], "SUCCEEDED")
        self.assertEqual(b.wait_status(report, "SUCCEEDED")["status"], "SUCCEEDED")
        self.assertEqual(b.run("logs", report, "--no-follow")[1], "report\n")

    def test_dependencies_refused_at_submit_say_why(self):
        b = self.b
        rc, _, err = b.run("exec", "-d", "--after", "ok:999999", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("job 999999 does not exist", err)
        rc, _, err = b.run("exec", "-d", "--after", "ok:group:4242", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("group 4242 does not exist", err)
        rc, _, err = b.run("exec", "-d", "--after", "okay:1", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("unknown kind 'okay'", err)
        failed = b.submit("--", "exit 1")
        b.wait_status(failed, "FAILED")
        rc, _, err = b.run("exec", "-d", "--after", f"ok:{failed}", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn(f"this job could never start: dependency {failed} failed", err)
        rc, _, err = b.run("exec", "-d", "--max-running", "3", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("--max-running limits a bulk group", err)

    def test_dependencies_survive_a_server_restart_and_do_not_block_other_jobs(self):
        b = self.b
        port = self.server.url.rsplit(":", 1)[1]
        prep = b.submit("--cpus", "4", "--", f"while [ ! -e {b.tmp}/go ]; do sleep 0.05; done")
        # A big job that waits for prep would take the whole node; it must not hold back the small one.
        big = b.submit("--cpus", "8", "--priority", "10", "--after", f"ok:{prep}", "--", "echo big")
        b.wait_status(prep, "RUNNING")
        small = b.submit("--cpus", "2", "--", "echo small")
        b.wait_status(small, "SUCCEEDED")
        self.assertEqual(b.status(big), "PENDING")

        self.server.kill()
        self.server = b.start_server(state_dir=self.state, listen=f"127.0.0.1:{port}")
        b.wait_nodes_up(["node-0"])
        self.assertEqual(b.show(big)["reason"], f"waiting for job {prep} (RUNNING)")
        self.write("go", "")
        b.wait_status(prep, "SUCCEEDED")
        b.wait_status(big, "SUCCEEDED")

    def test_max_running_caps_a_group_and_can_be_changed(self):
        b = self.b
        stamps = self.path("stamps")
        os.makedirs(stamps)
        script = (f'echo "$(date +%s.%N)" > {stamps}/start-$BERTH_JOB_ID; sleep 0.05; '
                  f'echo "$(date +%s.%N)" > {stamps}/end-$BERTH_JOB_ID')
        # 8 CPUs fit 16 such jobs at once: the cap, not the node, is what limits them.
        group, jobs = self.group("--num-jobs", "200", "--max-running", "5", "--cpus", "0.5", "--", script)
        wait_until(lambda: len(os.listdir(stamps)) == 400, timeout=240, interval=0.2,
                   message="all 200 jobs to end", diagnostics=b.diagnostics)
        for job in (jobs[0], jobs[-1]):
            b.wait_status(job, "SUCCEEDED")
        events = []
        for job in jobs:
            with open(os.path.join(stamps, f"start-{job}")) as f:
                events.append((float(f.read()), 1))
            with open(os.path.join(stamps, f"end-{job}")) as f:
                events.append((float(f.read()), -1))
        running = peak = 0
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):
            running += step
            peak = max(peak, running)
        self.assertLessEqual(peak, 5, "more than 5 jobs of the group ran at once")
        self.assertGreaterEqual(peak, 2, "the group's jobs never ran side by side")

        # Changed later by its owner; shown on the group.
        _, text, _ = b.run("update", "--group", group, "--max-running", "64")
        self.assertEqual(text, f"Group {group}: max_running 64.\n")
        self.assertEqual(b.run("update", "--group", group, "--max-running", "none")[1],
                         f"Group {group}: max_running none (no limit).\n")
        rc, _, err = b.run("update", "--group", group, "--max-running", "0", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("expected a number from 1", err)
        rc, _, err = b.run("update", "--group", 99999, "--max-running", "3", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("group 99999 not found", err)

    def test_group_updates_through_the_api_name_what_is_wrong(self):
        group, _ = self.group("--num-jobs", "2", "--max-running", "1", "--", "sleep 30")
        url = f"{self.server.url}/v1/groups/{group}"
        status, body, _ = http("GET", url)
        self.assertEqual((status, body["max_running"], body["jobs"]), (200, 1, 2))
        for payload, part in (('{"max_running": 0}', "max_running must be an integer from 1"),
                              ('{"max_running": "lots"}', "max_running must be an integer from 1"),
                              ('{"max_runing": 3}', "unknown field 'max_runing'"),
                              ('{}', "say what to change"),
                              ('[1]', "must be a JSON object")):
            status, body, _ = http("POST", url, payload)
            self.assertEqual(status, 400, payload)
            self.assertIn(part, body["error"], payload)
        status, body, _ = http("POST", f"{self.server.url}/v1/groups/abc", '{"max_running": 2}')
        self.assertEqual(status, 400)
        self.assertIn("group id must be a positive integer", body["error"])
        status, body, _ = http("POST", url, '{"max_running": null}')
        self.assertEqual((status, body["max_running"]), (200, None))

    def test_max_running_raised_while_the_group_waits_lets_more_start(self):
        b = self.b
        gate = self.path("gate")
        group, jobs = self.group("--num-jobs", "6", "--max-running", "1", "--",
                                 f"touch {b.tmp}/ran-$BERTH_JOB_ID; while [ ! -e {gate} ]; do sleep 0.05; done")
        b.wait_status(jobs[0], "RUNNING")
        # A pass has decided the rest (they carry its reason), rather than half a second of sleep.
        b.wait_until(lambda: all(f"group {group} is at its max_running" in (b.show(j)["reason"] or "")
                                 for j in jobs[1:]), message="a pass to hold the rest at max_running")
        self.assertEqual([b.status(j) for j in jobs[1:]], ["PENDING"] * 5)
        b.run("update", "--group", group, "--max-running", "3")
        b.wait_until(lambda: sum(b.status(j) == "RUNNING" for j in jobs) == 3,
                     message="3 jobs of the group to run")
        self.write("gate", "")
        for job in jobs:
            b.wait_status(job, "SUCCEEDED")

    def test_a_job_failing_twice_with_exit_75_succeeds_at_attempt_3(self):
        b = self.b
        task = self.write("retry.yaml", f"""\
name: flaky
retry: {{max_restarts: 3, on_exit_codes: [137, 75], backoff: 1s}}
run: |
  echo "attempt $BERTH_ATTEMPT" >> {b.tmp}/attempts
  date +%s.%N >> {b.tmp}/starts
  if [ "$BERTH_ATTEMPT" -lt 3 ]; then exit 75; fi
  echo done
""")
        job = b.submit(task)
        ended = b.wait_status(job, "SUCCEEDED", timeout=60)
        self.assertEqual((ended["attempt"], ended["restarts"], ended["preemptions"]), (3, 2, 0))
        self.assertEqual([(a["attempt"], a["outcome"], a["exit_code"]) for a in ended["attempts"]],
                         [(1, "FAILED", 75), (2, "FAILED", 75), (3, "SUCCEEDED", 0)])
        with open(self.path("starts")) as f:
            starts = [float(x) for x in f.read().split()]
        self.assertGreaterEqual(starts[1] - starts[0], 0.9, "the backoff was not waited out")
        self.assertEqual(b.run("logs", job, "--no-follow")[1], "done\n")
        _, text, _ = b.run("show", job)
        self.assertIn("2 restart(s) after failures", text)
        self.assertIn("FAILED", text)

        # Another exit code is not retried; `retry: never` is not retried either.
        other = self.write("other.yaml", "retry: {max_restarts: 3, on_exit_codes: [75]}\nrun: exit 4\n")
        job = b.submit(other)
        ended = b.wait_status(job, "FAILED")
        self.assertEqual((ended["attempt"], ended["restarts"]), (1, 0))
        capped = self.write("capped.yaml", "retry: {max_restarts: 1}\nrun: exit 5\n")
        job = b.submit(capped)
        ended = b.wait_status(job, "FAILED", timeout=30)
        self.assertEqual((ended["attempt"], ended["restarts"]), (2, 1))
        self.assertIn("(after 1 restart)", ended["reason"])

    def test_a_usr1_trap_checkpoints_before_the_time_limit(self):
        b = self.b
        ckpt = self.path("checkpoint")
        task = self.write("ckpt.yaml", f"""\
name: ckpt
time_limit: 4s
kill_grace: 2s
signal: {{name: USR1, before: 2s}}
run: |
  trap 'date +%s.%N > {ckpt}' USR1
  date +%s.%N > {b.tmp}/started
  while true; do sleep 0.05; done
""")
        job = b.submit(task)
        ended = b.wait_status(job, "FAILED", timeout=30)
        self.assertIn("time limit 4s exceeded", ended["reason"])
        self.assertTrue(os.path.exists(ckpt), "the USR1 trap never ran")
        with open(ckpt) as f:
            checkpoint = float(f.read())
        with open(self.path("started")) as f:
            started = float(f.read())
        # At about 2 s into the 4 s limit (counted from the step's start, which comes before the
        # script's first line by however long bash took to start on a loaded machine): well before
        # the SIGTERM, and not at once.
        self.assertGreater(checkpoint - started, 1.0)
        self.assertLess(checkpoint - started, 3.5)

    def test_time_limit_scope_job_counts_every_attempt(self):
        b = self.b
        task = self.write("scope.yaml", """\
time_limit: 3s
time_limit_scope: job
kill_grace: 1s
retry: {max_restarts: 5}
run: sleep 2; exit 1
""")
        job = b.submit(task)
        ended = b.wait_status(job, "FAILED", timeout=40)
        self.assertIn("time limit 3s exceeded (over 2 attempts)", ended["reason"])
        self.assertEqual((ended["attempt"], ended["restarts"]), (2, 1))

    def test_exec_pool_places_in_that_pool_only(self):
        b = self.b
        b.start_agent(self.server.url, name="node-p", gpus="", extra=("--cpus", "2", "--pool", "batch"))
        b.wait_nodes_up(["node-p"])
        job = b.submit("--pool", "batch", "--", "echo pooled")
        ended = b.wait_status(job, "SUCCEEDED")
        self.assertEqual([p["node"] for p in ended["placement"]], ["node-p"])
        rc, _, err = b.run("exec", "-d", "--pool", "nowhere", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("pool 'nowhere'", err)


if __name__ == "__main__":
    unittest.main()

"""Submitting and inspecting jobs through the CLI, as a user does.

A user runs a command and sees its output and exit code; detaches and gets the id as JSON; submits a
SkyPilot-style task file whose setup and run see the environment berth promises (and flags override the
file); reads the queue as a table and as JSON with the documented fields and units; looks at one job and at
the nodes.
"""

import json
import os
import re
import time
import unittest

from harness import SCALE, BerthTestCase, http

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

TASK_YAML = """\
name: envcheck
resources:
  accelerators: V100:2
envs:
  GREETING: hello
  LR: "0.01"
workdir: wd
setup: |
  echo "setup CVD=${CUDA_VISIBLE_DEVICES-unset} GREETING=$GREETING pwd=$(pwd)"
run: |
  echo "run CVD=${CUDA_VISIBLE_DEVICES-unset} GREETING=$GREETING LR=$LR pwd=$(pwd)"
  for v in BERTH_JOB_ID BERTH_JOB_NAME BERTH_NUM_NODES BERTH_NODE_RANK BERTH_ATTEMPT BERTH_NUM_GPUS_PER_NODE \\
           BERTH_NODE_IPS SKYPILOT_NODE_RANK SKYPILOT_NUM_NODES SKYPILOT_NODE_IPS SKYPILOT_NUM_GPUS_PER_NODE \\
           SKYPILOT_TASK_ID; do
    echo "$v=${!v-unset}"
  done
"""


def parse_env_lines(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and " " not in line.split("=", 1)[0]:
            k, v = line.split("=", 1)
            out[k] = v
    return out


class JobsCliTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.b.local_up(gpus="V100:4")

    def test_exec_streams_output_and_returns_the_exit_code(self):
        # Without -d, exec waits for the job, prints its output, and exits with its exit code.
        rc, out, err = self.b.run("exec", "--", "echo first; echo second; exit 3", check=False)
        self.assertEqual(rc, 3, err)
        self.assertEqual(out, "first\nsecond\n")
        self.assertIn("exit code 3", err)
        rc, out, _ = self.b.run("exec", "--", "echo", "two words", check=False)
        self.assertEqual((rc, out), (0, "two words\n"))

    def test_exec_streams_while_the_job_runs(self):
        # The first line shows up while the job is still running, not only at its end.
        b = self.b
        follower = b.popen("exec", "--", f"echo first; while [ ! -e {b.tmp}/go ]; do sleep 0.05; done; echo second")
        self.assertEqual(follower.stdout.readline(), "first\n")
        self.assertIsNone(follower.poll())
        # Its output may reach the server a moment before the agent's report that it started.
        b.wait_status(1, "RUNNING")
        self.write("go", "")
        self.assertEqual(follower.stdout.read(), "second\n")
        self.assertEqual(follower.wait(timeout=30), 0)

    def test_exec_of_a_cancelled_job_fails(self):
        b = self.b
        follower = b.popen("exec", "--", "echo started; sleep 1000")
        self.assertEqual(follower.stdout.readline(), "started\n")
        started = time.monotonic()
        b.run("cancel", 1)
        self.assertNotEqual(follower.wait(timeout=60), 0)
        self.assertLess(time.monotonic() - started, 10 * SCALE, "exec kept waiting after the job was gone")
        self.assertIn("CANCELLED", follower.stderr.read())

    def test_exec_detached_prints_the_id_as_json(self):
        _, out, _ = self.b.run("exec", "-d", "--json", "--", "true")
        self.assertRegex(out.strip(), r'^\{"group":\s*null,\s*"jobs":\s*\[1\]\}$')
        # Without --json, the id is said in words on stdout.
        _, out, _ = self.b.run("exec", "-d", "-n", "named", "--", "true")
        self.assertIn("Job 2 submitted", out)
        self.b.wait_status(2, "SUCCEEDED")
        self.assertEqual(self.b.show(2)["name"], "named")

    def test_a_submission_sent_again_with_its_idempotency_key_is_made_once(self):
        b = self.b
        args = ("exec", "-d", "--json", "--idempotency-key", "sweep-2026-11-25", "--num-jobs", "3", "--", "true")
        first = json.loads(b.run(*args)[1])
        again = json.loads(b.run(*args)[1])
        self.assertEqual(again, first)
        self.assertEqual(len(first["jobs"]), 3)
        # The same key for something else is refused, naming the jobs it made.
        rc, _, err = b.run("exec", "-d", "--idempotency-key", "sweep-2026-11-25", "--", "false", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("idempotency key 'sweep-2026-11-25' was used for a different submission", err)
        # Without a key each command is a new submission (the CLI makes a fresh key per command).
        one = json.loads(b.run("exec", "-d", "--json", "--", "true")[1])["jobs"]
        two = json.loads(b.run("exec", "-d", "--json", "--", "true")[1])["jobs"]
        self.assertNotEqual(one, two)
        ids = [j["id"] for j in b.json("queue", "--all", "--json")]
        self.assertEqual(sorted(ids), sorted(first["jobs"] + one + two))
        # Over HTTP: the Idempotency-Key header; a malformed one is refused.
        url = b.json("local", "status", "--json")["server"]
        body = json.dumps({"spec": {"run": "true"}})
        answers = [http("POST", url + "/v1/jobs", body, headers={"Idempotency-Key": "api-1"}) for _ in range(2)]
        self.assertEqual([a[0] for a in answers], [201, 201])
        self.assertEqual(answers[0][1]["jobs"], answers[1][1]["jobs"])
        status, out, _ = http("POST", url + "/v1/jobs", body, headers={"Idempotency-Key": "has space"})
        self.assertEqual(status, 400, out)
        self.assertIn("Idempotency-Key", out["error"])

    def test_exec_runs_an_executable_script_given_after_dashdash(self):
        # A path to an executable after `--` is a command to run, not a task file.
        script = self.write("train.sh", "#!/bin/bash\necho training \"$@\"\n", mode=0o755)
        rc, out, err = self.b.run("exec", "--", script, check=False)
        self.assertEqual((rc, out), (0, "training\n"), err)
        rc, out, err = self.b.run("exec", "--", script, "--lr", "0.1", check=False)
        self.assertEqual((rc, out), (0, "training --lr 0.1\n"), err)

    def test_task_yaml_setup_run_envs_workdir(self):
        os.makedirs(self.path("wd"))
        task = self.write("task.yaml", TASK_YAML)
        rc, out, err = self.b.run("exec", task, check=False)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        # The workdir is uploaded: the job runs in its own copy of it (docs/user-guide.md).
        wd = f"{self.b.home}/agents/local-0/jobs/1-1-0/work"
        # Setup runs first, in the workdir, with the task's envs and without GPUs.
        self.assertEqual(lines[0], f"setup CVD=unset GREETING=hello pwd={wd}")
        run_line = lines[1]
        m = re.fullmatch(r"run CVD=(\S+) GREETING=hello LR=0\.01 pwd=(\S+)", run_line)
        self.assertTrue(m, run_line)
        self.assertEqual(len(m.group(1).split(",")), 2, run_line)
        self.assertEqual(m.group(2), wd)
        env = parse_env_lines("\n".join(lines[2:]))
        self.assertEqual(env["BERTH_JOB_ID"], "1")
        self.assertEqual(env["BERTH_JOB_NAME"], "envcheck")
        self.assertEqual(env["BERTH_NUM_NODES"], "1")
        self.assertEqual(env["BERTH_NODE_RANK"], "0")
        self.assertEqual(env["BERTH_ATTEMPT"], "1")
        self.assertEqual(env["BERTH_NUM_GPUS_PER_NODE"], "2")
        self.assertEqual(env["SKYPILOT_NODE_RANK"], "0")
        self.assertEqual(env["SKYPILOT_NUM_NODES"], "1")
        self.assertEqual(env["SKYPILOT_NUM_GPUS_PER_NODE"], "2")
        self.assertNotEqual(env["BERTH_NODE_IPS"], "unset")
        self.assertEqual(env["SKYPILOT_NODE_IPS"], env["BERTH_NODE_IPS"])
        self.assertNotEqual(env["SKYPILOT_TASK_ID"], "unset")
        job = self.b.show(1)
        self.assertEqual(job["name"], "envcheck")
        self.assertEqual(job["resources"]["accelerators"], {"V100": 2})

    def test_flags_override_the_task_file(self):
        os.makedirs(self.path("wd"))
        task = self.write("task.yaml", TASK_YAML)
        rc, out, err = self.b.run("exec", "-n", "override", "--gpus", "V100:1", "--env", "GREETING=bonjour",
                                  "--env", "EXTRA=1", task, check=False)
        self.assertEqual(rc, 0, err)
        self.assertIn("setup CVD=unset GREETING=bonjour", out)
        m = re.search(r"run CVD=(\S+) GREETING=bonjour LR=0\.01", out)
        self.assertTrue(m, out)
        self.assertEqual(len(m.group(1).split(",")), 1)
        job = self.b.show(1)
        self.assertEqual(job["name"], "override")
        self.assertEqual(job["resources"]["accelerators"], {"V100": 1})
        self.assertEqual(job["spec"]["envs"], {"GREETING": "bonjour", "LR": "0.01", "EXTRA": "1"})

    def test_failed_setup(self):
        task = self.write("bad-setup.yaml", "setup: echo preparing; exit 7\nrun: echo never\n")
        rc, out, err = self.b.run("exec", task, check=False)
        self.assertEqual(rc, 7, err)
        self.assertIn("preparing", out)
        self.assertNotIn("never", out)
        job = self.b.show(1)
        self.assertEqual(job["status"], "FAILED_SETUP")
        self.assertEqual(job["exit_code"], 7)
        self.assertIn("setup", job["reason"])

    def test_queue_table_newest_first(self):
        b = self.b
        first = b.submit("-n", "alpha", "--", "true")
        b.wait_status(first, "SUCCEEDED")
        second = b.submit("-n", "beta", "--gpus", "V100:1", "--", "sleep 30")
        b.wait_status(second, "RUNNING")
        third = b.submit("-n", "gamma", "--gpus", "V100:4", "--", "true")  # waits for beta's GPU
        _, out, _ = b.run("queue")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(),
                         ["ID", "NAME", "USER", "SUBMITTED", "STARTED", "STATUS", "GPUS", "NODE", "REASON"])
        rows = [line.split()[0] for line in lines[1:]]
        self.assertEqual(rows, [str(third), str(second), str(first)])
        self.assertRegex(lines[1], r"gamma .*PENDING\s+V100:4\s+-\s+\S")  # why it waits
        self.assertRegex(lines[2], r"beta .*RUNNING\s+V100:1\s+local-0\s+-")
        self.assertRegex(lines[3], r"alpha .*SUCCEEDED\s+-\s+local-0")
        # Filters, and one meaning per flag letter: active first in every listing, --status, --active,
        # --limit 0 (no finished job), and `cancel -a` is no more (in queue -a means every job).
        _, out, _ = b.run("queue", "--all")
        self.assertEqual([line.split()[0] for line in out.splitlines()[1:]],
                         [str(third), str(second), str(first)])
        self.assertEqual([j["id"] for j in b.json("queue", "--status", "RUNNING,SUCCEEDED", "--json")],
                         [second, first])
        self.assertEqual([line.split()[0] for line in b.run("queue", "--active")[1].splitlines()[1:]],
                         [str(third), str(second)])
        self.assertEqual([line.split()[0] for line in b.run("queue", "--limit", "0")[1].splitlines()[1:]],
                         [str(third), str(second)])
        rc, _, err = b.run("queue", "--status", "RUNNIN", check=False)
        self.assertEqual(rc, 2, err)
        self.assertIn("did you mean RUNNING?", err)
        rc, _, err = b.run("cancel", "-a", check=False)
        self.assertEqual(rc, 2, err)
        self.assertIn("unknown option -a (did you mean --all?)", err)
        b.run("cancel", second, third)

    def test_queue_pages(self):
        # `queue` shows every active job and the newest --limit finished ones, and says when there are
        # more; --all shows every one. The JSON listing is a page of --limit rows, as it always was.
        b = self.b
        for _ in range(4):
            b.run("exec", "--", "true")
        running = b.submit("--", "sleep 1000")
        b.wait_status(running, "RUNNING")
        _, out, _ = b.run("queue", "--limit", "2")
        lines = out.splitlines()
        self.assertEqual([line.split()[0] for line in lines[1:4]], [str(running), "4", "3"])
        self.assertIn("only the newest 2 finished", lines[4])
        self.assertIn("--all", lines[4])
        self.assertEqual([j["id"] for j in b.json("queue", "--limit", "2", "--json")], [running, 4])
        self.assertEqual([j["id"] for j in b.json("queue", "--json")], [running, 4, 3, 2, 1])
        self.assertEqual([j["id"] for j in b.queue()], [running, 4, 3, 2, 1])
        b.run("cancel", running)

    def test_drain_and_undrain(self):
        b = self.b
        _, out, _ = b.run("drain", "local-0")
        self.assertIn("DRAINING", out)
        self.assertEqual(b.nodes()[0]["state"], "DRAINING")
        job = b.submit("--", "echo ran")
        b.wait_until(lambda: "draining" in b.show(job)["reason"], message="the job to say the node is draining")
        self.assertEqual(b.status(job), "PENDING")
        _, out, _ = b.run("undrain", "local-0")
        self.assertIn("UP", out)
        b.wait_status(job, "SUCCEEDED")
        rc, _, err = b.run("drain", "no-such-node", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("no-such-node", err)

    def test_queue_json_fields_and_units(self):
        b = self.b
        done = b.submit("-n", "done", "--", "exit 0")
        b.wait_status(done, "SUCCEEDED")
        running = b.submit("-n", "busy", "--gpus", "V100:3", "--cpus", "1.5", "--memory", "2", "--", "sleep 30")
        b.wait_status(running, "RUNNING")
        pending = b.submit("-n", "waits", "--gpus", "V100:2", "--", "true")
        # Its reason is written by the scheduler's next pass, which runs on its own thread.
        b.wait_until(lambda: "waiting" in b.show(pending)["reason"], message="the pending job's reason")
        jobs = b.queue()
        self.assertEqual([j["id"] for j in jobs], [pending, running, done])
        expected_fields = {"id", "name", "user", "status", "priority", "group", "rank", "num_nodes", "resources",
                           "submitted_at", "started_at", "ended_at", "exit_code", "attempt", "placement", "reason"}
        for j in jobs:
            self.assertTrue(expected_fields <= set(j), expected_fields - set(j))
            self.assertIsInstance(j["id"], int)
            self.assertIsNone(j["group"])
            self.assertIsNone(j["rank"])
            self.assertEqual(j["num_nodes"], 1)
            self.assertEqual(j["priority"], 0)
            self.assertRegex(j["submitted_at"], RFC3339_MS)
        by_id = {j["id"]: j for j in jobs}
        d, r, p = by_id[done], by_id[running], by_id[pending]
        # A job that names no CPUs or memory asks for half a CPU and no memory.
        self.assertEqual(d["resources"]["cpus"], 0.5)
        self.assertEqual(d["resources"]["memory"], 0)
        self.assertIsNone(d["resources"]["accelerators"])
        self.assertEqual(d["exit_code"], 0)
        self.assertEqual(d["attempt"], 1)
        self.assertRegex(d["started_at"], RFC3339_MS)
        self.assertRegex(d["ended_at"], RFC3339_MS)
        self.assertEqual(r["resources"], {"accelerators": {"V100": 3}, "cpus": 1.5, "memory": 2})
        self.assertRegex(r["started_at"], RFC3339_MS)
        self.assertIsNone(r["ended_at"])
        self.assertIsNone(r["exit_code"])
        self.assertEqual(p["status"], "PENDING")
        self.assertIsNone(p["started_at"])
        self.assertEqual(p["attempt"], 0)
        self.assertEqual(p["placement"], [])
        self.assertIn("waiting", p["reason"])
        b.run("cancel", running, pending)

    def test_show_json_has_the_placement(self):
        b = self.b
        job_id = b.submit("--gpus", "V100:2", "--", "echo $CUDA_VISIBLE_DEVICES")
        job = b.wait_status(job_id, "SUCCEEDED")
        self.assertEqual(len(job["placement"]), 1)
        p = job["placement"][0]
        self.assertEqual((p["node"], p["rank"]), ("local-0", 0))
        self.assertEqual(len(p["gpus"]), 2)
        self.assertTrue(all(isinstance(g, int) and 0 <= g < 4 for g in p["gpus"]), p)
        _, out, _ = b.run("logs", job_id, "--no-follow")
        self.assertEqual(out.strip(), ",".join(map(str, p["gpus"])))
        # The human form says the same.
        _, text, _ = b.run("show", job_id)
        self.assertIn("SUCCEEDED", text)
        self.assertIn("CUDA_VISIBLE_DEVICES=" + ",".join(map(str, p["gpus"])), text)

    def test_nodes_json(self):
        b = self.b
        nodes = b.nodes()
        self.assertEqual(len(nodes), 1)
        n = nodes[0]
        for field in ("name", "state", "pool", "labels", "address", "capacity", "free"):
            self.assertIn(field, n)
        self.assertEqual((n["name"], n["state"]), ("local-0", "UP"))
        self.assertEqual(n["capacity"]["gpus"], {"V100": 4})
        self.assertEqual(n["free"]["gpus"], {"V100": 4})
        self.assertGreater(n["capacity"]["cpus"], 0)
        self.assertGreater(n["capacity"]["memory"], 0)
        job_id = b.submit("--gpus", "V100:3", "--cpus", "0.5", "--", "sleep 30")
        b.wait_status(job_id, "RUNNING")
        n = b.nodes()[0]
        self.assertEqual(n["free"]["gpus"], {"V100": 1})
        self.assertAlmostEqual(n["free"]["cpus"], n["capacity"]["cpus"] - 0.5)
        self.assertEqual(n["free"]["memory"], n["capacity"]["memory"])
        _, text, _ = b.run("nodes")
        self.assertIn("V100 1/4", text)
        b.run("cancel", job_id)


if __name__ == "__main__":
    unittest.main()

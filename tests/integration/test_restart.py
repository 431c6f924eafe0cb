"""Restarts lose nothing.

The server is killed (kill -9) while a job runs, another waits for GPUs and a third finishes while the
server is down. When the server comes back on the same port with the same state dir, the running job is
still the same process (same attempt; it never noticed), finishes normally with all of its output, the
finished one is recorded as finished, and the waiting one is still waiting and then runs.

The same for the agent: killed and restarted, it re-adopts the jobs its supervisors kept running.
"""

import json
import os
import signal
import subprocess
import time
import unittest

from harness import BERTH_BIN, BerthTestCase, alive
from test_cancel import STUBBORN_SCRIPT, SURVIVORS_SCRIPT

# Writes its pid, prints, and moves on each time the test creates the next file under $CTL.
PHASED_SCRIPT = r"""
echo $$ > "$CTL/pid-$BERTH_JOB_ID"
echo "before attempt=$BERTH_ATTEMPT"
while [ ! -e "$CTL/phase2" ]; do sleep 0.05; done
echo "during"
touch "$CTL/during-$BERTH_JOB_ID"
while [ ! -e "$CTL/release" ]; do sleep 0.05; done
echo "after"
"""


class RestartTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.script = self.write("phased.sh", PHASED_SCRIPT)

    def pid_of(self, job):
        with open(self.path(f"pid-{job}")) as f:
            return int(f.read())

    def test_server_restart(self):
        b = self.b
        state = self.path("server-state")
        server = b.start_server(state_dir=state)
        port = server.url.rsplit(":", 1)[1]
        b.start_agent(server.url, name="node-0", gpus="V100:4")
        env = {"BERTH_SERVER": server.url}
        b.wait_nodes_up(["node-0"], env=env)

        long_job = b.submit("--gpus", "V100:3", "--env", f"CTL={b.tmp}", "--", "bash", self.script, env=env)
        quick = b.submit("--env", f"CTL={b.tmp}", "--", "while [ ! -e $CTL/phase2 ]; do sleep 0.05; done; echo quick done",
                         env=env)
        b.wait_status(long_job, "RUNNING", env=env)
        b.wait_status(quick, "RUNNING", env=env)
        waiting = b.submit("--gpus", "V100:2", "--", "echo waited", env=env)
        self.assertEqual(b.status(waiting, env=env), "PENDING")
        b.wait_until(lambda: os.path.exists(self.path(f"pid-{long_job}")), message="the job's pid file")
        pid = self.pid_of(long_job)

        # The server dies hard. The jobs go on: one writes more output, the other finishes.
        server.kill(signal.SIGKILL)
        self.write("phase2", "")
        b.wait_until(lambda: os.path.exists(self.path(f"during-{long_job}")), message="the job to go on")
        b.wait_until(lambda: not b.job_pids(quick), message="the quick job to end while the server is down")
        self.assertTrue(alive(pid))

        # Back on the same port, with the same state.
        server = b.start_server(state_dir=state, listen=f"127.0.0.1:{port}")
        self.assertEqual(server.url, env["BERTH_SERVER"])
        b.wait_nodes_up(["node-0"], env=env)
        b.wait_status(quick, "SUCCEEDED", env=env)
        self.assertEqual(b.run("logs", quick, "--no-follow", env=env)[1], "quick done\n")
        job = b.show(long_job, env=env)
        self.assertEqual((job["status"], job["attempt"]), ("RUNNING", 1))
        self.assertEqual(b.status(waiting, env=env), "PENDING")
        self.assertTrue(alive(pid), "the running job was restarted or killed")
        self.assertEqual(self.pid_of(long_job), pid)

        # It finishes normally, with everything it wrote, and the waiting job runs.
        self.write("release", "")
        job = b.wait_status(long_job, "SUCCEEDED", env=env)
        self.assertEqual((job["attempt"], job["exit_code"]), (1, 0))
        self.assertEqual(len(job["attempts"]), 1)
        self.assertEqual(b.run("logs", long_job, "--no-follow", env=env)[1], "before attempt=1\nduring\nafter\n")
        b.wait_status(waiting, "SUCCEEDED", env=env)
        self.assertEqual(b.run("logs", waiting, env=env)[1], "waited\n")
        self.assertEqual(b.nodes(env=env)[0]["free"]["gpus"], {"V100": 4})

    def test_a_submission_waits_out_a_server_restart_and_says_so(self):
        b = self.b
        state = self.path("server-state")
        server = b.start_server(state_dir=state)
        port = server.url.rsplit(":", 1)[1]
        b.start_agent(server.url, name="node-0", gpus="V100:1")
        b.wait_nodes_up(["node-0"], env={"BERTH_SERVER": server.url})
        env = {**b.env, "BERTH_SERVER": server.url}
        server.kill(signal.SIGKILL)
        # Submitted while no server listens: the CLI keeps trying, and says so after a second.
        err_path = self.path("exec.err")
        with open(err_path, "w") as err:
            cli = subprocess.Popen([BERTH_BIN, "exec", "-d", "--json", "--", "true"], env=env, cwd=b.tmp,
                                   stdout=subprocess.PIPE, stderr=err, text=True)
        b.wait_until(lambda: "trying again for up to" in open(err_path).read(), timeout=10,
                     message="the CLI to say it waits for the server")
        self.assertIsNone(cli.poll())
        server = b.start_server(state_dir=state, listen=f"127.0.0.1:{port}")
        out, _ = cli.communicate(timeout=30)
        self.assertEqual(cli.returncode, 0, open(err_path).read())
        job = json.loads(out)["jobs"][0]
        self.assertEqual([j["id"] for j in b.queue(env={"BERTH_SERVER": server.url})], [job])
        self.assertIn("cannot connect", open(err_path).read())
        b.wait_status(job, "SUCCEEDED", env={"BERTH_SERVER": server.url})

        # A server that never comes back: after 15 s the CLI gives up, and since no attempt reached a
        # server it says that nothing was submitted (not "may or may not").
        server.kill(signal.SIGKILL)
        started = time.monotonic()
        rc, _, err = b.run("exec", "-d", "--json", "--", "true", check=False, env={"BERTH_SERVER": server.url})
        self.assertNotEqual(rc, 0)
        self.assertGreaterEqual(time.monotonic() - started, 14)
        self.assertIn("nothing was submitted (no server was reached)", err)
        self.assertIn("--idempotency-key", err)
        self.assertNotIn("may or may not", err)

    def test_server_restart_while_a_cancelled_job_is_stopping(self):
        # A cancelled job's GPUs stay held until its last process is gone, even if the server restarts
        # during the grace period.
        b = self.b
        state = self.path("server-state")
        server = b.start_server(state_dir=state, extra=["--kill-grace", "3s"])
        port = server.url.rsplit(":", 1)[1]
        b.start_agent(server.url, name="node-0", gpus="V100:4")
        env = {"BERTH_SERVER": server.url}
        b.wait_nodes_up(["node-0"], env=env)
        stubborn = self.write("stubborn.sh", STUBBORN_SCRIPT)
        survivors = self.write("survivors.py", SURVIVORS_SCRIPT)
        job = b.submit("--gpus", "V100:4", "--env", f"READY_DIR={b.tmp}", "--", "bash", stubborn, env=env)
        b.wait_until(lambda: os.path.exists(self.path(f"ready-{job}")), message="the job to be ready")
        nxt = b.submit("--gpus", "V100:4", "--", "python3", survivors, job, b.tmp, env=env)
        b.run("cancel", job, env=env)
        server.kill(signal.SIGKILL)
        self.assertTrue(b.job_pids(job), "the job should still be within its grace period")
        server = b.start_server(state_dir=state, listen=f"127.0.0.1:{port}", extra=["--kill-grace", "3s"])
        b.wait_status(nxt, "SUCCEEDED", env=env)
        self.assertEqual(b.run("logs", nxt, "--no-follow", env=env)[1], "checked\n",
                         "the next job started while the cancelled one still ran")
        self.assertEqual(b.status(job, env=env), "CANCELLED")

    def test_second_agent_on_the_same_state_dir_is_refused(self):
        # Two agents sharing one state dir would both adopt (and stop, and report) the same jobs and keep
        # taking the node's session from each other: the second one must refuse to start.
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        first = b.start_agent(server.url, name="node-0", gpus="V100:4")
        b.wait_nodes_up(["node-0"], env=env)
        second = b.start_agent(server.url, name="node-0", gpus="V100:4", state_dir=first.state_dir)
        self.assertNotEqual(second.proc.wait(timeout=30), 0)
        self.assertIn("another agent", second.log())
        self.assertIn(str(first.pid), second.log())
        # The first one is undisturbed.
        self.assertIsNone(first.proc.poll())
        self.assertEqual(b.run("exec", "--", "echo fine", env=env)[1], "fine\n")
        # Once it is gone, a new one may use the state dir.
        first.kill(signal.SIGTERM)
        b.start_agent(server.url, name="node-0", gpus="V100:4", state_dir=first.state_dir)
        self.assertEqual(b.run("exec", "--", "echo again", env=env, timeout=60)[1], "again\n")

    def test_agent_restart(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        agent = b.start_agent(server.url, name="node-0", gpus="V100:4")
        b.wait_nodes_up(["node-0"], env=env)
        job = b.submit("--gpus", "V100:4", "--env", f"CTL={b.tmp}", "--", "bash", self.script, env=env)
        b.wait_status(job, "RUNNING", env=env)
        b.wait_until(lambda: os.path.exists(self.path(f"pid-{job}")), message="the job's pid file")
        pid = self.pid_of(job)
        b.wait_until(lambda: b.run("logs", job, "--no-follow", env=env)[1] == "before attempt=1\n",
                     message="the first line to reach the server")

        # The agent dies hard; the job, under its supervisor, does not notice.
        agent.kill(signal.SIGKILL)
        self.write("phase2", "")
        b.wait_until(lambda: os.path.exists(self.path(f"during-{job}")), message="the job to go on")
        self.assertTrue(alive(pid))

        # A new agent with the same state dir re-adopts it and ships what it wrote meanwhile.
        agent = b.start_agent(server.url, name="node-0", gpus="V100:4", state_dir=agent.state_dir)
        b.wait_until(lambda: b.run("logs", job, "--no-follow", env=env)[1] == "before attempt=1\nduring\n",
                     message="the output written while the agent was away")
        self.assertEqual(b.show(job, env=env)["attempt"], 1)
        self.assertTrue(alive(pid))

        # A polite stop (SIGTERM) leaves the job running too.
        agent.kill(signal.SIGTERM)
        self.assertEqual(agent.proc.returncode, 0, agent.log())
        self.assertTrue(alive(pid))
        self.write("release", "")
        b.wait_until(lambda: not alive(pid), message="the job to end")
        b.start_agent(server.url, name="node-0", gpus="V100:4", state_dir=agent.state_dir)
        job_obj = b.wait_status(job, "SUCCEEDED", env=env)
        self.assertEqual((job_obj["attempt"], job_obj["exit_code"]), (1, 0))
        self.assertEqual(b.run("logs", job, env=env)[1], "before attempt=1\nduring\nafter\n")


if __name__ == "__main__":
    unittest.main()

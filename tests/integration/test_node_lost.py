"""A node whose agent dies and stays away longer than its lease.

The job's supervisor notices that the lease is no longer renewed and stops the job before the lease runs
out; the server then marks the node DOWN and the job LOST, saying why. When the agent comes back (same
state dir), the node is UP again with all of its GPUs free, the job stays LOST, and new jobs run there.
"""

import signal
import unittest

from harness import BerthTestCase


class NodeLostTest(BerthTestCase):

    def test_agent_dies_past_its_lease_and_comes_back(self):
        b = self.b
        server = b.start_server(extra=["--lease", "2s"])
        agent = b.start_agent(server.url, name="node-0", gpus="V100:4")
        env = {"BERTH_SERVER": server.url}
        b.wait_nodes_up(["node-0"], env=env)
        job = b.submit("--gpus", "V100:3", "--", "echo started; trap '' TERM; sleep 1000", env=env)
        b.wait_status(job, "RUNNING", env=env)
        b.wait_until(lambda: b.job_pids(job), message="the job's processes")
        waiting = b.submit("--gpus", "V100:2", "--", "echo waited", env=env)

        agent.kill(signal.SIGKILL)
        lost = b.wait_status(job, "LOST", env=env)
        self.assertIn("lease", lost["reason"])
        self.assertIsNone(lost["exit_code"])
        # By the time the server gives up on the node, nothing of the job runs there any more.
        self.assertEqual(b.job_pids(job), [], "the lost job still runs on its node")
        node = b.nodes(env=env)[0]
        self.assertEqual(node["state"], "DOWN")
        self.assertIsNotNone(node["down_since"])
        self.assertEqual(b.status(waiting, env=env), "PENDING")
        # (rewritten by the pass that the node's end asks for, on the scheduler's thread)
        b.wait_until(lambda: "draining or down" in b.show(waiting, env=env)["reason"],
                     message="the waiting job's reason to name the down node")

        b.start_agent(server.url, name="node-0", gpus="V100:4", state_dir=agent.state_dir)
        b.wait_nodes_up(["node-0"], env=env)
        b.wait_status(waiting, "SUCCEEDED", env=env)
        self.assertEqual(b.run("logs", waiting, "--no-follow", env=env)[1], "waited\n")
        self.assertEqual(b.status(job, env=env), "LOST")
        self.assertEqual(b.run("logs", job, "--no-follow", env=env)[1], "started\n")
        b.wait_until(lambda: b.nodes(env=env)[0]["free"]["gpus"] == {"V100": 4}, message="all GPUs free")


if __name__ == "__main__":
    unittest.main()

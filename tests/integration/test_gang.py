"""Multi-node jobs as gangs, pools and labels, drain (issue "Multi-node jobs as gangs").

The seed's example: a cluster of 4 nodes with 8 V100 each, and a task of 2 nodes x 4 V100 submitted with
`exec`. A gang gets N distinct nodes at once or waits; every rank sees its rank, the node count and the
nodes' addresses; a failing rank fails the job and stops the others; cancel stops every rank.
"""
import os
import unittest

from harness import BerthTestCase

GANG = """\
name: dist
num_nodes: 2
resources:
  accelerators: V100:4
setup: echo "setup $BERTH_SETUP_NODE_RANK $SKYPILOT_SETUP_NODE_RANK"
run: |
  echo "rank=$BERTH_NODE_RANK sky=$SKYPILOT_NODE_RANK n=$BERTH_NUM_NODES gpus=$CUDA_VISIBLE_DEVICES per=$BERTH_NUM_GPUS_PER_NODE"
  echo "ips=$(echo "$BERTH_NODE_IPS" | paste -sd+) skyips=$(echo "$SKYPILOT_NODE_IPS" | paste -sd+)"
  {extra}
"""


class GangTest(BerthTestCase):
    def gang(self, extra="true", name="gang.yaml"):
        return self.write(name, GANG.replace("{extra}", extra))

    def test_seed_multi_node_example_beside_single_node_jobs(self):
        self.b.local_up("V100:8", 4)
        single = [self.b.submit("--gpus", "V100:2", "--", "sleep 600") for _ in range(3)]
        job = self.b.submit(self.gang())
        done = self.b.wait_status(job, "SUCCEEDED", timeout=60)
        nodes = [p["node"] for p in done["placement"]]
        self.assertEqual(len(set(nodes)), 2)  # two distinct nodes
        self.assertEqual([p["rank"] for p in done["placement"]], [0, 1])
        self.assertTrue(all(len(p["gpus"]) == 4 for p in done["placement"]))
        logs = self.b.run("logs", job, "--no-follow")[1]
        for rank, node in enumerate(nodes):
            self.assertIn(f"(rank {rank}, {node}) setup {rank} {rank}", logs)
            self.assertIn(f"(rank {rank}, {node}) rank={rank} sky={rank} n=2 gpus=", logs)
            self.assertIn(f"(rank {rank}, {node}) ips=127.0.0.1+127.0.0.1 skyips=127.0.0.1+127.0.0.1", logs)
            self.assertIn("per=4", logs)
        one = self.b.run("logs", job, "--rank", 1, "--no-follow")[1]
        self.assertTrue(one.startswith("setup 1 1\n"), one)  # one rank: its output exactly
        for s in single:
            self.b.wait_status(s, "RUNNING")

    def test_gang_that_does_not_fit_waits_while_smaller_jobs_backfill(self):
        # 2 nodes x 4 V100. A 2-node x 4-GPU gang cannot start while a 1-GPU job holds local-0; 1-GPU jobs
        # submitted after it still start on the free GPUs (backfill); the gang starts once local-0 is whole.
        self.b.local_up("V100:4", 2)
        flag = self.path("release")
        blocker = self.b.submit("--gpus", "V100:1", "--", f"while [ ! -e {flag} ]; do sleep 0.05; done")
        self.b.wait_status(blocker, "RUNNING")
        gang = self.b.submit(self.gang())
        small = [self.b.submit("--gpus", "V100:1", "--", "sleep 600") for _ in range(2)]
        for s in small:
            self.b.wait_status(s, "RUNNING")
        shown = self.b.show(gang)
        self.assertEqual(shown["status"], "PENDING")
        self.assertIn("waiting", shown["reason"])
        self.b.run("cancel", *small)
        open(flag, "w").close()
        self.b.wait_status(gang, "SUCCEEDED", timeout=60)

    def test_failing_rank_fails_the_job_and_stops_the_others(self):
        self.b.local_up("V100:4", 2)
        job = self.b.submit(self.gang('if [ "$BERTH_NODE_RANK" = 1 ]; then sleep 0.5; exit 3; fi; '
                                      'trap "" TERM; sleep 600'))
        ended = self.b.wait_status(job, "FAILED", timeout=60)
        self.assertEqual(ended["exit_code"], 3)
        self.assertIn("exit code 3", ended["reason"])
        self.assertIn("rank 1", ended["reason"])
        self.b.wait_until(lambda: not self.b.job_pids(job), timeout=40,
                          message="rank 0 (which ignores SIGTERM) killed")

    def test_cancel_of_a_running_gang_leaves_no_process_on_any_node(self):
        self.b.local_up("V100:4", 2)
        job = self.b.submit(self.gang("sleep 600 & sleep 600"))
        self.b.wait_status(job, "RUNNING", timeout=30)
        self.b.wait_until(lambda: len(self.b.job_pids(job)) >= 4, message="both ranks' processes")
        self.b.run("cancel", job)
        self.assertEqual(self.b.status(job), "CANCELLED")
        self.b.wait_until(lambda: not self.b.job_pids(job), timeout=40, message="every rank's processes gone")

    def test_pools_labels_addresses_and_drain(self):
        server = self.b.start_server()
        self.b.env["BERTH_SERVER"] = server.url
        self.b.start_agent(server.url, "a1", "V100:4", extra=("--pool", "research", "--label", "gpu_gen=volta",
                                                              "--address", "10.0.0.1"))
        self.b.start_agent(server.url, "a2", "V100:4", extra=("--pool", "research", "--label", "gpu_gen=volta",
                                                              "--address", "10.0.0.2"))
        self.b.start_agent(server.url, "b1", "V100:4", extra=("--label", "gpu_gen=hopper",
                                                              "--address", "10.0.0.3"))
        self.b.wait_nodes_up(["a1", "a2", "b1"])
        nodes = {n["name"]: n for n in self.b.nodes()}
        self.assertEqual(nodes["a1"]["pool"], "research")
        # (berth.* labels are the agent's own, e.g. a container runtime where podman is installed)
        own = {k: v for k, v in nodes["b1"]["labels"].items() if not k.startswith("berth.")}
        self.assertEqual(own, {"gpu_gen": "hopper"})
        self.assertEqual(nodes["a2"]["address"], "10.0.0.2")
        _, table, _ = self.b.run("nodes")
        self.assertIn("gpu_gen=hopper", table)

        pooled = self.write("pooled.yaml", GANG.replace("{extra}", "true").replace(
            "name: dist", "name: dist\npool: research\nnode_selector: {gpu_gen: volta}"))
        job = self.b.submit(pooled)
        done = self.b.wait_status(job, "SUCCEEDED", timeout=60)
        self.assertEqual(sorted(p["node"] for p in done["placement"]), ["a1", "a2"])
        logs = self.b.run("logs", job, "--rank", 0, "--no-follow")[1]
        self.assertIn("ips=10.0.0.1+10.0.0.2", logs)  # rank order, the addresses the agents reported

        # Nothing able to hold it matches: refused at submit with the reason.
        nowhere = self.write("nowhere.yaml", "run: 'true'\npool: research\nnode_selector: {gpu_gen: hopper}\n")
        rc, _, err = self.b.run("exec", "-d", nowhere, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("node_selector", err)

        # Drain: b1 finishes what it runs and takes nothing new; undrain returns it.
        flag = self.path("go")
        running = self.b.submit("--gpus", "V100:4", "--", f"while [ ! -e {flag} ]; do sleep 0.05; done")
        on = self.b.wait_status(running, "RUNNING")["placement"][0]["node"]
        _, out, _ = self.b.run("drain", on)
        self.assertIn("DRAINING", out)
        self.assertEqual({n["name"]: n["state"] for n in self.b.nodes()}[on], "DRAINING")
        open(flag, "w").close()
        self.b.wait_status(running, "SUCCEEDED")
        others = [n for n in ("a1", "a2", "b1") if n != on]
        holders = [self.b.submit("--gpus", "V100:4", "--", "sleep 600") for _ in others]
        for h in holders:
            self.b.wait_status(h, "RUNNING")
        late = self.b.submit("--gpus", "V100:4", "--", "true")
        self.assertEqual(self.b.status(late), "PENDING")  # only the drained node is free
        self.b.run("undrain", on)
        done = self.b.wait_status(late, "SUCCEEDED")
        self.assertEqual(done["placement"][0]["node"], on)


if __name__ == "__main__":
    unittest.main()

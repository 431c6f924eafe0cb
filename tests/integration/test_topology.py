"""Topology-aware placement end to end (docs/topology.md): a server with `--topology-levels
rack,switch`, agents labelled with their rack and switch, one of them an 8-GPU node whose declared
NVLink matrix (`--gpu-topology`, nvidia-smi topo -m's format) has two islands whose GPUs
interleave.

  rack r1: switch s1 = t-b, t-c; switch s2 = t-a       rack r2: switch s1 = t-d
  t-e: no labels (outside every domain)
"""
import os
import unittest

from harness import BerthTestCase

# Islands 0,2,4,6 and 1,3,5,7 (the lowest four indices would span both).
MATRIX = "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\n"
for _i in range(8):
    _cells = ["X" if _j == _i else ("NV12" if _j % 2 == _i % 2 else ("PXB" if _j // 4 == _i // 4 else "SYS"))
              for _j in range(8)]
    MATRIX += f"GPU{_i}\t" + "\t".join(_cells) + f"\t{0 if _i < 4 else 8}-{7 if _i < 4 else 15}\t{_i // 4}\n"
MATRIX += "\nLegend:\n\n  X    = Self\n"

NODES = {"t-a": {"rack": "r1", "switch": "s2"}, "t-b": {"rack": "r1", "switch": "s1"},
         "t-c": {"rack": "r1", "switch": "s1"}, "t-d": {"rack": "r2", "switch": "s1"}, "t-e": {}}


class TopologyTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server(extra=["--topology-levels", "rack,switch"])
        self.env = {"BERTH_SERVER": self.server.url}
        for name, labels in NODES.items():
            extra = ["--cpus", "2", "--memory", "2"]
            for key, value in labels.items():
                extra += ["--label", f"{key}={value}"]
            b.start_agent(self.server.url, name=name, gpus="V100:1", extra=extra)
        matrix = self.write("topo.txt", MATRIX)
        b.start_agent(self.server.url, name="t-gpu", gpus="A100:8",
                      extra=["--gpu-topology", matrix, "--cpus", "2", "--memory", "2"])
        b.wait_nodes_up([*NODES, "t-gpu"], env=self.env)

    def submit(self, *args):
        return self.b.submit(*args, env=self.env)

    def wait(self, job, *statuses, timeout=60):
        return self.b.wait_status(job, *statuses, timeout=timeout, env=self.env)

    def test_a_gang_requiring_a_rack_gets_one_with_ranks_in_switch_order(self):
        job = self.submit("--num-nodes", "3", "--gpus", "V100:1", "--topology", "required=rack",
                          "--", 'echo "rank=$BERTH_NODE_RANK"')
        done = self.wait(job, "SUCCEEDED", "FAILED")
        self.assertEqual(done["status"], "SUCCEEDED", done["reason"])
        # r1 is the only rack with three nodes; switch s1 (t-b, t-c) before s2 (t-a).
        self.assertEqual([p["node"] for p in done["placement"]], ["t-b", "t-c", "t-a"])
        self.assertEqual(done["topology"], {"rack": {"r1": 3}, "switch": {"r1/s1": 2, "r1/s2": 1}})
        logs = self.b.run("logs", job, "--no-follow", env=self.env)[1]
        for rank, node in enumerate(["t-b", "t-c", "t-a"]):
            self.assertIn(f"(rank {rank}, {node}) rank={rank}", logs)
        shown = self.b.run("show", job, env=self.env)[1]
        self.assertIn("topology:   rack r1 (3); switch r1/s1 (2), r1/s2 (1)", shown)

    def test_a_gang_prefers_one_switch_and_waits_for_a_rack_with_room(self):
        # Two nodes preferring the finest level (the default): switch r1/s1 holds both.
        pair = self.submit("--num-nodes", "2", "--gpus", "V100:1", "--", "sleep 600")
        running = self.wait(pair, "RUNNING")
        self.assertEqual(sorted(p["node"] for p in running["placement"]), ["t-b", "t-c"])
        # A 2-node gang requiring a rack now waits: t-a is r1's last free node, t-d r2's only one.
        waiting = self.submit("--num-nodes", "2", "--gpus", "V100:1", "--topology", "rack", "--",
                              "true")
        self.b.wait_until(lambda: "under one 'rack'" in self.b.show(waiting, env=self.env)["reason"],
                          timeout=30, message="the gang's reason to name the level")
        reason = self.b.show(waiting, env=self.env)["reason"]
        self.assertIn("needs 2 nodes under one 'rack' with V100:1", reason)
        self.assertIn("at most 1 fit under one now (rack r1), held by job %s" % pair, reason)
        # It starts as soon as r1 has room again.
        self.b.run("cancel", pair, env=self.env)
        done = self.wait(waiting, "SUCCEEDED", "FAILED")
        self.assertEqual(done["status"], "SUCCEEDED", done["reason"])
        self.assertEqual({n for n in done["topology"]["rack"]}, {"r1"})

    def test_gpus_come_from_one_nvlink_island(self):
        job = self.submit("--gpus", "A100:4", "--", 'echo "cuda=$CUDA_VISIBLE_DEVICES"')
        done = self.wait(job, "SUCCEEDED", "FAILED")
        self.assertEqual(done["status"], "SUCCEEDED", done["reason"])
        self.assertIn("cuda=0,2,4,6", self.b.run("logs", job, "--no-follow", env=self.env)[1])
        devices = {d["index"]: d for d in next(n for n in self.b.nodes(env=self.env)
                                               if n["name"] == "t-gpu")["devices"]}
        self.assertEqual([devices[i]["nvlink"] for i in range(8)], [1, 2, 1, 2, 1, 2, 1, 2])
        self.assertEqual([devices[i]["numa"] for i in range(8)], [0, 0, 0, 0, 1, 1, 1, 1])

    def test_nodes_show_their_domains_and_flag_those_outside(self):
        out = self.b.run("nodes", env=self.env)[1]
        self.assertIn("TOPOLOGY", out)
        self.assertRegex(out, r"t-a\s+UP\s+-\s+r1/s2\b")
        self.assertRegex(out, r"t-e\s+UP\s+-\s+\?/\?")
        self.assertIn("(?: the node lacks that topology level's label", out)
        one = self.b.run("nodes", "t-e", env=self.env)[1]
        self.assertIn("Topology:  rack none (no 'rack' label: outside every domain of it)", one)

    def test_bad_topology_requests_are_refused_saying_why(self):
        rc, _, err = self.b.run("exec", "-d", "--num-nodes", "2", "--topology", "required=pod", "--",
                                "true", check=False, env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("placement.topology.required: 'pod' is not a topology level of this cluster "
                      "(it has: rack, switch)", err)
        rc, _, err = self.b.run("exec", "-d", "--num-nodes", "4", "--gpus", "V100:1", "--topology",
                                "rack", "--", "true", check=False, env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("no 'rack' has 4 nodes that fit (largest: 3 in rack r1)", err)
        rc, _, err = self.b.run("exec", "-d", "--topology", "required=switch,preferred=rack", "--",
                                "true", check=False, env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("preferred 'rack' is coarser than required 'switch'", err)
        rc, _, err = self.b.run("exec", "-d", "--topology", "nearby=rack", "--", "true", check=False,
                                env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("--topology: expected LEVEL or required=LEVEL,preferred=LEVEL", err)
        self.assertEqual(self.b.queue(env=self.env), [], "nothing refused was accepted")


# `nvidia-smi -q` on a node of an NVL72 rack (abridged): each GPU's Fabric section names the NVLink
# domain (ClusterUUID, CliqueId); the clique comes from the agent's environment. Anything else the
# agent asks fails, as on a machine whose GPUs are declared (so health probes, which ask nvidia-smi
# too, are off).
FAKE_SMI = """#!/bin/sh
[ "$1" = "-q" ] || exit 1
for gpu in 0 1; do cat <<EOF
GPU 00000008:0$gpu:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : $TEST_CLIQUE
        ClusterUUID                       : 8b1f9d0c-4e5a-4f0b-9b2a-6f1c2d3e4a5b
        Health
            Bandwidth                     : Full
EOF
done
"""


class NvlinkDomainTest(BerthTestCase):
    """The NVLink domain across nodes discovered from nvidia-smi as a topology level's value: n1 and
    n2 in clique 1, n3 in clique 2, n4 in clique 2 but labelled by hand (the label wins)."""

    def setUp(self):
        super().setUp()
        b = self.b
        bindir = os.path.join(b.tmp, "smi-bin")
        os.makedirs(bindir, exist_ok=True)
        with open(os.path.join(bindir, "nvidia-smi"), "w") as f:
            f.write(FAKE_SMI)
        os.chmod(os.path.join(bindir, "nvidia-smi"), 0o755)
        path = bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")
        self.server = b.start_server(extra=["--topology-levels", "berth.nvlink_domain"])
        self.env = {"BERTH_SERVER": self.server.url}
        for name, clique, extra in [("n1", "1", []), ("n2", "1", []), ("n3", "2", []),
                                    ("n4", "2", ["--label", "berth.nvlink_domain=by-hand"])]:
            b.start_agent(self.server.url, name=name, gpus="GB200:2",
                          extra=["--cpus", "2", "--memory", "2", "--health", "off", *extra],
                          env={"PATH": path, "TEST_CLIQUE": clique})
        b.wait_nodes_up(["n1", "n2", "n3", "n4"], env=self.env)

    def test_gangs_keep_to_one_discovered_nvlink_domain(self):
        domain = "8b1f9d0c-4e5a-4f0b-9b2a-6f1c2d3e4a5b."
        labels = {n["name"]: n["labels"].get("berth.nvlink_domain")
                  for n in self.b.nodes(env=self.env)}
        self.assertEqual(labels, {"n1": domain + "1", "n2": domain + "1", "n3": domain + "2",
                                  "n4": "by-hand"})
        job = self.b.submit("--num-nodes", "2", "--gpus", "GB200:2", "--topology",
                            "berth.nvlink_domain", "--", "true", env=self.env)
        done = self.b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)
        self.assertEqual(done["status"], "SUCCEEDED", done["reason"])
        self.assertEqual(sorted(p["node"] for p in done["placement"]), ["n1", "n2"])
        rc, _, err = self.b.run("exec", "-d", "--num-nodes", "3", "--gpus", "GB200:1", "--topology",
                                "berth.nvlink_domain", "--", "true", check=False, env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("no 'berth.nvlink_domain' has 3 nodes that fit (largest: 2 in "
                      "berth.nvlink_domain " + domain + "1)", err)


if __name__ == "__main__":
    unittest.main()

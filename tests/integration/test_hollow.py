"""Hollow nodes: `berth agent --hollow N` simulates N nodes over the real protocol (issue "Scale").

A bare server and one hollow agent process with 20 nodes of 8 H100 each (160 GPUs). A sweep of 200
one-GPU jobs that each "run" 1 s (BERTH_HOLLOW_SECONDS) fills every GPU, then the rest runs when they end;
all 200 succeed. A job without BERTH_HOLLOW_SECONDS runs until it is cancelled.
"""
import unittest

from harness import BerthTestCase


class HollowTest(BerthTestCase):
    def test_hollow_nodes_run_jobs_without_processes(self):
        server = self.b.start_server()
        self.b.env["BERTH_SERVER"] = server.url  # every CLI call below talks to this server
        self.b.start_agent(server.url, name="sim", gpus="H100:8", extra=("--hollow", "20"))
        names = [f"sim-{i}" for i in range(20)]
        self.b.wait_nodes_up(names)
        nodes = {n["name"]: n for n in self.b.json("nodes", "--json")}
        self.assertEqual(sorted(nodes), sorted(names))
        self.assertEqual(nodes["sim-3"]["capacity"]["gpus"], {"H100": 8})

        task = self.write("sim.yaml", "name: sim\nresources: {accelerators: H100:1}\n"
                                      "envs: {BERTH_HOLLOW_SECONDS: '1'}\nrun: python train.py\n")
        sub = self.b.json("exec", task, "--num-jobs", 200, "-d", "--json")
        self.b.wait_until(lambda: sum(n["free"]["gpus"].get("H100", 8) == 0 for n in
                                      self.b.json("nodes", "--json")) == 20,
                          timeout=30, message="every simulated GPU busy")

        def all_done():
            jobs = self.b.json("queue", "--group", sub["group"], "--all", "--json")
            return len(jobs) == 200 and all(j["status"] == "SUCCEEDED" for j in jobs)
        self.b.wait_until(all_done, timeout=60, message="all 200 hollow jobs SUCCEEDED")
        job = self.b.show(sub["jobs"][0])
        self.assertEqual(job["exit_code"], 0)
        self.assertTrue(job["placement"][0]["node"].startswith("sim-"))

        forever = self.b.json("exec", "-d", "--json", "--gpus", "H100:8", "--",
                              "sleep", "1")["jobs"][0]
        self.b.wait_status(forever, "RUNNING")
        self.b.run("cancel", forever)
        self.b.wait_until(lambda: all(n["free"]["gpus"]["H100"] == 8 for n in
                                      self.b.json("nodes", "--json")),
                          timeout=30, message="the cancelled hollow job's GPUs back")


if __name__ == "__main__":
    unittest.main()

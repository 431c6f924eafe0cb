"""Priorities, whole-gang preemption, exclusive racks, starvation and time limits (issue "Priorities").

The JobSet scenario (kubernetes-sigs/jobset #682): two racks of 2 nodes x 4 GPUs. A low-priority exclusive
2-node job fills rack r1 and another fills r2. A high-priority exclusive 2-node job arrives: it preempts
exactly one of them (both ranks), runs on that rack, and the victim returns to PENDING and restarts
(attempt 2, BERTH_ATTEMPT=2) when a rack frees.
"""
import os
import threading
import time
import unittest

from harness import BerthTestCase

RACK_JOB = """\
name: {name}
num_nodes: 2
priority: {priority}
placement: {{exclusive: rack}}
resources: {{accelerators: V100:4}}
run: |
  echo "attempt=$BERTH_ATTEMPT rank=$BERTH_NODE_RANK"
  {run}
"""


class PreemptionTest(BerthTestCase):
    def cluster(self, racks=True):
        server = self.b.start_server(extra=("--kill-grace", "1s", "--starvation", "3s"))
        self.b.env["BERTH_SERVER"] = server.url
        names = ["n1", "n2", "n3", "n4"]
        for i, name in enumerate(names):
            extra = ("--label", f"rack=r{1 + i // 2}") if racks else ()
            self.b.start_agent(server.url, name, "V100:4", extra=extra)
        self.b.wait_nodes_up(names)
        return server

    def rack_job(self, name, priority, run="sleep 600", extra=""):
        return self.b.submit(self.write(f"{name}.yaml", RACK_JOB.format(name=name, priority=priority, run=run) + extra))

    def test_jobset_scenario_high_priority_gang_preempts_exactly_one_rack(self):
        self.cluster()
        low1 = self.rack_job("low1", 0)
        low2 = self.rack_job("low2", 0)
        for j in (low1, low2):
            self.b.wait_status(j, "RUNNING")
        racks = {j: {p["node"] for p in self.b.show(j)["placement"]} for j in (low1, low2)}
        self.assertEqual(sorted(map(sorted, racks.values())), [["n1", "n2"], ["n3", "n4"]])

        # The high-priority job runs until the test has looked (a fixed sleep raced slow builds: under
        # ASan six CLI calls outlast 3 s, and the victim was already back).
        release = self.path("release-high")
        high = self.rack_job("high", 10, run=f"while [ ! -e {release} ]; do sleep 0.1; done")
        running = self.b.wait_status(high, "RUNNING", timeout=60)
        victims = [j for j in (low1, low2) if self.b.show(j)["attempt"] == 2 or self.b.status(j) == "PENDING"]
        self.assertEqual(len(victims), 1, "exactly one low-priority gang preempted")
        victim = victims[0]
        survivor = low2 if victim == low1 else low1
        self.assertEqual({p["node"] for p in running["placement"]}, racks[victim])
        self.assertEqual(self.b.status(survivor), "RUNNING")
        shown = self.b.show(victim)
        self.assertEqual(shown["status"], "PENDING")
        self.assertIn(f"preempted by job {high}", shown["attempts"][0]["reason"])
        self.assertEqual(shown["attempts"][0]["outcome"], "PENDING")  # requeued, not failed
        self.assertTrue(any(f"preempted by job {high}" in e["reason"] for e in shown["events"]))
        # Both ranks of the victim were stopped.
        self.b.wait_until(lambda: not self.b.job_pids(victim), timeout=30, message="victim's processes gone")
        # When the high-priority job ends, the victim restarts as attempt 2 on the freed rack.
        open(release, "w").close()
        self.b.wait_status(high, "SUCCEEDED", timeout=60)
        again = self.b.wait_status(victim, "RUNNING", timeout=60)
        self.assertEqual(again["attempt"], 2)
        self.b.wait_until(lambda: "attempt=2" in self.b.run("logs", victim, "--rank", 0, "--no-follow")[1],
                          message="BERTH_ATTEMPT=2 in the restarted victim's output")
        self.assertEqual([a["attempt"] for a in self.b.show(victim)["attempts"]], [1, 2])
        self.b.run("cancel", "--all")

    def test_equal_priority_never_preempts_and_lower_never_enters(self):
        self.cluster()
        a = self.rack_job("a", 5)
        b = self.rack_job("b", 5)
        for j in (a, b):
            self.b.wait_status(j, "RUNNING")
        c = self.rack_job("c", 5)  # equal: waits
        d = self.b.submit("--gpus", "V100:1", "--priority", "1", "--", "true")  # lower: never enters a held rack
        # A pass has decided both (each has its waiting reason), rather than a second of sleep.
        self.b.wait_until(lambda: self.b.show(c)["reason"] and self.b.show(d)["reason"],
                          message="a scheduling pass to decide c and d")
        self.assertEqual(self.b.status(c), "PENDING")
        self.assertEqual(self.b.status(d), "PENDING")
        self.assertEqual(self.b.status(a), "RUNNING")
        self.assertEqual(self.b.status(b), "RUNNING")
        self.b.run("cancel", "--all")

    def test_opted_out_victim_ends_preempted(self):
        self.cluster(racks=False)
        low = self.b.submit(self.write("low.yaml", "resources: {accelerators: V100:4}\nnum_nodes: 4\n"
                                                    "recovery: {on_preemption: fail}\nrun: sleep 600\n"))
        self.b.wait_status(low, "RUNNING")
        high = self.b.submit("--gpus", "V100:4", "--priority", "10", "--", "true")
        self.b.wait_status(high, "SUCCEEDED", timeout=60)
        ended = self.b.show(low)
        self.assertEqual(ended["status"], "PREEMPTED")
        self.assertIn(f"preempted by job {high}", ended["reason"])

    def test_time_limit_stops_a_job(self):
        self.cluster(racks=False)
        job = self.b.submit(self.write("slow.yaml", "time_limit: 1s\nrun: sleep 600\n"))
        ended = self.b.wait_status(job, "FAILED", timeout=30)
        self.assertIn("time limit", ended["reason"])

    def test_no_starvation_behind_a_stream_of_small_jobs(self):
        # One node of 4 GPUs kept busy by a stream of 1-GPU jobs; a 4-GPU job waits. Past the starvation
        # bound (3 s here) it gets a reservation: small jobs stop landing on the node and it starts.
        server = self.b.start_server(extra=("--kill-grace", "1s", "--starvation", "3s"))
        self.b.env["BERTH_SERVER"] = server.url
        self.b.start_agent(server.url, "solo", "V100:4")
        self.b.wait_nodes_up(["solo"])
        stop = threading.Event()

        def stream():
            while not stop.is_set():
                self.b.run("exec", "-d", "--gpus", "V100:1", "--", "sleep 1")
                time.sleep(0.2)

        for _ in range(4):
            self.b.submit("--gpus", "V100:1", "--", "sleep 1")
        feeder = threading.Thread(target=stream)
        feeder.start()
        try:
            big = self.b.submit("--gpus", "V100:4", "--", "true")
            done = self.b.wait_status(big, "SUCCEEDED", timeout=60)
            waited = self.b.show(big)
            self.assertEqual(done["status"], "SUCCEEDED")
        finally:
            stop.set()
            feeder.join()
        self.b.run("cancel", "--all")


if __name__ == "__main__":
    unittest.main()

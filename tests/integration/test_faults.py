"""Faults: no job ever has two attempts running at once (issue "Dispatch that never stalls").

Two nodes, a server with a 2-second lease. A job that ignores SIGTERM runs on one node and stamps the
time into a shared file every 20 ms. Its agent is frozen (SIGSTOP) past its lease: the server marks the node
down and, as the job asks (`recovery: {on_node_lost: requeue}`), starts attempt 2 on the other node. The
frozen agent cannot stop anything — the job's supervisor does it by itself when the lease it watches is
not renewed — and the stamps prove that attempt 1 was dead before attempt 2 started.
"""
import os
import signal
import time
import unittest

from harness import BerthTestCase

JOB = """\
name: stamper
resources: {accelerators: V100:1}
recovery: {on_node_lost: requeue}
run: |
  trap "" TERM
  echo "start $BERTH_ATTEMPT $(date +%s%N)" >> STAMPS
  while true; do echo "alive $BERTH_ATTEMPT $(date +%s%N)" >> STAMPS; sleep 0.02; done
"""


class FaultTest(BerthTestCase):
    def test_frozen_agent_past_its_lease_never_runs_twice(self):
        server = self.b.start_server(extra=("--lease", "2s"))
        self.b.env["BERTH_SERVER"] = server.url
        agents = {name: self.b.start_agent(server.url, name, "V100:1") for name in ("n1", "n2")}
        self.b.wait_nodes_up(["n1", "n2"])
        stamps = self.path("stamps")
        job = self.b.submit(self.write("stamper.yaml", JOB.replace("STAMPS", stamps)))
        first = self.b.wait_status(job, "RUNNING")
        node = first["placement"][0]["node"]
        other = "n2" if node == "n1" else "n1"

        os.kill(agents[node].pid, signal.SIGSTOP)
        try:
            second = self.b.wait_until(
                lambda: (lambda j: j if j["attempt"] == 2 and j["status"] == "RUNNING" else None)(self.b.show(job)),
                timeout=30, message="attempt 2 running elsewhere")
            self.assertEqual(second["placement"][0]["node"], other)
            nodes = {n["name"]: n for n in self.b.nodes()}
            self.assertEqual(nodes[node]["state"], "DOWN")
            self.assertIsNotNone(nodes[node]["down_since"])
            time.sleep(1)  # let attempt 2 stamp for a while
        finally:
            os.kill(agents[node].pid, signal.SIGCONT)

        with open(stamps) as f:
            lines = [l.split() for l in f if l.strip()]
        first_alive = [int(t) for kind, a, t in lines if a == "1"]
        second_start = [int(t) for kind, a, t in lines if a == "2" and kind == "start"]
        self.assertTrue(first_alive and second_start, lines[-5:])
        self.assertLess(max(first_alive), min(second_start),
                        "attempt 1 was still running when attempt 2 started")
        shown = self.b.show(job)
        self.assertEqual([a["attempt"] for a in shown["attempts"]], [1, 2])
        self.assertIn("lease", shown["attempts"][0]["reason"])
        self.b.run("cancel", job)


if __name__ == "__main__":
    unittest.main()

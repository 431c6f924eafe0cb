"""Node health (docs/operators.md "Node health"): probes with hard timeouts, a GPU fenced on an XID, a node
drained by a failing probe and taken back only after clean runs, prolog and epilog.

The agents run with a fake nvidia-smi (a script that prints what the test wrote), a plain file standing in for
the kernel log, and health.d / prolog.d / epilog.d scripts that fail or hang on demand.
"""

import os
import unittest

from harness import BerthTestCase, http, pids_with_env

# The fake GPUs' PCI bus ids, as nvidia-smi prints them and as the kernel log names them.
BUS = ["00000000:1A:00.0", "00000000:1B:00.0", "00000000:3B:00.0", "00000000:5E:00.0"]
KLOG_BUS = ["0000:1a:00", "0000:1b:00", "0000:3b:00", "0000:5e:00"]


class HealthTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.bin = self.path("bin")
        self.write("bin/nvidia-smi", "#!/bin/sh\ncat " + self.path("gpus.csv") + "\n", mode=0o755)
        self.set_gpus(ecc={})
        self.klog = self.write("kern.log", "")

    def set_gpus(self, ecc, missing=()):
        rows = [f"{i}, {BUS[i]}, {ecc.get(i, 0)}, No, No" for i in range(4) if i not in missing]
        self.write("gpus.csv", "\n".join(rows) + "\n")

    def xid(self, gpu, code, text="GPU has fallen off the bus."):
        with open(self.klog, "a") as f:
            f.write(f"[12345.678] NVRM: Xid (PCI:{KLOG_BUS[gpu]}): {code}, pid=4242, name=python, {text}\n")

    def agent(self, server, name, health_dir=None, **flags):
        health_dir = health_dir or self.path("health.d-" + name)
        os.makedirs(health_dir, exist_ok=True)
        env = {"PATH": self.bin + ":" + os.environ["PATH"]}
        options = {"health-interval": "200ms", "health-timeout": "1s", "kernel-log": self.klog,
                   "health-dir": health_dir, "prolog-dir": self.path("none"),
                   "epilog-dir": self.path("none")}
        options.update({k.replace("_", "-"): v for k, v in flags.items()})
        args = [x for k, v in options.items() for x in ("--" + k, v)]
        return self.b.start_agent(server.url, name=name, gpus="V100:4", extra=args, env=env)

    def node(self, name, env):
        return next(n for n in self.b.nodes(env=env) if n["name"] == name)

    def probe(self, name, node, env):
        for p in self.node(node, env)["health"]["probes"]:
            if p["name"] == name:
                return p
        return None

    def test_xid_fences_one_gpu_and_requeues_only_its_job(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        # The XID fault stays for the whole test (its readmission is the next test's subject): a slow
        # machine may take a while between the checks.
        self.agent(server, "n0", health_clean_runs="100", health_interval="500ms")
        b.wait_nodes_up(["n0"], env=env)
        b.wait_until(lambda: self.probe("gpus", "n0", env), message="the GPU probe's first run")
        jobs = [b.submit("--gpus", "V100:1", "--", "sleep 1000", env=env) for _ in range(3)]
        for j in jobs:
            b.wait_status(j, "RUNNING", env=env)
        on = {b.show(j, env=env)["placement"][0]["gpus"][0]: j for j in jobs}
        self.assertEqual(sorted(on), [0, 1, 2])

        # An application's XID (13) on GPU 0 changes nothing.
        self.xid(0, 13, "Graphics SM Warp Exception")
        runs = self.probe("xid", "n0", env)["at"]
        b.wait_until(lambda: self.probe("xid", "n0", env)["at"] != runs, message="an xid probe run")
        self.assertEqual(self.node("n0", env)["health"]["state"], "ok")

        self.xid(2, 79)
        def fenced():
            return self.node("n0", env)["devices"][2].get("fault")
        fault = b.wait_until(fenced, message="GPU 2 fenced")
        self.assertEqual(fault, "xid 79 on GPU 2 (fell off the bus)")
        victim = on[2]
        b.wait_until(lambda: b.show(victim, env=env)["attempts"][0]["outcome"], message="the attempt ended")
        first = b.show(victim, env=env)["attempts"][0]
        self.assertIn("health: xid 79 on GPU 2 (fell off the bus) on node n0; requeued", first["reason"])
        self.assertEqual(first["outcome"], "PENDING")
        # The others keep running, in their first attempt.
        for gpu in (0, 1):
            shown = b.show(on[gpu], env=env)
            self.assertEqual(shown["status"], "RUNNING")
            self.assertEqual([(a["attempt"], a["outcome"]) for a in shown["attempts"]], [(1, None)])
        node = self.node("n0", env)
        self.assertEqual(node["state"], "UP")  # the node stays up for its other GPUs
        self.assertEqual(node["health"]["state"], "degraded")
        self.assertEqual([g["index"] for g in node["health"]["gpus"]], [2])
        # The requeued job runs again, not on GPU 2.
        b.wait_until(lambda: b.show(victim, env=env)["status"] == "RUNNING", message="the victim placed again")
        again = b.show(victim, env=env)["placement"][0]["gpus"][0]
        self.assertNotEqual(again, 2)
        status, body, _ = http("GET", server.url + "/metrics")
        self.assertEqual(status, 200)
        self.assertIn('berth_gpus_unhealthy{node="n0",gpu="2"} 1', body)

    def test_failing_probe_drains_until_two_clean_runs_and_an_operator_drain_stays(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        flag = self.path("disk-bad")
        runs = self.path("runs.log")
        health_dir = self.path("health.d")
        self.write("health.d/check-scratch",
                   f"#!/bin/sh\nif [ -e {flag} ]; then echo bad >> {runs}; echo 'scratch is read-only'; exit 1; fi\n"
                   f"echo clean >> {runs}\nexit 0\n", mode=0o755)
        self.write("disk-bad", "")
        # A node whose probe fails at start joins drained: it never shows UP.
        self.agent(server, "n0", health_dir=health_dir)
        seen = b.wait_until(lambda: [n["state"] for n in b.nodes(env=env)], message="the node registered")
        self.assertEqual(seen, ["DRAINING"])
        node = self.node("n0", env)
        self.assertEqual(node["health"]["state"], "drained")
        self.assertEqual(node["health"]["reason"], "health: health.d/check-scratch: scratch is read-only")
        self.assertFalse(node["drained_by_operator"])
        job = b.submit("--", "echo ran", env=env)
        self.assertEqual(b.status(job, env=env), "PENDING")

        os.remove(flag)
        def up():
            return self.node("n0", env)["state"] == "UP"
        b.wait_until(up, message="the node taken back")
        # Taken back only after two clean runs in a row.
        with open(runs) as f:
            after = f.read().split("bad\n")[-1].split()
        self.assertGreaterEqual(after.count("clean"), 2, after)
        b.wait_status(job, "SUCCEEDED", env=env)

        # An operator's drain is not the probes' to clear.
        b.run("drain", "n0", env=env)
        def cleans():
            with open(runs) as f:
                return f.read().count("clean")
        clean = cleans()
        b.wait_until(lambda: cleans() >= clean + 3, message="three more clean runs")
        node = self.node("n0", env)
        self.assertEqual(node["state"], "DRAINING")
        self.assertTrue(node["drained_by_operator"])
        b.run("undrain", "n0", env=env)
        b.wait_nodes_up(["n0"], env=env)

    def test_a_hanging_probe_is_killed_at_its_timeout_and_drains_the_node(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        hang = self.path("hang")
        marker = "BERTH_HEALTH_HANG_" + os.path.basename(b.tmp).replace("-", "_")
        self.write("health.d/dcgm-lite",
                   f"#!/bin/sh\nif [ -e {hang} ]; then env {marker}=1 sleep 1000; fi\nexit 0\n", mode=0o755)
        self.agent(server, "n0", health_dir=self.path("health.d"))
        b.wait_nodes_up(["n0"], env=env)
        self.write("hang", "")
        def drained():
            return self.node("n0", env)["health"]["reason"]
        reason = b.wait_until(drained, message="the node drained by the hung probe")
        self.assertEqual(reason, "health: health.d/dcgm-lite: timed out after 1s")
        probe = self.probe("health.d/dcgm-lite", "n0", env)
        self.assertTrue(probe["timed_out"])
        self.assertGreaterEqual(probe["timeouts"], 1)
        # The probe's whole process group was killed: no `sleep` outlives its run for long.
        b.wait_until(lambda: not pids_with_env(marker, "1") or None, timeout=5, message="the hung sleep killed")
        status, body, _ = http("GET", server.url + "/metrics")
        self.assertIn('berth_nodes_unhealthy 1', body)
        self.assertRegex(body, r'berth_health_probe_timeouts_total\{node="n0",probe="health.d/dcgm-lite"\} [1-9]')
        # --force clears it now; the probe, still hanging, drains it again.
        os.remove(hang)
        b.run("undrain", "--force", "n0", env=env)
        b.wait_nodes_up(["n0"], env=env)

    def test_failing_prolog_requeues_elsewhere_and_epilog_failure_drains_after_the_job(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        self.write("prolog-bad/10-scratch", "#!/bin/sh\necho 'no scratch space'\nexit 3\n", mode=0o755)
        seen = self.path("prolog-env")
        self.write("prolog-good/10-record",
                   f"#!/bin/sh\necho \"$BERTH_JOB_ID $BERTH_USER $CUDA_VISIBLE_DEVICES $BERTH_NODE\" >> {seen}\n",
                   mode=0o755)
        self.write("epilog-bad/90-check", "#!/bin/sh\necho \"GPU left dirty by $BERTH_JOB_ID ($BERTH_EXIT_CODE)\"\nexit 1\n",
                   mode=0o755)
        self.agent(server, "bad", prolog_dir=self.path("prolog-bad"))
        b.wait_nodes_up(["bad"], env=env)
        job = b.submit("--gpus", "V100:1", "--", "echo hello", env=env)
        def requeued():
            attempts = b.show(job, env=env)["attempts"]
            return attempts[0] if attempts and attempts[0]["outcome"] else None
        first = b.wait_until(requeued, message="the attempt on the bad node ended")
        self.assertEqual(first["outcome"], "PENDING")
        self.assertIn("prolog failed on node bad: prolog/10-scratch: exit code 3: no scratch space; requeued",
                      first["reason"])
        node = self.node("bad", env)
        self.assertEqual(node["state"], "DRAINING")
        # A light probe may fail for a moment beside it on a loaded machine (its 1 s timeout): find the
        # prolog's fault by name, not by position.
        faults = {f["probe"]: f for f in node["health"]["faults"]}
        self.assertIn("prolog", faults, node["health"])
        self.assertEqual(faults["prolog"]["cleared_by"], "operator")
        self.assertEqual(b.status(job, env=env), "PENDING")

        self.agent(server, "good", prolog_dir=self.path("prolog-good"),
                   epilog_dir=self.path("epilog-bad"))
        b.wait_status(job, "SUCCEEDED", env=env)
        self.assertEqual(b.run("logs", job, "--no-follow", env=env)[1], "hello\n")
        with open(seen) as f:
            fields = f.read().split()
        self.assertEqual(fields[0], str(job))
        self.assertEqual(fields[3], "good")
        self.assertTrue(fields[1])
        # The epilog fails after the job ended: the job keeps its result, the node drains.
        def epilog_drained():
            return self.node("good", env)["health"]["reason"]
        reason = b.wait_until(epilog_drained, message="the good node drained by its epilog")
        self.assertEqual(reason, f"health: epilog/90-check: exit code 1: GPU left dirty by {job} (0)")
        self.assertEqual(b.status(job, env=env), "SUCCEEDED")
        # Only an operator clears a prolog's or an epilog's drain; clean probes do not.
        self.assertEqual(self.node("bad", env)["state"], "DRAINING")
        out = b.run("undrain", "bad", env=env)[1]
        self.assertIn("stays drained by its health probes", out)
        self.assertEqual(self.node("bad", env)["state"], "DRAINING")
        b.run("undrain", "--force", "bad", env=env)
        # Its prolog still fails, but only a job's launch runs it: the node is up until then.
        b.wait_nodes_up(["bad"], env=env)


if __name__ == "__main__":
    unittest.main()

"""GPU utilisation per job end to end (docs/idle.md): an agent with declared GPUs samples
them through the nvidia-smi on its PATH (a stand-in printing nvidia-smi's CSV from files the test
writes), its heartbeats carry each rank's use, and `berth show` and the API report it."""
import os
import unittest

from harness import BerthTestCase, http

# Answers exactly the two questions the agent asks (docs/idle.md); anything else fails, as on a
# machine whose GPUs are declared.
FAKE_SMI = """#!/bin/sh
[ -e "$SMI_DIR/broken" ] && exit 9
case "$*" in
  "--query-gpu=index,uuid,utilization.gpu,memory.used --format=csv,noheader,nounits")
    cat "$SMI_DIR/gpus.csv" ;;
  "--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits")
    cat "$SMI_DIR/apps.csv" ;;
  *) exit 1 ;;
esac
"""


class GpuUsageTest(BerthTestCase):
    SERVER_EXTRA = []

    def setUp(self):
        super().setUp()
        b = self.b
        self.smi = os.path.join(b.tmp, "smi")
        bindir = os.path.join(b.tmp, "smi-bin")
        os.makedirs(self.smi, exist_ok=True)
        os.makedirs(bindir, exist_ok=True)
        with open(os.path.join(bindir, "nvidia-smi"), "w") as f:
            f.write(FAKE_SMI)
        os.chmod(os.path.join(bindir, "nvidia-smi"), 0o755)
        self.gpus(0, 0, apps="")
        self.server = b.start_server(extra=self.SERVER_EXTRA)
        self.env = {"BERTH_SERVER": self.server.url}
        self.bindir = bindir
        self.agent = self.start_agent()
        b.wait_nodes_up(["g1"], env=self.env)

    def start_agent(self):
        return self.b.start_agent(self.server.url, name="g1", gpus="A100:2",
                                  extra=["--cpus", "2", "--memory", "2", "--health", "off",
                                         "--gpu-sample-interval", "1s"],
                                  env={"PATH": self.bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                                       "SMI_DIR": self.smi})

    def gpus(self, sm0, sm1, apps):
        with open(os.path.join(self.smi, "gpus.csv.tmp"), "w") as f:
            f.write(f"0, GPU-aaaa, {sm0}, 1200\n1, GPU-bbbb, {sm1}, 900\n")
        os.replace(os.path.join(self.smi, "gpus.csv.tmp"), os.path.join(self.smi, "gpus.csv"))
        with open(os.path.join(self.smi, "apps.csv"), "w") as f:
            f.write(apps)

    def use(self, job):
        return self.b.show(job, env=self.env).get("gpu_usage")

    def test_a_running_jobs_gpu_use_and_idle_time_are_reported(self):
        job = self.b.submit("--gpus", "A100:1", "--", "sleep 120", env=self.env)
        self.b.wait_status(job, "RUNNING", timeout=60, env=self.env)
        # Both GPUs at 0 % with no process: the job's GPU is idle, and the spell grows.
        self.b.wait_until(lambda: (self.use(job) or {}).get("idle_for_seconds", 0) >= 2, timeout=30,
                          message="the job's GPU to be reported idle")
        use = self.use(job)
        self.assertTrue(use["known"])
        self.assertEqual(use["mean_sm"], 0)
        self.assertEqual(use["peak_memory_mib"] in (1200, 900), True, use)
        shown = self.b.run("show", job, env=self.env)[1]
        self.assertIn("gpu use:    mean 0% SM (p95 0%)", shown)
        self.assertIn("idle now for", shown)
        status, metrics, _ = http("GET", self.server.url + "/metrics")
        self.assertEqual(status, 200)
        self.assertIn("berth_gpu_sampled_jobs 1\n", metrics)
        self.assertIn("berth_gpu_idle_jobs 1\n", metrics)
        self.assertIn(f'berth_job_gpu_sm_percent{{job="{job}",attempt="1"}} 0\n', metrics)
        self.assertRegex(metrics, rf'berth_job_gpu_idle_seconds{{job="{job}",attempt="1"}} [1-9]')
        # Work starts on both GPUs: busy, the spell is over.
        self.gpus(80, 80, apps="GPU-aaaa, 4242, 1100\nGPU-bbbb, 4243, 800\n")
        self.b.wait_until(lambda: self.use(job)["idle_for_seconds"] == 0 and
                          self.use(job)["p95_sm"] == 80, timeout=30,
                          message="the job's GPU to be reported busy")
        self.assertGreater(self.use(job)["mean_sm"], 0)
        # nvidia-smi breaks: utilisation unknown, never idle.
        with open(os.path.join(self.smi, "broken"), "w"):
            pass
        self.gpus(0, 0, apps="")
        self.b.wait_until(lambda: not self.use(job)["known"], timeout=30,
                          message="the job's utilisation to be unknown")
        self.assertEqual(self.use(job)["idle_for_seconds"], 0)
        self.assertIn("utilisation unknown now", self.b.run("show", job, env=self.env)[1])
        self.b.run("cancel", job, env=self.env)
        done = self.b.wait_status(job, "CANCELLED", timeout=60, env=self.env)
        self.assertIsNone(done["gpu_usage"])
        # `berth usage`: the attempt's sampled GPU time, its GPU efficiency and its idle GPU time
        # (from its last known reading: idle at first, then busy at 80 %).
        row = self.b.json("usage", "--json", env=self.env)["rows"][0]
        self.assertGreater(row["sampled_gpu_seconds"], 0, row)
        self.assertGreaterEqual(row["idle_gpu_seconds"], 2, row)
        self.assertLess(row["idle_gpu_seconds"], row["sampled_gpu_seconds"], row)
        self.assertTrue(0 <= row["gpu_efficiency"] <= 0.8, row)
        table = self.b.run("usage", env=self.env)[1]
        self.assertIn("GPU EFF", table)
        self.assertIn("IDLE GPU-H", table)


class AdoptedRankTest(GpuUsageTest):
    """An agent that restarts (kill -9) re-adopts a running rank and samples its GPUs again."""

    def test_a_running_jobs_gpu_use_and_idle_time_are_reported(self):
        pass  # (the parent's test)

    def test_a_rank_adopted_by_a_restarted_agent_is_sampled_again(self):
        job = self.b.submit("--gpus", "A100:1", "--", "sleep 300", env=self.env)
        self.b.wait_status(job, "RUNNING", timeout=60, env=self.env)
        self.b.wait_until(lambda: (self.use(job) or {}).get("known"), timeout=30,
                          message="the job's GPU use")
        self.agent.kill()
        self.gpus(80, 0, apps="GPU-aaaa, 4242, 1100\n")  # only the new agent can see this
        self.agent = self.start_agent()
        self.b.wait_until(lambda: (self.use(job) or {}).get("p95_sm") == 80, timeout=60,
                          message="the re-adopted rank's GPU sampled again")
        shown = self.b.show(job, env=self.env)
        self.assertEqual((shown["status"], shown["attempt"]), ("RUNNING", 1))
        self.b.run("cancel", job, env=self.env)


class IdlePolicyTest(GpuUsageTest):
    """`berth server --idle-policy`: a job whose GPU stays idle is warned, then requeued; its busy
    neighbour on the same node is untouched."""
    SERVER_EXTRA = ["--idle-policy", "below=5,warn=30s,act=40s,action=requeue"]

    def test_a_running_jobs_gpu_use_and_idle_time_are_reported(self):
        pass  # (the parent's test, without a policy)

    def test_an_idle_job_is_warned_then_requeued_and_its_busy_neighbour_runs_on(self):
        # GPU 0 busy with a process, GPU 1 idle: the first job gets GPU 0 (lowest index), the
        # second GPU 1.
        self.gpus(90, 0, apps="GPU-aaaa, 4242, 1100\n")
        busy = self.b.submit("--gpus", "A100:1", "--", "sleep 300", env=self.env)
        self.b.wait_status(busy, "RUNNING", timeout=60, env=self.env)
        idle = self.b.submit("--gpus", "A100:1", "--", "sleep 300", env=self.env)
        self.b.wait_status(idle, "RUNNING", timeout=60, env=self.env)
        self.b.wait_until(
            lambda: any("idle GPUs" in e["reason"] and "will be requeued once idle for 40s" in
                        e["reason"] for e in self.b.show(idle, env=self.env)["events"]),
            timeout=90, message="the idle job's warning")
        self.b.wait_until(lambda: self.b.show(idle, env=self.env)["attempt"] >= 2 or
                          self.b.show(idle, env=self.env)["status"] == "PENDING", timeout=90,
                          message="the idle job to be requeued")
        reasons = [e["reason"] for e in self.b.show(idle, env=self.env)["events"]]
        self.assertTrue(any("below 5% SM" in r and "; requeued (--idle-policy below=5,warn=30s,"
                            "act=40s,action=requeue" in r for r in reasons), reasons)
        shown = self.b.show(busy, env=self.env)
        self.assertEqual(shown["status"], "RUNNING")
        self.assertEqual(shown["attempt"], 1)
        self.assertFalse(any("idle GPUs" in e["reason"] for e in shown["events"]))


class IdlePolicyFlagsTest(BerthTestCase):
    """Teams' and pools' idle policies on the server's command line: a bad one is refused, naming it."""

    def test_a_bad_team_or_pool_policy_is_refused_naming_it(self):
        import subprocess
        from harness import BERTH_BIN
        for flag, value, said in (
                ("--pool-idle-policy", "gpu=action=nap", "--pool-idle-policy gpu: "),
                ("--team-idle-policy", "=none", "--team-idle-policy: expected NAME=POLICY"),
                ("--team-idle-policy", "vision=warn=1s", "--team-idle-policy vision: ")):
            out = subprocess.run([BERTH_BIN, "server", "--listen", "127.0.0.1:0", "--state-dir",
                                  self.path("state"), "--idle-policy", "action=requeue", flag, value],
                                 capture_output=True, text=True, timeout=30, env=self.b.env)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn(said, out.stderr)


if __name__ == "__main__":
    unittest.main()

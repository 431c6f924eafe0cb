"""Fractions of a GPU enforced with MPS (docs/gpus.md "Fractions"), end to end.

An agent declares T4s and finds `nvidia-cuda-mps-control` on its PATH: a stand-in that behaves as
NVIDIA's does for what the agent asks of it (`-f`: the control daemon in the foreground, which
opens its control pipe and waits; a client that reads "quit" on stdin and shuts the daemon down).
It records its environment and the commands it got, so the tests see what a real node would.
"""

import os
import signal
import unittest

from harness import BerthTestCase

STAND_IN = r"""#!/bin/sh
if [ "$1" = "-f" ]; then
  env > "$CUDA_MPS_LOG_DIRECTORY/daemon-env"
  echo $$ > "$CUDA_MPS_PIPE_DIRECTORY/pid"
  : > "$CUDA_MPS_PIPE_DIRECTORY/control"
  exec sleep 300
fi
read cmd
echo "$cmd" >> "$CUDA_MPS_LOG_DIRECTORY/commands"
[ "$cmd" = quit ] && kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/pid")"
exit 0
"""

# A job that says its MPS variables; with a barrier directory, it waits there for a second job.
PROBE = ("import os, sys, time\n"
         "d = sys.argv[1] if len(sys.argv) > 1 else ''\n"
         "if d:\n"
         "    open(os.path.join(d, os.environ['BERTH_JOB_ID']), 'w').close()\n"
         "    t = time.time()\n"
         "    while len(os.listdir(d)) < 2 and time.time() - t < 60: time.sleep(0.05)\n"
         "    print('together', len(os.listdir(d)))\n"
         "for k in ('CUDA_MPS_PIPE_DIRECTORY', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE',\n"
         "          'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'):\n"
         "    print(k, os.environ.get(k, '-'))\n")


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


class GpuFractionsTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server()
        self.env = {"BERTH_SERVER": self.server.url}
        bindir = self.path("bin")
        os.makedirs(bindir)
        control = os.path.join(bindir, "nvidia-cuda-mps-control")
        with open(control, "w") as f:
            f.write(STAND_IN)
        os.chmod(control, 0o755)
        self.probe = self.path("probe.py")
        with open(self.probe, "w") as f:
            f.write(PROBE)
        self.state = self.path("agent-mps")
        b.start_agent(self.server.url, name="mps", gpus="T4:2", state_dir=self.state,
                      extra=["--cpus", "4", "--memory", "4"],
                      env={"PATH": bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")})
        b.wait_nodes_up(["mps"], env=self.env)

    def tearDown(self):
        for device in range(2):
            pid = self.daemon_pid(device)
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        super().tearDown()

    def device_dir(self, device):
        return os.path.join(self.state, "mps", str(device))

    def daemon_pid(self, device):
        try:
            with open(os.path.join(self.device_dir(device), "pipe", "pid")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def logs(self, job):
        return self.b.run("logs", job, "--no-follow", env=self.env)[1]

    def test_the_node_says_it_enforces_fractions(self):
        node = self.b.nodes(env=self.env)[0]
        self.assertEqual(node["sharing"], "mps")
        out = self.b.run("nodes", "mps", env=self.env)[1]
        self.assertIn("Sharing:   mps", out)

    def test_two_half_gpu_jobs_share_a_gpu_under_one_daemon_with_their_limits(self):
        b = self.b
        barrier = self.path("barrier")
        os.makedirs(barrier)
        jobs = [b.submit("--gpus", "T4:0.5", "--", f"python3 {self.probe} {barrier}", env=self.env)
                for _ in range(2)]
        pipes = set()
        for job in jobs:
            done = b.wait_status(job, "SUCCEEDED", "FAILED", timeout=90, env=self.env)
            out = self.logs(job)
            self.assertEqual(done["status"], "SUCCEEDED", out)
            self.assertIn("together 2", out)
            self.assertIn("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 50", out)
            self.assertIn("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=7680M", out)  # half a T4's 15360 MiB
            pipes.update(line.split()[1] for line in out.splitlines()
                         if line.startswith("CUDA_MPS_PIPE_DIRECTORY"))
        # One daemon, the agent's, for the one device both shares are of; it sees only that GPU.
        self.assertEqual(len(pipes), 1, pipes)
        pipe = pipes.pop()
        self.assertTrue(pipe.startswith(os.path.join(self.state, "mps") + "/"), pipe)
        device_dir = os.path.dirname(pipe)
        with open(os.path.join(device_dir, "log", "daemon-env")) as f:
            env = f.read()
        device = int(os.path.basename(device_dir))
        self.assertIn(f"CUDA_VISIBLE_DEVICES={device}\n", env)
        # Both ended: the daemon is told to quit, and goes.
        pid = self.daemon_pid(device)
        self.assertIsNotNone(pid)
        b.wait_until(lambda: not alive(pid), 30, message="the MPS daemon to quit")
        with open(os.path.join(device_dir, "log", "commands")) as f:
            self.assertEqual(f.read(), "quit\n")

    def test_a_daemon_that_dies_fails_only_the_jobs_on_its_gpu_and_the_next_gets_a_new_one(self):
        b = self.b
        shared = b.submit("--gpus", "T4:0.5", "--", "sleep 300", env=self.env)
        whole = b.submit("--gpus", "T4:1", "--", "sleep 300", env=self.env)
        for job in (shared, whole):
            b.wait_status(job, "RUNNING", timeout=60, env=self.env)
        device = next(d for d in range(2) if self.daemon_pid(d))
        first = self.daemon_pid(device)
        os.kill(first, signal.SIGKILL)
        done = b.wait_status(shared, "FAILED", "SUCCEEDED", timeout=60, env=self.env)
        self.assertEqual(done["status"], "FAILED")
        self.assertIn("MPS daemon", done["reason"])
        self.assertIn("died", done["reason"])
        self.assertEqual(b.status(whole, env=self.env), "RUNNING")  # the other GPU's job runs on
        job = b.submit("--gpus", "T4:0.5", "--", f"python3 {self.probe}", env=self.env)
        done = b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)
        self.assertEqual(done["status"], "SUCCEEDED", self.logs(job))
        self.assertIn("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 50", self.logs(job))
        self.assertNotEqual(self.daemon_pid(device), first)
        b.run("cancel", whole, env=self.env)


class NoMpsTest(BerthTestCase):

    def test_a_node_without_mps_says_so_and_runs_fractions_unenforced(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": server.url}
        b.start_agent(server.url, name="plain", gpus="T4:1", state_dir=self.path("agent-plain"),
                      extra=["--cpus", "2", "--memory", "2"], env={"PATH": "/usr/bin:/bin"})
        b.wait_nodes_up(["plain"], env=env)
        self.assertEqual(b.nodes(env=env)[0]["sharing"], "none")
        probe = self.path("probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        job = b.submit("--gpus", "T4:0.5", "--", f"python3 {probe}", env=env)
        done = b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=env)
        out = b.run("logs", job, "--no-follow", env=env)[1]
        self.assertEqual(done["status"], "SUCCEEDED", out)
        self.assertIn("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE -", out)


if __name__ == "__main__":
    unittest.main()

"""The local cluster: no set-up beyond the build.

A new user with no server configured runs `berth queue`: berth starts a local cluster under BERTH_HOME,
says so on stderr, and answers. `local status` describes it; `local up` does not start a second one;
`local down` stops everything it started, jobs included, and a later `local up` brings the cluster back
on the same address with its history.
"""

import os
import signal
import unittest

from harness import BerthTestCase, alive, pids_with_env


def file_table_size(pid):
    """The size of a process's file-descriptor table (FDSize in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("FDSize:"))


def open_file_limit(pid):
    """A process's soft limit on open files (/proc/PID/limits)."""
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    soft = line.split()[3]
    return 1 << 62 if soft == "unlimited" else int(soft)


class LocalAutostartTest(BerthTestCase):

    def berth_processes(self):
        """Live processes of this BERTH_HOME: daemons (by command line) and everything they started."""
        pids = set(self.b.tagged_pids())
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if self.b.home.encode() in cmdline and alive(int(name)):
                pids.add(int(name))
        return sorted(pids)

    def test_first_command_starts_the_local_cluster(self):
        b = self.b
        self.assertFalse(os.path.exists(b.home))
        rc, out, err = b.run("queue")
        self.assertEqual(rc, 0, err)
        self.assertIn("starting one under " + b.home, err)
        self.assertIn("local cluster up at http://127.0.0.1:", err)
        self.assertEqual(out.split(), ["ID", "NAME", "USER", "SUBMITTED", "STARTED", "STATUS", "GPUS", "NODE", "REASON"])
        b.local_started = True

        rc, out, err = b.run("local", "status", "--json")
        status = b.json("local", "status", "--json")
        self.assertRegex(status["server"], r"^http://127\.0\.0\.1:\d+$")
        self.assertEqual(status["nodes"], ["local-0"])
        # The next command finds it, and says nothing about starting anything.
        rc, out, err = b.run("nodes", "--json")
        self.assertEqual(err, "")
        b.wait_nodes_up(["local-0"])
        # `local up` does not start a second cluster.
        rc, out, err = b.run("local", "up")
        self.assertIn("already running at " + status["server"], err)
        self.assertEqual(b.json("local", "status", "--json")["server"], status["server"])

        # The server grew its file table at start (HttpServerOptions::reserve_fds): no agent or user
        # that connects later waits for the kernel to double it (docs/design.md).
        with open(os.path.join(b.home, "server", "server.pid")) as f:
            server_pid = int(f.read().strip())
        self.assertGreaterEqual(file_table_size(server_pid), min(65536, open_file_limit(server_pid)))

        # Jobs run on it.
        rc, out, err = b.run("exec", "--", "echo local hello")
        self.assertEqual(out, "local hello\n")
        running = b.submit("--", "sleep 1000")
        b.wait_status(running, "RUNNING")
        b.wait_until(lambda: b.job_pids(running), message="the job's processes")
        self.assertTrue(self.berth_processes())

        # What podman leaves mounted below the store (c/storage bind-mounts its overlay dir onto
        # itself, as root) goes with the cluster: a leftover mount keeps `rm -rf` from BERTH_HOME.
        overlay = os.path.join(b.home, "agents", "local-0", "containers", "0", "storage", "overlay")
        if os.geteuid() == 0:
            os.makedirs(overlay, exist_ok=True)
            __import__("subprocess").run(["mount", "--bind", overlay, overlay], check=True)
            self.addCleanup(__import__("subprocess").run, ["umount", "-l", overlay], check=False,
                            stderr=__import__("subprocess").DEVNULL)

        # `local down` stops the server, the agents, the supervisors and the jobs, and says so as
        # it goes (it was silent for 10 s); the jobs it stops end CANCELLED, "local cluster stopped".
        rc, out, err = b.run("local", "down")
        self.assertIn("stopped", out)
        self.assertIn("Cancelled 1 active job(s) (\"local cluster stopped\").\n", out)
        self.assertIn("Stopping 1 node agent(s)...\n", out)
        self.assertIn("Stopping the server...\n", out)
        if os.geteuid() == 0:
            with open("/proc/self/mountinfo") as f:
                self.assertNotIn(" " + overlay + " ", f.read())
            self.assertIn("Unmounted 1 mount(s) podman left below " + b.home, out)
        self.assertEqual(self.berth_processes(), [], "processes left after `berth local down`")
        rc, out, _ = b.run("local", "status", "--json", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIsNone(__import__("json").loads(out)["server"])

        # `local up` brings it back on the same address, with its history; the stopped job is over.
        b.run("local", "up")
        self.assertEqual(b.json("local", "status", "--json")["server"], status["server"])
        job = b.show(running)
        self.assertEqual(job["status"], "CANCELLED")
        self.assertRegex(job["reason"], r"^cancelled by \S+: local cluster stopped$")
        self.assertEqual([j["id"] for j in b.queue()], [running, 1])

    def test_several_nodes_and_clusters_side_by_side(self):
        b = self.b
        status = b.local_up("V100:2", 2)
        self.assertEqual(status["nodes"], ["local-0", "local-1"])
        nodes = b.nodes()
        self.assertEqual([(n["name"], n["state"]) for n in nodes], [("local-0", "UP"), ("local-1", "UP")])
        self.assertEqual([n["capacity"]["gpus"] for n in nodes], [{"V100": 2}, {"V100": 2}])
        # A second BERTH_HOME is a second, independent cluster.
        other_home = self.path("other-home")
        other = {"BERTH_HOME": other_home}
        rc, out, err = b.run("local", "up", "--gpus", "A100:1", env=other)
        self.assertEqual(rc, 0, err)
        try:
            other_status = b.json("local", "status", "--json", env=other)
            self.assertNotEqual(other_status["server"], status["server"])
            self.assertEqual(b.nodes(env=other)[0]["capacity"]["gpus"], {"A100": 1})
            job = b.submit("--gpus", "A100:1", "--", "true", env=other)
            b.wait_status(job, "SUCCEEDED", env=other)
            self.assertEqual(b.queue(), [])
        finally:
            b.run("local", "down", env=other)
        self.assertEqual(pids_with_env("BERTH_HOME", other_home), [])
        self.assertEqual(b.nodes()[0]["state"], "UP")  # the first one is untouched

    def test_restart_after_the_local_server_died(self):
        # The local server crashed; its agent lives on. The next command starts a fresh cluster (saying
        # so), which works, and `local down` then stops everything, the old agent included.
        b = self.b
        b.local_up(gpus="V100:2")
        old_agent = b.agent_pid("local-0")
        with open(os.path.join(b.home, "server", "server.pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        rc, out, err = b.run("queue")
        self.assertEqual(rc, 0, err)
        self.assertIn("starting one", err)
        b.wait_nodes_up(["local-0"])
        self.assertEqual(b.run("exec", "--", "echo after the crash")[1], "after the crash\n")
        b.run("local", "down")
        self.assertFalse(alive(old_agent), "the old agent survived")
        self.assertEqual(self.berth_processes(), [])

    def test_local_down_without_a_cluster(self):
        rc, _, err = self.b.run("local", "down", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("no local cluster", err)
        self.assertFalse(self.berth_processes())


if __name__ == "__main__":
    unittest.main()

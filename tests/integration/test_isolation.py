"""Jobs contained on their node (docs/security.md "Isolation"), on the real kernel of this machine.

As root, on a host whose cgroups the agent can use (these machines: v1 controllers beside an empty
cgroup2 hierarchy), each job rank runs in a cgroup of its own under the agent's: a memory hog ends
FAILED for out of memory while its neighbour succeeds; busy loops get no more CPU than the job asked
for; a fork bomb stops at the pids limit; a job opens only its own GPUs' device files (mknod'ed here,
NVIDIA major 195: an allowed open fails ENXIO, a denied one EPERM); a cancel kills a grandchild that
left the job's session and environment.
"""

import json
import os
import re
import signal
import time
import unittest

from harness import BerthTestCase, http, wait_until


def cgroup_host_usable():
    if os.geteuid() != 0:
        return "isolation needs root (the agent makes cgroups)"
    if not os.access("/sys/fs/cgroup/memory", os.W_OK) and not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "no writable cgroup hierarchy here"
    return None


@unittest.skipIf(cgroup_host_usable() is not None, cgroup_host_usable() or "")
class IsolationTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server()
        self.devdir = self.path("dev")
        os.makedirs(self.devdir)
        for i in range(2):
            os.mknod(os.path.join(self.devdir, f"nvidia{i}"), 0o666 | 0o020000, os.makedev(195, i))
        self.agent = self.start_agent()
        self.env = {"BERTH_SERVER": self.server.url}
        b.wait_nodes_up(["iso"], env=self.env)

    def test_a_job_that_asks_for_no_memory_is_told_its_limit(self):
        b = self.b
        job = b.submit("--", "true", env=self.env)
        b.wait_status(job, "SUCCEEDED", timeout=60, env=self.env)
        self.assertEqual(b.show(job, env=self.env)["memory_default"], {"iso": 4})  # the node's memory
        _, out, _ = b.run("show", job, env=self.env)
        self.assertIn("memory:     none asked: limited to 4 GiB on iso (its default for such jobs)", out)

    def test_the_node_says_how_it_isolates_jobs(self):
        node = self.b.nodes(env=self.env)[0]
        self.assertIn(node["isolation"], ("v1", "v2"))
        self.assertEqual(node["job_memory_default"], 4)
        _, out, _ = self.b.run("nodes", env=self.env)
        self.assertIn("ISOLATION", out)
        self.assertIn(node["isolation"], out)
        status, metrics, _ = http("GET", self.server.url + "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(f'berth_node_isolation{{isolation="{node["isolation"]}"}} 1', metrics)

    def start_agent(self):
        return self.b.start_agent(self.server.url, name="iso", gpus="V100:2",
                                  state_dir=self.path("agent-iso"),
                                  extra=["--cpus", "4", "--memory", "4", "--job-pids-max", "64",
                                         "--gpu-device-dir", self.devdir, "--require-isolation"])

    def gpu_probe(self):
        """A job script that tries to open both GPUs and prints what each open did, and its GPU ids."""
        return ("python3 -c \"\nimport os, errno\nfor i in range(2):\n    try:\n"
                "        os.close(os.open('%s/nvidia%%d' %% i, os.O_RDWR))\n        r = 'opened'\n"
                "    except OSError as e:\n        r = errno.errorcode[e.errno]\n    print('gpu', i, r)\n"
                "print('ids', os.environ['BERTH_GPU_IDS'], os.environ['CUDA_VISIBLE_DEVICES'])\n\"") % self.devdir

    def logs(self, job):
        return self.b.run("logs", job, "--no-follow", env=self.env)[1]

    def test_a_memory_hog_fails_for_out_of_memory_and_its_neighbour_succeeds(self):
        b = self.b
        neighbour = b.submit("--memory", "0.25", "--", "sleep 2; echo neighbour-done", env=self.env)
        hog = b.submit("--memory", "0.125", "--",
                       "python3 -c \"s = 'x' * (400 << 20); print('survived')\"", env=self.env)
        job = b.wait_status(hog, "FAILED", "SUCCEEDED", timeout=60, env=self.env)
        self.assertEqual(job["status"], "FAILED", job)
        self.assertTrue(job["reason"].startswith("out of memory: rank 0 on iso reached its limit of 128 MiB "
                                                 "(resources.memory)"), job["reason"])
        self.assertEqual(job["reason_code"], "oom")
        self.assertEqual(job["exit_code"], 137)
        self.assertIn("berth_out_of_memory_total 1", http("GET", self.server.url + "/metrics")[1])
        _, out, _ = b.run("show", hog, env=self.env)
        self.assertIn("out of memory", out)
        self.assertNotIn("survived", self.logs(hog))
        self.assertEqual(b.wait_status(neighbour, "SUCCEEDED", "FAILED", timeout=60, env=self.env)["status"],
                         "SUCCEEDED")

    def test_busy_loops_get_the_cpu_they_asked_for(self):
        b = self.b
        # Two busy processes for 3 s of wall time under cpus: 0.5; the job adds up their CPU time.
        spin = ("python3 -c \"\nimport os, time\npids = []\nfor _ in range(2):\n    p = os.fork()\n"
                "    if p == 0:\n        end = time.time() + 3\n        while time.time() < end: pass\n"
                "        os._exit(0)\n    pids.append(p)\nfor p in pids: os.waitpid(p, 0)\n"
                "t = os.times()\nprint('cpu-s=%.3f' % (t.children_user + t.children_system))\n\"")
        job = b.submit("--cpus", "0.5", "--", spin, env=self.env)
        b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)
        m = re.search(r"cpu-s=([0-9.]+)", self.logs(job))
        self.assertIsNotNone(m, self.logs(job))
        cpu_seconds = float(m.group(1))
        print(f"cpu-seconds in 3 s under cpus: 0.5: {cpu_seconds:.2f}")
        # 3 s of wall time at half a CPU is 1.5 s; unlimited, two loops would take about 6.
        self.assertLess(cpu_seconds, 0.55 * 3 + 0.4, f"{cpu_seconds:.2f} CPU-seconds in 3 s")
        self.assertGreater(cpu_seconds, 0.1)  # the loops ran (how much: what else runs)

    def test_jobs_weigh_the_cpus_they_asked_for_and_the_node_its_cpus(self):
        # A contended machine shares CPU time by weight: a job's cgroup weighs its request, and the
        # agent's cgroup (all its jobs) the node's 4 CPUs, not one process's worth.
        b = self.b
        probe = ("python3 -c \"\nimport os\nfor line in open('/proc/self/cgroup'):\n"
                 "    n, ctl, path = line.strip().split(':', 2)\n"
                 "    if 'cpu' in ctl.split(',') or (n == '0' and os.path.exists('/sys/fs/cgroup/cgroup.controllers')):\n"
                 "        base = '/sys/fs/cgroup/cpu' if 'cpu' in ctl.split(',') else '/sys/fs/cgroup'\n"
                 "        f = 'cpu.shares' if 'cpu' in ctl.split(',') else 'cpu.weight'\n"
                 "        d = base + path\n"
                 "        print(f, open(d + '/' + f).read().strip(), open(os.path.dirname(d) + '/' + f).read().strip())\n\"")
        job = b.submit("--cpus", "0.5", "--", probe, env=self.env)
        self.assertEqual(b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)["status"], "SUCCEEDED",
                         self.logs(job))
        out = self.logs(job)
        if "cpu.shares" in out:
            self.assertIn("cpu.shares 512 4096", out)  # v1: 1024 a CPU
        else:
            self.assertIn("cpu.weight 50 400", out)  # v2: 100 a CPU

    def test_show_says_what_the_job_used(self):
        b = self.b
        # 200 MiB held, and a second of busy wall time; the job prints the CPU time it got (how much
        # depends on what else the machine runs).
        job = b.submit("--memory", "0.5", "--cpus", "1", "--",
                       "python3 -c \"\nimport os, time\ns = 'x' * (200 << 20)\nt = time.time()\n"
                       "while time.time() - t < 1: pass\nu = os.times()\n"
                       "print('self-cpu=%.3f' % (u.user + u.system))\n\"", env=self.env)
        b.wait_status(job, "SUCCEEDED", timeout=60, env=self.env)
        own = float(re.search(r"self-cpu=([0-9.]+)", self.logs(job)).group(1))
        attempt = b.show(job, env=self.env)["attempts"][-1]
        self.assertGreaterEqual(attempt["peak_memory_bytes"], 200 << 20)
        self.assertLess(attempt["peak_memory_bytes"], 512 << 20)
        # What the supervisor counted: the job's own CPU time, plus its bash's (a little).
        self.assertGreaterEqual(attempt["cpu_seconds"], own - 0.02)
        self.assertLess(attempt["cpu_seconds"], own + 0.5)
        self.assertGreater(attempt["memory_efficiency"], 0.38)
        self.assertGreater(attempt["cpu_efficiency"], 0)
        _, out, _ = b.run("show", job, env=self.env)
        self.assertEqual(b.show(job, env=self.env)["memory_default"], {})  # it asked for memory
        self.assertRegex(out, r"used: +peak memory \d+ MiB of 0.5 GiB asked \(\d+%\), CPU time [0-9.]+ s, [0-9.]+ of 1 CPUs busy on average \(\d+%\)")
        # berth usage: the user's efficiency over the jobs that ended, as the attempt's (one job).
        _, out, _ = b.run("usage", "--json", env=self.env)
        rows = json.loads(out)["rows"]
        self.assertEqual(len(rows), 1, rows)
        row = rows[0]
        self.assertAlmostEqual(row["used_cpu_seconds"], attempt["cpu_seconds"], delta=0.01)
        self.assertAlmostEqual(row["memory_efficiency"], attempt["memory_efficiency"], delta=0.01)
        self.assertAlmostEqual(row["cpu_efficiency"], attempt["cpu_efficiency"], delta=0.01)
        _, out, _ = b.run("usage", env=self.env)
        self.assertRegex(out, r"CPU EFF +MEM EFF")
        self.assertRegex(out, r" \d+% +\d+% +1 ")

    def test_a_fork_bomb_stops_at_the_pids_limit(self):
        b = self.b
        bomb = ("python3 -c \"\nimport os, time\nn = 0\ntry:\n    while n < 1000:\n"
                "        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\n"
                "except OSError as e:\n    print('forks', n, e.errno)\n\"")
        job = b.submit("--", bomb, env=self.env)
        b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)
        m = re.search(r"forks (\d+) (\d+)", self.logs(job))
        self.assertIsNotNone(m, self.logs(job))
        self.assertLess(int(m.group(1)), 64)
        self.assertEqual(int(m.group(2)), 11)  # EAGAIN
        self.assertEqual(b.nodes(env=self.env)[0]["name"], "iso")  # the node still answers

    def test_a_job_opens_only_its_own_gpus(self):
        b = self.b
        job = b.submit("--gpus", "V100:1", "--", self.gpu_probe(), env=self.env)
        b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)
        out = self.logs(job)
        m = re.search(r"ids (\d) (\S+)", out)
        self.assertIsNotNone(m, out)
        mine = int(m.group(1))
        self.assertEqual(m.group(2), "0")  # renumbered: CUDA sees one device, 0
        self.assertIn(f"gpu {mine} ENXIO", out)
        self.assertIn(f"gpu {1 - mine} EPERM", out)

    def test_jobs_sharing_a_gpu_fractionally_both_open_it(self):
        b = self.b
        whole = b.submit("--gpus", "V100:1", "--", "sleep 600", env=self.env)
        b.wait_status(whole, "RUNNING", env=self.env)
        halves = [b.submit("--gpus", "V100:0.5", "--", self.gpu_probe() + "; sleep 1", env=self.env)
                  for _ in range(2)]
        shared = set()
        for job in halves:
            self.assertEqual(b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)["status"],
                             "SUCCEEDED")
            out = self.logs(job)
            mine = int(re.search(r"ids (\d) ", out).group(1))
            shared.add(mine)
            self.assertIn(f"gpu {mine} ENXIO", out)
            self.assertIn(f"gpu {1 - mine} EPERM", out)
        self.assertEqual(len(shared), 1)  # the one device the whole-GPU job left
        b.run("cancel", whole, env=self.env)

    def test_an_agent_killed_and_restarted_keeps_its_jobs_and_their_limits(self):
        b = self.b
        started, go = self.path("started"), self.path("go")
        job = b.submit("--memory", "0.125", "--",
                       f"touch {started}; while [ ! -e {go} ]; do sleep 0.1; done; "
                       "python3 -c \"s = 'x' * (400 << 20); print('survived')\"", env=self.env)
        # A pinned job keeps its CPU through the restart: the next pinned one gets another.
        probe = f"grep Cpus_allowed_list /proc/self/status; while [ ! -e {go} ]; do sleep 0.1; done"
        pinned = b.submit("--cpus", "1", "--cpu-binding", "cores", "--", probe, env=self.env)
        b.wait_status(job, "RUNNING", env=self.env)
        wait_until(lambda: os.path.exists(started), 30)
        wait_until(lambda: "Cpus_allowed_list" in self.logs(pinned), 30)
        self.agent.kill(signal.SIGKILL)
        self.agent = self.start_agent()
        b.wait_nodes_up(["iso"], env=self.env)
        self.assertEqual(b.status(job, env=self.env), "RUNNING")
        if len(os.sched_getaffinity(0)) >= 2:
            after = b.submit("--cpus", "1", "--cpu-binding", "cores", "--", probe, env=self.env)
            wait_until(lambda: "Cpus_allowed_list" in self.logs(after), 30,
                       message="the job pinned after the restart printed its CPUs")
            cpus = [re.search(r"Cpus_allowed_list:\s*(\S+)", self.logs(j)).group(1) for j in (pinned, after)]
            self.assertNotEqual(cpus[0], cpus[1], "the restarted agent gave a pinned job's CPU away")
        open(go, "w").close()
        done = b.wait_status(job, "FAILED", "SUCCEEDED", timeout=60, env=self.env)
        self.assertEqual(done["status"], "FAILED", done)
        self.assertIn("out of memory", done["reason"])

    def test_pinned_jobs_get_cpus_of_their_own(self):
        b = self.b
        cpus = os.sched_getaffinity(0)
        if len(cpus) < 2:
            self.skipTest("pinning two jobs apart needs two CPUs")
        probe = "grep Cpus_allowed_list /proc/self/status"
        # The two hold their CPUs until told to (a fixed sleep may end first on a slow machine).
        flag = self.path("release")
        hold = f"{probe}; while [ ! -e {flag} ]; do sleep 0.05; done"
        pinned = [b.submit("--cpus", "1", "--cpu-binding", "cores", "--", hold, env=self.env)
                  for _ in range(2)]
        got = {}
        for job in pinned:
            wait_until(lambda: "Cpus_allowed_list" in self.logs(job), timeout=30,
                       message=f"job {job} printed its CPUs")
            got[job] = re.search(r"Cpus_allowed_list:\s*(\S+)", self.logs(job)).group(1)
        print(f"pinned jobs' CPUs: {got}")
        self.assertEqual(len(set(got.values())), 2, got)
        for cpu in got.values():
            self.assertIn(int(cpu), cpus)  # one CPU each, of the node's
        # The agent offers 4 CPUs; two more pinned ones fit on a machine with 4, not on fewer:
        # the rank fails at launch, saying why, rather than share another's CPUs.
        third = b.submit("--cpus", "2", "--cpu-binding", "cores", "--", probe, env=self.env)
        done = b.wait_status(third, "SUCCEEDED", "FAILED", timeout=30, env=self.env)
        if len(cpus) >= 4:
            self.assertEqual(done["status"], "SUCCEEDED", done)
            mine = re.search(r"Cpus_allowed_list:\s*(\S+)", self.logs(third)).group(1)
            self.assertNotIn(got[pinned[0]], mine.replace("-", ",").split(","))
        else:
            self.assertEqual(done["status"], "FAILED", done)
            self.assertIn("resources.cpu_binding: cores: 2 CPU(s) asked", done["reason"])
        # Their CPUs are free again once they end.
        open(flag, "w").close()
        for job in pinned:
            b.wait_status(job, "SUCCEEDED", timeout=30, env=self.env)
        again = b.submit("--cpus", "2", "--cpu-binding", "cores", "--", probe, env=self.env)
        b.wait_status(again, "SUCCEEDED", timeout=30, env=self.env)
        self.assertRegex(self.logs(again), r"Cpus_allowed_list:\s*\d+[-,]\d+")
        _, _, err = b.run("exec", "-d", "--cpus", "1.5", "--cpu-binding", "cores", "--", "true",
                          env=self.env, check=False)
        self.assertIn("ask for a whole number of them in resources.cpus, not 1.5", err)

    def test_a_cancel_kills_a_grandchild_that_left_the_job(self):
        b = self.b
        marker = f"{time.time_ns() % 1000000}.25"
        job = b.submit("--", f"setsid env -i /bin/sleep {marker} & sleep 600", env=self.env)
        b.wait_status(job, "RUNNING", env=self.env)

        def sleepers():
            found = []
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            if f.read().split(b"\0")[:2] == [b"/bin/sleep", marker.encode()]:
                                found.append(pid)
                    except OSError:
                        pass
            return found

        wait_until(lambda: sleepers(), 30)
        b.run("cancel", job, env=self.env)
        b.wait_status(job, "CANCELLED", timeout=60, env=self.env)
        wait_until(lambda: not sleepers(), 30)


if __name__ == "__main__":
    unittest.main()

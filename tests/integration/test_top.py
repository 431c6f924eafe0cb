"""`berth top` in a real terminal (tmux, on a socket of its own): the nodes' GPU maps with a letter per
job and a legend naming the jobs, the queue with its bulk group as one row, live updates as jobs start,
and `q` quitting with the terminal restored. `--once` prints one frame for scripts.
"""

import shlex
import shutil
import subprocess
import time
import unittest

from harness import BERTH_BIN, SCALE, BerthTestCase


class TopTest(BerthTestCase):

    def setUp(self):
        if shutil.which("tmux") is None:
            raise unittest.SkipTest("tmux is needed (scripts/install-deps.sh installs it)")
        super().setUp()
        self.b.local_up("V100:4", 2, "--cpus", "16")
        self.socket = "berth-top-" + str(id(self))
        self.addCleanup(subprocess.run, ["tmux", "-L", self.socket, "kill-server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.socket, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "top").stdout

    def wait_screen(self, pred, message):
        deadline = time.time() + 30 * SCALE
        text = ""
        while time.time() < deadline:
            text = self.screen()
            if pred(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {message}; the screen:\n{text}")

    def test_live_gpu_maps_and_queue(self):
        b = self.b
        big = b.submit("-n", "big", "--gpus", "V100:2", "--", "sleep 300")
        b.wait_status(big, "RUNNING")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in b.env.items() if k.startswith("BERTH"))
        command = f"env {env} {shlex.quote(BERTH_BIN)} top --interval 0.3"
        started = self.tmux("new-session", "-d", "-s", "top", "-x", "120", "-y", "40", command)
        self.assertEqual(started.returncode, 0, started.stderr)

        text = self.wait_screen(lambda t: f"A={big} (" in t, "job A on the map")
        self.assertIn("nodes: 2 up, 0 draining, 0 down | GPUs: V100 2/8 used", text)
        lines = text.splitlines()
        maps = {line.split()[0]: line.split()[2] for line in lines if line.startswith("local-")}
        self.assertEqual(sorted(maps.values()), ["[....]", "[AA..]"], text)
        self.assertRegex(text, rf"\n{big}\s+big\s+\S+\s+RUNNING")

        # Live: a sweep starts and shows up without anything pressed, its group as one queue row.
        group = b.json("exec", "-d", "--json", "-n", "sweep", "--num-jobs", 8, "--gpus", "V100:1", "--",
                       "sleep 300")["group"]
        text = self.wait_screen(lambda t: "GPUs: V100 8/8 used" in t and f"group {group}" in t,
                                "the sweep on the maps")
        self.assertRegex(text, rf"group {group}\s+sweep\s+\S+\s+2 PENDING, ")
        maps = [line.split()[2] for line in text.splitlines() if line.startswith("local-")]
        self.assertTrue(all("." not in m for m in maps), maps)
        self.assertEqual(len(set("".join(maps)) - set("[]")), 7, maps)  # big's A, and six sweep jobs

        # q quits, and the session (whose only command was top) ends.
        self.tmux("send-keys", "-t", "top", "q")
        deadline = time.time() + 10 * SCALE
        while time.time() < deadline and self.tmux("has-session", "-t", "top").returncode == 0:
            time.sleep(0.1)
        self.assertNotEqual(self.tmux("has-session", "-t", "top").returncode, 0, "top did not quit")
        b.run("cancel", "--all")

    def test_once_prints_one_frame(self):
        _, out, _ = self.b.run("top", "--once")
        self.assertIn("nodes: 2 up, 0 draining, 0 down | GPUs: V100 0/8 used", out)
        self.assertNotIn("\x1b[", out)
        rc, _, err = self.b.run("top", "--interval", "0", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("--interval", err)

"""Progress of bulk submissions and `berth wait` (issue "Seeing the cluster"): `berth exec --num-jobs N`
without -d and `berth wait ID | --group G` show pending / running / succeeded / failed, the rate and the
time left, as a line redrawn in place on a terminal (a real pty here), as plain lines when not on one,
and as JSON lines with --json; the exit code says whether every job succeeded.
"""

import json
import os
import pty
import re
import select
import subprocess

from harness import BERTH_BIN, SCALE, BerthTestCase


class WaitTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.b.local_up("V100:4", 1, "--cpus", "64")
        # Rank 3 fails; the rest succeed.
        self.sweep = self.write("sweep.yaml", "name: sweep\nresources: {cpus: 1}\n"
                                              "run: |\n  sleep 0.2; test \"$BERTH_JOB_RANK\" != 3\n")

    def test_bulk_exec_waits_with_plain_lines_and_fails_if_a_job_failed(self):
        rc, out, err = self.b.run("exec", self.sweep, "--num-jobs", 6, check=False, timeout=120)
        self.assertEqual(rc, 1, out + err)
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^Submitted group (\d+): jobs")
        group = re.match(r"^Submitted group (\d+)", lines[0]).group(1)
        progress = lines[1:]
        self.assertTrue(progress, out)
        for line in progress:
            self.assertRegex(line, rf"^group {group}: \d+ pending, \d+ running, \d+ succeeded, \d+ failed "
                                   r"\| \d+/6 done, [\d.]+/s, ETA \S+$")
        self.assertNotIn("\r", out)
        self.assertIn("5 succeeded, 1 failed | 6/6 done", progress[-1])
        self.assertIn("1 of 6 did not succeed", err)

        # Waiting again on the ended group: one line, the same answer; JSON lines for scripts.
        rc, out, _ = self.b.run("wait", "--group", group, check=False)
        self.assertEqual(rc, 1)
        self.assertEqual(len(out.splitlines()), 1, out)
        rc, out, _ = self.b.run("wait", "--group", group, "--json", check=False)
        self.assertEqual(rc, 1)
        events = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(events[-1]["finished"], True)
        self.assertEqual((events[-1]["succeeded"], events[-1]["failed"], events[-1]["total"]), (5, 1, 6))

    def test_wait_for_jobs_by_id(self):
        ok = self.b.submit("--", "sleep 0.5")
        rc, out, _ = self.b.run("wait", ok, check=False, timeout=60)
        self.assertEqual(rc, 0, out)
        self.assertIn(f"job {ok}: 0 pending, 0 running, 1 succeeded, 0 failed | 1/1 done", out)
        bad = self.b.submit("--", "exit 3")
        rc, _, err = self.b.run("wait", ok, bad, check=False, timeout=60)
        self.assertEqual(rc, 1)
        self.assertIn("2 jobs: 1 of 2 did not succeed (1 failed, 0 cancelled)", err)
        rc, _, err = self.b.run("wait", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("give job ids or --group", err)
        # Waiting for one job that has not started: why it waits (or how far its image's pull got).
        # (`first` runs until the wait has said so: a fixed sleep may end first on a slow machine.)
        flag = self.path("release")
        first = self.b.submit("--", f"while [ ! -e {flag} ]; do sleep 0.05; done")
        after = self.b.submit("--after", f"ok:{first}", "--", "true")
        waiting = self.b.popen("wait", after)
        first_line = waiting.stdout.readline()
        open(flag, "w").close()
        rest, _ = waiting.communicate(timeout=60 * SCALE)
        self.assertEqual(waiting.returncode, 0, first_line + rest)
        lines = (first_line + rest).splitlines()
        self.assertRegex(lines[0], rf"^job {after}: 1 pending, .* \| .*{first}")
        self.assertNotIn("|", lines[-1].split("ETA")[1])  # ended: no reason
        rc, out, _ = self.b.run("wait", after, "--json", check=False, timeout=60)
        self.assertIsNone(json.loads(out.splitlines()[-1])["reason"])

    def test_on_a_terminal_the_line_is_redrawn_in_place(self):
        master, slave = pty.openpty()
        proc = subprocess.Popen([BERTH_BIN, "exec", self.sweep, "--num-jobs", "8"], env=self.b.env,
                                cwd=self.b.tmp, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        os.close(slave)
        out = b""
        while True:
            ready, _, _ = select.select([master], [], [], 60 * SCALE)
            self.assertTrue(ready, out)
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the pty closed: the command ended
                break
            if not chunk:
                break
            out += chunk
        os.close(master)
        self.assertEqual(proc.wait(timeout=30), 1)
        text = out.decode()
        redraws = text.count("\r\x1b[K")
        self.assertGreaterEqual(redraws, 2, text)
        self.assertIn("7 succeeded, 1 failed | 8/8 done", text.split("\r\x1b[K")[-1])

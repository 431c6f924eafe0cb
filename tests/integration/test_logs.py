"""Reading a job's output with `berth logs`.

A user follows a running job and sees its lines as they come, and `logs` returns when the job ends; with
--no-follow they get what is there at once. The output stays available from the server after the job
ended, even once the node's agent is gone, and it is exactly what the job wrote, however large.
"""

import os
import queue
import signal
import threading
import time
import unittest

from harness import SCALE, BerthTestCase, alive, http_unix

# Prints a line, waits for the test to say "go on" (a file), prints another, and so on.
STEPPED_SCRIPT = r"""
for i in 1 2 3; do
  echo "line $i"
  while [ ! -e "$STEP_DIR/step-$i" ]; do sleep 0.05; done
done
echo "done"
"""


class LineReader:
    """Reads a pipe's lines on a thread, so that the test can wait for each with a timeout."""

    def __init__(self, pipe):
        self.lines = queue.Queue()
        self.thread = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self.thread.start()

    def _pump(self, pipe):
        for line in pipe:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout=30):
        try:
            return self.lines.get(timeout=timeout * SCALE)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout * SCALE:.0f}s")


class LogsTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.b.local_up(gpus="V100:4")

    def test_follow_a_running_job(self):
        b = self.b
        script = self.write("stepped.sh", STEPPED_SCRIPT)
        job = b.submit("--env", f"STEP_DIR={b.tmp}", "--", "bash", script)
        b.wait_status(job, "RUNNING")
        follower = b.popen("logs", job)
        reader = LineReader(follower.stdout)
        # Each line shows up while the job is still running, before the next one is even written.
        for i in (1, 2, 3):
            self.assertEqual(reader.next(), f"line {i}\n")
            self.assertIsNone(follower.poll(), "logs returned while the job still runs")
            self.assertIn(b.status(job), ("RUNNING",))
            self.write(f"step-{i}", "")
        self.assertEqual(reader.next(), "done\n")
        # The job ends, and so does `logs`, successfully.
        self.assertIsNone(reader.next())
        self.assertEqual(follower.wait(timeout=30 * SCALE), 0, follower.stderr.read())
        self.assertEqual(b.status(job), "SUCCEEDED")

    def test_follow_a_job_that_has_not_started_yet(self):
        # `logs` on a queued job waits for it to start, then follows it to its end.
        b = self.b
        blocker = b.submit("--gpus", "V100:4", "--", f"while [ ! -e {b.tmp}/release ]; do sleep 0.05; done")
        b.wait_status(blocker, "RUNNING")
        job = b.submit("--gpus", "V100:1", "--", "echo started; echo finished")
        follower = b.popen("logs", job)
        reader = LineReader(follower.stdout)
        time.sleep(0.5)  # give `logs` time to wrongly give up; it must still be waiting
        self.assertIsNone(follower.poll(), follower.stderr.read() if follower.poll() is not None else "")
        self.assertEqual(b.status(job), "PENDING")
        self.write("release", "")
        self.assertEqual(reader.next(), "started\n")
        self.assertEqual(reader.next(), "finished\n")
        self.assertIsNone(reader.next())
        self.assertEqual(follower.wait(timeout=30 * SCALE), 0)

    def test_follow_ends_soon_after_a_cancel(self):
        b = self.b
        job = b.submit("--", "echo started; sleep 1000")
        b.wait_status(job, "RUNNING")
        follower = b.popen("logs", job)
        self.assertEqual(follower.stdout.readline(), "started\n")
        started = time.monotonic()
        b.run("cancel", job)
        # Followed to its end: the job's outcome is the exit status (a cancelled job has no code: 1).
        self.assertEqual(follower.wait(timeout=30 * SCALE), 1)
        self.assertIn(f"berth: job {job} CANCELLED", follower.stderr.read())
        self.assertLess(time.monotonic() - started, 10 * SCALE, "`logs` kept waiting after the job was gone")

    def test_follow_moves_on_to_the_next_attempt_after_a_requeue(self):
        """`berth logs -f` follows a requeued job into its next attempt (a follower pinned to the old
        attempt used to ask for it again and again, answered at once each time)."""
        b = self.b
        job = b.submit("--", 'echo "attempt $BERTH_ATTEMPT"; sleep 1000')
        b.wait_status(job, "RUNNING")
        follower = b.popen("logs", job)
        reader = LineReader(follower.stdout)
        self.assertEqual(reader.next(), "attempt 1\n")
        b.run("requeue", job)
        self.assertEqual(reader.next(timeout=60), "attempt 2\n")
        b.run("cancel", job)
        self.assertEqual(follower.wait(timeout=30 * SCALE), 1)
        self.assertIn(f"berth: job {job} restarted (attempt 2)", follower.stderr.read())

    def test_no_follow_prints_what_is_there(self):
        b = self.b
        script = self.write("stepped.sh", STEPPED_SCRIPT)
        job = b.submit("--env", f"STEP_DIR={b.tmp}", "--", "bash", script)
        b.wait_until(lambda: b.run("logs", job, "--no-follow")[1] == "line 1\n", message="the first line")
        started = time.monotonic()
        rc, out, _ = b.run("logs", job, "--no-follow")
        self.assertEqual((rc, out), (0, "line 1\n"))
        self.assertLess(time.monotonic() - started, 10 * SCALE, "--no-follow waited for more output")
        for i in (1, 2, 3):
            self.write(f"step-{i}", "")
        b.wait_status(job, "SUCCEEDED")
        rc, out, _ = b.run("logs", job, "--no-follow")
        self.assertEqual(out, "line 1\nline 2\nline 3\ndone\n")

    def test_a_long_poll_of_a_silent_job_is_answered_at_its_deadline(self):
        # A follower's request waits at most wait_ms for output. For a job that prints nothing, the
        # deadline answers it, empty (the server forgets its waiter off the I/O threads), and the
        # next poll is answered the same way.
        b = self.b
        job = b.submit("--", "sleep", "600")
        b.wait_status(job, "RUNNING")
        sock = os.path.join(b.home, "server", "berth.sock")
        for _ in range(3):
            started = time.monotonic()
            status, body = http_unix("GET", sock, f"/v1/jobs/{job}/logs?offset=0&wait_ms=300")
            elapsed = time.monotonic() - started
            self.assertEqual((status, body), (200, ""))
            self.assertGreaterEqual(elapsed, 0.25, "answered before its deadline with nothing to say")
            self.assertLess(elapsed, 10 * SCALE)
        b.run("cancel", job)
        b.wait_status(job, "CANCELLED")

    def test_logs_outlive_the_job_and_the_agent(self):
        b = self.b
        job = b.submit("--", "printf 'alpha\\nbeta\\nno newline at the end'; echo oops >&2; exit 4")
        b.wait_status(job, "FAILED")
        expected = "alpha\nbeta\nno newline at the endoops\n"
        # Following a finished job prints it and exits with its exit code (it exited 4); --no-follow
        # only prints.
        rc, out, err = b.run("logs", job, check=False)
        self.assertEqual((rc, out), (4, expected), err)
        self.assertIn(f"berth: job {job} FAILED", err)
        self.assertEqual(b.run("logs", job, "--no-follow")[1], expected)
        # The node's agent dies: the server still has every byte.
        agent = b.agent_pid("local-0")
        os.kill(agent, signal.SIGKILL)
        b.wait_until(lambda: not alive(agent), message="the agent to die")
        rc, out, err = b.run("logs", job, "--no-follow")
        self.assertEqual((rc, out), (0, expected), err)
        rc, out, err = b.run("logs", job, timeout=30, check=False)
        self.assertEqual((rc, out), (4, expected), err)

    def test_large_output_arrives_whole(self):
        # More than the server's 1 MiB chunk, in lines of varying length: every byte, in order, once.
        b = self.b
        job = b.submit("--", "python3 -c \"import sys\nfor i in range(60000): sys.stdout.write(str(i) * (i % 7 + 1) + '\\n')\"")
        b.wait_status(job, "SUCCEEDED", timeout=60)
        expected = "".join(str(i) * (i % 7 + 1) + "\n" for i in range(60000))
        self.assertGreater(len(expected), 1 << 20)
        rc, out, _ = b.run("logs", job, "--no-follow", timeout=60)
        self.assertEqual(len(out), len(expected))
        self.assertEqual(out, expected)
        rc, out, _ = b.run("logs", job, timeout=60)
        self.assertEqual(out, expected)

    def test_follow_tail_group_and_a_pending_jobs_reason(self):
        """`logs -f` and `--follow` were refused though the docs use them; there was no `--tail N`
        nor `--group G`; a pending job's `logs` printed nothing, saying nothing."""
        b = self.b
        job = b.submit("--", "for i in 1 2 3 4 5; do echo line $i; done")
        b.wait_status(job, "SUCCEEDED")
        for flag in ("-f", "--follow"):
            rc, out, err = b.run("logs", flag, job)
            self.assertEqual((rc, out), (0, "".join(f"line {i}\n" for i in range(1, 6))), err)
        self.assertEqual(b.run("logs", job, "--tail", "2")[1], "line 4\nline 5\n")
        self.assertEqual(b.run("logs", job, "--tail", "2", "--no-follow")[1], "line 4\nline 5\n")
        self.assertEqual(b.run("logs", job, "--tail", "0")[1], "")
        rc, _, err = b.run("logs", job, "-f", "--no-follow", check=False)
        self.assertEqual(rc, 2, err)

        out = b.json("exec", "-d", "--json", "--num-jobs", "3", "--", "echo rank $BERTH_JOB_RANK")
        group = out["group"]
        for j in out["jobs"]:
            b.wait_status(j, "SUCCEEDED")
        rc, text, err = b.run("logs", "--group", group)
        self.assertEqual(rc, 0, err)
        self.assertEqual(text, "".join(f"==> job {j} <==\nrank {r}\n" for r, j in enumerate(out["jobs"])))

        blocker = b.submit("--gpus", "V100:4", "--", "sleep 600")
        b.wait_status(blocker, "RUNNING")
        waiting = b.submit("--gpus", "V100:1", "--", "echo hi")
        b.wait_until(lambda: b.show(waiting)["reason"], message="a reason for the pending job")
        rc, out, err = b.run("logs", waiting, "--no-follow")
        self.assertEqual((rc, out), (0, ""))
        self.assertIn(f"berth: job {waiting} is PENDING: ", err)
        self.assertIn("it has printed nothing yet", err)
        b.run("cancel", blocker, waiting)

    def test_timestamps(self):
        """`logs --timestamps` did not exist: each line now carries when it reached the server."""
        import datetime
        import re
        b = self.b
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        job = b.submit("--", "echo first; sleep 2.5; echo second")
        b.wait_status(job, "SUCCEEDED")
        after = datetime.datetime.now(datetime.timezone.utc)
        for flag in ("-t", "--timestamps"):
            rc, out, err = b.run("logs", job, flag)
            self.assertEqual(rc, 0, err)
            lines = out.splitlines()
            self.assertEqual(len(lines), 2, out)
            times = []
            for line, text in zip(lines, ("first", "second")):
                m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (.*)", line)
                self.assertIsNotNone(m, line)
                self.assertEqual(m.group(2), text)
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=datetime.timezone.utc)
                self.assertTrue(before <= t <= after, (before, t, after))
                times.append(t)
            self.assertGreaterEqual((times[1] - times[0]).total_seconds(), 2, out)
        self.assertEqual(b.run("logs", job, "-t", "--tail", "1")[1].split(" ", 1)[1], "second\n")
        self.assertEqual(b.run("logs", job)[1], "first\nsecond\n")

    def test_logs_of_unknown_job_or_rank(self):
        rc, out, err = self.b.run("logs", 999, check=False)
        self.assertNotEqual(rc, 0)
        self.assertEqual(out, "")
        self.assertIn("no job 999", err)
        job = self.b.submit("--", "echo x")
        rc, out, err = self.b.run("logs", job, "--rank", "1", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("ranks 0..0", err)


if __name__ == "__main__":
    unittest.main()

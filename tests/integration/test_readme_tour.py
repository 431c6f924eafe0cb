"""The README's five-minute tour, line by line, as a new user types it from the repository's root.

Each line of the tour's code block runs as written (`berth` is the binary under test), in order, on a
fresh BERTH_HOME; the interactive ones (`shell`, `exec --into -it`, `top`) in a real terminal (tmux),
`port-forward` in the background while a request goes through it. The one change: the notebook's
ports 8888 and 9999 become free ports of this machine (tests bind no fixed port). Where a comment says
which job a line makes ("job 3"), that is the job it made. The image lines need podman on the node:
without it they must be refused saying so.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.request

from harness import BERTH_BIN, SCALE, BerthTestCase
from image_registry import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tour_lines():
    """The tour's commands: (the line as written, its words), continuation comments dropped."""
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    section = text[text.index("## A five-minute tour"):]
    block = section.split("```\n")[1]
    lines = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        lines.append((line, shlex.split(line, comments=True)))
    return lines


class ReadmeTourTest(BerthTestCase):

    def setUp(self):
        if shutil.which("tmux") is None:
            raise unittest.SkipTest("tmux is needed (scripts/install-deps.sh installs it)")
        super().setUp()
        self.socket = "berth-tour-" + str(id(self))
        self.addCleanup(subprocess.run, ["tmux", "-L", self.socket, "kill-server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.podman = shutil.which("podman") is not None

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.socket, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)

    def screen(self, session):
        return self.tmux("capture-pane", "-p", "-S", "-200", "-t", session).stdout

    def wait_screen(self, session, pred, message, timeout=60):
        deadline = time.time() + timeout * SCALE
        text = ""
        while time.time() < deadline:
            text = self.screen(session)
            if pred(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {message}; the screen:\n{text}\n{self.b.diagnostics()}")

    def in_tmux(self, session, words):
        """`berth WORDS` in a terminal of its own, from the repository's root; its exit status goes to a
        file, which this returns the path of."""
        rc_file = self.path(f"rc-{session}")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.b.env.items() if k.startswith("BERTH"))
        command = (f"cd {shlex.quote(REPO)}; env {env} {shlex.quote(BERTH_BIN)} "
                   f"{' '.join(map(shlex.quote, words))}; echo $? > {shlex.quote(rc_file)}; sleep 60")
        started = self.tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", command)
        self.assertEqual(started.returncode, 0, started.stderr)
        return rc_file

    def wait_rc(self, rc_file, timeout=60):
        def read():
            if not os.path.exists(rc_file):
                return ""
            with open(rc_file) as f:
                return f.read().strip()
        self.b.wait_until(lambda: read() != "", timeout=timeout, message=f"exit status in {rc_file}")
        return int(read())

    def run_line(self, words, timeout=120):
        rc, out, err = self.b.run(*words, check=False, timeout=timeout, cwd=REPO)
        return rc, out, err

    def test_the_tour_runs_as_written(self):
        lines = tour_lines()
        self.assertGreater(len(lines), 15)
        self.assertEqual(lines[0][1][:3], ["berth", "local", "up"])
        self.assertEqual(lines[-1][1], ["berth", "local", "down"])
        notebook, forwarded = free_port(), free_port()
        for text, words in lines:
            with self.subTest(line=text):
                self.assertEqual(words[0], "berth", text)
                words = [str(notebook) if w == "8888" else
                         f"{forwarded}:{notebook}" if w == "9999:8888" else w for w in words[1:]]
                self.step(text, words, notebook, forwarded)

    def step(self, text, words, notebook, forwarded):
        b = self.b
        comment = text.split("#", 1)[1] if "#" in text else ""
        made = re.match(r"\s*job (\d+)", comment)
        if words[:2] == ["local", "up"]:
            b.local_started = True
            rc, out, err = self.run_line(words)
            self.assertEqual(rc, 0, err)
            self.assertIn("Local cluster up at", out)
        elif words[0] == "port-forward":
            p = b.popen(*words, cwd=REPO)
            url = f"http://127.0.0.1:{forwarded}/"

            def answers():
                try:
                    with urllib.request.urlopen(url, timeout=5) as r:
                        return r.status == 200 and b"Directory listing" in r.read()
                except OSError:
                    return False
            b.wait_until(answers, timeout=60, message=f"{url} to reach the notebook")
            p.send_signal(signal.SIGINT)
            self.assertEqual(p.wait(30), 0, p.stderr.read())
        elif words[0] == "exec" and "--into" in words:
            job = words[words.index("--into") + 1]
            rc_file = self.in_tmux("into", words)
            self.wait_screen("into", lambda t: "#" in t or "$" in t, "a prompt inside the job")
            self.tmux("send-keys", "-t", "into", "echo inside-$BERTH_JOB_ID", "Enter")
            self.wait_screen("into", lambda t: f"inside-{job}" in t.replace("$BERTH_JOB_ID", ""),
                             "the job's own id inside it")
            self.tmux("send-keys", "-t", "into", "exit", "Enter")
            self.assertEqual(self.wait_rc(rc_file), 0, self.screen("into"))
        elif words[0] == "shell":
            rc_file = self.in_tmux("shell", words)
            job = int(made.group(1)) if made else None
            # It waits for a GPU (job 1 holds them all for its 30 s), then the shell is there.
            b.wait_until(lambda: b.status(job) == "RUNNING", timeout=120, message="the shell to run")
            self.wait_screen("shell", lambda t: "#" in t.split("RUNNING")[-1] or "$" in t.split("RUNNING")[-1],
                             "the shell's prompt", timeout=60)
            self.tmux("send-keys", "-t", "shell", "echo in-shell-$BERTH_JOB_ID", "Enter")
            self.wait_screen("shell", lambda t: f"in-shell-{job}" in t.replace("$BERTH_JOB_ID", ""),
                             "the shell's answer")
            self.tmux("send-keys", "-t", "shell", "exit", "Enter")
            self.assertEqual(self.wait_rc(rc_file), 0, self.screen("shell"))
            self.assertTrue(b.show(job)["spec"]["interactive"])
        elif words[0] == "top":
            rc_file = self.in_tmux("top", words)
            self.wait_screen("top", lambda t: "local-0" in t, "the node's GPU map")
            self.tmux("send-keys", "-t", "top", "q")
            self.assertEqual(self.wait_rc(rc_file), 0, self.screen("top"))
        elif ("--image" in words or words[0] == "image") and not self.podman:
            rc, _, err = self.run_line(words)
            self.assertNotEqual(rc, 0)
            self.assertRegex(err, r"runs? (no )?containers")
        else:
            rc, out, err = self.run_line(words)
            self.assertEqual(rc, 0, f"{text}\nstdout: {out}\nstderr: {err}")
            if words[0] == "logs":
                self.assertIn("epoch 2: loss", out)
            if words[:2] == ["local", "down"]:
                self.assertIn("stopped", out)
            if words[0] == "show":
                self.assertIn("PENDING", out)
        if made and words[0] == "exec" and "--into" not in words:
            self.assertIn(f"Job {made.group(1)} submitted", out + err, text)
            b.wait_until(lambda: b.status(int(made.group(1))) in ("RUNNING", "PENDING", "SUCCEEDED"),
                         message="the job to be there")
            if words[0:3] == ["exec", "-d", "-n"] and "notebook" in words:
                b.wait_status(int(made.group(1)), "RUNNING")
                b.wait_until(lambda: self.listening(notebook), message="the notebook to listen")

    @staticmethod
    def listening(port):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    unittest.main()

"""Interactive jobs (`interactive: true`) and `berth attach`, in a real terminal (tmux, on a socket of
its own): keys reach the job and its output comes back; a resized window is the job's terminal's
new size; Ctrl-C reaches the job through its terminal (exit 130); the command exits with the job's
exit code; a client killed mid-session leaves the job running, and attaching again replays what the
job printed and goes on. Without a terminal (a pipe) the typing still goes through, and Ctrl-C twice
within a second ends the job. A server killed and restarted mid-session is dialled through;
what is typed while a session waits for its node (a restart, a node that does not answer in time)
reaches the job. A batch job is
followed instead; another user's job is refused (403). `exec --into` runs a command inside a running
job (its cgroup, user, environment and work dir), with or without a terminal. With --interactive-idle-limit, a job no one is
attached to ends, and one with a client attached does not.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import unittest
import urllib.request

from harness import BERTH_BIN, SCALE, BerthTestCase, http_unix


class InteractiveTest(BerthTestCase):

    def setUp(self):
        if shutil.which("tmux") is None:
            raise unittest.SkipTest("tmux is needed (scripts/install-deps.sh installs it)")
        super().setUp()
        self.cluster = self.b.local_up("V100:1", 1, "--cpus", "8")
        self.socket = "berth-it-" + str(id(self))
        self.addCleanup(subprocess.run, ["tmux", "-L", self.socket, "kill-server"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.socket, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)

    def screen(self, session):
        return self.tmux("capture-pane", "-p", "-t", session).stdout

    def wait_screen(self, session, pred, message):
        deadline = time.time() + 30 * SCALE
        text = ""
        while time.time() < deadline:
            text = self.screen(session)
            if pred(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {message}; the screen:\n{text}\n"
                             f"{self.b.diagnostics()}")

    def interactive(self, name, run):
        path = self.write(f"{name}.yaml", f"name: {name}\ninteractive: true\nresources: {{cpus: 1}}\n"
                                          f"run: |\n" + "".join(f"  {line}\n" for line in run.splitlines()))
        job = self.b.submit(path)
        self.b.wait_status(job, "RUNNING")
        return job

    def berth_in_tmux(self, session, args, rc_file, width=80, height=24):
        """`berth ARGS` in a tmux window of its own, in the test's dir; its exit status goes to rc_file."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.b.env.items() if k.startswith("BERTH"))
        command = (f"cd {shlex.quote(self.b.tmp)}; env {env} {shlex.quote(BERTH_BIN)} {args}; "
                   f"echo $? > {shlex.quote(rc_file)}; sleep 60")
        started = self.tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height),
                            command)
        self.assertEqual(started.returncode, 0, started.stderr)

    def attach_in_tmux(self, session, job, rc_file, width=80, height=24):
        self.berth_in_tmux(session, f"attach {job}", rc_file, width, height)

    def wait_rc(self, rc_file):
        def read():
            if not os.path.exists(rc_file):
                return ""
            with open(rc_file) as f:
                return f.read().strip()
        self.b.wait_until(lambda: read() != "", message="the attach command's exit")
        return int(read())

    def test_keys_resize_and_ctrl_c(self):
        job = self.interactive("shell", "stty -echo\necho ready\nread -r line\necho \"got:$line\"\n"
                                        "while read -r _; do stty size; done")
        rc_file = self.path("rc")
        self.attach_in_tmux("a", job, rc_file)
        self.wait_screen("a", lambda t: "ready" in t, "the job's first line")
        self.tmux("send-keys", "-t", "a", "hello", "Enter")
        self.wait_screen("a", lambda t: "got:hello" in t, "the typed line echoed by the job")
        # A new window size reaches the job's terminal (the client follows SIGWINCH).
        # (Enter again until it shows: the resize travels client -> server -> node on its own.)
        self.tmux("resize-window", "-t", "a", "-x", "100", "-y", "30")

        def resized(text):
            if "30 100" in text:
                return True
            self.tmux("send-keys", "-t", "a", "Enter")
            time.sleep(0.4)
            return False
        self.wait_screen("a", resized, "stty size after the resize")
        # Ctrl-C is a key for the job's terminal, which signals the job: it ends 130, so does attach.
        self.tmux("send-keys", "-t", "a", "C-c")
        self.assertEqual(self.wait_rc(rc_file), 130)
        # The agent's report of the end reaches the server on its own path (see the next test).
        self.b.wait_status(job, "FAILED", timeout=10)

    def newest_job(self):
        return max(j["id"] for j in self.b.queue())

    def test_ctrl_c_while_a_shell_waits_cancels_it(self):
        """Ctrl-C while `berth shell` waited left the shell queued, silently: it took the GPU later
        with nobody attached. It cancels the shell now and says so (salloc gives up its request)."""
        blocker = self.b.submit("--gpus", "V100:1", "--", "sleep 600")
        self.b.wait_status(blocker, "RUNNING")
        rc_file = self.path("rc")
        self.berth_in_tmux("w", "shell --gpus V100:1", rc_file)
        self.wait_screen("w", lambda t: "is PENDING" in t and "Ctrl-C cancels it" in t, "the wait")
        shell = self.newest_job()
        self.tmux("send-keys", "-t", "w", "C-c")
        self.assertEqual(self.wait_rc(rc_file), 130)
        self.wait_screen("w", lambda t: f"cancelled job {shell}: it had not started" in t, "what happened")
        self.assertEqual(self.b.status(shell), "CANCELLED")
        self.assertEqual(self.b.status(blocker), "RUNNING")
        self.b.run("cancel", blocker)

    def test_ctrl_c_during_a_foreground_exec_does_what_srun_does(self):
        """Ctrl-C during `berth exec` returned to the prompt and left the job running, silently. The
        first Ctrl-C says the job's state and how to cancel; a second within a second cancels it;
        Ctrl-\\ stops following and leaves it running, saying so."""
        rc_file = self.path("rc")
        self.berth_in_tmux("e", "exec -- 'echo started; sleep 600'", rc_file)
        self.wait_screen("e", lambda t: "started" in t, "the job's output")
        job = self.newest_job()
        self.tmux("send-keys", "-t", "e", "C-c")
        self.wait_screen("e", lambda t: f"job {job} is RUNNING on local-0. Ctrl-C again within a second "
                                        "cancels it" in t, "the job's state")
        time.sleep(1.5)  # past the second: the next Ctrl-C is a first one again
        self.assertEqual(self.b.status(job), "RUNNING")
        self.tmux("send-keys", "-t", "e", "C-c")
        self.tmux("send-keys", "-t", "e", "C-c")
        self.assertEqual(self.wait_rc(rc_file), 1)
        self.wait_screen("e", lambda t: f"cancelled job {job} (Ctrl-C twice)" in t, "the cancel said")
        self.b.wait_status(job, "CANCELLED", timeout=30)

        rc_file = self.path("rc2")
        self.berth_in_tmux("q", "exec -- 'echo again; sleep 600'", rc_file)
        self.wait_screen("q", lambda t: "again" in t, "the second job's output")
        second = self.newest_job()
        self.tmux("send-keys", "-t", "q", "C-\\")
        self.assertEqual(self.wait_rc(rc_file), 0)
        self.wait_screen("q", lambda t: f"stopped following job {second}; it goes on" in t, "the detach said")
        self.assertEqual(self.b.status(second), "RUNNING")
        self.b.run("cancel", second)

    def test_a_killed_client_leaves_the_job_and_attach_replays(self):
        job = self.interactive("replay", "echo one\nread -r x\necho \"two:$x\"\nexit 7")
        first = self.path("rc1")
        self.attach_in_tmux("a", job, first)
        self.wait_screen("a", lambda t: "one" in t, "the job's first line")
        # The client dies with its terminal: the job does not notice.
        self.tmux("kill-session", "-t", "a")
        time.sleep(0.5)
        self.assertEqual(self.b.show(job)["status"], "RUNNING")
        # Attaching again shows what it printed, and goes on from there.
        second = self.path("rc2")
        self.attach_in_tmux("b", job, second)
        self.wait_screen("b", lambda t: "one" in t, "the scrollback replayed")
        self.tmux("send-keys", "-t", "b", "x", "Enter")
        self.wait_screen("b", lambda t: "two:x" in t, "the job's answer")
        self.assertEqual(self.wait_rc(second), 7)
        # The client has the exit code from the terminal; the agent's report of the end reaches the
        # server on its own path, and may be a moment behind (seen once, in a serial run of the suite).
        self.b.wait_status(job, "FAILED", timeout=10)

    def test_shell_and_exec_it(self):
        # berth shell: a login shell in this directory (the local node has it), ended by `exit`.
        rc_file = self.path("rc-shell")
        self.berth_in_tmux("s", "shell --cpus 1 --time 1h", rc_file)
        self.wait_screen("s", lambda t: "submitted (shell)" in t, "the shell's submission")
        time.sleep(1)
        self.tmux("send-keys", "-t", "s", "echo hi-$((40+2)); pwd", "Enter")
        text = self.wait_screen("s", lambda t: "hi-42" in t, "the shell's answer")
        self.assertIn(self.b.tmp, text)
        self.tmux("send-keys", "-t", "s", "exit 5", "Enter")
        self.assertEqual(self.wait_rc(rc_file), 5)
        job = max(j["id"] for j in self.b.queue() if j["name"] == "shell")
        shown = self.b.wait_status(job, "FAILED", timeout=10)  # the end's report: its own path
        self.assertEqual(shown["spec"]["time_limit_s"], 3600)
        self.assertTrue(shown["spec"]["interactive"])

        # exec -it: a command on a terminal, attached at once; its exit code is the command's.
        rc_file = self.path("rc-exec")
        self.berth_in_tmux("e", "exec -it -- 'test -t 0 && echo on-a-terminal; read -r x; exit 4'",
                           rc_file)
        self.wait_screen("e", lambda t: "on-a-terminal" in t, "the command's line")
        self.tmux("send-keys", "-t", "e", "Enter")
        self.assertEqual(self.wait_rc(rc_file), 4)

    def test_exec_into_a_running_job(self):
        b = self.b
        # A batch job: --into needs no terminal of the job's own.
        job = b.submit("--", "cat /proc/self/cgroup > job-cgroup.txt; echo $$ > job.pid; sleep 300")
        b.wait_status(job, "RUNNING")
        b.wait_until(lambda: os.path.exists(self.path("job.pid")), message="the job's first lines")
        rc, out, err = b.run("exec", "--into", job, "--", "cat /proc/self/cgroup; id -un; "
                             "echo job=$BERTH_JOB_ID; pwd", check=False)
        self.assertEqual(rc, 0, err)
        with open(self.path("job-cgroup.txt")) as f:
            cgroup = f.read()
        user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout
        self.assertEqual(out, cgroup + user + f"job={job}\n{self.b.tmp}\n")
        # Its exit code is the command's; arguments are quoted as given.
        rc, out, _ = b.run("exec", "--into", job, "--", "sh", "-c", "echo 'two words'; exit 7",
                           check=False)
        self.assertEqual((rc, out), (7, "two words\n"))
        # -it: a terminal of its own, the window's size, typing and Ctrl-C.
        rc_file = self.path("rc-into")
        self.berth_in_tmux("i", f"exec --into {job} -it -- bash --norc", rc_file, width=100,
                           height=30)
        time.sleep(1)
        self.tmux("send-keys", "-t", "i", "stty size; tty", "Enter")
        self.wait_screen("i", lambda t: "30 100" in t and "/dev/pts/" in t, "the command's terminal")
        self.tmux("send-keys", "-t", "i", "sleep 100", "Enter")
        time.sleep(1)
        self.tmux("send-keys", "-t", "i", "C-c")
        self.tmux("send-keys", "-t", "i", "echo after-$?", "Enter")
        self.wait_screen("i", lambda t: "after-130" in t, "Ctrl-C reaching the command")
        self.tmux("send-keys", "-t", "i", "exit 6", "Enter")
        self.assertEqual(self.wait_rc(rc_file), 6)
        self.assertEqual(b.status(job), "RUNNING", "the job goes on")
        # A job that ended has nothing to run into.
        b.run("cancel", job)
        b.wait_status(job, "CANCELLED")
        rc, _, err = b.run("exec", "--into", job, "--", "true", check=False)
        self.assertEqual(rc, 1, err)
        self.assertIn("CANCELLED", err)

    def test_without_a_terminal_typing_goes_through(self):
        job = self.interactive("piped", "read -r line\necho \"got:$line\"\nexit 3")
        rc, out, err = self.b.run("attach", job, input="through a pipe\n", check=False)
        self.assertEqual(rc, 3, out + err)
        self.assertIn("got:through a pipe", out)

    def test_without_a_terminal_ctrl_c_twice_ends_the_job(self):
        # srun's rule: the first SIGINT goes to the job, a second within a second cancels it.
        job = self.interactive("twice", "trap 'echo got-int' INT\necho ready\n"
                                        "while true; do sleep 0.1; done")
        p = subprocess.Popen([BERTH_BIN, "attach", str(job)], env=self.b.env, cwd=self.b.tmp,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.b.clients.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.stdout.readline().strip(), "got-int")
        time.sleep(1.5)
        p.send_signal(signal.SIGINT)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=30 * SCALE), 130)
        self.assertIn(f"job {job} cancelled (Ctrl-C twice)", p.stderr.read())
        self.b.wait_status(job, "CANCELLED")

    def test_an_agent_killed_and_restarted_leaves_the_terminal_attachable(self):
        # The terminal lives in the node supervisor, which outlives its agent.
        b = self.b
        server = b.start_server()
        sock = os.path.join(server.state_dir, "berth.sock")
        token = ["--token-file", os.path.join(server.state_dir, "token")]
        agent = b.start_agent(server.url, name="node-0", gpus="", extra=token)
        env = {"BERTH_SERVER": "unix:" + sock}
        b.wait_nodes_up(["node-0"], env=env)
        path = self.write("survivor.yaml", "name: survivor\ninteractive: true\nrun: |\n"
                                           "  echo before\n  read -r x\n  echo \"after:$x\"\n  exit 6\n")
        job = b.submit(path, env=env)
        b.wait_status(job, "RUNNING", env=env)
        agent.kill(signal.SIGKILL)
        b.start_agent(server.url, name="node-0", gpus="", state_dir=agent.state_dir, extra=token)
        b.wait_nodes_up(["node-0"], env=env)
        self.assertEqual(b.status(job, env=env), "RUNNING")
        # The first session may go to the killed agent's stream and be lost (4004 after 10 s):
        # the client dials again by itself.
        rc_file = self.path("rc-survivor")
        env_text = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**b.env, **env}.items()
                            if k.startswith("BERTH"))
        started = self.tmux("new-session", "-d", "-s", "r", "-x", "80", "-y", "24",
                            f"env {env_text} {shlex.quote(BERTH_BIN)} attach {job}; "
                            f"echo $? > {shlex.quote(rc_file)}; sleep 60")
        self.assertEqual(started.returncode, 0, started.stderr)
        self.wait_screen("r", lambda t: "before" in t, "the scrollback through the new agent")
        self.tmux("send-keys", "-t", "r", "again", "Enter")
        self.wait_screen("r", lambda t: "after:again" in t, "the job's answer")
        self.assertEqual(self.wait_rc(rc_file), 6)

    def metric(self, server, name):
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return 0.0

    def held(self, agent):
        """Stops `agent` (SIGSTOP) until the test continues it; continued at the test's end anyway."""
        os.kill(agent.pid, signal.SIGSTOP)
        self.addCleanup(lambda: agent.proc.poll() is None and os.kill(agent.pid, signal.SIGCONT))

    def cluster_with_a_reader(self, name, exit_code, **server_args):
        """A server and an agent of the test's own, and an interactive job on them that prints
        "before", reads a line, prints "after:LINE" and exits `exit_code`: (server, agent, env, job)."""
        b = self.b
        server = b.start_server(**server_args)
        agent = b.start_agent(server.url, name="node-0", gpus="")
        env = {"BERTH_SERVER": server.url}
        b.wait_nodes_up(["node-0"], env=env)
        path = self.write(f"{name}.yaml", f"name: {name}\ninteractive: true\nrun: |\n  echo before\n"
                                          f"  read -r x\n  echo \"after:$x\"\n  exit {exit_code}\n")
        job = b.submit(path, env=env)
        b.wait_status(job, "RUNNING", env=env)
        return server, agent, env, job

    def attach_piped(self, job, env):
        """`berth attach JOB` with its stdin, stdout and stderr on pipes."""
        client = subprocess.Popen([BERTH_BIN, "attach", str(job)], env={**self.b.env, **env},
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.b.clients.append(client)
        return client

    def test_a_server_restart_mid_session_is_dialled_through(self):
        # The server dies hard and comes back on its port: the client dials again by itself, and
        # the session goes on where it was (the terminal lives on the node). The node's agent is
        # held stopped across the restart, so the client's new session is opened before the agent
        # registers with the new server (which drops what was queued for the node before): the
        # server invites the node again when it registers, and what was typed meanwhile reaches
        # the job. The connect timeout is long, so that a node invited only by a later dial would
        # show as an unanswered session.
        b = self.b
        state = self.path("server-state")
        connect = ["--interactive-connect-timeout", f"{int(60 * SCALE)}s"]
        server, agent, env, job = self.cluster_with_a_reader("restart", 6, state_dir=state, extra=connect)
        port = server.url.rsplit(":", 1)[1]
        client = self.attach_piped(job, env)
        self.assertEqual(client.stdout.readline().strip(), "before")
        self.held(agent)
        server.kill(signal.SIGKILL)
        server = b.start_server(state_dir=state, listen=f"127.0.0.1:{port}", extra=connect)

        def dialled():
            if client.poll() is not None:
                raise AssertionError(f"attach exited {client.returncode}: {client.stderr.read()}")
            return self.metric(server, "berth_interactive_sessions") == 1
        b.wait_until(dialled, timeout=60, message="the client to dial again")
        client.stdin.write("again\n")
        client.stdin.flush()
        os.kill(agent.pid, signal.SIGCONT)
        self.assertEqual(client.wait(timeout=60 * SCALE), 6)
        out = client.stdout.read()
        self.assertIn("after:again", out)
        self.assertIn("was lost", client.stderr.read())
        self.assertEqual(self.metric(server, "berth_interactive_sessions_unanswered_total"), 0,
                         "the node was invited again when it registered")

    def test_typing_outlives_a_session_its_node_never_answered(self):
        # The node's agent is stopped: the client's session waits, is closed when the node has not
        # answered within --interactive-connect-timeout, and the client dials again. What was typed
        # meanwhile is not lost with the closed session: the client holds it until the node's side
        # has joined.
        b = self.b
        server, agent, env, job = self.cluster_with_a_reader(
            "typed", 5, extra=["--interactive-connect-timeout", "1s"])
        self.held(agent)
        client = self.attach_piped(job, env)
        client.stdin.write("typed\n")
        client.stdin.flush()
        b.wait_until(lambda: self.metric(server, "berth_interactive_sessions_unanswered_total") >= 1,
                     timeout=30 * SCALE, message="a session its node did not answer")
        os.kill(agent.pid, signal.SIGCONT)
        self.assertEqual(client.wait(timeout=60 * SCALE), 5)
        out = client.stdout.read()
        self.assertIn("before", out)
        self.assertIn("after:typed", out)

    def test_a_batch_job_is_followed_instead(self):
        batch = self.b.submit("--", "echo out-of-batch; exit 2")
        rc, out, err = self.b.run("attach", batch, check=False)
        self.assertEqual(rc, 2, out + err)
        self.assertIn("out-of-batch", out)
        self.assertIn(f"job {batch} is not interactive: following its output", err)
        # The API says why it refuses a plain request.
        status, body = http_unix("GET", os.path.join(self.b.home, "server", "berth.sock"),
                                 f"/v1/jobs/{batch}/attach")
        self.assertIn(status, (400, 404), body)

    def test_a_waiting_shell_says_where_it_stands(self):
        b = self.b
        holder = b.submit("--gpus", "V100:1", "--", "sleep 300")
        b.wait_status(holder, "RUNNING")
        rc_file = self.path("rc-wait")
        self.berth_in_tmux("w", "shell --gpus V100:1", rc_file, width=200)
        text = self.wait_screen("w", lambda t: "position 1 in the queue" in t, "the shell's place")
        self.assertIn("PENDING", text)
        b.run("cancel", holder)
        self.wait_screen("w", lambda t: "runs" in t, "the shell starting")
        time.sleep(1)
        self.tmux("send-keys", "-t", "w", "exit 0", "Enter")
        self.assertEqual(self.wait_rc(rc_file), 0)

    def test_an_idle_interactive_job_ends_at_the_idle_limit(self):
        b = self.b
        server = b.start_server(extra=["--interactive-idle-limit", "3s"])
        sock = os.path.join(server.state_dir, "berth.sock")
        b.start_agent(server.url, name="node-0", gpus="",
                      extra=["--token-file", os.path.join(server.state_dir, "token")])
        env = {"BERTH_SERVER": "unix:" + sock}
        b.wait_nodes_up(["node-0"], env=env)
        path = self.write("idle.yaml", "name: idle\ninteractive: true\nrun: sleep 300\n")
        idle = b.submit(path, env=env)
        watched = b.submit(path, env=env)
        batch = b.submit("--", "sleep 300", env=env)
        b.wait_status(watched, "RUNNING", env=env)
        client = subprocess.Popen([BERTH_BIN, "attach", str(watched)], env={**b.env, **env},
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        b.clients.append(client)
        ended = b.wait_status(idle, "FAILED", timeout=20, env=env)
        self.assertIn("idle limit 3s exceeded", ended["reason"])
        time.sleep(4 * SCALE)
        self.assertEqual(b.status(watched, env=env), "RUNNING", "attached: not idle")
        self.assertEqual(b.status(batch, env=env), "RUNNING", "a batch job is never idle")
        client.kill()
        client.wait()
        ended = b.wait_status(watched, "FAILED", timeout=20, env=env)
        self.assertIn("idle limit 3s exceeded", ended["reason"])

    def test_refusals(self):
        b = self.b
        # Another user's job: 403, naming the owner. (A server of its own: the local cluster is
        # private to its owner.)
        server = b.start_server()
        sock = os.path.join(server.state_dir, "berth.sock")
        b.start_agent(server.url, name="node-0", gpus="",
                      extra=["--token-file", os.path.join(server.state_dir, "token")])
        env = {"BERTH_SERVER": "unix:" + sock}
        b.wait_nodes_up(["node-0"], env=env)
        path = self.write("mine.yaml", "name: mine\ninteractive: true\nrun: |\n"
                                       "  read -r x\n  echo \"op:$x\"\n")
        job = b.submit(path, env=env)
        b.wait_status(job, "RUNNING", env=env)
        status, body = http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": "alice"}))
        self.assertEqual(status, 201, body)
        alice = ["--server", server.url, "--token", body["token"]]
        rc, _, err = b.run("attach", job, *alice, check=False)
        self.assertEqual(rc, 1, err)
        self.assertIn("belongs to root", err)
        self.assertIn("operator role", err)
        rc, _, err = b.run("exec", "--into", job, *alice, "--", "true", check=False)
        self.assertEqual(rc, 1, err)
        self.assertIn("belongs to root", err)

        # An operator may, and it is on the record.
        status, body = http_unix("POST", sock, "/v1/admin/users/alice", json.dumps({"role": "operator"}))
        self.assertEqual(status, 200, body)
        rc, out, err = b.run("attach", job, *alice, input="typed by an operator\n", check=False)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("op:typed by an operator", out)
        status, body = http_unix("GET", sock, "/v1/admin/audit")
        self.assertEqual(status, 200, body)
        attaches = [a for a in body["audit"] if a["action"] == "attach"]
        self.assertEqual(len(attaches), 1, body)
        self.assertEqual((attaches[0]["by"], attaches[0]["target"]), ("alice", f"job {job}"),
                         attaches[0])


if __name__ == "__main__":
    unittest.main()

"""The everyday commands as people type them (docs/user-guide.md).

`berth exec python3 train.py -n 3` took `-n 3` for berth's own option: the job was named "3" and the
script never got it. A command's words are its own from the first one on, as `docker run IMAGE CMD
ARGS` and `srun CMD ARGS` read them. Usage errors name what was wrong and the nearest known name, and
exit 2; `--server` is accepted before the command too. A URL where something else answers is said to
be that, never its HTML dumped, never an empty `berth: `.
"""

import http.server
import json
import os
import threading

from harness import BerthTestCase


class CliHabitsTest(BerthTestCase):

    def cluster(self, *nodes):
        """A server and an agent per (name, gpus, extra args) in `nodes`, all UP; the env that
        reaches the server through its unix socket, and the server."""
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": "unix:" + os.path.join(server.state_dir, "berth.sock")}
        for name, gpus, extra in nodes:
            b.start_agent(server.url, name=name, gpus=gpus,
                          extra=["--token-file", os.path.join(server.state_dir, "token"), *extra])
        b.wait_nodes_up([name for name, _, _ in nodes], env=env)
        return env, server

    def test_options_after_the_command_are_the_commands(self):
        b = self.b
        env, _ = self.cluster(("node-0", "", ()))
        script = self.write("train.py", "import sys\nprint('argv', sys.argv[1:])\n")
        _, out, _ = b.run("exec", "-d", "--json", "-n", "mine", "python3", script, "-n", "3",
                          "--lr", "0.1", env=env)
        job = json.loads(out)["jobs"][0]
        b.wait_status(job, "SUCCEEDED", timeout=60, env=env)
        self.assertEqual(b.show(job, env=env)["name"], "mine")
        self.assertIn("argv ['-n', '3', '--lr', '0.1']", b.run("logs", job, "--no-follow", env=env)[1])

        # A script where a task file goes says how to run it; a missing task file says why.
        rc, _, err = b.run("exec", script, env=env, check=False)
        self.assertEqual(rc, 2, err)
        self.assertIn(f"is not a task file", err)
        self.assertIn(f"berth exec -- python3 {script}", err)
        rc, _, err = b.run("exec", "nosuch.yaml", env=env, check=False)
        self.assertEqual(rc, 2, err)
        self.assertIn("cannot read task file nosuch.yaml: No such file or directory", err)

        # Exit code 127 says which command was not found.
        rc, _, err = b.run("exec", "--", "pythn3 -c 1", env=env, check=False, timeout=60)
        self.assertEqual(rc, 127, err)
        self.assertIn("exit code 127 (command not found: pythn3)", err)

        # --server before the command; `berth queue` as the docs have it.
        rc, out, err = b.run("--server", env["BERTH_SERVER"], "queue", "--json", check=False)
        self.assertEqual(rc, 0, err)

        # One style for usage errors: the command, what was wrong, the nearest name; exit 2.
        for args, says in ((["queu"], "unknown command 'queu' (did you mean queue?)"),
                           (["exec", "--gpu", "V100:1", "--", "echo", "hi"],
                            "berth exec: unknown option --gpu (did you mean --gpus?)"),
                           (["cancel", "abc"], "berth cancel: 'abc' is not a valid value of ids")):
            rc, _, err = b.run(*args, env=env, check=False)
            self.assertEqual(rc, 2, err)
            self.assertIn(says, err)

    def test_a_limit_no_node_enforces_is_said_at_submission(self):
        """On a node that isolates nothing, `--memory 0.25` allocating 1 GiB SUCCEEDED, and `exec`
        said nothing; only `berth nodes` showed why."""
        b = self.b
        env, server = self.cluster(("open-0", "T4:1", ("--isolation", "off")),
                                   ("open-1", "", ("--isolation", "off")))
        token = ["--token-file", os.path.join(server.state_dir, "token")]
        rc, out, err = b.run("exec", "-d", "--json", "--gpus", "T4:1", "--memory", "0.25", "--",
                             "true", env=env)
        self.assertEqual(rc, 0, err)
        self.assertIn("berth: warning: limits not enforced: the node that can run this job (open-0) "
                      "isolates nothing (none: turned off (--isolation off)), so its memory (256M), "
                      "CPUs (0.5) and GPU devices are not enforced there", err)
        self.assertEqual(err.count("warning"), 1, err)
        json.loads(out)  # --json's output stays JSON: the warning is on stderr
        # `berth nodes` fits a terminal: short forms, the full reason in `berth nodes NODE`.
        _, table, _ = b.run("nodes", env=env)
        self.assertLessEqual(max(len(line) for line in table.splitlines()), 120, table)
        self.assertNotIn("turned off", table)
        self.assertIn("(berth nodes NAME says a node's isolation and health in full)", table)
        _, one, _ = b.run("nodes", "open-0", env=env)
        self.assertIn("Isolation: none: turned off (--isolation off)\n", one)
        self.assertRegex(one, r"Free:      GPUs T4 [01]/1, CPUs [0-9.]+ of 2, memory ")
        # A bulk submission says it once.
        rc, _, err = b.run("exec", "-d", "--num-jobs", "5", "--", "true", env=env)
        self.assertEqual(err.count("berth: warning: limits not enforced: the nodes that can run "
                                   "this job (open-0, open-1) isolate nothing"), 1, err)
        if os.geteuid() == 0:
            # With a node that isolates, it is a "may": the job may land on either.
            b.start_agent(server.url, name="closed", gpus="", extra=token)
            b.wait_nodes_up(["closed"], env=env)
            if b.json("nodes", "--json", env=env)[-1]["isolation"] in ("v1", "v2"):
                _, _, err = b.run("exec", "-d", "--", "true", env=env)
                self.assertIn("berth: warning: limits may not be enforced: 2 of the 3 nodes that can "
                              "run this job (open-0, open-1) isolate nothing", err)
                # A job only the isolating node can hold hears nothing.
                _, _, err = b.run("exec", "-d", "--cpus", "2", "--", "true", env=env)
                self.assertNotIn("warning", err)

    def test_show_reads_as_text(self):
        """`berth show` printed a multi-line `run:` flush left, team scores and a quota of 0 on a
        cluster with no teams, "memory 0 GiB" when none was asked, and "CPU 0.1 s of 2 CPU(s)"."""
        b = self.b
        env, _ = self.cluster(("node-0", "V100:1", ()))
        task = self.write("t.yaml", "resources:\n  cpus: 2\nrun: |\n  echo one\n  echo two\n")
        job = b.submit(task, env=env)
        b.wait_status(job, "SUCCEEDED", env=env)
        out = b.run("show", job, env=env)[1]
        self.assertIn("  run:        echo one\n              echo two\n", out)
        self.assertIn("memory -]", out)
        self.assertRegex(out, r"CPU time (\d+\.\d s|-)(, [\d.e-]+ of 2 CPUs busy on average \(\d+%\))?\n")
        self.assertNotIn("CPU(s) asked", out)
        blocker = b.submit("--gpus", "V100:1", "--", "sleep 600", env=env)
        b.wait_status(blocker, "RUNNING", env=env)
        waiting = b.submit("--gpus", "V100:1", "--", "true", env=env)
        b.wait_until(lambda: "in line:" in b.run("show", waiting, env=env)[1], message="a place in line")
        out = b.run("show", waiting, env=env)[1]
        self.assertIn("  in line:    #1 of the waiting jobs\n", out)
        self.assertIn("  fair share: user score ", out)
        self.assertNotIn("team", out)
        self.assertNotIn("quota", out)
        self.assertRegex(out, r"held by:    \S+ \(1 GPU\)")
        b.run("cancel", blocker, waiting, env=env)

    def test_no_private_cluster_on_a_node(self):
        """On a machine that runs a berth agent, a command with no server configured started a
        private local cluster (declaring the node's GPUs a second time) instead of saying where the
        node's cluster is."""
        import subprocess
        from harness import BERTH_BIN
        b = self.b
        server = b.start_server()
        state = self.path("agent-state")
        agent = b.start_agent(server.url, name="n1", gpus="", state_dir=state,
                              extra=["--token-file", os.path.join(server.state_dir, "token")])
        b.wait_nodes_up(["n1"], env={"BERTH_SERVER": server.url})
        with open(f"/proc/{agent.proc.pid}/cmdline", "rb") as f:
            seen = f.read().split(b"\0")
        self.assertEqual(seen[1:2], [b"agent"], f"the agent's command line as /proc shows it: {seen}")
        home = self.path("home")
        os.makedirs(home)
        env = {k: v for k, v in b.env.items() if not k.startswith("BERTH_")}
        env["HOME"] = home
        p = subprocess.run([BERTH_BIN, "queue"], env=env, cwd=home, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 2, f"{p.stderr}\nthe agent: {agent.proc.poll()=}, {seen}")
        self.assertIn("this machine runs a berth agent (pid ", p.stderr)
        self.assertIn("`berth local up` starts a private cluster here anyway", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(home, ".berth", "server")), "a cluster started")
        # With BERTH_HOME set, a local cluster there is what was asked for.
        self.assertNotIn("berth agent", b.run("queue", check=False)[2])
        b.local_started = True

    def test_a_server_that_is_not_berth_is_said_to_be_so(self):
        """A web page's 404 was printed whole (14 lines of HTML); an empty answer printed `berth: `."""
        class NotBerth(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"<html><head><title>404</title></head>\n<body>\n<h1>Not Found</h1>\n</body></html>\n"
                self.send_response(404)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        stub = http.server.HTTPServer(("127.0.0.1", 0), NotBerth)
        threading.Thread(target=stub.serve_forever, daemon=True).start()
        self.addCleanup(stub.server_close)
        self.addCleanup(stub.shutdown)
        url = f"http://127.0.0.1:{stub.server_port}"
        rc, _, err = self.b.run("--server", url, "queue", check=False)
        self.assertEqual(rc, 1)
        self.assertEqual(err.strip(), f"berth: {url} answered 404 to GET /v1/queue: is it a berth server? "
                                      "(--server, BERTH_SERVER)")
        rc, _, err = self.b.run("cancel", "--server", url, "5", check=False)
        self.assertEqual(rc, 1)
        self.assertIn(f"answered 500 to POST /v1/jobs/cancel: is it a berth server?", err)
        self.assertNotIn("<html>", err)

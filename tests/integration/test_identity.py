"""Who is who, with real unix users.

The test creates throwaway unix users (it must run as root; it skips, saying so, otherwise) and drives the
CLI as each of them through the server's unix socket (`setpriv`), against a server and a root agent it
starts: alice cannot cancel bob's job or read its logs, an operator can; the job of alice runs with alice's
uid, its log is hers alone and its environment holds no credential; a user's priority is capped; jobs of
root are refused unless allowed; the server's files are private; 300 idle connections plus a slow-header
client do not stall anyone.
"""

import json
import os
import pwd
import shutil
import socket
import stat
import statistics
import subprocess
import threading
import time
import unittest
import uuid

from harness import BERTH_BIN, SCALE, BerthTestCase, http, http_unix


def sh(*args, check=True):
    return subprocess.run(args, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class IdentityTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            raise unittest.SkipTest("creating unix users needs root (CI runs as root)")
        if subprocess.run(["which", "useradd", "setpriv"], stdout=subprocess.DEVNULL).returncode != 0:
            raise unittest.SkipTest("useradd and setpriv are needed")
        tag = uuid.uuid4().hex[:5]
        self.users = {}
        for role in ("alice", "bob", "olga"):
            name = f"bt{role[0]}{tag}"
            sh("useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/bash", name)
            self.addCleanup(sh, "userdel", name, check=False)
            self.users[role] = pwd.getpwnam(name)
        # The users must reach the socket inside the server's state dir, and their jobs' work dir.
        os.chmod(self.b.tmp, 0o711)
        self.work = self.path("work")
        os.makedirs(self.work)
        os.chmod(self.work, 0o1777)
        # The users must be able to run the binary: a checkout under a private home (/root) is not
        # theirs to reach, so they get a copy of it then.
        self.bin = BERTH_BIN
        u = self.users["alice"]
        probe = subprocess.run(["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups",
                                BERTH_BIN, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            # With berth-daemon and berth-supervisor, which belong beside berth.
            bindir = self.path("bin-for-users")
            os.makedirs(bindir)
            os.chmod(bindir, 0o755)
            for name in ("berth", "berth-daemon", "berth-supervisor"):
                shutil.copy(os.path.join(os.path.dirname(BERTH_BIN), name), os.path.join(bindir, name))
                os.chmod(os.path.join(bindir, name), 0o755)
            self.bin = os.path.join(bindir, "berth")

    def start(self, allow_root_jobs=False):
        self.server = self.b.start_server(allow_root_jobs=allow_root_jobs)
        self.sock = os.path.join(self.server.state_dir, "berth.sock")
        self.agent = self.b.start_agent(self.server.url, name="node-0", gpus="V100:2",
                                        extra=["--token-file", os.path.join(self.server.state_dir, "token")])
        self.b.wait_nodes_up(["node-0"], env={"BERTH_SERVER": "unix:" + self.sock})

    def as_user(self, who, *args, check=True, timeout=60):
        """Runs `berth ARGS` as unix user `who` (or root), through the server's unix socket."""
        env = {"PATH": "/usr/bin:/bin", "BERTH_SERVER": "unix:" + self.sock, "IT_BERTH_TMP": self.b.tmp,
               "BERTH_HOME": self.path("home-" + who)}
        cmd = [self.bin, *map(str, args)]
        if who != "root":
            u = self.users[who]
            cmd = ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--init-groups", *cmd]
            env.update(HOME="/nonexistent", USER=u.pw_name)
        p = subprocess.run(cmd, env=env, cwd=self.work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout * SCALE)
        if check and p.returncode != 0:
            raise AssertionError(f"berth {' '.join(map(str, args))} as {who} exited {p.returncode}:\n"
                                 f"{p.stdout}{p.stderr}")
        return p.returncode, p.stdout, p.stderr

    def submit_as(self, who, *args):
        _, out, _ = self.as_user(who, "exec", "-d", "--json", *args)
        return json.loads(out)["jobs"][0]

    def status(self, job):
        return json.loads(self.as_user("root", "show", job, "--json")[1])

    def wait_status(self, job, *statuses, timeout=60):
        return self.b.wait_until(lambda: (lambda j: j if j["status"] in statuses else None)(self.status(job)),
                                 timeout, message=f"job {job} to be {statuses}")

    def test_rights_over_jobs(self):
        self.start()
        alice, bob, olga = (self.users[k].pw_name for k in ("alice", "bob", "olga"))
        _, out, _ = self.as_user("alice", "whoami", "--json")
        me = json.loads(out)
        self.assertEqual((me["user"], me["role"], me["via"], me["max_priority"]), (alice, "user", "socket", 0))

        # A body claiming another user is refused: jobs belong to whoever submits them.
        status, body = http_unix("POST", self.sock, "/v1/jobs",
                                 json.dumps({"spec": {"run": "true"}, "user": "someone-else"}))
        self.assertEqual(status, 403, body)

        long_job = self.submit_as("bob", "--", "sleep 300")
        self.wait_status(long_job, "RUNNING")
        self.assertEqual(self.status(long_job)["user"], bob)

        # alice may read the queue and see bob's job, but not its spec, its logs, nor cancel it.
        _, out, _ = self.as_user("alice", "queue", "--json")
        self.assertIn(long_job, [j["id"] for j in json.loads(out)])
        _, out, _ = self.as_user("alice", "show", long_job, "--json")
        self.assertIsNone(json.loads(out)["spec"])
        rc, _, err = self.as_user("alice", "logs", long_job, "--no-follow", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("operator role", err)
        rc, _, err = self.as_user("alice", "cancel", long_job, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("not yours", err)
        self.assertIn("operator role", err)
        rc, _, err = self.as_user("alice", "cancel", "--all-users", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("operator role", err)
        rc, _, err = self.as_user("alice", "drain", "node-0", check=False)
        self.assertIn("operator role", err)
        self.assertEqual(self.status(long_job)["status"], "RUNNING")
        # Nor may she administer.
        rc, _, err = self.as_user("alice", "admin", "token", "create", "--user", alice, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("admin role", err)

        # An admin (root, on the socket) makes olga an operator: she may cancel bob's job.
        rc, _, err = self.as_user("alice", "requeue", long_job, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("operator role", err)
        self.as_user("root", "admin", "user", "set", olga, "--role", "operator")
        # An operator may requeue bob's job: it goes back to the queue and runs again.
        self.as_user("olga", "requeue", long_job)
        again = self.wait_status(long_job, "RUNNING")
        self.assertEqual(again["attempt"], 2)
        self.assertEqual(again["attempts"][0]["reason"], f"requeued by {olga}")
        _, out, _ = self.as_user("olga", "show", long_job, "--json")
        self.assertIsNotNone(json.loads(out)["spec"])
        self.as_user("olga", "logs", long_job, "--no-follow")
        self.as_user("olga", "cancel", long_job)
        done = self.wait_status(long_job, "CANCELLED")
        self.assertEqual(done["events"][-1]["by"], olga)
        self.assertEqual(done["events"][0]["by"], bob)
        _, out, _ = self.as_user("root", "show", long_job)
        self.assertIn(olga, out)

        # Priorities: above the user's max is refused naming the limit, until an admin raises it.
        rc, _, err = self.as_user("alice", "exec", "-d", "--priority", "5", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("priority 5 is over your limit", err)
        self.as_user("root", "admin", "user", "set", alice, "--max-priority", "10", "--team", "vision")
        self.submit_as("alice", "--priority", "5", "--", "true")
        _, out, _ = self.as_user("alice", "whoami", "--json")
        self.assertEqual((json.loads(out)["max_priority"], json.loads(out)["team"]), (10, "vision"))

        # Every administrative action is audited with who did it.
        _, out, _ = self.as_user("root", "admin", "audit", "--json")
        actions = [(a["by"], a["action"], a["target"]) for a in json.loads(out)]
        self.assertIn(("root", "user set", olga), actions)
        self.assertIn(("root", "user set", alice), actions)
        rc, _, err = self.as_user("olga", "admin", "audit", check=False)
        self.assertIn("admin role", err)

        # A token for alice, over TCP, is alice (the server's TCP port, as from another machine).
        _, out, _ = self.as_user("root", "admin", "token", "create", "--user", alice, "--expires", "1h",
                                 "--json")
        alice_token = json.loads(out)["token"]
        status, body, _ = http("GET", self.server.url + "/v1/whoami", token=alice_token)
        self.assertEqual((status, body["user"], body["role"]), (200, alice, "user"), body)
        self.assertIsNotNone(body["token_expires"])
        status, body, _ = http("GET", self.server.url + f"/v1/jobs/{long_job}/logs", token=alice_token)
        self.assertEqual(status, 403, body)
        _, out, _ = self.as_user("root", "admin", "token", "list", "--json")
        listed = {t["name"]: t for t in json.loads(out)}
        self.assertTrue(all("token" not in t and "hash" not in t for t in listed.values()))

        # On a node, the agent's socket speaks for its users: no token needed, rights unchanged.
        node_sock = "unix:" + os.path.join(self.agent.state_dir, "berth.sock")
        _, out, _ = self.as_user("alice", "whoami", "--json", "--server", node_sock)
        me = json.loads(out)
        self.assertEqual((me["user"], me["via"]), (alice, "a node's socket"), me)
        bobs = self.submit_as("bob", "--server", node_sock, "--", "sleep 300")
        self.assertEqual(self.status(bobs)["user"], bob)
        rc, _, err = self.as_user("alice", "cancel", bobs, "--server", node_sock, check=False)
        self.assertIn("not yours", err)
        self.as_user("bob", "cancel", bobs, "--server", node_sock)
        # The same keyed `berth exec` twice through the node: one submission. (The node forwarded
        # method, path and body only, so a retry through a node could submit twice.)
        keyed = [self.submit_as("bob", "--server", node_sock, "--idempotency-key", "node-retry-1", "--", "true")
                 for _ in range(2)]
        self.assertEqual(keyed[0], keyed[1])
        rc, _, err = self.as_user("root", "whoami", "--server", node_sock, check=False)
        self.assertNotEqual(rc, 0)  # a node never speaks for an admin
        self.assertIn("may not speak for root", err)

        # root's own jobs are refused by this server (no --allow-root-jobs), saying how to allow them.
        rc, _, err = self.as_user("root", "exec", "-d", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("--allow-root-jobs", err)

    def test_jobs_run_as_their_user(self):
        self.start()
        alice = self.users["alice"]
        agent_state = self.agent.state_dir
        server_state = self.server.state_dir
        job = self.submit_as("alice", "--", f"id -u; id -g; echo HOME=$HOME USER=$USER LOGNAME=$LOGNAME; "
                                            f"ls {agent_state} >/dev/null 2>&1 && echo AGENT-READABLE; "
                                            f"cat {server_state}/token >/dev/null 2>&1 && echo TOKEN-READABLE; "
                                            f"env > env.txt; touch mine; sleep 3")
        # While it runs: its output log is hers alone (the agent drops the job's dir once it ended).
        self.b.wait_until(lambda: os.path.exists(os.path.join(self.work, "mine")), 60,
                          message="the job to write its file")
        logs = [os.path.join(d, "output.log") for d, _, files in os.walk(os.path.join(agent_state, "jobs"))
                if "output.log" in files]
        self.assertEqual(len(logs), 1)
        st = os.stat(logs[0])
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (alice.pw_uid, 0o600))
        done = self.wait_status(job, "SUCCEEDED", "FAILED")
        self.assertEqual(done["status"], "SUCCEEDED", done)
        _, out, _ = self.as_user("alice", "logs", job, "--no-follow")
        lines = out.splitlines()
        self.assertEqual(lines[0], str(alice.pw_uid))
        self.assertEqual(lines[1], str(alice.pw_gid))
        self.assertEqual(lines[2], f"HOME=/nonexistent USER={alice.pw_name} LOGNAME={alice.pw_name}")
        self.assertNotIn("AGENT-READABLE", out)
        self.assertNotIn("TOKEN-READABLE", out)
        # The job's files are hers; its environment holds no credential and no path to one.
        self.assertEqual(os.stat(os.path.join(self.work, "mine")).st_uid, alice.pw_uid)
        with open(os.path.join(self.work, "env.txt")) as f:
            env = f.read()
        with open(os.path.join(server_state, "token")) as f:
            cluster_token = f.read().strip()
        self.assertNotIn(cluster_token, env)
        self.assertNotIn("TOKEN", env.upper().replace("TOKENIZERS", ""))
        self.assertNotIn(server_state, env)
        # The one path below the agent's state dir a job is told is its user's own image store's
        # podman (on a node that runs containers: $BERTH_PODMAN, theirs, 0700, under dirs that can
        # be crossed but not listed).
        own_store = os.path.join(agent_state, "containers", str(alice.pw_uid)) + "/podman"
        self.assertNotIn(agent_state, "\n".join(line for line in env.splitlines()
                                                if line != "BERTH_PODMAN=" + own_store))

        # The daemons' files are private.
        self.assertEqual(stat.S_IMODE(os.stat(server_state).st_mode), 0o711)
        for name in ("berth.db", "token"):
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(server_state, name)).st_mode), 0o600, name)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(server_state, "logs")).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(self.sock).st_mode), 0o666)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(agent_state, "jobs")).st_mode), 0o711)

        # A user the node does not know fails that job alone, with the reason.
        token = json.loads(self.as_user("root", "admin", "token", "create", "--user", "nobody-here-xyz",
                                        "--json")[1])["token"]
        status, body, _ = http("POST", self.server.url + "/v1/jobs", json.dumps({"spec": {"run": "true"}}),
                               token=token)
        self.assertEqual(status, 201, body)
        failed = self.wait_status(body["jobs"][0], "FAILED", "SUCCEEDED")
        self.assertEqual(failed["status"], "FAILED")
        self.assertIn("user 'nobody-here-xyz' does not exist on this node", failed["reason"])

    def test_a_work_dir_the_user_booby_trapped_is_removed_without_following_its_links(self):
        """The agent removed a work dir its user could not remove as root, by path, walking a tree the
        user could still change. The job here leaves a read-only directory and links to a root file
        and a root directory in its work dir: the tree goes (as its user, who may write to it again),
        and what the links point at stays."""
        self.start()
        alice = self.users["alice"]
        victim_dir = self.path("root-only")
        os.makedirs(victim_dir)
        os.chmod(victim_dir, 0o755)
        victim = os.path.join(victim_dir, "precious")
        with open(victim, "w") as f:
            f.write("root's\n")
        token = json.loads(self.as_user("root", "admin", "token", "create", "--user", alice.pw_name,
                                        "--json")[1])["token"]
        run = (f"mkdir -p ro/deeper && echo x > ro/deeper/f && ln -s {victim} ro/file-link && "
               f"ln -s {victim_dir} ro/dir-link && chmod 500 ro/deeper ro && pwd > /dev/stderr")
        status, body, _ = http("POST", self.server.url + "/v1/jobs", json.dumps({"spec": {"run": run}}),
                               token=token)
        self.assertEqual(status, 201, body)
        job = body["jobs"][0]
        done = self.wait_status(job, "SUCCEEDED", "FAILED")
        self.assertEqual(done["status"], "SUCCEEDED", done)
        jobs_dir = os.path.join(self.agent.state_dir, "jobs")

        def work_dirs_left():
            return [os.path.join(d, "work") for d in (os.path.join(jobs_dir, e) for e in os.listdir(jobs_dir))
                    if os.path.lexists(os.path.join(d, "work"))]
        self.b.wait_until(lambda: not work_dirs_left(), 30, message="the job's work dir to be removed")
        with open(victim) as f:
            self.assertEqual(f.read(), "root's\n")
        self.assertTrue(os.path.isdir(victim_dir))

    def test_idle_and_slow_clients_do_not_stall_others(self):
        self.start()
        host, port = self.server.url.rsplit("/", 1)[-1].rsplit(":", 1)
        idle = []
        for _ in range(300):
            s = socket.create_connection((host, int(port)))
            idle.append(s)
        self.addCleanup(lambda: [s.close() for s in idle])
        stop = threading.Event()

        def slow_header():
            with socket.create_connection((host, int(port))) as s:
                for c in b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                    if stop.is_set():
                        return
                    try:
                        s.send(bytes([c]))
                    except OSError:
                        return  # closed by the server's header deadline: as it should
                    time.sleep(1)
        t = threading.Thread(target=slow_header, daemon=True)
        t.start()
        self.addCleanup(stop.set)
        time.sleep(0.5)
        latencies = []
        for _ in range(7):
            t0 = time.perf_counter()
            status, _, _ = http("GET", self.server.url + "/v1/jobs")
            latencies.append((time.perf_counter() - t0) * 1000)
            self.assertEqual(status, 200)
        _, out, _ = self.as_user("alice", "queue")
        median = statistics.median(latencies)
        print(f"/v1/jobs with 300 idle connections and a slow-header client: median {median:.1f} ms, "
              f"max {max(latencies):.1f} ms")
        self.assertLess(median, 100 * SCALE)


if __name__ == "__main__":
    unittest.main()

"""Per-node credentials (docs/security.md "Node credentials"): a node may touch only its own jobs.

An admin makes a join token; an agent started with --join-token-file exchanges it, at its first start,
for its node's own credential, kept mode 0600 in its state dir and used from then on. A one-use join
token is used up; a join token is good for nothing but joining; a name that holds a live credential
cannot be taken. A node's credential speaks for that node only: the server refuses (403) its log
appends, spec reads and reports about a job placed on another node, and any call naming another node.
Through its user socket it speaks only for the users an admin named for it. `berth admin node revoke`
ends it at once.
"""

import json
import os
import signal
import stat
import unittest

from harness import BerthTestCase, http, wait_until


class NodeCredentialsTest(BerthTestCase):

    def join_token(self, env, *extra):
        _, out, _ = self.b.run("admin", "node", "join-token", "--json", *extra, env=env)
        return json.loads(out)["token"]

    def test_a_join_never_takes_a_cluster_token_nodes_name(self):
        """A join token could take the name of a node that registers with the cluster token once its
        lease lapsed. The name stays its own while the cluster remembers it; an admin frees it."""
        b = self.b
        server = b.start_server(extra=["--require-token", "--lease", "1s"])
        url = server.url
        env = {"BERTH_SERVER": "unix:" + os.path.join(server.state_dir, "berth.sock")}
        legacy = b.start_agent(url, name="legacy", gpus="",
                               extra=["--token-file", os.path.join(server.state_dir, "token")])
        b.wait_nodes_up(["legacy"], env=env)
        legacy.kill(signal.SIGKILL)
        b.wait_until(lambda: b.nodes(env=env)[0]["state"] == "DOWN", 30, message="legacy's lease to lapse")
        join = self.join_token(env, "--reusable")
        status, body, _ = http("POST", url + "/v1/agent/join", json.dumps({"node": "legacy"}), token=join)
        self.assertEqual(status, 409, body)
        self.assertIn("registers with the cluster token", body["error"])
        self.assertIn("berth admin node revoke legacy", body["error"])
        b.run("admin", "node", "revoke", "legacy", env=env)
        status, body, _ = http("POST", url + "/v1/agent/join", json.dumps({"node": "legacy"}), token=join)
        self.assertEqual(status, 201, body)

    def test_a_node_touches_only_its_own_jobs(self):
        b = self.b
        server = b.start_server(extra=["--require-token"])
        url = server.url
        env = {"BERTH_SERVER": "unix:" + os.path.join(server.state_dir, "berth.sock")}

        # A join token joins, and does nothing else.
        join = self.join_token(env)
        for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/agent/heartbeat"), ("GET", "/v1/nodes")):
            status, body, _ = http(method, url + path, "{}" if method == "POST" else None, token=join)
            self.assertEqual(status, 403, f"{path}: {body}")
            self.assertIn("join token may only join", body["error"])

        # node-a joins with it: its credential is kept 0600 and used from then on.
        join_file = self.write("join.token", join + "\n", mode=0o600)
        a = b.start_agent(url, name="node-a", gpus="", extra=["--join-token-file", join_file])
        b.wait_nodes_up(["node-a"], env=env)
        cred_path = os.path.join(a.state_dir, "node-credential")
        self.assertEqual(stat.S_IMODE(os.stat(cred_path).st_mode), 0o600)
        with open(cred_path) as f:
            cred_a = f.read().strip()
        self.assertIn("joined with join token", server.log())

        # The token was for one node: a second agent with it is refused and says why.
        stray = b.start_agent(url, name="node-x", gpus="", extra=["--join-token-file", join_file])
        self.assertNotEqual(stray.proc.wait(timeout=30), 0)
        self.assertIn("used or revoked", stray.log())

        # node-b joins with a reusable token, which cannot take node-a's name.
        reusable = self.join_token(env, "--reusable", "--expires", "10m", "--users", "alice")
        node_b = b.start_agent(url, name="node-b", gpus="V100:1",
                               extra=["--join-token-file", self.write("join2.token", reusable + "\n")])
        b.wait_nodes_up(["node-b"], env=env)
        status, body, _ = http("POST", url + "/v1/agent/join", json.dumps({"node": "node-a"}), token=reusable)
        self.assertEqual(status, 409, body)
        self.assertIn("berth admin node revoke node-a", body["error"])

        # node-b speaks for alice, the user its join token named, and for no one else until an
        # admin says so; never for an admin.
        with open(os.path.join(node_b.state_dir, "node-credential")) as f:
            cred_b = f.read().strip()

        def whoami_through_node_b(user):
            return http("GET", url + "/v1/whoami", token=cred_b, headers={"X-Berth-On-Behalf-Of": user})[:2]

        status, answer = whoami_through_node_b("alice")
        self.assertEqual((status, answer.get("user")), (200, "alice"), answer)
        status, answer = whoami_through_node_b("bob")
        self.assertEqual(status, 403, answer)
        self.assertIn("berth admin node users node-b alice,bob", answer["error"])
        _, out, _ = b.run("admin", "node", "users", "node-b", "bob", env=env)
        self.assertIn("node-b now speaks for bob", out)
        self.assertEqual(whoami_through_node_b("bob")[0], 200)
        self.assertEqual(whoami_through_node_b("alice")[0], 403)
        self.assertEqual(whoami_through_node_b("root")[0], 403)
        _, out, _ = b.run("admin", "token", "list", "--json", env=env)
        b_tokens = [t for t in json.loads(out) if t["user"] == "node:node-b"]
        self.assertEqual([t["speaks_for"] for t in b_tokens], [["bob"]])
        b.run("admin", "node", "users", "node-b", "*", env=env)
        self.assertEqual(whoami_through_node_b("alice")[0], 200)

        # A job on node-b (the only node with a GPU), running.
        job = b.submit("--gpus", "V100:1", "--", "echo secret-out; sleep 600", env=env)
        b.wait_status(job, "RUNNING", env=env)
        self.assertEqual(b.show(job, env=env)["placement"][0]["node"], "node-b")

        # node-a's credential may not name node-b, in any call.
        for method, path, body in (
                ("POST", "/v1/agent/heartbeat", {"node": "node-b", "session": "x"}),
                ("POST", "/v1/agent/report", {"node": "node-b", "session": "x", "reports": []}),
                ("POST", f"/v1/agent/logs?node=node-b&session=x&job={job}&attempt=1&rank=0&offset=0", "forged"),
                ("POST", "/v1/agent/logs/batch?node=node-b&session=x",
                 f'{{"job":{job},"attempt":1,"rank":0,"offset":0,"size":6}}\nforged'),
                ("GET", f"/v1/specs/1?node=node-b&session=x&job={job}", None),
                ("GET", "/v1/agent/watch?node=node-b&session=x", None)):
            data = body if isinstance(body, str) or body is None else json.dumps(body)
            status, answer, _ = http(method, url + path, data, token=cred_a)
            self.assertEqual(status, 403, f"{path}: {answer}")
            self.assertIn("node node-a's credential", answer["error"])

        # Holding node-a's own session does not help either: node-a's agent stopped, the test
        # registers as node-a with its credential and identity, then touches node-b's job.
        a.kill(signal.SIGTERM)
        with open(os.path.join(a.state_dir, "node_id")) as f:
            node_id = f.read().strip()
        status, reg, _ = http("POST", url + "/v1/agent/register",
                              json.dumps({"name": "node-a", "node_id": node_id, "cpus_milli": 1000,
                                          "memory_mib": 1024}), token=cred_a)
        self.assertEqual(status, 200, reg)
        session = reg["session"]
        where = f"node=node-a&session={session}&job={job}"
        status, answer, _ = http("POST", url + f"/v1/agent/logs?{where}&attempt=1&rank=0&offset=0",
                                 "forged output\n", token=cred_a)
        self.assertEqual(status, 403, answer)
        self.assertIn("node node-a holds no rank 0 of job", answer["error"])
        # In a batch, the piece is refused on its own and tells nothing of node-b's log (its size
        # is where the piece said it starts).
        piece = f'{{"job":{job},"attempt":1,"rank":0,"offset":3,"size":14}}\nforged output\n'
        status, answer, _ = http("POST", url + f"/v1/agent/logs/batch?node=node-a&session={session}",
                                 piece, token=cred_a)
        self.assertEqual(status, 200, answer)
        self.assertEqual(len(answer["results"]), 1, answer)
        self.assertEqual(answer["results"][0]["size"], 3, answer)
        self.assertIn("node node-a holds no rank 0 of job", answer["results"][0]["error"])
        status, answer, _ = http("POST", url + "/v1/agent/logs/batch?node=node-a&session=stale",
                                 piece, token=cred_a)
        self.assertEqual(status, 409, answer)
        status, answer, _ = http("GET", url + f"/v1/specs/1?{where}", token=cred_a)
        self.assertEqual(status, 403, answer)
        report = {"node": "node-a", "session": session,
                  "reports": [{"job": job, "attempt": 1, "rank": 0, "event": "exited", "exit_code": 0}]}
        status, answer, _ = http("POST", url + "/v1/agent/report", json.dumps(report), token=cred_a)
        self.assertEqual(status, 403, answer)
        self.assertEqual(b.status(job, env=env), "RUNNING")
        wait_until(lambda: "secret-out" in b.run("logs", job, "--no-follow", env=env)[1], 30)
        self.assertNotIn("forged", b.run("logs", job, "--no-follow", env=env)[1])

        # Revoked: node-a's credential is refused at once; the audit log says who did what.
        _, out, _ = b.run("admin", "node", "revoke", "node-a", env=env)
        self.assertIn("revoked", out)
        status, answer, _ = http("POST", url + "/v1/agent/heartbeat",
                                 json.dumps({"node": "node-a", "session": session}), token=cred_a)
        self.assertEqual(status, 401, answer)
        self.assertIn("revoked", answer["error"])
        _, out, _ = b.run("admin", "audit", "--json", env=env)
        actions = [e["action"] for e in json.loads(out)]
        for action in ("join-token create", "node join", "node users", "node revoke"):
            self.assertIn(action, actions)
        b.run("cancel", job, env=env)


if __name__ == "__main__":
    unittest.main()

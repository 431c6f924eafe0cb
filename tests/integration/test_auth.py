"""The cluster token.

An operator starts a server that requires a token. Anyone without it (or with a wrong one) gets 401 and a
JSON error saying what to do; an agent given the token joins, and a user passing it by flag, by BERTH_TOKEN
or by BERTH_TOKEN_FILE can run jobs. A server told to require a token but given none makes one, stores it
mode 0600 in its state dir, and keeps it across restarts.
"""

import os
import stat
import unittest

from harness import BerthTestCase, http


class AuthTest(BerthTestCase):

    def test_token_required(self):
        b = self.b
        token_file = self.write("cluster.token", "s3cret-token-value\n")
        server = b.start_server(extra=["--require-token", "--token-file", token_file])
        url = server.url
        token = "s3cret-token-value"

        # Without the token, or with a wrong one, every endpoint answers 401 with a JSON error.
        for path in ("/v1/health", "/v1/jobs", "/v1/nodes", "/v1/jobs/1", "/v1/nope"):
            for bad in (None, "wrong", token + "x"):
                status, body, _ = http("GET", url + path, token=bad)
                self.assertEqual(status, 401, f"{path} with token {bad!r}: {body}")
                self.assertIn("token", body["error"])
        status, body, _ = http("POST", url + "/v1/jobs", '{"spec": {"run": "true"}}')
        self.assertEqual(status, 401)
        status, body, _ = http("GET", url + "/v1/health", headers={"Authorization": token})  # no "Bearer"
        self.assertEqual(status, 401)
        status, body, _ = http("GET", url + "/v1/health", token=token)
        self.assertEqual((status, body["ok"]), (200, True))

        # An agent without the token cannot join, and says why.
        stray = b.start_agent(url, name="stray", gpus="V100:1")
        self.assertNotEqual(stray.proc.wait(timeout=30), 0)
        self.assertIn("token", stray.log())
        # With it, it joins.
        b.start_agent(url, name="node-0", gpus="V100:2", extra=["--token", token])
        b.wait_nodes_up(["node-0"], env={"BERTH_SERVER": url, "BERTH_TOKEN": token})
        self.assertEqual([n["name"] for n in b.nodes(env={"BERTH_SERVER": url, "BERTH_TOKEN": token})],
                         ["node-0"])

        # The CLI without the token is refused, with the reason.
        rc, _, err = b.run("queue", "--server", url, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("token", err)
        rc, _, err = b.run("exec", "--server", url, "--token", "wrong", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("token", err)

        # With the token, by flag, by environment or by file, it works.
        rc, out, err = b.run("exec", "--server", url, "--token", token, "--gpus", "V100:1", "--", "echo by flag")
        self.assertEqual(out, "by flag\n")
        rc, out, err = b.run("exec", "--", "echo by env", env={"BERTH_SERVER": url, "BERTH_TOKEN": token})
        self.assertEqual(out, "by env\n")
        rc, out, err = b.run("exec", "--", "echo by file", env={"BERTH_SERVER": url, "BERTH_TOKEN_FILE": token_file})
        self.assertEqual(out, "by file\n")
        jobs = b.queue(env={"BERTH_SERVER": url, "BERTH_TOKEN": token})
        self.assertEqual([j["status"] for j in jobs], ["SUCCEEDED"] * 3)
        _, out, _ = b.run("logs", jobs[-1]["id"], "--server", url, "--token", token)
        self.assertEqual(out, "by flag\n")

    def test_generated_token(self):
        b = self.b
        state = self.path("state")
        server = b.start_server(state_dir=state, extra=["--require-token"])
        token_path = os.path.join(state, "token")
        self.assertTrue(os.path.exists(token_path))
        self.assertEqual(stat.S_IMODE(os.stat(token_path).st_mode), 0o600)
        with open(token_path) as f:
            token = f.read().strip()
        self.assertGreaterEqual(len(token), 32)
        status, _, _ = http("GET", server.url + "/v1/health")
        self.assertEqual(status, 401)
        status, _, _ = http("GET", server.url + "/v1/health", token=token)
        self.assertEqual(status, 200)
        # The agent and the CLI can use the file.
        b.start_agent(server.url, name="node-0", gpus="V100:1", extra=["--token-file", token_path])
        env = {"BERTH_SERVER": server.url, "BERTH_TOKEN_FILE": token_path}
        b.wait_nodes_up(["node-0"], env=env)
        self.assertEqual(b.run("exec", "--", "echo ok", env=env)[1], "ok\n")
        # A restart keeps the token.
        server.kill()
        server = b.start_server(state_dir=state, extra=["--require-token"])
        with open(token_path) as f:
            self.assertEqual(f.read().strip(), token)
        status, _, _ = http("GET", server.url + "/v1/health", token=token)
        self.assertEqual(status, 200)

    def test_loopback_server_needs_no_token_by_default(self):
        server = self.b.start_server()
        status, body, _ = http("GET", server.url + "/v1/health")
        self.assertEqual(status, 200, body)
        self.assertFalse(os.path.exists(os.path.join(server.state_dir, "token")))


if __name__ == "__main__":
    unittest.main()

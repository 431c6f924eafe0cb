"""Tokens: the cluster token for nodes, users' own tokens for people.

A server made to require tokens on TCP (as any server off loopback does) answers requests from nobody
with 401 and a JSON error saying what to do; /v1/health stays open for probes. Agents join with the
cluster token, which the users' API refuses: it identifies nodes, never a user. An admin on the server's
machine (identified by the unix socket) issues users their own tokens, presented by flag, by BERTH_TOKEN,
by BERTH_TOKEN_FILE or saved by `berth login`. The generated cluster token is kept mode 0600 across
restarts. A loopback server needs no token at all from local users: the kernel says who they are.
"""

import os
import stat
import unittest

from harness import BerthTestCase, http, http_unix


class AuthTest(BerthTestCase):

    def admin_token(self, sock, user, **fields):
        """A token for `user`, issued over the unix socket (the test runs as root: an admin)."""
        import json
        status, body = http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": user, **fields}))
        self.assertEqual(status, 201, body)
        return body["token"]

    def test_tokens_on_tcp(self):
        b = self.b
        cluster_file = self.write("cluster.token", "s3cret-cluster-token\n")
        server = b.start_server(extra=["--require-token", "--token-file", cluster_file])
        url = server.url
        sock = os.path.join(server.state_dir, "berth.sock")
        cluster = "s3cret-cluster-token"

        # Nobody, or a wrong token: 401 with a JSON error saying what to do. Health stays open.
        for path in ("/v1/jobs", "/v1/nodes", "/v1/jobs/1", "/v1/whoami", "/v1/nope"):
            for bad in (None, "wrong", cluster + "x"):
                status, body, _ = http("GET", url + path, token=bad)
                self.assertEqual(status, 401, f"{path} with token {bad!r}: {body}")
                self.assertIn("token", body["error"])
        status, _, _ = http("POST", url + "/v1/jobs", '{"spec": {"run": "true"}}')
        self.assertEqual(status, 401)
        status, body, _ = http("GET", url + "/v1/jobs", headers={"Authorization": cluster})  # no "Bearer"
        self.assertEqual(status, 401)
        status, body, _ = http("GET", url + "/v1/health")
        self.assertEqual((status, body["ok"]), (200, True))

        # The cluster token is a node's credential: the users' API refuses it, saying so.
        status, body, _ = http("GET", url + "/v1/jobs", token=cluster)
        self.assertEqual(status, 403, body)
        self.assertIn("identifies nodes, not users", body["error"])
        rc, _, err = b.run("queue", "--server", url, "--token", cluster, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("nodes, not users", err)

        # An agent without it cannot join, and says why; with it, it joins.
        stray = b.start_agent(url, name="stray", gpus="V100:1")
        self.assertNotEqual(stray.proc.wait(timeout=30), 0)
        self.assertIn("token", stray.log())
        b.start_agent(url, name="node-0", gpus="V100:2", extra=["--token", cluster])

        # A user's token works where the cluster token does not: by flag, environment, file or login.
        token = self.admin_token(sock, "root", name="root-remote")
        env = {"BERTH_SERVER": url, "BERTH_TOKEN": token}
        b.wait_nodes_up(["node-0"], env=env)
        status, body, _ = http("GET", url + "/v1/whoami", token=token)
        self.assertEqual((status, body["user"], body["via"]), (200, "root", "token root-remote"), body)
        # ...but it does not make its bearer a node.
        status, body, _ = http("POST", url + "/v1/agent/heartbeat", "{}", token=token)
        self.assertEqual(status, 403, body)
        self.assertIn("cluster token", body["error"])

        rc, out, err = b.run("exec", "--server", url, "--token", token, "--gpus", "V100:1", "--", "echo by flag")
        self.assertEqual(out, "by flag\n")
        rc, out, err = b.run("exec", "--", "echo by env", env=env)
        self.assertEqual(out, "by env\n")
        token_file = self.write("my.token", token + "\n")
        rc, out, err = b.run("exec", "--", "echo by file", env={"BERTH_SERVER": url, "BERTH_TOKEN_FILE": token_file})
        self.assertEqual(out, "by file\n")
        rc, out, err = b.run("login", "--server", url, "--token-file", token_file)
        self.assertIn("as root", out)
        config = os.path.join(b.home, "config")
        self.assertEqual(stat.S_IMODE(os.stat(config).st_mode), 0o600)
        rc, out, err = b.run("exec", "--", "echo by login")  # no flag, no env: the saved login
        self.assertEqual(out, "by login\n")
        jobs = b.queue(env=env)
        self.assertEqual([j["status"] for j in jobs], ["SUCCEEDED"] * 4)
        _, out, _ = b.run("logs", jobs[-1]["id"], "--server", url, "--token", token)
        self.assertEqual(out, "by flag\n")

    def test_a_stranger_spends_no_memory_and_connections_are_capped(self):
        """Eight unauthenticated connections declaring 64 MiB bodies took a server from 69 to 561 MB:
        bodies were read whole before anyone asked who sent them. Now each is answered 401 from its
        headers, its body unread, and connections past the cap are refused, 503, naming the limit."""
        import socket
        import time
        server = self.b.start_server(extra=["--require-token", "--max-connections", "16"])
        port = int(server.url.rsplit(":", 1)[1])
        answers = []
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 67108000\r\n\r\n")
            start = time.monotonic()
            data = s.recv(4096).decode(errors="replace")
            answers.append((time.monotonic() - start, data))
            s.close()
        for elapsed, data in answers:
            self.assertTrue(data.startswith("HTTP/1.1 401"), data)
            self.assertIn("token", data)
            self.assertLess(elapsed, 5)  # answered at once, not after a body that never comes
        # Past 16 open connections, the 17th is refused and closed.
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(16)]
        self.addCleanup(lambda: [h.close() for h in held])
        self.b.wait_until(lambda: self.refused(port), 10, message="a refusal past the cap")

    @staticmethod
    def refused(port):
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = s.recv(4096).decode(errors="replace")
        return data.startswith("HTTP/1.1 503") and "--max-connections" in data

    def test_generated_cluster_token(self):
        b = self.b
        state = self.path("state")
        server = b.start_server(state_dir=state, extra=["--require-token"])
        token_path = os.path.join(state, "token")
        self.assertTrue(os.path.exists(token_path))
        self.assertEqual(stat.S_IMODE(os.stat(token_path).st_mode), 0o600)
        with open(token_path) as f:
            token = f.read().strip()
        self.assertGreaterEqual(len(token), 32)
        # The agent uses the file; a user on this machine the unix socket.
        b.start_agent(server.url, name="node-0", gpus="V100:1", extra=["--token-file", token_path])
        env = {"BERTH_SERVER": "unix:" + os.path.join(state, "berth.sock")}
        b.wait_nodes_up(["node-0"], env=env)
        self.assertEqual(b.run("exec", "--", "echo ok", env=env)[1], "ok\n")
        # A restart keeps the token.
        server.kill()
        server = b.start_server(state_dir=state, extra=["--require-token"])
        with open(token_path) as f:
            self.assertEqual(f.read().strip(), token)
        status, _, _ = http("GET", server.url + "/v1/agent/heartbeat", token=token)
        self.assertNotIn(status, (401, 403))

    def test_tls_on_loopback_with_a_pinned_certificate(self):
        """--tls serves HTTPS on loopback too (as always off loopback): the CLI pins the certificate's
        fingerprint; a wrong pin, or plain HTTP to the TLS port, is refused with the reason."""
        b = self.b
        server = b.start_server(extra=["--tls"])
        self.assertTrue(server.url.startswith("https://127.0.0.1:"), server.url)
        with open(os.path.join(server.state_dir, "tls.fingerprint")) as f:
            fingerprint = f.read().strip()
        key = os.path.join(server.state_dir, "tls.key")
        self.assertEqual(stat.S_IMODE(os.stat(key).st_mode), 0o600)
        sock = os.path.join(server.state_dir, "berth.sock")
        token = self.admin_token(sock, "root", name="tls-user")
        token_file = self.write("tls.token", token + "\n")
        rc, out, err = b.run("login", "--server", server.url, "--token-file", token_file, "--trust")
        self.assertIn(fingerprint, out)
        rc, out, err = b.run("whoami", "--json")
        self.assertIn('"via":"token tls-user"', out)
        rc, out, err = b.run("whoami", "--server", server.url, "--token", token, check=False,
                             env={"BERTH_TLS_FINGERPRINT": "sha256:" + "ab" * 32})
        self.assertNotEqual(rc, 0)
        self.assertIn(fingerprint, err)
        rc, out, err = b.run("whoami", "--server", server.url.replace("https:", "http:"), check=False)
        self.assertNotEqual(rc, 0)

    def test_loopback_users_need_no_token(self):
        server = self.b.start_server()
        status, body, _ = http("GET", server.url + "/v1/whoami")
        self.assertEqual(status, 200, body)
        self.assertEqual((body["user"], body["via"], body["role"]), ("root", "loopback", "admin"))
        status, body = http_unix("GET", os.path.join(server.state_dir, "berth.sock"), "/v1/whoami")
        self.assertEqual((status, body["via"]), (200, "socket"), body)
        # A revoked or expired token is refused even where no token is needed: it says who it is not.
        sock = os.path.join(server.state_dir, "berth.sock")
        token = self.admin_token(sock, "root", name="short", expires_in_ms=1500)
        status, body, _ = http("GET", server.url + "/v1/whoami", token=token)
        self.assertEqual((status, body["via"]), (200, "token short"))
        self.b.wait_until(lambda: http("GET", server.url + "/v1/whoami", token=token)[0] == 401, 30,
                          message="the token to expire")
        status, body, _ = http("GET", server.url + "/v1/whoami", token=token)
        self.assertIn("expired", body["error"])
        token2 = self.admin_token(sock, "root", name="revoked")
        status, body = http_unix("POST", sock, "/v1/admin/tokens/revoked/revoke")
        self.assertEqual(status, 200, body)
        status, body, _ = http("GET", server.url + "/v1/whoami", token=token2)
        self.assertEqual(status, 401)
        self.assertIn("revoked", body["error"])


if __name__ == "__main__":
    unittest.main()

"""Agents on separate network hosts: BERTH_NODE_IPS holds distinct addresses (issue "Multi-node jobs").

Two network namespaces made by the test (skipped where it cannot make them), each joined to this host by
a veth pair: host side 10.213.N.1, namespace side 10.213.N.2. The server listens on 10.213.1.1 — not
loopback, so it demands the cluster token — and one agent runs inside each namespace. The server learns
each node's address from its connection, and a 2-node job sees both, in rank order.
"""
import os
import subprocess
import unittest
import uuid

from harness import BerthTestCase, BERTH_BIN


def sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check)


class NetnsTest(BerthTestCase):
    def setUp(self):
        super().setUp()
        tag = uuid.uuid4().hex[:6]
        self.ns = [f"berth-{tag}-{i}" for i in (1, 2)]
        try:
            for i, ns in enumerate(self.ns, start=1):
                self.addCleanup(sh, "ip", "netns", "del", ns, check=False)
                self.addCleanup(sh, "ip", "link", "del", f"bh{tag}{i}", check=False)
                sh("ip", "netns", "add", ns)
                sh("ip", "link", "add", f"bh{tag}{i}", "type", "veth", "peer", "name", f"bn{tag}{i}")
                sh("ip", "link", "set", f"bn{tag}{i}", "netns", ns)
                sh("ip", "addr", "add", f"10.213.{i}.1/24", "dev", f"bh{tag}{i}")
                sh("ip", "link", "set", f"bh{tag}{i}", "up")
                sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.213.{i}.2/24", "dev", f"bn{tag}{i}")
                sh("ip", "netns", "exec", ns, "ip", "link", "set", f"bn{tag}{i}", "up")
                sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
                sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"10.213.{i}.1")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            raise unittest.SkipTest(f"cannot create network namespaces here: {e}")

    def test_node_ips_are_the_addresses_the_server_sees(self):
        """Off loopback the server speaks TLS with a self-signed certificate made at first start; agents
        in other network namespaces pin its fingerprint and join with the cluster token."""
        token = "netns-test-token"
        server = self.b.start_server(listen="10.213.1.1:0", extra=("--token", token))
        self.assertTrue(server.url.startswith("https://10.213.1.1:"), server.url)
        with open(os.path.join(server.state_dir, "tls.fingerprint")) as f:
            fingerprint = f.read().strip()
        self.assertRegex(fingerprint, r"^sha256:[0-9a-f]{64}$")
        self.assertIn(fingerprint, server.log())  # printed for the admin to hand out
        # Users on the server's machine: the unix socket.
        self.b.env["BERTH_SERVER"] = "unix:" + os.path.join(server.state_dir, "berth.sock")
        for i, ns in enumerate(self.ns, start=1):
            state = self.path(f"agent{i}")
            os.makedirs(state)
            with open(self.path(f"agent{i}.log"), "w") as log:
                proc = subprocess.Popen(["ip", "netns", "exec", ns, BERTH_BIN, "agent", "--server", server.url,
                                         "--tls-fingerprint", fingerprint, "--token", token,
                                         "--name", f"host{i}", "--state-dir", state,
                                         "--gpus", "V100:4"], env=self.b.env, stdout=log,
                                        stderr=subprocess.STDOUT)
            self.addCleanup(lambda p=proc: (p.terminate(), p.wait()))
        self.b.wait_nodes_up(["host1", "host2"])

        # A remote user: their own token over TLS, the pin from `berth login` (trust on first use).
        rc, out, err = self.b.run("admin", "token", "create", "--user", "root", "--name", "remote")
        user_token = out.strip()
        token_file = self.write("user.token", user_token + "\n")
        remote = dict(self.b.env)
        remote["BERTH_SERVER"] = ""  # as if unset: the saved login says where
        rc, out, err = self.b.run("login", "--server", server.url, "--token-file", token_file, check=False,
                                  env=remote)
        self.assertNotEqual(rc, 0)  # not confirmed: nothing sent, nothing saved
        self.assertIn(fingerprint, out)
        self.assertIn("--fingerprint " + fingerprint, err)
        self.assertFalse(os.path.exists(os.path.join(self.b.home, "config")))
        rc, out, err = self.b.run("login", "--server", server.url, "--token-file", token_file, "--fingerprint",
                                  fingerprint, env=remote)
        self.assertIn("as root", out)
        with open(os.path.join(self.b.home, "config")) as f:
            self.assertIn(fingerprint, f.read())
        rc, out, err = self.b.run("whoami", "--json", env=remote)
        self.assertIn('"via":"token remote"', out)
        # A wrong pin is refused, naming both fingerprints; so is plain HTTP to the TLS port.
        wrong = "sha256:" + "0" * 64
        rc, out, err = self.b.run("queue", "--server", server.url, "--token", user_token, check=False,
                                  env=dict(remote, BERTH_TLS_FINGERPRINT=wrong))
        self.assertNotEqual(rc, 0)
        self.assertIn(wrong, err)
        self.assertIn(fingerprint, err)
        rc, out, err = self.b.run("queue", "--server", server.url.replace("https", "http"), "--token",
                                  user_token, check=False, env=remote)
        self.assertNotEqual(rc, 0)
        addresses = {n["name"]: n["address"] for n in self.b.nodes()}
        self.assertEqual(addresses, {"host1": "10.213.1.2", "host2": "10.213.2.2"})
        task = self.write("dist.yaml", "num_nodes: 2\nresources: {accelerators: V100:4}\n"
                                       "run: echo \"$BERTH_NODE_RANK $(echo \"$BERTH_NODE_IPS\" | paste -sd,)\"\n")
        job = self.b.submit(task)
        done = self.b.wait_status(job, "SUCCEEDED", timeout=60)
        ips = [addresses[p["node"]] for p in done["placement"]]
        self.assertEqual(len(set(ips)), 2)
        logs = self.b.run("logs", job, "--rank", 0, "--no-follow")[1]
        self.assertEqual(logs.strip(), "0 " + ",".join(ips))


if __name__ == "__main__":
    unittest.main()

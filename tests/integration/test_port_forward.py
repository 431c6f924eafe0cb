"""`berth port-forward`: a local port reaches an HTTP server a running job started (small pages
and a 6 MiB file, over several connections at once); a port nothing of the job listens on is
refused with the reason, and (with cgroups) so is one another process of the same user listens on;
the command ends when the job does. Another user's job is refused before anything listens (403);
an operator may, on the audit record.
"""

import concurrent.futures
import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request

from harness import SCALE, BerthTestCase, http_unix


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class PortForwardTest(BerthTestCase):

    def serve_job(self, env=None):
        """A job serving its own directory over HTTP on a free port: (job, port, site dir)."""
        site = self.path("site")
        os.makedirs(site, exist_ok=True)
        self.write("site/hello.txt", "hello from the job\n")
        with open(os.path.join(site, "big.bin"), "wb") as f:
            f.write(os.urandom(6 << 20))
        port = free_port()
        job = self.b.submit("--", f"exec /usr/bin/python3 -m http.server {port} --bind 127.0.0.1 "
                                  f"--directory {site}", env=env)
        self.b.wait_status(job, "RUNNING", env=env)
        self.b.wait_until(lambda: listening(port), message="the job's HTTP server")
        return job, port, site

    def start_forward(self, *args, env=None):
        """`berth port-forward ARGS` in the background: (process, local port)."""
        p = self.b.popen("port-forward", *args, env=env)
        line = p.stdout.readline()
        self.assertTrue(line.startswith("Forwarding 127.0.0.1:"), line + p.stderr.read()
                        if p.poll() is not None else line)
        return p, int(line.split()[1].split(":")[1])

    def refused(self, job, port):
        """A connection forwarded to `port` of `job` that the node refuses: it is closed at once, and
        the command's stderr (returned) says why."""
        forward, local = self.start_forward(job, f":{port}")
        with socket.create_connection(("127.0.0.1", local), timeout=10) as s:
            s.settimeout(30 * SCALE)
            self.assertEqual(s.recv(100), b"")
        forward.terminate()
        return forward.communicate(timeout=30)[1]

    def test_reaches_the_jobs_server_and_ends_with_the_job(self):
        b = self.b
        b.local_up("", 1, "--cpus", "4")
        job, port, site = self.serve_job()
        forward, local = self.start_forward(job, f":{port}")

        url = f"http://127.0.0.1:{local}"
        with urllib.request.urlopen(f"{url}/hello.txt", timeout=30 * SCALE) as r:
            self.assertEqual(r.read(), b"hello from the job\n")
        with open(os.path.join(site, "big.bin"), "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()

        def fetch(_):
            with urllib.request.urlopen(f"{url}/big.bin", timeout=60 * SCALE) as r:
                return hashlib.sha256(r.read()).hexdigest()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            self.assertEqual(list(pool.map(fetch, range(4))), [want] * 4)

        # Nothing of the job's listens on this port: the connection is refused, saying why.
        empty = free_port()
        self.assertIn(f"nothing listens on port {empty}", self.refused(job, empty))

        # The job ends: so does the forward.
        b.run("cancel", job)
        rc = forward.wait(timeout=30 * SCALE)
        err = forward.stderr.read()
        self.assertEqual(rc, 0, err)
        self.assertIn(f"job {job} is CANCELLED: port-forward ends", err)

    def test_a_port_of_another_process_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("telling a rank's processes apart needs cgroups, which need root")
        b = self.b
        b.local_up("", 1, "--cpus", "4")
        node = b.nodes()[0]
        if node["isolation"] not in ("v1", "v2"):
            self.skipTest(f"the node has no cgroups ({node['isolation']})")
        job = b.submit("--", "sleep 300")
        b.wait_status(job, "RUNNING")
        # This test's own listener: the same user as the job, but no process of the job.
        with socket.socket() as mine:
            mine.bind(("127.0.0.1", 0))
            mine.listen(1)
            self.assertIn("no process of this rank does", self.refused(job, mine.getsockname()[1]))

    def test_another_users_job_is_refused_before_listening(self):
        b = self.b
        server = b.start_server()
        sock = os.path.join(server.state_dir, "berth.sock")
        b.start_agent(server.url, name="node-0", gpus="",
                      extra=["--token-file", os.path.join(server.state_dir, "token")])
        env = {"BERTH_SERVER": "unix:" + sock}
        b.wait_nodes_up(["node-0"], env=env)
        job, port, _ = self.serve_job(env=env)
        status, body = http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": "alice"}))
        self.assertEqual(status, 201, body)
        alice = ["--server", server.url, "--token", body["token"]]
        rc, out, err = b.run("port-forward", job, f":{port}", *alice, check=False, timeout=30)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("belongs to root", err)
        self.assertNotIn("Forwarding", out)
        status, body = http_unix("GET", sock, f"/v1/jobs/{job}/port-forward?port=0")
        self.assertEqual(status, 400, body)
        self.assertIn("port must be 1 to 65535", body["error"])

        # An operator may; the forward is on the audit record (the check before it is not).
        status, body = http_unix("POST", sock, "/v1/admin/users/alice", json.dumps({"role": "operator"}))
        self.assertEqual(status, 200, body)
        forward, local = self.start_forward(job, f":{port}", *alice)
        with urllib.request.urlopen(f"http://127.0.0.1:{local}/hello.txt", timeout=30 * SCALE) as r:
            self.assertEqual(r.read(), b"hello from the job\n")
        forward.terminate()
        forward.wait(timeout=30)
        status, body = http_unix("GET", sock, "/v1/admin/audit")
        self.assertEqual(status, 200, body)
        forwards = [a for a in body["audit"] if a["action"] == "port-forward"]
        self.assertEqual(len(forwards), 1, body)
        self.assertEqual((forwards[0]["by"], forwards[0]["target"]), ("alice", f"job {job}"))


if __name__ == "__main__":
    import unittest
    unittest.main()

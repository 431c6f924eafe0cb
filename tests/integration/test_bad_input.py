"""Bad input, at the CLI and at the HTTP API, is refused with a reason, and the server shrugs it off.

A user's typo in a task file is pointed at by line. A job that could never fit (unknown GPU type, more GPUs
than any node has, absurd sizes, zero or negative counts) is refused when it is submitted, saying why,
instead of waiting forever. A client speaking the HTTP API gets JSON errors with the right status codes
for malformed JSON, unknown jobs and endpoints, and a body over the size limit. Through all of that the
server stays up and keeps the job it accepted earlier.
"""

import json
import socket
import threading
import unittest

from harness import SCALE, BerthTestCase, http


def raw_request(url, head, body_size=0, timeout=60):
    """Sends `head` (request line + headers) and then `body_size` bytes of body on a background thread,
    reading the answer meanwhile (a server may answer and close before the body is all sent).
    Returns (status, parsed JSON body)."""
    host, port = url.split("//")[1].split(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout * SCALE)
    sock.sendall(head.encode())

    def send_body():
        chunk = b"x" * (1 << 20)
        sent = 0
        try:
            while sent < body_size:
                n = min(len(chunk), body_size - sent)
                sock.sendall(chunk[:n])
                sent += n
        except OSError:
            pass  # the server stopped reading: expected once it has answered

    sender = threading.Thread(target=send_body, daemon=True)
    sender.start()
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data) < response_length(data):
            got = sock.recv(65536)
            if not got:
                break
            data += got
    except ConnectionResetError:
        pass
    sock.close()
    sender.join(timeout=30)
    head_text, _, payload = data.partition(b"\r\n\r\n")
    status = int(head_text.split()[1]) if head_text else None
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload


def response_length(data):
    head, sep, _ = data.partition(b"\r\n\r\n")
    if not sep:
        return 1 << 62
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return 1 << 62


class BadInputTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.status = self.b.local_up(gpus="V100:4")
        self.url = self.status["server"]
        # A job accepted before all the abuse, which must survive it.
        self.good = self.b.submit("-n", "good", "--", "echo still here")
        self.b.wait_status(self.good, "SUCCEEDED")

    def tearDown(self):
        # The server is still up and still has the earlier job.
        status, body, _ = http("GET", self.url + "/v1/health")
        self.assertEqual(status, 200, body)
        job = self.b.show(self.good)
        self.assertEqual((job["name"], job["status"]), ("good", "SUCCEEDED"))
        self.assertEqual(self.b.run("logs", self.good, "--no-follow")[1], "still here\n")

    def refused(self, *args, rc=None):
        """Runs a command that must fail; returns its stderr."""
        code, out, err = self.b.run(*args, check=False)
        self.assertNotEqual(code, 0, f"berth {args} was accepted: {out}")
        if rc is not None:
            self.assertEqual(code, rc, err)
        self.assertTrue(err.startswith("berth: "), err)
        return err

    def test_task_file_errors_name_the_line(self):
        self.write("malformed.yaml", "name: x\nrun: echo hi\n  bad: indent\n")
        err = self.refused("exec", "malformed.yaml")
        self.assertIn("malformed.yaml:3:", err)
        self.write("typo.yaml", "name: x\nresources:\n  acelerators: V100:1\nrun: echo hi\n")
        err = self.refused("exec", "typo.yaml")
        self.assertIn("typo.yaml:3:", err)
        self.assertIn("acelerators", err)
        self.assertIn("did you mean 'accelerators'", err)
        self.write("typo2.yaml", "name: x\nrunn: echo hi\n")
        err = self.refused("exec", "typo2.yaml")
        self.assertIn("typo2.yaml:2:", err)
        self.assertIn("'runn'", err)
        self.write("twice.yaml", "name: x\nrun: a\nname: y\n")
        self.assertIn("twice.yaml:3:", self.refused("exec", "twice.yaml"))
        self.write("zero.yaml", "num_nodes: 0\nrun: echo\n")
        self.assertIn("zero.yaml:1:", self.refused("exec", "zero.yaml"))
        self.write("negative.yaml", "resources:\n  memory: -5\nrun: echo\n")
        self.assertIn("negative.yaml:2:", self.refused("exec", "negative.yaml"))
        self.assertIn("cannot read task file", self.refused("exec", "missing.yaml"))
        # Nothing reached the queue.
        self.assertEqual([j["id"] for j in self.b.queue()], [self.good])

    def test_jobs_that_can_never_fit_are_refused_at_submit(self):
        err = self.refused("exec", "-d", "--gpus", "A100:1", "--", "true")
        self.assertIn("unknown GPU type 'A100'", err)
        self.assertIn("V100", err)  # says what there is
        err = self.refused("exec", "-d", "--gpus", "V100:5", "--", "true")
        self.assertIn("no node has 5 V100 GPUs", err)
        self.assertIn("largest: 4", err)
        err = self.refused("exec", "-d", "--cpus", "100000", "--", "true")
        self.assertIn("100000 CPUs", err)
        err = self.refused("exec", "-d", "--memory", "100000", "--", "true")
        self.assertIn("memory", err)
        err = self.refused("exec", "-d", "--num-nodes", "2", "--", "true")
        self.assertIn("2 nodes", err)
        self.write("toomany.yaml", "resources:\n  accelerators: {V100: 8}\nrun: echo\n")
        self.assertIn("no node has 8 V100 GPUs", self.refused("exec", "-d", "toomany.yaml"))
        self.assertEqual([j["id"] for j in self.b.queue()], [self.good])

    def test_zero_negative_and_absurd_counts(self):
        cases = [
            (["--gpus", "V100:0.0"], "positive"),
            (["--gpus", "V100:-1"], "positive"),
            (["--gpus", "V100:abc"], "abc"),
            (["--gpus", "V100:1000000"], "1000000"),
            (["--cpus", "0"], "cpus"),
            (["--cpus", "-1"], "--cpus"),
            (["--cpus", "1e9"], "--cpus"),
            (["--memory", "-1"], "--memory"),
            (["--memory", "1e12"], "--memory"),
            (["--num-nodes", "0"], "num_nodes"),
            (["--num-nodes", "-3"], "num_nodes"),
            (["--num-nodes", "1000000"], "num_nodes"),
            (["--num-jobs", "0"], "num_jobs"),
            (["--num-jobs", "-1"], "num_jobs"),
            (["--num-jobs", "100000000"], "num_jobs"),
        ]
        for flags, says in cases:
            with self.subTest(flags=flags):
                err = self.refused("exec", "-d", *flags, "--", "true")
                self.assertIn(says, err)
        self.assertEqual([j["id"] for j in self.b.queue()], [self.good])

    def test_http_api_errors(self):
        url = self.url
        # Malformed JSON.
        status, body, hdrs = http("POST", url + "/v1/jobs", "{not json")
        self.assertEqual(status, 400)
        self.assertIsInstance(body, dict)
        self.assertIn("error", body)
        self.assertIn("json", hdrs.get("Content-Type", ""))
        for bad in ("[1, 2]", "null", '"text"', '{"spec": 5}', '{"yaml": 5}', "{}", '{"bogus": 1}', ""):
            with self.subTest(body=bad):
                status, body, _ = http("POST", url + "/v1/jobs", bad)
                self.assertEqual(status, 400, body)
                self.assertIn("error", body)
        # A task file sent as text is checked like the CLI checks it, line numbers included.
        status, body, _ = http("POST", url + "/v1/jobs", json.dumps({"yaml": "name: x\nrunn: echo\n"}))
        self.assertEqual(status, 400, body)
        self.assertIn("task.yaml:2:", body["error"])
        status, body, _ = http("POST", url + "/v1/jobs",
                               json.dumps({"yaml": "resources:\n  accelerators: H100:1\nrun: echo\n"}))
        self.assertEqual(status, 422, body)
        self.assertIn("H100", body["error"])
        # Unknown jobs.
        for path in ("/v1/jobs/999", "/v1/jobs/999/logs"):
            status, body, _ = http("GET", url + path)
            self.assertEqual(status, 404, path)
            self.assertIn("no job 999", body["error"])
        for path in ("/v1/jobs/abc", "/v1/jobs/-1", "/v1/jobs/99999999999999999999999"):
            status, body, _ = http("GET", url + path)
            self.assertEqual(status, 400, path)
            self.assertIn("error", body)
        status, body, _ = http("POST", url + "/v1/jobs/cancel", json.dumps({"ids": "all"}))
        self.assertEqual(status, 400)
        status, body, _ = http("GET", url + f"/v1/jobs/{self.good}/logs?offset=-5")
        self.assertEqual(status, 400)
        # Unknown endpoints and methods.
        for method, path in (("GET", "/v1/nope"), ("GET", "/nope.html"), ("DELETE", "/v1/jobs"), ("GET", "/v2/jobs"),
                             ("POST", "/v1/nodes/nope/drain")):
            with self.subTest(endpoint=f"{method} {path}"):
                status, body, _ = http(method, url + path)
                self.assertEqual(status, 404, body)
                self.assertIn("error", body)
        # Not HTTP at all.
        status, body = raw_request(url, "BLAH\r\n\r\n")
        self.assertEqual(status, 400)

    def test_oversized_body(self):
        # The server's limit is 64 MiB: a 70 MiB body is refused with 413 without being stored.
        size = 70 << 20
        head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n\r\n")
        status, body = raw_request(self.url, head, size)
        self.assertEqual(status, 413)
        self.assertIn("too large", body["error"])
        # The same with chunked encoding, where the size is not declared up front.
        head = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        status, body = raw_request(self.url, head + "%x\r\n" % size, size)
        self.assertEqual(status, 413)
        # A large but acceptable body is fine: a 900 KB run script (the limit is 1 MiB), which also runs.
        script = ": padding line\n" * 60000 + "echo the long script ran\n"
        self.assertGreater(len(script), 800_000)
        status, body, _ = http("POST", self.url + "/v1/jobs", json.dumps({"spec": {"run": script}}))
        self.assertEqual(status, 201, body)
        job = body["jobs"][0]
        self.b.wait_status(job, "SUCCEEDED", timeout=60)
        self.assertEqual(self.b.run("logs", job, "--no-follow")[1], "the long script ran\n")

    def test_environment_too_large_for_exec(self):
        # Linux passes at most 128 KiB per environment variable: a job with a larger one could never
        # start, so it is refused at submit.
        self.write("bigenv.yaml", f"envs:\n  PAD: {'y' * 200_000}\nrun: 'true'\n")
        err = self.refused("exec", "-d", "bigenv.yaml")
        self.assertIn("envs.PAD", err)
        self.assertIn("128 KiB", err)
        status, body, _ = http("POST", self.url + "/v1/jobs",
                               json.dumps({"spec": {"run": "true", "envs": {"PAD": "y" * (2 << 20)}}}))
        self.assertEqual(status, 400, body)
        self.assertIn("envs.PAD", body["error"])
        # Just under the limit is fine.
        job = self.b.submit("--env", "PAD=" + "y" * 100_000, "--", 'echo "${#PAD}"')
        self.b.wait_status(job, "SUCCEEDED")
        self.assertEqual(self.b.run("logs", job, "--no-follow")[1], "100000\n")


if __name__ == "__main__":
    unittest.main()

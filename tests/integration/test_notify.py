"""Notifications (docs/notifications.md): e-mail through a real SMTP relay, signed webhooks to a real
HTTPS receiver, an outbox that loses nothing.

The relay is Python's aiosmtpd (Debian's python3-aiosmtpd) on 127.0.0.1 (also with STARTTLS required);
the receiver is an HTTPS server with a certificate made here by openssl, which the berth server trusts
through --webhook-ca-file (and --smtp-ca-file). Jobs run on a real agent (mail: end, fail, oom) or on hollow nodes (the 1,000-job
group). The receiver verifies every delivery's X-Berth-Signature the way docs/notifications.md tells
receivers to, and counts deliveries per event id.
"""

import hashlib
import hmac
import http.server
import json
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest

from harness import BerthTestCase, http as http_call

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "python"))
import berth  # noqa: E402
from berth.webhooks import SignatureError, verify as client_verify  # noqa: E402

try:
    from aiosmtpd.controller import Controller
except ImportError:  # pragma: no cover - install-deps --for-tests installs it
    Controller = None

# aiosmtpd logs the handshake the untrusting server refuses (a test below) as an error; it is expected.
logging.getLogger("mail.log").setLevel(logging.CRITICAL)

SECRET = "s3cret-for-the-webhook-tests-0123456789"
TOLERANCE = 300  # seconds a receiver accepts between the signature's t and its own clock


def verify(secret, header, body, now=None):
    """What docs/notifications.md tells a receiver to do: True only for a fresh, authentic body."""
    parts = dict(p.split("=", 1) for p in header.split(","))
    t = int(parts["t"])
    expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, parts["v1"]):
        return False
    return abs((now if now is not None else time.time()) - t) <= TOLERANCE


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mailbox:
    """aiosmtpd's handler: every message received."""

    def __init__(self):
        self.messages = []
        self.lock = threading.Lock()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("nobody@"):
            return "550 5.1.1 no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.messages.append((envelope.rcpt_tos, envelope.content.decode("utf-8", "replace")))
        return "250 OK"

    def subjects(self):
        with self.lock:
            out = []
            for _, text in self.messages:
                for line in text.splitlines():
                    if line.startswith("Subject: "):
                        out.append(line[len("Subject: "):])
            return out


class Receiver:
    """An HTTPS webhook receiver on `port`: records each delivery; answers 200."""

    def __init__(self, port, cert, key):
        self.deliveries = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.deliveries.append((dict(self.headers), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def events(self):
        with self.lock:
            return [(h, json.loads(b), b) for h, b in self.deliveries]

    def ids(self):
        return [e["id"] for _, e, _ in self.events()]


@unittest.skipIf(Controller is None or shutil.which("openssl") is None,
                 "needs python3-aiosmtpd and openssl (scripts/install-deps.sh --for-tests)")
class NotifyTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.cert, self.key = self.path("hook.crt"), self.path("hook.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", self.key, "-out", self.cert], check=True, capture_output=True)
        self.mailbox = Mailbox()
        self.smtp = Controller(self.mailbox, hostname="127.0.0.1", port=free_port())
        self.smtp.start()
        self.addCleanup(self.smtp.stop)
        self.receivers = []
        self.addCleanup(lambda: [r.stop() for r in self.receivers])
        self.hook_port = free_port()
        self.state = self.path("server-state")
        self.server = self.start_server()
        self.env = {"BERTH_SERVER": self.server.url}

    def start_server(self, listen="127.0.0.1:0"):
        return self.b.start_server(state_dir=self.state, listen=listen, extra=[
            "--smtp", f"127.0.0.1:{self.smtp.port}", "--smtp-from", "berth@cluster.example",
            "--webhook-ca-file", self.cert, "--notify-retry-cap", "1s"])

    def start_receiver(self):
        r = Receiver(self.hook_port, self.cert, self.key)
        self.receivers.append(r)
        return r

    def set_webhook(self, fmt="json"):
        secret_file = self.write("secret", SECRET + "\n")
        self.b.run("notify", "set", "--webhook", f"https://127.0.0.1:{self.hook_port}/hook",
                   "--secret-file", secret_file, "--format", fmt, env=self.env)

    def notices(self):
        return self.b.json("notify", "ls", "--json", "--limit", "1000", env=self.env)["notices"]

    def start_real_agent(self):
        self.b.start_agent(self.server.url, name="node-0", gpus="V100:2")
        self.b.wait_nodes_up(["node-0"], env=self.env)

    def test_mails_for_end_and_fail_arrive_with_the_right_text(self):
        b = self.b
        self.start_real_agent()
        b.run("notify", "set", "--email", "alice@example.com", env=self.env)
        ok = b.submit("--name", "fine", "--notify", "end", "--", "true", env=self.env)
        bad = b.submit("--name", "broken", "--notify", "end,fail", "--", "exit 3", env=self.env)
        quiet = b.submit("--name", "quiet", "--", "true", env=self.env)  # asks for nothing
        for job in (ok, bad, quiet):
            b.wait_status(job, "SUCCEEDED", "FAILED", env=self.env)
        b.wait_until(lambda: len(self.mailbox.subjects()) >= 2, timeout=30, message="two mails")
        time.sleep(1.5)  # nothing more comes: the quiet job asked for nothing
        subjects = sorted(self.mailbox.subjects())
        self.assertEqual(subjects, sorted([f"berth: job {ok} (fine) SUCCEEDED",
                                           f"berth: job {bad} (broken) FAILED (exit 3)"]))
        rcpts, text = next(m for m in self.mailbox.messages if "broken" in m[1])
        self.assertEqual(rcpts, ["alice@example.com"])
        self.assertIn("From: berth@cluster.example", text)
        self.assertIn(f"Message-ID: <job-{bad}.1.fail@berth>", text)
        self.assertIn("Exit code: 3", text)
        self.assertIn(f"berth logs {bad}", text)
        # Who sees what: berth show lists the job's notification; notify ls every one, sent.
        detail = b.show(bad, env=self.env)
        self.assertEqual([(n["id"], n["sink"], n["state"]) for n in detail["notifications"]],
                         [(f"job-{bad}.1.fail", "email", "sent")])
        _, shown, _ = b.run("show", bad, env=self.env)
        self.assertIn("Notifications:", shown)
        self.assertEqual(sorted(n["id"] for n in self.notices() if n["state"] == "sent"),
                         sorted([f"job-{ok}.1.end", f"job-{bad}.1.fail"]))
        metrics = http_call("GET", self.server.url + "/metrics")[1]
        self.assertIn('berth_notifications_sent_total{sink="email"} 2', metrics)

    @unittest.skipIf(os.geteuid() != 0 or not os.access("/sys/fs/cgroup/memory", os.W_OK),
                     "an out-of-memory kill needs root and the v1 memory controller")
    def test_an_oom_mail_says_so(self):
        b = self.b
        b.start_agent(self.server.url, name="iso", gpus="V100:1", extra=["--memory", "4", "--require-isolation"])
        b.wait_nodes_up(["iso"], env=self.env)
        b.run("notify", "set", "--email", "alice@example.com", env=self.env)
        hog = b.submit("--name", "hog", "--memory", "0.125", "--notify", "oom", "--",
                       "python3 -c \"s = 'x' * (400 << 20)\"", env=self.env)
        b.wait_status(hog, "FAILED", timeout=60, env=self.env)
        b.wait_until(lambda: self.mailbox.subjects(), timeout=30, message="the oom mail")
        self.assertEqual(self.mailbox.subjects(), [f"berth: job {hog} (hog) ran out of memory"])
        self.assertIn("Reason:    out of memory", self.mailbox.messages[0][1])

    def test_webhook_signatures_verify_and_a_replay_is_detectable(self):
        b = self.b
        self.start_real_agent()
        receiver = self.start_receiver()
        self.set_webhook(fmt="slack")
        job = b.submit("--name", "hooked", "--notify", "started,end", "--", "true", env=self.env)
        b.wait_status(job, "SUCCEEDED", env=self.env)
        b.wait_until(lambda: len(receiver.events()) >= 2, timeout=30, message="two deliveries")
        by_type = {e["type"]: (h, e, raw) for h, e, raw in receiver.events()}
        self.assertEqual(set(by_type), {"started", "end"})
        for kind, (headers, event, raw) in by_type.items():
            for key in ("id", "type", "job", "status"):
                self.assertIn(key, event)
            self.assertEqual(event["job"], job)
            self.assertEqual(headers["X-Berth-Delivery"], event["id"])
            self.assertTrue(verify(SECRET, headers["X-Berth-Signature"], raw), headers)
            self.assertIn("text", event)  # the Slack-compatible body
        headers, event, raw = by_type["end"]
        self.assertEqual(event["status"], "SUCCEEDED")
        self.assertEqual(event["id"], f"job-{job}.1.end")
        sig = headers["X-Berth-Signature"]
        # A tampered body fails; the same body replayed ten minutes later fails on its timestamp.
        self.assertFalse(verify(SECRET, sig, raw.replace(b"SUCCEEDED", b"FAILED")))
        self.assertFalse(verify("another-secret-of-enough-length", sig, raw))
        t = int(dict(p.split("=", 1) for p in sig.split(","))["t"])
        self.assertFalse(verify(SECRET, sig, raw, now=t + 600))
        # The secret is never shown again.
        listing = b.json("notify", "ls", "--json", env=self.env)
        self.assertNotIn(SECRET, json.dumps(listing))

    def test_a_receiver_down_for_a_while_gets_every_event_once(self):
        b = self.b
        b.start_agent(self.server.url, name="sim", gpus="H100:8", extra=("--hollow", "2"))
        b.wait_nodes_up(["sim-0", "sim-1"], env=self.env)
        self.set_webhook()
        jobs = [b.submit("--notify", "end", "--env", "BERTH_HOLLOW_SECONDS=0", "--", "x", env=self.env)
                for _ in range(3)]
        for job in jobs:
            b.wait_status(job, "SUCCEEDED", env=self.env)
        # Nobody listens: the sink is tried (once a round), fails, and every notice waits for its retry.
        b.wait_until(lambda: len(self.notices()) == 3
                     and all(n["state"] == "pending" and n["last_error"] for n in self.notices())
                     and max(n["attempts"] for n in self.notices()) >= 2,
                     timeout=30, message="three failing deliveries retried")
        receiver = self.start_receiver()
        want = sorted(f"job-{j}.1.end" for j in jobs)
        b.wait_until(lambda: sorted(receiver.ids()) == want, timeout=30, message="every event after the outage")
        time.sleep(2.5)  # retries at a 1s cap: none comes again once acknowledged
        self.assertEqual(sorted(receiver.ids()), want)
        self.assertTrue(all(n["state"] == "sent" for n in self.notices()))
        metrics = http_call("GET", self.server.url + "/metrics")[1]
        self.assertIn('berth_notifications_sent_total{sink="webhook"} 3', metrics)
        self.assertRegex(metrics, r'berth_notifications_failed_total\{sink="webhook"\} [1-9]')

    def test_a_server_killed_before_it_sends_loses_nothing(self):
        b = self.b
        b.start_agent(self.server.url, name="sim", gpus="H100:8", extra=("--hollow", "1"))
        b.wait_nodes_up(["sim-0"], env=self.env)
        self.set_webhook()
        jobs = [b.submit("--notify", "end", "--env", "BERTH_HOLLOW_SECONDS=0", "--", "x", env=self.env)
                for _ in range(2)]
        for job in jobs:
            b.wait_status(job, "SUCCEEDED", env=self.env)
        # The events are committed with the jobs' ends; the receiver is down, so none is sent yet.
        self.assertEqual(len(self.notices()), 2)
        port = self.server.url.rsplit(":", 1)[1]
        self.server.kill()  # kill -9
        self.server = self.start_server(listen=f"127.0.0.1:{port}")
        receiver = self.start_receiver()
        want = sorted(f"job-{j}.1.end" for j in jobs)
        b.wait_until(lambda: sorted(receiver.ids()) == want, timeout=30,
                     message="the restarted server delivers the outbox")

    def test_a_failing_thousand_job_group_sends_one_summary(self):
        b = self.b
        b.start_agent(self.server.url, name="sim", gpus="H100:8", extra=("--hollow", "10"))
        b.wait_nodes_up([f"sim-{i}" for i in range(10)], env=self.env)
        b.run("notify", "set", "--email", "alice@example.com", env=self.env)
        receiver = self.start_receiver()
        self.set_webhook()
        out = b.json("exec", "-d", "--json", "--name", "sweep", "--num-jobs", 1000, "--cpus", "0.01",
                     "--notify", "end,fail", "--env", "BERTH_HOLLOW_SECONDS=0", "--env", "BERTH_HOLLOW_EXIT=1/50",
                     "--", "x", env=self.env)
        group = out["group"]
        b.run("wait", "--group", group, env=self.env, check=False, timeout=180)
        b.wait_until(lambda: self.mailbox.subjects() and receiver.ids(), timeout=30, message="the summary")
        time.sleep(2)
        self.assertEqual(len(self.mailbox.messages), 1, self.mailbox.subjects())
        self.assertEqual(receiver.ids(), [f"group-{group}.end"])
        _, event, _ = receiver.events()[0]
        self.assertEqual(event["type"], "summary")
        self.assertEqual(event["status"], "FAILED")
        self.assertEqual(event["group_size"], 1000)
        self.assertEqual(event["counts"], {"SUCCEEDED": 980, "FAILED": 20})
        self.assertEqual(event["failures"], "exit 1: 20")
        self.assertEqual(self.mailbox.subjects(),
                         [f"berth: group {group} (sweep): 1000 jobs: 980 succeeded, 20 failed (exit 1: 20)"])

    def test_the_python_client_sets_sinks_asks_and_verifies(self):
        b = self.b
        b.start_agent(self.server.url, name="sim", gpus="H100:8", extra=("--hollow", "1"))
        b.wait_nodes_up(["sim-0"], env=self.env)
        receiver = self.start_receiver()
        client = berth.Client(self.server.url)
        self.addCleanup(client.close)
        sinks = client.notify_set(webhook=f"https://127.0.0.1:{self.hook_port}/hook", secret=SECRET,
                                  events=["end"])
        self.assertEqual([(s["kind"], s["events"]) for s in sinks], [("webhook", "end")])
        with self.assertRaises(ValueError):
            client.submit("x", notify="end,whenever")
        job = client.submit({"run": "x", "envs": {"BERTH_HOLLOW_SECONDS": "0"}}, notify=["end", "fail"])
        job.wait(progress=False, timeout=30)
        b.wait_until(lambda: receiver.ids(), timeout=30, message="the delivery")
        headers, _, raw = receiver.events()[0]
        event = client_verify(SECRET, headers["X-Berth-Signature"], raw)
        self.assertEqual((event["id"], event["job"], event["status"]), (f"job-{job.id}.1.end", job.id, "SUCCEEDED"))
        with self.assertRaises(SignatureError):
            client_verify(SECRET, headers["X-Berth-Signature"], raw, now=time.time() + 3600)
        with self.assertRaises(SignatureError):
            client_verify(SECRET, headers["X-Berth-Signature"], raw + b" ")
        b.wait_until(lambda: client.notifications()["notices"][0]["state"] == "sent", timeout=10,
                     message="the notice marked sent")
        self.assertEqual([n["id"] for n in client.show(job).notifications], [f"job-{job.id}.1.end"])
        self.assertTrue(client.notify_test().startswith("test-"))
        client.notify_unset(webhook=True)
        with self.assertRaises(berth.NotFoundError):
            client.notify_unset(webhook=True)
        self.assertEqual(client.notifications()["sinks"], [])

    def test_operators_hear_of_a_drained_node(self):
        b = self.b
        b.start_agent(self.server.url, name="sim", gpus="H100:8", extra=("--hollow", "1"))
        b.wait_nodes_up(["sim-0"], env=self.env)
        b.run("notify", "set", "--email", "oncall@example.com", "--events", "nodes", env=self.env)
        b.run("drain", "sim-0", env=self.env)
        b.wait_until(lambda: self.mailbox.subjects(), timeout=30, message="the node's mail")
        me = b.json("whoami", "--json", env=self.env)["user"]
        self.assertEqual(self.mailbox.subjects(), [f"berth: node sim-0 DRAINING: drained by {me}"])
        self.assertIn("berth nodes sim-0", self.mailbox.messages[0][1])
        rc, _, err = b.run("exec", "-d", "--notify", "nodes", "--", "true", env=self.env, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("an operator's event", err)

    def test_mail_over_starttls_with_the_relays_certificate_checked(self):
        b = self.b
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        mailbox = Mailbox()
        relay = Controller(mailbox, hostname="127.0.0.1", port=free_port(), tls_context=ctx,
                           require_starttls=True)
        relay.start()
        self.addCleanup(relay.stop)
        server = b.start_server(state_dir=self.path("tls-server"), extra=[
            "--smtp", f"127.0.0.1:{relay.port}", "--smtp-from", "berth@cluster.example",
            "--smtp-starttls", "require", "--smtp-ca-file", self.cert])
        env = {"BERTH_SERVER": server.url}
        b.run("notify", "set", "--email", "alice@example.com", env=env)
        b.run("notify", "test", env=env)
        b.wait_until(lambda: mailbox.subjects(), timeout=30, message="the mail over TLS")
        self.assertEqual(len(mailbox.subjects()), 1)
        self.assertTrue(mailbox.subjects()[0].startswith("berth: a test notification for "))
        # The same relay, its certificate not trusted (the system's CAs): refused, said per delivery.
        other = b.start_server(state_dir=self.path("untrusting"), extra=[
            "--smtp", f"127.0.0.1:{relay.port}", "--smtp-from", "berth@cluster.example"])
        env = {"BERTH_SERVER": other.url}
        b.run("notify", "set", "--email", "alice@example.com", env=env)
        b.run("notify", "test", env=env)
        b.wait_until(lambda: b.json("notify", "ls", "--json", env=env)["notices"][0]["last_error"],
                     timeout=30, message="the failed TLS handshake reported")
        notice = b.json("notify", "ls", "--json", env=env)["notices"][0]
        self.assertIn("TLS", notice["last_error"])
        self.assertEqual(len(mailbox.subjects()), 1)

    def test_a_relay_that_refuses_is_reported_per_delivery(self):
        b = self.b
        b.start_agent(self.server.url, name="sim", gpus="H100:8", extra=("--hollow", "1"))
        b.wait_nodes_up(["sim-0"], env=self.env)
        b.run("notify", "set", "--email", "nobody@example.com", env=self.env)
        job = b.submit("--notify", "end", "--env", "BERTH_HOLLOW_SECONDS=0", "--", "x", env=self.env)
        b.wait_status(job, "SUCCEEDED", env=self.env)
        b.wait_until(lambda: [n["state"] for n in self.notices()] == ["failed"], timeout=30,
                     message="the refused delivery marked failed")
        notice = self.notices()[0]
        self.assertEqual(notice["attempts"], 1)  # a 5xx is not retried
        self.assertIn("550 5.1.1 no such user here", notice["last_error"])
        _, listing, _ = b.run("notify", "ls", env=self.env)
        self.assertIn("failed", listing)
        self.assertIn("no such user", listing)
        self.assertEqual(self.mailbox.messages, [])

    def test_bad_sinks_are_refused_clearly(self):
        b = self.b
        rc, _, err = b.run("notify", "set", "--webhook", "http://example.com/hook", "--secret-file",
                           self.write("s", SECRET), env=self.env, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("must be https://", err)
        rc, _, err = b.run("notify", "set", "--webhook", "https://127.0.0.1:1/hook", env=self.env, check=False)
        self.assertIn("--secret-file", err)
        rc, _, err = b.run("notify", "set", "--webhook", "https://127.0.0.1:1/hook", "--secret-file",
                           self.write("short", "tiny"), env=self.env, check=False)
        self.assertIn("16 to 512", err)
        rc, _, err = b.run("notify", "set", "--email", "not-an-address", env=self.env, check=False)
        self.assertIn("not an e-mail address", err)
        rc, _, err = b.run("exec", "-d", "--notify", "end,sometimes", "--", "true", env=self.env, check=False)
        self.assertEqual(rc, 2)
        self.assertIn("unknown event 'sometimes'", err)
        task = self.write("task.yaml", "run: true\nnotify: [end, pending>soon]\n")
        rc, _, err = b.run("exec", "-d", task, env=self.env, check=False)
        self.assertIn("task.yaml:2:", err)
        self.assertIn("pending>", err)
        rc, _, err = b.run("notify", "test", env=self.env, check=False)
        self.assertIn("has no sink", err)


if __name__ == "__main__":
    unittest.main()

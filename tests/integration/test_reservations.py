"""Reservations and maintenance windows, end to end on a real server and agents (docs/reservations.md).

- A one-minute window on n1 for root's jobs that name it: before it, a job whose time limit ends by the
  start backfills onto n1 while a job without a limit waits, saying which reservation and when; a job naming
  the reservation waits for its window; inside it only that job runs on n1; a server restart mid-window
  keeps the window; after it, the held job runs on n1.
- Bad input is refused with a clear error: a start in the past, a zero duration, an unknown node, user or
  team, more GPUs than the cluster has, an overlap (naming the other reservation); non-operators may not
  create; deleting a reservation leaves its running job running.
- A maintenance window: n1 takes no jobs inside it, and takes them again when it ends.
"""
import os
import sys
import time
from datetime import datetime

from harness import BerthTestCase, http

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "python"))
import berth  # noqa: E402


def ts(text):
    """RFC 3339 with milliseconds and Z -> seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class ReservationsTest(BerthTestCase):
    def cluster(self, state_dir=None, listen="127.0.0.1:0"):
        self.server = self.b.start_server(state_dir=state_dir, listen=listen, extra=("--kill-grace", "1s"))
        self.b.env["BERTH_SERVER"] = self.server.url
        return self.server

    def nodes(self):
        for name in ("n1", "n2"):
            self.b.start_agent(self.server.url, name, "V100:1")
        self.b.wait_nodes_up(["n1", "n2"])

    def submit(self, *args):
        return self.b.submit("-d", "--gpus", "V100:1", *args)

    def node_of(self, job):
        return self.b.show(job)["placement"][0]["node"]

    def reason(self, job):
        return self.b.show(job).get("reason") or ""

    def reserve(self, *args, check=True):
        return self.b.run("reserve", *args, check=check)

    def test_window_backfills_holds_and_admits_only_its_users_across_a_restart(self):
        state = self.path("server-state")
        self.cluster(state)
        self.nodes()
        start = time.time() + 30
        self.reserve("create", "--name", "demo", "--start", "now+30s", "--duration", "1m",
                     "--nodes", "n1", "--users", "root")
        # `berth nodes` and `berth top` mark the node with the window ahead.
        _, out, _ = self.b.run("nodes")
        self.assertIn("RESERVED", out)
        self.assertRegex(out, r"n1 +UP +demo from ")
        _, out, _ = self.b.run("top", "--once")
        self.assertIn("[demo at ", out)
        # n2 taken by a job without a time limit: the next such job may not start on n1 before the window.
        filler = self.submit("--", "sleep", "600")
        self.assertEqual(self.b.wait_status(filler, "RUNNING")["placement"][0]["node"], "n2")
        held = self.submit("--", "sleep", "600")
        self.b.wait_until(lambda: "reserved by 'demo'" in self.reason(held), 20, message="held's reason")
        self.assertIn("no time_limit", self.reason(held))
        # A job whose limit ends before the start backfills onto n1.
        short = self.submit("--time", "10s", "--", "sleep", "1")
        self.b.wait_status(short, "SUCCEEDED", timeout=30)
        self.assertEqual(self.node_of(short), "n1")
        # A job naming the reservation waits for its window.
        member = self.submit("--reservation", "demo", "--", "sleep", "25")
        self.b.wait_until(lambda: "waiting for reservation 'demo'" in self.reason(member), 20,
                          message="member's reason")
        self.assertEqual(self.b.status(member), "PENDING")

        # The window opens: the member runs on n1; the held job is told until when.
        self.b.wait_status(member, "RUNNING", timeout=start - time.time() + 30)
        self.assertGreaterEqual(time.time(), start - 2)
        self.assertEqual(self.node_of(member), "n1")
        _, out, _ = self.b.run("nodes")
        self.assertRegex(out, r"n1 +UP +demo until ")
        _, out, _ = self.b.run("top", "--once")
        self.assertIn("[reserved demo]", out)
        listed = self.b.json("reserve", "list", "--json")["reservations"]
        self.assertEqual([(r["name"], r["active"]) for r in listed], [("demo", True)])

        # A restart mid-window keeps it.
        listen = self.server.url.split("//")[1]
        self.server.kill()
        self.cluster(state, listen=listen)
        self.b.wait_nodes_up(["n1", "n2"], timeout=60)
        shown = self.b.json("reserve", "show", "demo", "--json")
        self.assertTrue(shown["active"])
        self.assertEqual(shown["nodes"], ["n1"])
        self.b.wait_status(member, "SUCCEEDED", timeout=60)
        self.b.wait_until(lambda: "reserved by 'demo'" in self.reason(held) and "until" in self.reason(held),
                          20, message="held's reason inside the window")
        self.assertEqual(self.b.status(held), "PENDING")

        # The window ends: the held job runs on n1.
        self.b.wait_status(held, "RUNNING", timeout=start + 60 - time.time() + 30)
        self.assertEqual(self.node_of(held), "n1")
        self.assertGreaterEqual(time.time(), start + 60 - 2)
        audit = self.b.json("admin", "audit", "--json")
        actions = [a["action"] for a in (audit["audit"] if isinstance(audit, dict) else audit)]
        self.assertIn("reserve create", actions)

    def test_bad_input_is_refused_saying_why_and_delete_leaves_jobs_running(self):
        self.cluster()
        self.nodes()
        def base(extra):
            start = () if "--start" in extra else ("--start", "now+1h")
            duration = () if "--duration" in extra else ("--duration", "10m")
            return ("create", *start, *duration, *extra)
        cases = [
            (("--name", "p", "--start", "2020-01-01T00:00:00Z", "--nodes", "n1"), "in the past"),
            (("--name", "z", "--duration", "0", "--nodes", "n1"), "above zero"),
            (("--name", "u", "--nodes", "nx"), "unknown node 'nx'"),
            (("--name", "v", "--nodes", "n1", "--users", "no-such-user-x"), "unknown user"),
            (("--name", "w", "--nodes", "n1", "--team", "no-such-team"), "unknown team"),
            (("--name", "g", "--gpus", "V100:3"), "only 2 V100 GPUs"),
            (("--name", "c", "--nodes", "n1", "--repeat", "0 25 * * *"), "field 2 (hour)"),
            (("--name", "t", "--start", "tomorrow", "--nodes", "n1"), "RFC 3339"),
            (("--name", "n"), "say where"),
        ]
        for extra, needle in cases:
            code, _, err = self.reserve(*base(extra), check=False)
            self.assertNotEqual(code, 0, extra)
            self.assertIn(needle, err, extra)
        self.reserve(*base(("--name", "first", "--nodes", "n1,n2")))
        code, _, err = self.reserve(*base(("--name", "second", "--gpus", "V100:1")), check=False)
        self.assertNotEqual(code, 0)
        self.assertIn("free of other reservations", err)
        code, _, err = self.reserve("create", "--name", "second", "--start", "now+65m",
                                    "--duration", "1h", "--nodes", "n2", check=False)
        self.assertNotEqual(code, 0)
        self.assertIn("overlaps reservation 'first'", err)
        # A weekly window on another day does not overlap.
        self.reserve("create", "--name", "weekly", "--start", "now+3h", "--duration", "1h",
                     "--nodes", "n2", "--repeat", "weekly")
        # The API answers 4xx with a JSON error; the name is unique.
        status, body, _ = http("POST", self.server.url + "/v1/reservations",
                               '{"name": "first", "start": "now+5h", "duration": "1h", "nodes": ["n1"]}')
        self.assertEqual(status, 409, body)
        self.assertIn("error", body)
        status, body, _ = http("POST", self.server.url + "/v1/reservations", '{"name": "x", "bogus": 1}')
        self.assertEqual(status, 400, body)
        # The iCal feed lists both (the weekly one each week of the next 30 days).
        status, ics, hdrs = http("GET", self.server.url + "/v1/reservations.ics")
        self.assertEqual(status, 200)
        self.assertIn("text/calendar", hdrs["Content-Type"])
        self.assertIn("SUMMARY:Reserved: first", ics)
        self.assertGreaterEqual(ics.count("SUMMARY:Reserved: weekly"), 4)
        # A running job inside a window keeps running when the reservation is deleted.
        self.reserve("create", "--name", "now", "--start", "now", "--duration", "30m", "--nodes", "n1",
                     "--users", "root")
        # (A time limit: 'first' takes n1 in an hour, and only a job ending by then may start there.)
        job = self.submit("--reservation", "now", "--time", "20m", "--", "sleep", "600")
        self.assertEqual(self.b.wait_status(job, "RUNNING", timeout=30)["placement"][0]["node"], "n1")
        self.reserve("delete", "now")
        time.sleep(1)
        self.assertEqual(self.b.status(job), "RUNNING")
        code, _, err = self.reserve("delete", "now", check=False)
        self.assertNotEqual(code, 0)
        self.assertIn("no reservation named 'now'", err)

    def test_maintenance_window_evicts_takes_no_jobs_and_gives_the_node_back_after_health(self):
        self.cluster()
        for name in ("n1", "n2"):
            self.b.start_agent(self.server.url, name, "V100:1", extra=("--health-interval", "3s"))
        self.b.wait_nodes_up(["n1", "n2"])
        # A job without a time limit runs on n1 before the window is made: at the start it is evicted
        # (requeued) and runs again on n2.
        first = self.submit("--", "sleep", "600")
        self.assertEqual(self.b.wait_status(first, "RUNNING")["placement"][0]["node"], "n1")
        start = time.time() + 8
        self.reserve("create", "--name", "upgrade", "--start", "now+8s", "--duration", "20s",
                     "--nodes", "n1", "--maintenance")
        self.b.wait_until(lambda: self.b.show(first)["attempt"] == 2 and self.b.status(first) == "RUNNING",
                          start - time.time() + 30, message="the evicted job to run again")
        self.assertGreaterEqual(time.time(), start - 1)
        self.assertEqual(self.node_of(first), "n2")
        inside = self.submit("--time", "5s", "--", "sleep", "1")
        self.b.wait_until(lambda: "maintenance window 'upgrade'" in self.reason(inside), 20,
                          message="the maintenance reason")
        self.assertEqual(self.b.status(inside), "PENDING")
        # The window ends; n1 takes jobs again once its health probes report after it.
        self.b.wait_status(inside, "SUCCEEDED", timeout=start + 20 - time.time() + 30)
        self.assertEqual(self.node_of(inside), "n1")
        self.assertIn("passed its health probes after maintenance window 'upgrade'", self.server.log())

    def test_an_unused_window_releases_itself(self):
        self.cluster()
        self.nodes()
        made = time.time()
        self.reserve("create", "--name", "idle", "--start", "now", "--duration", "1h", "--nodes", "n1,n2",
                     "--users", "root", "--release-unused", "4s")
        # Nobody runs in it: a job of no reservation waits, then starts once the window lets go (not
        # before: its start is at least the release time after the reservation was made).
        job = self.submit("--", "sleep", "600")
        started = self.b.wait_status(job, "RUNNING", timeout=40)["started_at"]
        self.assertGreaterEqual(ts(started), made + 3.5)
        shown = self.b.json("reserve", "show", "idle", "--json")
        self.assertFalse(shown["active"])
        self.assertIsNone(shown["window"])
        self.assertIn("released_start", shown)
        audit = self.b.json("admin", "audit", "--json")
        rows = audit["audit"] if isinstance(audit, dict) else audit
        self.assertIn("reserve release", [a["action"] for a in rows])

    def test_a_teams_reservation_takes_its_users_jobs_without_naming_it(self):
        self.cluster()
        self.nodes()
        self.b.run("drain", "n2")
        self.b.run("admin", "user", "set", "root", "--team", "ml")
        self.reserve("create", "--name", "lab", "--start", "now", "--duration", "1h", "--nodes", "n1",
                     "--team", "ml")
        # root is in team ml: its job runs on the team's node without --reservation.
        member = self.submit("--", "sleep", "600")
        self.assertEqual(self.b.wait_status(member, "RUNNING", timeout=30)["placement"][0]["node"], "n1")
        self.b.run("cancel", str(member))
        self.b.wait_status(member, "CANCELLED", timeout=30)
        # Out of the team, the same job waits, told whose the node is and until when.
        self.b.run("admin", "user", "set", "root", "--team", "vision")
        other = self.submit("--", "sleep", "600")
        self.b.wait_until(lambda: "reserved by 'lab' (for team ml) until" in self.reason(other), 30,
                          message="the team reservation's reason")
        self.assertEqual(self.b.status(other), "PENDING")

    def test_the_python_client_lists_reservations_and_submits_into_one(self):
        self.cluster()
        self.nodes()
        self.reserve("create", "--name", "py", "--start", "now", "--duration", "1h", "--nodes", "n2",
                     "--users", "root")
        client = berth.Client(server=self.server.url)
        listed = client.reservations()
        self.assertEqual([(r["name"], r["active"], r["nodes"]) for r in listed], [("py", True, ["n2"])])
        job = client.submit("sleep 600", gpus="V100:1", reservation="py")
        self.assertEqual(self.b.wait_status(job.id, "RUNNING", timeout=30)["placement"][0]["node"], "n2")
        with self.assertRaises(TypeError):
            client.submit("true", reservation="")

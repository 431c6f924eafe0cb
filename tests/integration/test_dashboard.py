"""The web dashboard's server side over real HTTP (issue "Seeing the cluster"): the embedded page and its
headers, the way in (a one-time login link from `berth dashboard`, a token pasted in the login form), the
session cookie and the CSRF header a change needs, browsers never identified by the loopback, rights
checked as the session's user, ETags for pollers, and the queue sorted, filtered and paged on the
server. The page itself, in a real browser, is test_dashboard_browser.py.
"""

import json
import re

from harness import BerthTestCase, http


class DashboardHttpTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.server = self.b.start_server()
        self.b.env["BERTH_SERVER"] = self.server.url
        self.b.start_agent(self.server.url, name="node-0", gpus="V100:4", extra=["--cpus", "64"])
        self.b.wait_nodes_up(["node-0"])

    def link(self):
        out = self.b.json("dashboard", "--json")
        self.assertTrue(out["url"].startswith(self.server.url + "/login?code="), out)
        return out["url"]

    def login(self, url=None):
        """Follows a login link; returns the session cookie's value."""
        status, body, headers = http("GET", url or self.link())
        self.assertEqual(status, 200, body)
        cookie = headers["Set-Cookie"]
        for part in ("HttpOnly", "SameSite=Strict", "Path=/"):
            self.assertIn(part, cookie)
        # Named after the server's port: cookies are per host, and two servers of a host must not
        # overwrite each other's.
        port = self.server.url.rsplit(":", 1)[1]
        return re.match(rf"berth_session_{port}=([0-9a-f]+);", cookie).group(1)

    def as_browser(self, method, path, cookie=None, body=None, csrf=None):
        headers = {"Sec-Fetch-Site": "same-origin"}
        if cookie:
            headers["Cookie"] = f"berth_session_1=not-ours; berth_session_2={cookie}"
        if csrf:
            headers["X-Berth-CSRF"] = csrf
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body)
        return http(method, self.server.url + path, body=body, headers=headers)

    def test_page_and_files_are_served_with_a_strict_policy(self):
        status, page, headers = http("GET", self.server.url + "/")
        self.assertEqual(status, 200)
        self.assertIn('<script src="/app.js"', page)
        self.assertIn("script-src 'self'", headers["Content-Security-Policy"])
        self.assertIn("frame-ancestors 'none'", headers["Content-Security-Policy"])
        self.assertEqual(headers["Referrer-Policy"], "no-referrer")
        for path, kind in (("/app.js", "text/javascript"), ("/app.css", "text/css")):
            status, _, headers = http("GET", self.server.url + path)
            self.assertEqual(status, 200)
            self.assertTrue(headers["Content-Type"].startswith(kind))
            status, _, _ = http("GET", self.server.url + path, headers={"If-None-Match": headers["ETag"]})
            self.assertEqual(status, 304)
        status, body, _ = http("GET", self.server.url + "/nope.js")
        self.assertEqual(status, 404, body)
        self.assertIn("error", body)

    def test_a_login_link_works_once_and_the_session_is_the_user(self):
        url = self.link()
        cookie = self.login(url)
        status, body, _ = http("GET", url)
        self.assertEqual(status, 401)
        self.assertIn("used already", body)

        # Without the session a browser is nobody, though it runs on the server's machine.
        status, body, _ = self.as_browser("GET", "/v1/dashboard/session")
        self.assertEqual(status, 401, body)
        self.assertIn("berth dashboard", body["error"])
        status, body, _ = http("GET", self.server.url + "/v1/jobs", headers={"Origin": "http://evil.example"})
        self.assertEqual(status, 401, body)
        # A page on a rebound DNS name sends neither header on a GET; its Host gives it away.
        port = self.server.url.rsplit(":", 1)[1]
        status, body, _ = http("GET", self.server.url + "/v1/jobs", headers={"Host": f"evil.example:{port}"})
        self.assertEqual(status, 401, body)
        self.assertIn("Host: evil.example", body["error"])

        status, me, _ = self.as_browser("GET", "/v1/dashboard/session", cookie)
        self.assertEqual(status, 200, me)
        self.assertEqual((me["user"], me["role"]), ("root", "admin"))
        self.assertTrue(me["via"].startswith("dashboard"), me)
        self.assertRegex(me["csrf"], r"^[0-9a-f]{32}$")
        # A session cannot make itself new sessions (it would outlive its token, renewed for ever).
        status, body, _ = self.as_browser("POST", "/v1/dashboard/link", cookie, {}, csrf=me["csrf"])
        self.assertEqual(status, 403, body)
        # Nor can a node speak for a user to get one (a node's word is capped; a session would not be).
        with open(self.server.state_dir + "/token") as f:
            cluster_token = f.read().strip()
        status, body, _ = http("POST", self.server.url + "/v1/dashboard/link", body="{}", token=cluster_token,
                               headers={"X-Berth-On-Behalf-Of": "nobody"})
        self.assertEqual(status, 403, body)
        self.assertIn("node", body["error"])

        # A change needs the session's CSRF header: a page of another site can make the browser send
        # the cookie, never the header.
        job = self.b.submit("--gpus", "V100:1", "--", "sleep", "300")
        status, body, _ = self.as_browser("POST", "/v1/jobs/cancel", cookie, {"ids": [job]})
        self.assertEqual(status, 403, body)
        self.assertIn("X-Berth-CSRF", body["error"])
        self.assertNotEqual(self.b.status(job), "CANCELLED")
        status, body, _ = self.as_browser("POST", "/v1/jobs/cancel", cookie, {"ids": [job]}, csrf=me["csrf"])
        self.assertEqual((status, body["cancelled"]), (200, [job]), body)

        # Logging out ends the session on the server, not only in the browser.
        status, _, headers = self.as_browser("POST", "/v1/dashboard/logout", cookie, {}, csrf=me["csrf"])
        self.assertEqual(status, 200)
        self.assertIn("Max-Age=0", headers["Set-Cookie"])
        status, body, _ = self.as_browser("GET", "/v1/dashboard/session", cookie)
        self.assertEqual(status, 401, body)
        self.assertIn("session has ended", body["error"])

    def test_a_pasted_token_logs_in_as_its_user_with_their_rights_until_revoked(self):
        root_job = self.b.submit("--gpus", "V100:1", "--", "sleep", "300")
        token = self.b.json("admin", "token", "create", "--user", "alice", "--name", "alice-web",
                            "--json")["token"]
        url = self.server.url + "/v1/dashboard/login"
        # Only a JSON body (a foreign form cannot send one without asking first), and a real token.
        status, body, _ = http("POST", url, body="token=" + token,
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual(status, 400, body)
        status, body, _ = http("POST", url, body=json.dumps({"token": "berth_nope"}),
                               headers={"Content-Type": "application/json"})
        self.assertEqual(status, 401, body)
        with open(self.server.state_dir + "/token") as f:
            cluster_token = f.read().strip()
        status, body, _ = http("POST", url, body=json.dumps({"token": cluster_token}),
                               headers={"Content-Type": "application/json"})
        self.assertEqual(status, 403, body)
        self.assertIn("nodes, not users", body["error"])

        status, body, headers = http("POST", url, body=json.dumps({"token": token}),
                                     headers={"Content-Type": "application/json"})
        self.assertEqual((status, body["user"]), (200, "alice"), body)
        cookie = re.match(r"berth_session_\d+=([0-9a-f]+);", headers["Set-Cookie"]).group(1)
        csrf = body["csrf"]
        status, me, _ = self.as_browser("GET", "/v1/dashboard/session", cookie)
        self.assertEqual((me["user"], me["role"], me["via"]), ("alice", "user", "dashboard (token alice-web)"))

        # Every call is authorised as alice: root's job is not hers to cancel or read.
        status, body, _ = self.as_browser("POST", "/v1/jobs/cancel", cookie, {"ids": [root_job]}, csrf=csrf)
        self.assertEqual(status, 403, body)
        self.assertIn("operator", body["error"])
        status, body, _ = self.as_browser("GET", f"/v1/jobs/{root_job}/logs", cookie)
        self.assertEqual(status, 403, body)
        status, body, _ = self.as_browser("GET", f"/v1/jobs/{root_job}", cookie)
        self.assertEqual((status, body["spec"]), (200, None))

        self.b.run("admin", "token", "revoke", "alice-web")
        status, body, _ = self.as_browser("GET", "/v1/dashboard/session", cookie)
        self.assertEqual(status, 401, body)
        self.assertIn("revoked", body["error"])

    def test_pollers_get_304_when_nothing_changed(self):
        cookie = self.login()
        # (Not /v1/nodes: a node's last_seen changes at every heartbeat.)
        for path in ("/v1/dashboard/overview", "/v1/dashboard/queue", "/v1/teams"):
            status, _, headers = self.as_browser("GET", path, cookie)
            self.assertEqual(status, 200)
            tag = headers["ETag"]
            status, body, _ = http("GET", self.server.url + path, headers={
                "Sec-Fetch-Site": "same-origin", "Cookie": f"berth_session_1={cookie}", "If-None-Match": tag})
            self.assertEqual((status, body), (304, ""), path)
        self.b.submit("--", "sleep", "300")
        status, _, _ = http("GET", self.server.url + "/v1/dashboard/overview", headers={
            "Sec-Fetch-Site": "same-origin", "Cookie": f"berth_session_1={cookie}", "If-None-Match": tag})
        self.assertEqual(status, 200)

    def test_overview_counts_the_cluster(self):
        running = [self.b.submit("--gpus", "V100:1", "--", "sleep", "300") for _ in range(3)]
        for j in running:
            self.b.wait_status(j, "RUNNING")
        waiting = self.b.submit("--gpus", "V100:2", "--", "sleep", "300")
        failed = self.b.submit("--", "bash", "-c", "exit 3")
        self.b.wait_status(failed, "FAILED")
        status, ov, _ = http("GET", self.server.url + "/v1/dashboard/overview")
        self.assertEqual(status, 200, ov)
        self.assertEqual(ov["jobs"], {"PENDING": 1, "RUNNING": 3})
        self.assertEqual(ov["nodes"], {"UP": 1, "DRAINING": 0, "DOWN": 0})
        self.assertEqual(ov["gpus"], [{"type": "V100", "total": 4, "used": 3, "down": 0}])
        self.assertEqual([j["id"] for j in ov["recent_failures"]], [failed])
        self.assertEqual(ov["recent_failures"][0]["exit_code"], 3)
        self.assertEqual(ov["cpus"]["total"], 64)
        self.assertNotEqual(self.b.status(waiting), "RUNNING")

    def test_queue_pages_sorts_and_filters_on_the_server(self):
        b = self.b
        holder = b.submit("--gpus", "V100:4", "--priority", "10", "--", "sleep", "300")  # never preempted here
        b.wait_status(holder, "RUNNING")
        sweep = self.write("sweep.yaml", "name: sweep\nresources:\n  accelerators: V100:1\nrun: sleep 300\n")
        group = b.json("exec", sweep, "--num-jobs", 250, "-d", "--json")["group"]
        singles = [b.submit("-n", f"single{i}", "--gpus", "V100:1", "--priority", str(i % 3), "--", "true")
                   for i in range(5)]

        def page(query):
            status, body, _ = http("GET", self.server.url + "/v1/dashboard/queue?" + query)
            self.assertEqual(status, 200, body)
            return body

        # The group is one row among the active ones; the newest first by default.
        p = page("")
        self.assertEqual(p["total"], 7)
        self.assertEqual([r["id"] if r["kind"] == "job" else ("group", r["group"]) for r in p["rows"]],
                         list(reversed(singles)) + [("group", group), holder])
        g = p["rows"][5]
        self.assertEqual((g["jobs"], g["counts"], g["matching"]), (250, {"PENDING": 250}, 250))
        b.wait_until(lambda: page("")["rows"][0]["reason"].startswith("waiting"),
                     message="the newest job to say why it waits")

        # Expanded: its jobs, a page at a time.
        first = page(f"group={group}&limit=100")
        self.assertEqual((first["total"], len(first["rows"]), first["more"]), (250, 100, True))
        last = page(f"group={group}&limit=100&offset=200")
        self.assertEqual((len(last["rows"]), last["more"]), (50, False))
        ids = {r["id"] for r in first["rows"]} | {r["id"] for r in last["rows"]}
        self.assertEqual(len(ids), 150)

        # Sorted by priority (then id), filtered by status and user.
        by_priority = page("sort=-priority&status=PENDING")
        pri = [r["priority"] for r in by_priority["rows"]]
        self.assertEqual(pri, sorted(pri, reverse=True))
        self.assertEqual(page("status=RUNNING")["total"], 1)
        self.assertEqual(page("user=nobody")["total"], 0)
        self.assertEqual(page("user=root")["total"], 7)

        # Finished jobs: newest first.
        for j in singles:
            b.run("cancel", j)
        fin = page("view=finished&limit=3")
        self.assertEqual([r["id"] for r in fin["rows"]], list(reversed(singles))[:3])
        self.assertTrue(fin["more"])
        self.assertEqual(page("view=finished&status=SUCCEEDED")["rows"], [])

        # Bad parameters are named.
        for query, word in (("limit=0", "limit"), ("limit=501", "limit"), ("offset=x", "integers"),
                            ("offset=2147483600", "offset"), ("view=finished&offset=19950", "newest 20000"),
                            ("sort=name", "sort"), ("status=DONE", "DONE"), ("view=all", "view")):
            status, body, _ = http("GET", self.server.url + "/v1/dashboard/queue?" + query)
            self.assertEqual(status, 400, (query, body))
            self.assertIn(word, body["error"])


if __name__ == "__main__":
    import unittest
    unittest.main()

"""The HTTP API's contract (docs/api.md, docs/openapi.json): GET /v1/openapi.json is a valid OpenAPI 3.1
document by an independent validator (Debian's python3-jsonschema against the OpenAPI Initiative's own
schema of 3.1 documents, tests/integration/data/openapi-3.1-schema.json, and the 2020-12 metaschema for
every schema in it); it is what docs/openapi.json and `berth openapi` say; and real requests to every
route, good and bad, against a live server and agent are answered with a status the description lists
and a body its schema accepts. A route added without a case here fails the coverage check, and the
CLI's --json outputs fit the same schemas."""

import copy
import hashlib
import http.client as http_client
import json
import os
import subprocess
import unittest
import urllib.parse

from harness import BERTH_BIN, BerthTestCase, HERE, http

try:
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError:  # python3-jsonschema (scripts/install-deps.sh --for-tests)
    jsonschema = None

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def template_of(doc, method, path):
    """The path template of the spec that `path` (no query) fits, for `method`."""
    parts = path.split("/")
    best = None
    for template, item in doc["paths"].items():
        if method.lower() not in item:
            continue
        segs = template.split("/")
        if len(segs) != len(parts):
            continue
        if all(s == p or (s.startswith("{") and s.endswith("}") and p) for s, p in zip(segs, parts)):
            params = sum(1 for s in segs if s.startswith("{"))
            if best is None or params < best[0]:
                best = (params, template)
    return best[1] if best else None


@unittest.skipIf(jsonschema is None, "python3-jsonschema is not installed (scripts/install-deps.sh --for-tests)")
class OpenApiTest(BerthTestCase):
    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server()
        self.url = self.server.url
        with open(os.path.join(self.server.state_dir, "token")) as f:
            self.cluster_token = f.read().strip()
        b.start_agent(self.url, name="node-0", gpus="V100:2")
        self.env = dict(b.env, BERTH_SERVER=self.url)
        b.wait_nodes_up(["node-0"], env=self.env)
        status, self.doc, _ = http("GET", self.url + "/v1/openapi.json")
        self.assertEqual(status, 200)
        self.seen = set()  # (METHOD, template) exercised

    # --- the checks ---
    def validator(self, schema):
        root = dict(schema)
        root["components"] = self.doc["components"]
        return Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)

    def check(self, method, path, status, body, headers, content_type=None):
        """`status` and `body` are what the spec says `method path` answers."""
        bare = urllib.parse.urlsplit(path).path
        template = template_of(self.doc, method, bare)
        self.assertIsNotNone(template, f"{method} {bare}: no route in the description")
        self.seen.add((method, template))
        responses = self.doc["paths"][template][method.lower()]["responses"]
        self.assertIn(str(status), responses,
                      f"{method} {path} answered {status}, which the description does not list: {body!r}")
        content = responses[str(status)].get("content")
        if not content:
            return
        (media, spec), = content.items()
        got_type = (headers.get("Content-Type") or "").split(";")[0].strip()
        self.assertEqual(got_type, media, f"{method} {path} {status}: content type")
        if media == "application/json":
            errors = sorted(self.validator(spec["schema"]).iter_errors(body), key=lambda e: list(e.path))
            self.assertFalse(errors, f"{method} {path} {status}: " +
                             "; ".join(f"{list(e.path)}: {e.message[:300]}" for e in errors[:5]))

    def call(self, method, path, body=None, expect=None, token=None, headers=None, raw=False):
        data = body if raw or body is None else json.dumps(body)
        hdrs = dict(headers or {})
        if data is not None and not raw:
            hdrs.setdefault("Content-Type", "application/json")
        status, parsed, answer_headers = http(method, self.url + path, data, token=token, headers=hdrs)
        if expect is not None:
            self.assertEqual(status, expect, f"{method} {path}: {parsed!r}")
        self.check(method, path, status, parsed, answer_headers)
        return parsed

    def stream_first_line(self, path, token):
        """A streamed route's status, headers and first line (the watch stream never ends by itself)."""
        u = urllib.parse.urlsplit(self.url)
        conn = http_client.HTTPConnection(u.hostname, u.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Authorization": "Bearer " + token})
            r = conn.getresponse()
            line = r.readline() if r.status == 200 else r.read()
            return r.status, line, r.headers
        finally:
            conn.close()

    # --- the test ---
    def test_the_description_is_valid_and_every_route_answers_as_it_says(self):
        doc = self.doc
        with open(os.path.join(HERE, "data", "openapi-3.1-schema.json")) as f:
            meta = json.load(f)
        oas = Draft202012Validator(meta)
        errors = list(oas.iter_errors(doc))
        self.assertFalse(errors, [f"{list(e.path)}: {e.message[:200]}" for e in errors[:5]])
        for name, schema in doc["components"]["schemas"].items():
            Draft202012Validator.check_schema(schema)
        for item in doc["paths"].values():
            for op in item.values():
                for answer in op["responses"].values():
                    for media in answer.get("content", {}).values():
                        Draft202012Validator.check_schema(media["schema"])
        # The validator is not a rubber stamp: a broken description fails it.
        broken = copy.deepcopy(doc)
        broken["paths"]["/v1/jobs/{id}"]["get"]["parameters"][0]["in"] = "body"  # OpenAPI 2's
        self.assertTrue(list(oas.iter_errors(broken)))
        broken = copy.deepcopy(doc)
        del broken["info"]
        self.assertTrue(list(oas.iter_errors(broken)))
        broken = copy.deepcopy(doc)
        broken["openapi"] = "3.0.3"
        self.assertTrue(list(oas.iter_errors(broken)))
        # docs/openapi.json and `berth openapi` say the same.
        with open(os.path.join(REPO, "docs", "openapi.json")) as f:
            self.assertEqual(json.load(f), doc, "docs/openapi.json is stale: the build writes it "
                             "(berth openapi --out docs/openapi.json)")
        printed = subprocess.run([BERTH_BIN, "openapi"], capture_output=True, check=True).stdout
        self.assertEqual(json.loads(printed), doc)
        self.check("GET", "/v1/openapi.json", 200, doc, {"Content-Type": "application/json"})

        self.exercise_jobs()
        self.exercise_admin_and_dashboard()
        self.exercise_uploads()
        self.exercise_agents()
        self.exercise_cli_json()

        every = {(m.upper(), t) for t, item in doc["paths"].items() for m in item}
        self.assertEqual(every - self.seen, set(), "routes no request here exercised")

    def exercise_jobs(self):
        c = self.call
        c("GET", "/v1/health", expect=200)
        status, text, headers = http("GET", self.url + "/metrics")
        self.assertEqual(status, 200)
        self.check("GET", "/metrics", status, text, headers)
        job = c("POST", "/v1/jobs", {"spec": {"name": "sleeper", "run": "sleep 60",
                                              "resources": {"accelerators": {"V100": 1}}}},
                expect=201)["jobs"][0]
        c("POST", "/v1/jobs", {"spec": {"run": "true", "bogus": 1}}, expect=400)
        c("POST", "/v1/jobs", {"spec": {"run": "true", "resources": {"accelerators": {"H100": 64}}}},
          expect=422)
        bulk = c("POST", "/v1/jobs", {"spec": {"run": "sleep 60"}, "num_jobs": 3}, expect=201)
        group = bulk["group"]
        c("POST", "/v1/jobs", {"spec": {"run": "true"}}, expect=201, headers={"Idempotency-Key": "k1"})
        c("POST", "/v1/jobs", {"spec": {"run": "false"}}, expect=409, headers={"Idempotency-Key": "k1"})
        self.b.wait_status(job, "RUNNING", env=self.env)
        c("GET", "/v1/jobs", expect=200)
        c("GET", "/v1/jobs?all=1&page=5000", expect=400)
        c("GET", f"/v1/jobs/{job}", expect=200)
        c("GET", "/v1/jobs/abc", expect=400)
        c("GET", "/v1/jobs/999999", expect=404)
        c("GET", f"/v1/jobs/{job}/logs?offset=0", expect=200)
        c("GET", f"/v1/groups/{group}", expect=200)
        c("GET", "/v1/groups/999999", expect=404)
        c("POST", f"/v1/groups/{group}", {"max_running": 2}, expect=200)
        c("POST", f"/v1/groups/{group}", {"max_running": "many"}, expect=400)
        c("GET", "/v1/queue", expect=200)
        c("GET", "/v1/queue?limit=5000", expect=400)
        c("GET", "/v1/usage?by=team", expect=200)
        c("GET", "/v1/usage?since=never", expect=400)
        c("GET", "/v1/teams", expect=200)
        c("GET", "/v1/nodes?holders=1", expect=200)
        c("POST", "/v1/nodes/node-0/drain", expect=200)
        c("POST", "/v1/nodes/node-0/undrain?force=1", expect=200)
        c("POST", "/v1/nodes/nowhere/drain", expect=404)
        c("POST", "/v1/nodes/nowhere/undrain", expect=404)
        # The WebSockets: without the upgrade, a check (port-forward) or a 400 (the others).
        c("GET", f"/v1/jobs/{job}/attach", expect=400)
        c("GET", f"/v1/jobs/{job}/exec?command=true", expect=400)
        c("GET", f"/v1/jobs/{job}/port-forward?port=8080", expect=200)
        c("GET", f"/v1/jobs/{job}/port-forward?port=0", expect=400)
        c("POST", f"/v1/jobs/{job}/requeue", expect=200)
        c("POST", "/v1/jobs/cancel", {"ids": [job, 999999], "reason": "done"}, expect=200)
        c("POST", "/v1/jobs/cancel", {"ids": "all of them"}, expect=400)
        c("POST", f"/v1/jobs/{job}/requeue", expect=409)
        c("POST", "/v1/jobs/cancel", {"group": group}, expect=200)
        self.job = job

    def exercise_admin_and_dashboard(self):
        c = self.call
        c("GET", "/v1/whoami", expect=200)
        made = c("POST", "/v1/admin/tokens", {"user": "alice", "name": "alice-1"}, expect=201)
        self.alice = made["token"]
        c("POST", "/v1/admin/tokens", {"user": "alice", "colour": "red"}, expect=400)
        c("GET", "/v1/admin/tokens", expect=200)
        c("GET", "/v1/whoami", expect=401, token="berth_not_a_token")
        c("GET", "/v1/admin/tokens", expect=403, token=self.alice)
        c("POST", "/v1/admin/users/alice", {"max_pending_jobs": 50, "team": "vision"}, expect=200)
        c("POST", "/v1/admin/users/alice", {"role": "king"}, expect=400)
        c("GET", "/v1/admin/users", expect=200)
        c("POST", "/v1/admin/teams/vision", {"weight": 2, "quota": {"V100": 1}}, expect=200)
        c("POST", "/v1/admin/teams/vision", {"weight": "heavy"}, expect=400)
        c("GET", "/v1/admin/audit?limit=10", expect=200)
        c("GET", "/v1/admin/audit?limit=lots", expect=400)
        # Notifications: the caller's own sinks.
        c("POST", "/v1/notify/test", expect=409)
        c("POST", "/v1/notify/sinks", {"kind": "email", "target": "root@example.com", "events": "end"},
          expect=200)
        c("POST", "/v1/notify/sinks", {"kind": "webhook", "target": "http://example.com/x",
                                       "secret": "x" * 20}, expect=400)
        c("POST", "/v1/notify/sinks", {"kind": "email", "colour": "red"}, expect=400)
        c("POST", "/v1/notify/test", expect=200)
        c("GET", "/v1/notify?limit=5", expect=200)
        c("GET", "/v1/notify?limit=0", expect=400)
        c("DELETE", "/v1/notify/sinks/email", expect=200)
        c("DELETE", "/v1/notify/sinks/email", expect=404)
        # Reservations: operators create (alice may not), anyone reads (docs/reservations.md).
        window = {"name": "r1", "start": "now+1h", "duration": "1h", "nodes": ["node-0"]}
        c("POST", "/v1/reservations", window, expect=201)
        c("POST", "/v1/reservations", window, expect=409)
        c("POST", "/v1/reservations", {**window, "name": "r2"}, expect=400)  # overlaps r1
        c("POST", "/v1/reservations", {**window, "name": "r3"}, expect=403, token=self.alice)
        c("GET", "/v1/reservations", expect=200)
        c("GET", "/v1/reservations/r1", expect=200)
        c("GET", "/v1/reservations/nope", expect=404)
        c("PATCH", "/v1/reservations/r1", {"duration": "2h", "repeat": "weekly"}, expect=200)
        c("PATCH", "/v1/reservations/nope", {"duration": "2h"}, expect=404)
        status, ics, headers = http("GET", self.url + "/v1/reservations.ics")
        self.check("GET", "/v1/reservations.ics", status, ics, headers)
        self.assertIn("BEGIN:VEVENT", ics)
        c("DELETE", "/v1/reservations/r1", expect=200)
        c("DELETE", "/v1/reservations/r1", expect=404)
        spare = c("POST", "/v1/admin/tokens", {"user": "alice", "name": "alice-2"}, expect=201)
        c("POST", "/v1/admin/tokens/alice-2/revoke", expect=200)
        c("POST", "/v1/admin/tokens/nobody/revoke", expect=404)
        self.assertTrue(spare["token"])
        # A node joins with a join token; an admin sets whom it speaks for, then revokes it.
        join = c("POST", "/v1/admin/join-tokens", {"users": ["alice"]}, expect=201)["token"]
        c("POST", "/v1/admin/join-tokens", {"users": "alice"}, expect=400)
        c("POST", "/v1/agent/join", {"node": "node-j"}, expect=201, token=join)
        c("POST", "/v1/agent/join", {"node": "node-j"}, expect=401, token=join)
        c("POST", "/v1/admin/nodes/node-j/users", {"users": ["alice", "bob"]}, expect=200)
        c("POST", "/v1/admin/nodes/node-j/users", {"users": "alice"}, expect=400)
        c("POST", "/v1/admin/nodes/node-j/revoke", expect=200)
        c("POST", "/v1/admin/nodes/node-j/revoke", expect=404)
        # The dashboard's calls.
        link = c("POST", "/v1/dashboard/link", expect=201)
        status, page, headers = http("GET", self.url + link["path"])
        self.check("GET", link["path"], status, page, headers)
        self.assertEqual(status, 200)
        status, page, headers = http("GET", self.url + "/login?code=spent")
        self.check("GET", "/login", status, page, headers)
        self.assertEqual(status, 401)
        c("POST", "/v1/dashboard/login", {"token": self.alice}, expect=200)
        c("POST", "/v1/dashboard/login", {"token": "berth_unknown"}, expect=401)
        c("GET", "/v1/dashboard/session", expect=200)
        c("POST", "/v1/dashboard/logout", expect=200)
        c("GET", "/v1/dashboard/overview", expect=200)
        c("GET", "/v1/dashboard/queue?view=finished", expect=200)
        c("GET", "/v1/dashboard/queue?limit=0", expect=400)

    def exercise_uploads(self):
        c = self.call
        data = b"hello, berth\n"
        digest = hashlib.sha256(data).hexdigest()
        c("POST", "/v1/uploads/missing", {"digests": [digest]}, expect=200)
        c("POST", "/v1/uploads/missing", {"digests": 7}, expect=400)
        frame = f"{digest} 0 {len(data)}\n".encode() + data
        c("POST", "/v1/uploads/blobs", frame, raw=True, expect=200)
        wrong = f"{'0' * 64} 0 {len(data)}\n".encode() + data
        c("POST", "/v1/uploads/blobs", wrong, raw=True, expect=409)
        big = b"x" * 100
        big_digest = hashlib.sha256(big).hexdigest()
        c("PUT", f"/v1/uploads/blobs/{big_digest}?offset=0&size=100&last=0", big[:60], raw=True,
          expect=200)
        c("GET", f"/v1/uploads/blobs/{big_digest}/received", expect=200)
        c("PUT", f"/v1/uploads/blobs/{big_digest}?offset=10&size=100&last=1", big[60:], raw=True,
          expect=409)
        c("POST", "/v1/uploads/manifests",
          {"version": 1, "entries": [["f", "hello.txt", 420, len(data), digest]]}, expect=200)
        c("POST", "/v1/uploads/manifests",
          {"version": 1, "entries": [["f", "/etc/passwd", 420, len(data), digest]]}, expect=400)

    def exercise_agents(self):
        c, token, job = self.call, self.cluster_token, self.job
        reg = c("POST", "/v1/agent/register",
                {"name": "fake-1", "node_id": "fake-1-id", "address": "127.0.0.1",
                 "cpus_milli": 1000, "memory_mib": 1024}, expect=200, token=token)
        session = reg["session"]
        c("POST", "/v1/agent/register", {"name": 7}, expect=400, token=token)
        c("POST", "/v1/agent/register", {"name": "fake-1"}, expect=403, token=self.alice)
        q = f"node=fake-1&session={session}"
        c("POST", "/v1/agent/heartbeat", {"node": "fake-1", "session": session}, expect=200, token=token)
        c("POST", "/v1/agent/heartbeat", {"node": "fake-1", "session": "stale"}, expect=409, token=token)
        c("POST", "/v1/agent/health",
          {"node": "fake-1", "session": session, "health": {"faults": [], "probes": []}},
          expect=200, token=token)
        c("POST", "/v1/agent/health", {"node": "fake-1"}, expect=400, token=token)
        c("POST", "/v1/agent/report", {"node": "fake-1", "session": session, "reports": [
            {"job": job, "attempt": 1, "rank": 0, "event": "warp"}]}, expect=200, token=token)
        c("POST", f"/v1/agent/logs?{q}&job={job}&attempt=1&rank=0&offset=0", b"out", raw=True,
          expect=403, token=token)
        c("POST", f"/v1/agent/logs/batch?{q}", b"", raw=True, expect=200, token=token)
        c("POST", "/v1/agent/logs/batch?node=fake-1&session=stale", b"", raw=True, expect=409,
          token=token)
        c("GET", f"/v1/specs/{job}?{q}&job={job}", expect=403, token=token)
        c("GET", f"/v1/specs/{job}", expect=400, token=token)
        c("POST", "/v1/agent/blobs", {"node": "fake-1", "session": session, "job": job, "want": []},
          expect=403, token=token)
        c("GET", f"/v1/agent/sessions/nope?{q}", expect=404, token=token)
        status, line, headers = self.stream_first_line(f"/v1/agent/watch?{q}", token)
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(line)["type"], "hello")
        self.check("GET", "/v1/agent/watch", status, None, headers)
        status, body, headers = self.stream_first_line("/v1/agent/watch?node=fake-1&session=stale", token)
        self.check("GET", "/v1/agent/watch", status, json.loads(body), headers)

    def exercise_cli_json(self):
        """`berth show --json`, `queue --json` and `nodes --json` print the API's objects."""
        schemas = self.doc["components"]["schemas"]
        shown = self.b.json("show", str(self.job), "--json", env=self.env)
        self.assertFalse(list(self.validator({"$ref": "#/components/schemas/JobDetail"}).iter_errors(shown)))
        for row in self.b.json("queue", "--json", env=self.env):
            errors = list(self.validator({"$ref": "#/components/schemas/QueueRow"}).iter_errors(row))
            self.assertFalse(errors, [e.message for e in errors[:3]])
        for node in self.b.json("nodes", "--json", env=self.env):
            errors = list(self.validator({"$ref": "#/components/schemas/Node"}).iter_errors(node))
            self.assertFalse(errors, [e.message for e in errors[:3]])
        self.assertIn("Job", schemas)


if __name__ == "__main__":
    unittest.main()

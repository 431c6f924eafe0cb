"""GET /metrics end to end (docs/monitoring.md): a real server and two agents, real jobs, and the page
checked line by line against the Prometheus text exposition format (a strict parser of our own, plus
`promtool check metrics` when Prometheus is installed), then against what the server says elsewhere:
the GPU gauges equal `berth nodes --json`, the counters follow the jobs' lives, a job id makes no series
of its own, and the cluster token (a node's credential) may not read the page.
"""

import os
import re
import shutil
import subprocess
import unittest

from harness import BerthTestCase, http

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(" + NAME + r")(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"(,|$)')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_exposition(text):
    """Parses a text exposition strictly. Returns ({family: type}, {(name, labels tuple): value}).
    Raises AssertionError naming the first line that breaks the format."""
    families, helps, samples = {}, set(), {}
    histograms = {}  # (family, labels without le) -> [(le, cumulative count)]
    assert text.endswith("\n"), "the page must end with a newline"
    for number, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert re.fullmatch(NAME, name), where
            assert name not in helps, f"HELP twice for {name}: {where}"
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            assert len(parts) == 4 and parts[3] in TYPES, where
            assert parts[2] not in families, f"TYPE twice for {parts[2]}: {where}"
            families[parts[2]] = parts[3]
            continue
        assert not line.startswith("#"), where
        m = SAMPLE.match(line)
        assert m, where
        name, label_text, value = m.group(1), m.group(3) or "", m.group(4)
        labels, rest = [], label_text
        while rest:
            lm = LABEL.match(rest)
            assert lm, f"bad labels in {where}"
            labels.append((lm.group(1), lm.group(2)))
            rest = rest[lm.end():]
        assert len({k for k, _ in labels}) == len(labels), f"a label twice: {where}"
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and families.get(name[: -len(suffix)]) == "histogram":
                family = name[: -len(suffix)]
        assert family in families, f"sample before its TYPE: {where}"
        if families[family] == "histogram":
            assert family != name, f"a histogram's sample must be _bucket, _sum or _count: {where}"
        number_value = float(value.replace("+Inf", "inf").replace("-Inf", "-inf"))
        key = (name, tuple(labels))
        assert key not in samples, f"series twice: {where}"
        samples[key] = number_value
        if name == family + "_bucket":
            le = dict(labels).get("le")
            assert le is not None, f"bucket without le: {where}"
            base = tuple(kv for kv in labels if kv[0] != "le")
            histograms.setdefault((family, base), []).append((le, number_value))
    for (family, base), buckets in histograms.items():
        counts = [c for _, c in buckets]
        assert counts == sorted(counts), f"{family}{base}: buckets not cumulative"
        assert buckets[-1][0] == "+Inf", f"{family}{base}: last bucket is not +Inf"
        assert samples[(family + "_count", base)] == buckets[-1][1], f"{family}{base}: count"
        assert (family + "_sum", base) in samples, f"{family}{base}: no _sum"
    return families, samples


def value(samples, name, **labels):
    """The sample of `name` whose labels include `labels`, summed over the rest."""
    total, found = 0.0, False
    for (n, ls), v in samples.items():
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items()):
            total, found = total + v, True
    return total if found else None


class MetricsTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server()
        b.env["BERTH_SERVER"] = self.server.url  # root over loopback: the admin
        b.start_agent(self.server.url, "m0", "V100:4")
        b.start_agent(self.server.url, "m1", "T4:2")
        b.wait_nodes_up(["m0", "m1"])

    def scrape(self, token=None):
        status, body, headers = http("GET", self.server.url + "/metrics", token=token)
        self.assertEqual(status, 200, body)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"),
                        headers["Content-Type"])
        return body

    def test_the_page_is_valid_and_agrees_with_the_cluster(self):
        b = self.b
        done = b.submit("--gpus", "V100:1", "--", "true")
        b.wait_status(done, "SUCCEEDED")
        held = b.submit("--gpus", "V100:2", "--", "sleep", "300")
        b.wait_status(held, "RUNNING")
        b.show(held)
        b.show(done)
        text = self.scrape()
        families, samples = parse_exposition(text)

        if shutil.which("promtool"):
            check = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.assertEqual(check.returncode, 0, check.stdout)

        for name, kind in [("berth_jobs", "gauge"), ("berth_pending_jobs", "gauge"),
                           ("berth_gpus", "gauge"), ("berth_node_gpus", "gauge"),
                           ("berth_nodes", "gauge"), ("berth_build_info", "gauge"),
                           ("berth_admission_wait_seconds", "histogram"),
                           ("berth_job_run_seconds", "histogram"),
                           ("berth_scheduler_pass_seconds", "histogram"),
                           ("berth_scheduler_passes_total", "counter"),
                           ("berth_store_commit_seconds", "histogram"),
                           ("berth_http_request_seconds", "histogram"),
                           ("berth_jobs_finished_total", "counter"),
                           ("berth_preemptions_total", "counter"),
                           ("berth_launches_total", "counter"),
                           ("berth_lease_expiries_total", "counter"),
                           ("berth_user_gpu_seconds_total", "counter")]:
            self.assertEqual(families.get(name), kind, name)

        # GPUs: the same as `berth nodes --json`, type by type and node by node.
        nodes = b.nodes()
        for node in nodes:
            for gpu_type, total in node["capacity"]["gpus"].items():
                free = node["free"]["gpus"][gpu_type]
                self.assertEqual(value(samples, "berth_node_gpus", node=node["name"], type=gpu_type,
                                       state="free"), free)
                self.assertEqual(value(samples, "berth_node_gpus", node=node["name"], type=gpu_type,
                                       state="used"), total - free)
        self.assertEqual(value(samples, "berth_gpus", type="V100", state="used"), 2)
        self.assertEqual(value(samples, "berth_gpus", type="V100", state="free"), 2)
        self.assertEqual(value(samples, "berth_gpus", type="T4", state="free"), 2)
        self.assertEqual(value(samples, "berth_nodes", state="UP"), 2)

        # The jobs' lives.
        self.assertEqual(value(samples, "berth_jobs", status="RUNNING"), 1)
        self.assertEqual(value(samples, "berth_jobs_finished_total", status="SUCCEEDED"), 1)
        self.assertEqual(value(samples, "berth_launches_total"), 2)
        self.assertEqual(value(samples, "berth_job_run_seconds_count", status="SUCCEEDED"), 1)
        self.assertEqual(value(samples, "berth_admission_wait_seconds_count"), 2)
        self.assertGreater(value(samples, "berth_user_gpu_seconds_total", user="root",
                                 gpu_type="V100"), 0)
        self.assertGreaterEqual(value(samples, "berth_scheduler_pass_seconds_count"), 1)
        self.assertGreaterEqual(value(samples, "berth_scheduler_passes_total", outcome="decided"), 1)
        self.assertGreaterEqual(value(samples, "berth_store_commit_seconds_count"), 2)
        self.assertEqual(value(samples, "berth_build_info"), 1)

        # Requests by route template: two job ids shown, one series; agents' calls are there too.
        routes = {dict(ls).get("route") for (n, ls) in samples
                  if n == "berth_http_request_seconds_count"}
        self.assertIn("/v1/jobs/{id}", routes)
        self.assertIn("/v1/agent/register", routes)
        self.assertFalse(any(r and re.search(r"/\d", r) for r in routes), routes)
        self.assertGreaterEqual(value(samples, "berth_http_request_seconds_count",
                                      route="/v1/jobs/{id}", method="GET", code="200"), 2)

        # Cancelling ends the running job: counted by its final status.
        b.run("cancel", str(held))
        b.wait_status(held, "CANCELLED")
        _, later = parse_exposition(self.scrape())
        self.assertEqual(value(later, "berth_jobs_finished_total", status="CANCELLED"), 1)
        # Its GPUs are free once its process is gone (held while it stops, a moment after CANCELLED).
        b.wait_until(lambda: value(parse_exposition(self.scrape())[1], "berth_gpus", type="V100",
                                   state="free") == 4, message="the cancelled job's GPUs to be free")

    def test_pending_jobs_say_why_they_wait(self):
        b = self.b
        b.submit("--gpus", "V100:4", "--", "sleep", "300")
        waiting = b.submit("--gpus", "V100:4", "--", "true")
        b.wait_until(lambda: "waiting for resources" in
                     ((b.show(waiting).get("waiting") or {}).get("reason") or ""),
                     message="the second job to wait for resources")
        _, samples = parse_exposition(self.scrape())
        self.assertEqual(value(samples, "berth_pending_jobs", reason="resources", user="root"), 1)
        self.assertEqual(value(samples, "berth_jobs", status="PENDING"), 1)

    def test_the_example_dashboard_and_alerts_use_metrics_that_exist(self):
        families, _ = parse_exposition(self.scrape())
        docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "monitoring")
        for name in ("grafana-dashboard.json", "alerts.yml"):
            with open(os.path.join(docs, name)) as f:
                text = f.read()
            used = set(re.findall(r"berth_[a-z_]+", text))
            self.assertTrue(used, name)
            for metric in used:
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                self.assertTrue(metric in families or base in families, f"{name}: {metric}")

    def test_nodes_may_not_read_the_page(self):
        with open(os.path.join(self.server.state_dir, "token")) as f:
            cluster_token = f.read().strip()
        status, body, _ = http("GET", self.server.url + "/metrics", token=cluster_token)
        self.assertEqual(status, 403, body)
        self.assertIn("identifies nodes, not users", body["error"])


if __name__ == "__main__":
    unittest.main()

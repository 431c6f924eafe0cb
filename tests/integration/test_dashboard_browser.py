"""The web dashboard in a real browser (issue "Seeing the cluster"): Debian's headless Chromium, driven over
the DevTools protocol (browser.py), against a local cluster running the seed scenario.

It logs in with the link `berth dashboard` prints, sees the scenario's jobs, checks the GPU map against
`berth nodes --json` and the jobs' placements (shared devices included), follows a job's logs live,
cancels a job from its page, stays responsive with 10,000 more jobs queued (the browser is sent a page of
them, not all), and logs out and back in with a pasted token. A screenshot of each page is saved under
build/dashboard-screenshots (or $BERTH_SCREENSHOTS).
"""

import datetime
import json
import os
import unittest

from browser import Browser, find_chromium
from harness import BERTH_BIN, BerthTestCase, http

SHOTS = os.environ.get("BERTH_SCREENSHOTS") or os.path.join(os.path.dirname(os.path.dirname(BERTH_BIN)),
                                                           "dashboard-screenshots")

# Prints its devices, then a line when told to (say-<id>), then holds its GPUs until released.
JOB = r"""
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
while [ ! -e "$DIR/say-$BERTH_JOB_ID" ]; do sleep 0.05; done
echo "live line from job $BERTH_JOB_ID"
while [ ! -e "$DIR/release-$BERTH_JOB_ID" ]; do sleep 0.05; done
"""


@unittest.skipUnless(find_chromium(), "no chromium on PATH: `scripts/install-deps.sh --for-tests` installs "
                                      "Debian's (the dashboard's browser tests need it)")
def nodes_page(test):
    """A headless Chromium on the Nodes page of the dashboard of test.b's server (closed at cleanup)."""
    browser = Browser(test.path("chromium-profile"))
    test.addCleanup(browser.close)
    browser.navigate(test.b.json("dashboard", "--json")["url"])
    browser.wait_for("(document.body.dataset.rendered || '').startsWith('overview:')", message="the overview")
    browser.evaluate("delete document.body.dataset.rendered; location.hash = '#/nodes'")
    browser.wait_for("(document.body.dataset.rendered || '').startsWith('nodes:')", message="the nodes page")
    return browser


class DashboardBrowserTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.b.local_up("V100:4", 1, "--cpus", "64")
        self.browser = Browser(self.path("chromium-profile"))
        self.addCleanup(self.browser.close)

    def rendered(self, page):
        """Waits until the dashboard has drawn `page` (after any earlier drawing)."""
        self.browser.evaluate("delete document.body.dataset.rendered")
        self.browser.wait_for(f"(document.body.dataset.rendered || '').startsWith('{page}:')",
                              message=f"the {page} page to render")

    def go(self, hash_, page):
        """Opens `hash_` and waits until it is drawn: `page` is "queue", or "job:<id>"."""
        self.browser.evaluate("delete document.body.dataset.rendered")
        self.browser.evaluate(f"location.hash = {json.dumps(hash_)}")
        self.browser.wait_for(f"(document.body.dataset.rendered || '').startsWith('{page}:')",
                              message=f"the {page} page to render")

    def shot(self, name):
        self.browser.screenshot(os.path.join(SHOTS, name + ".png"))

    def test_the_dashboard_end_to_end(self):
        b, br = self.b, self.browser
        script = self.write("job.sh", JOB)
        env = ["--env", f"DIR={b.tmp}"]
        # The seed scenario, with a shared device: 2 + 1 GPUs, two half GPUs sharing one device, and a job
        # that waits for all four.
        two = b.submit("-n", "train", "--gpus", "V100:2", *env, "--", "bash", script)
        one = b.submit("-n", "eval", "--gpus", "V100:1", *env, "--", "bash", script)
        halves = [b.submit("-n", f"half{i}", "--gpus", "V100:0.5", *env, "--", "bash", script) for i in range(2)]
        for j in (two, one, *halves):
            b.wait_status(j, "RUNNING")
        waiting = b.submit("-n", "big", "--gpus", "V100:4", *env, "--", "bash", script)
        b.wait_until(lambda: b.show(waiting)["reason"].startswith("waiting"), message="job big to wait")

        # Logged in by the link `berth dashboard` prints: the overview.
        url = b.json("dashboard", "--json")["url"]
        br.navigate(url)
        br.wait_for("(document.body.dataset.rendered || '').startsWith('overview:')", message="the overview")
        self.assertEqual(br.evaluate("document.getElementById('who').textContent"), "root (admin)")
        self.assertNotIn("code=", br.evaluate("location.href"))
        cards = br.evaluate("[...document.querySelectorAll('.card')].map(c => c.innerText.replace(/\\s+/g, ' '))")
        self.assertIn("RUNNING 4 0 STARTING", map(str.upper, cards))
        self.assertIn("PENDING 1 0 STOPPING", map(str.upper, cards))
        self.assertIn("4 / 4", br.evaluate("document.getElementById('gpu-types').innerText"))
        self.shot("overview")

        # The nodes page: the GPU map is `berth nodes --json`, each held device showing its jobs.
        self.go("#/nodes", "nodes")
        holders = {}
        for job in b.queue():
            if job["status"] != "RUNNING":
                continue
            for p in job["placement"]:
                for d in p["gpus"]:
                    holders.setdefault((p["node"], d), set()).add(job["id"])
        cells = br.evaluate("""[...document.querySelectorAll('.node')].map(n => ({
            node: n.dataset.node,
            cells: [...n.querySelectorAll('.gpus .gpu')].map(c => ({
                index: Number(c.dataset.index), free: Number(c.dataset.free),
                jobs: c.dataset.jobs ? c.dataset.jobs.split(',').map(Number) : [],
                slices: c.querySelectorAll('i').length}))}))""")
        nodes = b.nodes()
        self.assertEqual([c["node"] for c in cells], [n["name"] for n in nodes])
        for node, drawn in zip(nodes, cells):
            self.assertEqual([(c["index"], c["free"]) for c in drawn["cells"]],
                             [(d["index"], d["free"]) for d in node["devices"]])
            for c in drawn["cells"]:
                self.assertEqual(set(c["jobs"]), holders.get((node["name"], c["index"]), set()), c)
        shared = [c for c in cells[0]["cells"] if len(c["jobs"]) == 2]
        self.assertEqual(len(shared), 1, cells)
        self.assertEqual(set(shared[0]["jobs"]), set(halves))
        self.assertEqual(shared[0]["slices"], 2)  # drawn as two half cells
        self.shot("nodes")

        # The queue: every job of the scenario, with why the waiting one waits.
        self.go("#/queue", "queue")
        rows = br.evaluate("""[...document.querySelectorAll('#queue tr[data-job]')].map(r => ({
            id: Number(r.dataset.job), status: r.children[3].innerText, why: r.children[7].innerText}))""")
        self.assertEqual([r["id"] for r in rows], [waiting, *reversed(halves), one, two])
        self.assertTrue(rows[0]["why"].startswith("waiting"), rows[0])
        self.shot("queue")

        # A job's page follows its output live, without reloading.
        self.go(f"#/job/{two}", f"job:{two}")
        br.evaluate("window.stillTheSamePage = true")
        devices = ",".join(map(str, b.show(two)["placement"][0]["gpus"]))
        br.wait_for(f"document.getElementById('logs').textContent.includes('CUDA_VISIBLE_DEVICES={devices}')",
                    message="the job's first output")
        self.write(f"say-{two}", "")
        br.wait_for(f"document.getElementById('logs').textContent.includes('live line from job {two}')",
                    message="the job's new output, streamed")
        self.assertTrue(br.evaluate("window.stillTheSamePage === true"))
        self.shot("job")

        # Cancelled from its page by its owner.
        self.go(f"#/job/{waiting}", f"job:{waiting}")
        br.evaluate("window.confirm = () => true")
        br.evaluate("document.getElementById('cancel').click()")
        b.wait_status(waiting, "CANCELLED")
        br.wait_for("document.querySelector('h1 .status').textContent === 'CANCELLED'",
                    message="the page to show the job cancelled")
        self.assertEqual(b.show(waiting)["events"][-1]["by"], "root")

        # 10,000 more jobs: the browser is sent one page of the queue, and stays responsive.
        group = b.json("exec", "-d", "--json", "-n", "sweep", "--num-jobs", 10000, "--gpus", "V100:1", "--",
                       "true", timeout=120)["group"]
        br.evaluate("""window.longTasks = [];
            new PerformanceObserver(l => window.longTasks.push(...l.getEntries().map(e => e.duration)))
                .observe({type: 'longtask', buffered: false});
            performance.clearResourceTimings();""")
        self.go("#/queue", "queue")
        group_row = br.wait_for(f"document.querySelector('#queue tr[data-group=\"{group}\"]')?.innerText",
                                message="the sweep's row")
        self.assertIn("10000 jobs", group_row)
        br.evaluate(f"document.querySelector('#queue tr[data-group=\"{group}\"] a').click()")
        br.wait_for("document.querySelectorAll('#queue tr.child').length >= 100", message="the group to expand")
        self.assertIn("more active jobs", br.evaluate("document.getElementById('queue').innerText"))
        # A few refreshes while it is open, then: no answer the page fetched was big, and no task blocked
        # the page for long.
        for _ in range(3):
            self.rendered("queue")
        biggest = br.evaluate("""Math.max(...performance.getEntriesByType('resource')
            .filter(e => e.name.includes('/v1/')).map(e => e.decodedBodySize))""")
        self.assertLess(biggest, 256 * 1024)
        self.assertLess(max(br.evaluate("window.longTasks") or [0]), 2000)
        self.shot("queue-10000")

        # Sorting and filtering happen on the server: a filter for another user shows nothing.
        br.evaluate("""const u = document.getElementById('q-user'); u.value = 'nobody';
            u.dispatchEvent(new Event('change'))""")
        br.wait_for("document.getElementById('q-range').textContent === 'nothing here'", message="the filter")

        # Logged out, then in again with a pasted token.
        token = b.json("admin", "token", "create", "--user", "root", "--json")["token"]
        br.evaluate("document.getElementById('logout').click()")
        br.wait_for("!!document.querySelector('.login input')", message="the login form")
        self.shot("login")
        br.evaluate(f"""const i = document.querySelector('.login input'); i.value = {json.dumps(token)};
            document.querySelector('.login form').requestSubmit()""")
        br.wait_for("(document.body.dataset.rendered || '').startsWith('queue:')", message="logged in again")
        self.assertEqual(br.evaluate("document.getElementById('who').textContent"), "root (admin)")
        for j in (two, one, *halves):
            self.write(f"release-{j}", "")
            self.write(f"say-{j}", "")
        b.run("cancel", "--all")

    def test_reservations_timeline_shows_the_next_week(self):
        """The overview's Reservations panel: the next 7 days, a row per reservation, a bar per window (a
        daily one's windows computed in the page), maintenance bars marked, and the iCal feed linked."""
        b, br = self.b, self.browser
        br.navigate(b.json("dashboard", "--json")["url"])
        br.wait_for("(document.body.dataset.rendered || '').startsWith('overview:')", message="the overview")
        self.assertIn("No reservations.", br.evaluate("document.getElementById('reservations').innerText"))

        node = b.nodes()[0]["name"]
        b.run("reserve", "create", "--name", "train", "--start", "now+1h", "--duration", "2h", "--nodes", node,
              "--repeat", "daily", "--users", "root")
        # Clear of train's windows (1h to 3h from now, each day) on the same node.
        b.run("reserve", "create", "--name", "upgrade", "--start", "now+52h", "--duration", "4h", "--nodes", node,
              "--maintenance")
        b.run("reserve", "create", "--name", "demo", "--start", "now", "--duration", "30m", "--nodes", node)
        # The overview's next refresh draws them.
        br.wait_for("document.querySelectorAll('#reservations .resv-row').length === 3", message="the reservations")
        drawn = br.evaluate("""(() => { const p = document.getElementById('reservations');
            return {from: p.dataset.from, to: p.dataset.to, ical: document.querySelector('a#resv-ical').href,
                    ticks: document.querySelectorAll('#reservations .resv-tick').length,
                    rows: [...p.querySelectorAll('.resv-row')].map(r => ({name: r.dataset.name,
                        label: r.querySelector('.resv-label').innerText,
                        bars: [...r.querySelectorAll('.resv-bar')].map(e => ({start: e.dataset.start,
                            end: e.dataset.end, cls: [...e.classList].sort()}))}))}; })()""")
        rows = {r["name"]: r for r in drawn["rows"]}
        self.assertEqual(sorted(rows), ["demo", "train", "upgrade"])
        self.assertTrue(drawn["ical"].endswith("/v1/reservations.ics"), drawn["ical"])
        self.assertEqual(drawn["ticks"], 7)  # a UTC midnight per day of the span

        def ms(iso):
            return int(datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
        day = 86400 * 1000
        start, end = ms(drawn["from"]), ms(drawn["to"])
        self.assertEqual(end - start, 7 * day)
        # The daily one: a bar per day from its next window while it starts before the span's end — from
        # now+1h, 7 of them (the 8th would start an hour after it).
        first = ms(b.json("reserve", "show", "train", "--json")["window"]["start"])
        expected = [first + k * day for k in range(8) if first + k * day < end]
        self.assertEqual(len(expected), 7)
        train = rows["train"]
        self.assertEqual([ms(x["start"]) for x in train["bars"]], expected)
        self.assertEqual([ms(x["end"]) - ms(x["start"]) for x in train["bars"]], [2 * 3600 * 1000] * 7)
        self.assertEqual({tuple(x["cls"]) for x in train["bars"]}, {("resv-bar",)})
        self.assertIn("users root", train["label"])
        self.assertIn("daily", train["label"])
        upgrade = rows["upgrade"]
        self.assertEqual([x["cls"] for x in upgrade["bars"]], [["maintenance", "resv-bar"]])
        self.assertIn("maintenance", upgrade["label"])
        # The window in force now is highlighted, drawn from the span's start.
        self.assertEqual([x["cls"] for x in rows["demo"]["bars"]], [["active", "resv-bar"]])
        self.assertIn("anyone naming it", rows["demo"]["label"])
        self.shot("overview-reservations")


@unittest.skipUnless(find_chromium(), "no chromium on PATH: `scripts/install-deps.sh --for-tests` installs "
                                      "Debian's (the dashboard's browser tests need it)")
class DashboardHealthBrowserTest(BerthTestCase):
    """The nodes page marks a GPU its node's health probes fenced, and a node they drained, with why."""

    def test_unhealthy_gpu_cells_and_drained_nodes_show_their_reason(self):
        b = self.b
        server = b.start_server()
        b.env["BERTH_SERVER"] = server.url
        for name, line in (("sick", "gpu 1: fan stuck at 0 rpm"), ("bad", "scratch is read-only")):
            self.write(f"health-{name}/check", f"#!/bin/sh\necho '{line}'\nexit 1\n", mode=0o755)
            b.start_agent(server.url, name=name, gpus="V100:2",
                          extra=["--health-interval", "200ms", "--health-dir", self.path(f"health-{name}")])
        b.wait_until(lambda: {n["name"]: n["health"]["state"] for n in b.nodes()} == {"bad": "drained", "sick": "degraded"},
                     message="one node drained, one GPU fenced")
        browser = nodes_page(self)
        drawn = browser.evaluate("""[...document.querySelectorAll('.node')].map(n => ({
            node: n.dataset.node, state: n.querySelector('.state').innerText,
            reason: (n.querySelector('.health-reason') || {}).innerText || '',
            faulty: [...n.querySelectorAll('.gpus .gpu.faulty')].map(c => Number(c.dataset.index)),
            label: ((n.querySelector('.gpus .gpu.faulty') || {getAttribute: () => ''}).getAttribute('aria-label')) || ''}))""")
        by_node = {d["node"]: d for d in drawn}
        self.assertEqual(by_node["bad"]["state"], "DRAINING")
        self.assertEqual(by_node["bad"]["reason"], "health: health.d/check: scratch is read-only")
        self.assertEqual(by_node["bad"]["faulty"], [])
        self.assertEqual(by_node["sick"]["state"], "UP")
        self.assertEqual(by_node["sick"]["faulty"], [1])
        self.assertIn("unhealthy: health.d/check: gpu 1: fan stuck at 0 rpm", by_node["sick"]["label"])
        browser.screenshot(os.path.join(SHOTS, "nodes-health.png"))


@unittest.skipUnless(find_chromium(), "no chromium on PATH")
class DashboardMigBrowserTest(BerthTestCase):
    """The GPU map of a node whose GPUs are in MIG mode: each GPU a frame with its slices inside."""

    def test_slices_are_drawn_inside_their_gpu(self):
        b = self.b
        server = b.start_server()
        b.env["BERTH_SERVER"] = server.url
        b.start_agent(server.url, name="mig", gpus="A100:3",
                      extra=["--mig", "0=4g.40gb,3g.40gb;1=1g.10gb*7", "--cpus", "4", "--memory", "4"])
        b.wait_nodes_up(["mig"])
        job = b.submit("--gpus", "A100-3g.40gb:1", "--", "sleep 300")
        b.wait_status(job, "RUNNING", timeout=60)
        browser = nodes_page(self)
        drawn = browser.evaluate("""(() => { const n = document.querySelector('.node');
            return {whole: [...n.querySelectorAll('.gpus > .gpu')].map(c => Number(c.dataset.index)),
                    frames: [...n.querySelectorAll('.gpus > .mig')].map(f => ({gpu: Number(f.dataset.gpu),
                        slices: [...f.querySelectorAll('.gpu.slice')].map(c => ({index: Number(c.dataset.index),
                            jobs: c.dataset.jobs, width: c.getBoundingClientRect().width}))}))}; })()""")
        self.assertEqual(drawn["whole"], [2])  # the GPU not in MIG mode
        self.assertEqual([f["gpu"] for f in drawn["frames"]], [0, 1])
        first, second = drawn["frames"]
        self.assertEqual([s["index"] for s in first["slices"]], [100, 101])
        self.assertEqual([s["jobs"] for s in first["slices"]], ["", str(job)])  # on the 3g.40gb
        self.assertGreater(first["slices"][0]["width"], first["slices"][1]["width"])  # 4g wider than 3g
        self.assertEqual(len(second["slices"]), 7)
        browser.screenshot(os.path.join(SHOTS, "nodes-mig.png"))
        b.run("cancel", job)


# nvidia-smi as the agent asks it (docs/idle.md): GPU 0 at 0 % with no process, GPU 1 at 90 % with one.
FAKE_SMI = """#!/bin/sh
case "$*" in
  "--query-gpu=index,uuid,utilization.gpu,memory.used --format=csv,noheader,nounits")
    printf '0, GPU-aaaa, 0, 10\\n1, GPU-bbbb, 90, 30000\\n' ;;
  "--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits")
    printf 'GPU-bbbb, 4242, 29000\\n' ;;
  *) exit 1 ;;
esac
"""


@unittest.skipUnless(find_chromium(), "no chromium on PATH")
class DashboardGpuUseBrowserTest(BerthTestCase):
    """Each GPU cell is shaded by what its node last sampled (docs/idle.md): a strip as tall as
    its SM utilisation, a held GPU below 5 % drawn idle; the overview lists who holds idle GPUs."""

    def test_gpu_cells_are_shaded_by_utilisation_and_idle_holders_are_listed(self):
        b = self.b
        bindir = self.path("smi-bin")
        os.makedirs(bindir, exist_ok=True)
        self.write("smi-bin/nvidia-smi", FAKE_SMI, mode=0o755)
        server = b.start_server()
        b.env["BERTH_SERVER"] = server.url
        b.start_agent(server.url, name="g1", gpus="A100:3",
                      extra=["--cpus", "4", "--memory", "4", "--health", "off", "--gpu-sample-interval", "1s"],
                      env={"PATH": bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")})
        b.wait_nodes_up(["g1"])
        idle = b.submit("--gpus", "A100:1", "--", "sleep 300")   # GPU 0 (the lowest free index)
        b.wait_status(idle, "RUNNING", timeout=60)
        busy = b.submit("--gpus", "A100:1", "--", "sleep 300")   # GPU 1
        b.wait_status(busy, "RUNNING", timeout=60)

        def sampled():
            devices = b.json("nodes", "--json")[0]["devices"]
            return [d.get("sm") for d in devices] == [0, 90, None] and devices
        b.wait_until(sampled, timeout=60, message="the node's GPUs as sampled in /v1/nodes")
        b.wait_until(lambda: [g["job"] for g in self.overview(server)] == [idle], timeout=60,
                     message="the idle job in the overview")
        browser = nodes_page(self)
        cells = browser.evaluate("""[...document.querySelectorAll('.node .gpus > .gpu')].map(c => ({
            index: Number(c.dataset.index), sm: c.dataset.sm, idle: c.classList.contains('idle'),
            strip: c.querySelector('b.sm') ? c.querySelector('b.sm').style.height : null,
            label: c.getAttribute('aria-label')}))""")
        self.assertEqual([(c["index"], c["sm"], c["idle"], c["strip"]) for c in cells],
                         [(0, "0", True, "0%"), (1, "90", False, "90%"), (2, "", False, None)], cells)
        self.assertIn("0% SM (idle)", cells[0]["label"])
        self.assertIn("90% SM", cells[1]["label"])
        browser.screenshot(os.path.join(SHOTS, "nodes-gpu-use.png"))
        browser.evaluate("delete document.body.dataset.rendered; location.hash = '#/'")
        browser.wait_for("(document.body.dataset.rendered || '').startsWith('overview:')", message="the overview")
        listed = browser.evaluate("[...document.querySelectorAll('#idle-gpus tr[data-job]')].map(r => Number(r.dataset.job))")
        self.assertEqual(listed, [idle])
        browser.screenshot(os.path.join(SHOTS, "overview-idle.png"))
        b.run("cancel", idle, busy)

    def overview(self, server):
        status, body, _ = http("GET", server.url + "/v1/dashboard/overview")
        return body.get("idle_gpus", []) if status == 200 else []


class DashboardTopologyBrowserTest(BerthTestCase):
    """With --topology-levels, the nodes page groups the nodes by their coarsest level's domain."""

    def test_nodes_are_grouped_by_rack(self):
        b = self.b
        server = b.start_server(extra=["--topology-levels", "rack,switch"])
        b.env["BERTH_SERVER"] = server.url
        for name, rack in (("z-1", "r2"), ("a-1", "r1"), ("a-2", "r2"), ("m-1", None)):
            labels = ["--label", f"rack={rack}", "--label", "switch=s1"] if rack else []
            b.start_agent(server.url, name=name, gpus="V100:1", extra=["--cpus", "2", "--memory", "2", *labels])
        b.wait_nodes_up(["z-1", "a-1", "a-2", "m-1"])
        browser = nodes_page(self)
        drawn = browser.evaluate("""[...document.querySelectorAll('section.domain')].map(s => ({
            domain: s.dataset.domain, title: s.querySelector('h2').textContent,
            nodes: [...s.querySelectorAll('.node')].map(n => n.dataset.node)}))""")
        self.assertEqual(drawn, [
            {"domain": "r1", "title": "rack r1 (1)", "nodes": ["a-1"]},
            {"domain": "r2", "title": "rack r2 (2)", "nodes": ["a-2", "z-1"]},
            {"domain": "", "title": "no rack label (1): outside every rack", "nodes": ["m-1"]}])
        browser.screenshot(os.path.join(SHOTS, "nodes-topology.png"))


if __name__ == "__main__":
    unittest.main()

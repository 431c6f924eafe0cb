"""`berth queue` as a summary (issue "Seeing the cluster"): every active job that is in no bulk group is
listed, however many there are beyond --limit; each bulk group is one row with its jobs' counts per
status (`--group G` lists them); the newest --limit finished jobs follow; and what is left out is said
at the end. The API behind it (`GET /v1/queue`) caps the active jobs it lists and says how many it left
out.
"""

import re

from harness import BerthTestCase, http


class QueueViewTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.b.local_up("V100:4", 1, "--cpus", "64")

    def test_groups_collapse_and_every_active_job_shows(self):
        b = self.b
        sweep = self.write("sweep.yaml", "name: sweep\nresources:\n  accelerators: V100:1\nrun: sleep 300\n")
        group = b.json("exec", sweep, "--num-jobs", 30, "-d", "--json")["group"]
        b.wait_until(lambda: sum(j["status"] == "RUNNING" for j in b.json("queue", "--group", str(group),
                                                                         "--json")) == 4,
                     message="four of the sweep's jobs to run")
        done = b.submit("-n", "early", "--", "true")
        b.wait_status(done, "SUCCEEDED")
        # 55 single jobs wait behind the sweep for a GPU: more than the 50 rows of the old page.
        singles = [b.submit("-n", f"single{i}", "--gpus", "V100:1", "--", "true") for i in range(55)]
        _, out, _ = b.run("queue")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "NAME", "USER", "SUBMITTED", "STARTED", "STATUS", "GPUS",
                                            "NODE", "REASON"])
        listed = [line.split()[0] for line in lines[1:] if re.match(r"^\d", line)]
        self.assertEqual(listed, [str(i) for i in reversed(singles)] + [str(done)])
        group_rows = [line for line in lines if line.startswith(f"group {group} ")]
        self.assertEqual(len(group_rows), 1, out)
        self.assertRegex(group_rows[0], r"26 PENDING, 4 RUNNING\s+V100:1\s+30 jobs")
        self.assertIn(f"berth queue --group {group} lists its jobs", out)
        self.assertNotIn("more active job", out)
        # The group expands on request.
        _, expanded, _ = b.run("queue", "--group", str(group))
        self.assertEqual(len([line for line in expanded.splitlines() if re.match(r"^\d", line)]), 30)

        # The API caps the active jobs it lists and says how many it left out.
        server = b.json("local", "status", "--json")["server"]
        status, page, _ = http("GET", server + "/v1/queue?active_cap=10&limit=5")
        self.assertEqual(status, 200, page)
        jobs = [r for r in page["rows"] if r["kind"] == "job"]
        self.assertEqual([r["id"] for r in jobs if r["status"] == "PENDING"],
                         list(reversed(singles))[:10])
        self.assertEqual(page["active_not_shown"], 45)
        groups = [r for r in page["rows"] if r["kind"] == "group"]
        self.assertEqual([(r["group"], r["jobs"], r["counts"]) for r in groups],
                         [(group, 30, {"PENDING": 26, "RUNNING": 4})])
        b.run("cancel", "--all")
        # A finished group is still one row, with its final counts (once it is among the newest --limit
        # finished jobs: behind the 55 newer single jobs here).
        b.wait_until(lambda: "30 CANCELLED" in b.run("queue", "--limit", "100")[1],
                     message="the group's jobs to be cancelled")
        self.assertNotIn(f"group {group}", b.run("queue", "--limit", "50")[1])

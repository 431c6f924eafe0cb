"""`GET /v1/jobs` always answers a page (issue "Launching at the machine's speed": a listing of every job in
one answer could take the server down by accident): a default page size, a maximum, a cursor (`next`, passed
back as `before`) and `more`; filters fill a page from as many of the store's rows as they need; and
`berth queue --all --json` follows the cursor to the end, printing each page as it arrives.
"""

import json

from harness import BerthTestCase, http


class ListingTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        self.b.local_up("V100:4", 1, "--cpus", "64")
        self.url = self.b.json("local", "status", "--json")["server"]

    def get(self, query):
        status, body, _ = http("GET", self.url + "/v1/jobs?" + query)
        self.assertEqual(status, 200, body)
        return body

    def test_every_listing_is_a_page_with_a_cursor(self):
        b = self.b
        holder = b.submit("--gpus", "V100:4", "--priority", "10", "--", "sleep", "300")
        b.wait_status(holder, "RUNNING")
        group = b.json("exec", "-d", "--json", "--num-jobs", 2500, "--gpus", "V100:1", "--", "true")["group"]
        done = b.submit("-n", "done", "--", "true")
        b.wait_status(done, "SUCCEEDED")
        total = 2502  # over one page of the CLI (2,000): it must follow the cursor

        # No page asked for: the default page (1000), newest first, with the cursor of the next one.
        first = self.get("all=1")
        self.assertEqual((len(first["jobs"]), first["more"]), (1000, True))
        self.assertEqual(first["jobs"][0]["id"], done)
        self.assertEqual(first["next"], first["jobs"][-1]["id"])
        # Following the cursor visits every job once, in order.
        seen, before = [], None
        while True:
            page = self.get("all=1&page=700" + (f"&before={before}" if before else ""))
            seen += [j["id"] for j in page["jobs"]]
            self.assertLessEqual(len(page["jobs"]), 700)
            before = page["next"]
            self.assertEqual(page["more"], before is not None)
            if before is None:
                break
        self.assertEqual(seen, sorted(seen, reverse=True))
        self.assertEqual(len(set(seen)), total)

        # Over the maximum: refused, naming it.
        status, body, _ = http("GET", self.url + "/v1/jobs?all=1&page=2001")
        self.assertEqual(status, 400, body)
        self.assertIn("2000", body["error"])
        # The queue summary had no maximum at all (any limit was read from the store at once).
        for query, maximum in (("limit=2001", "2000"), ("active_cap=10001", "10000")):
            status, body, _ = http("GET", self.url + "/v1/queue?" + query)
            self.assertEqual(status, 400, f"{query}: {body}")
            self.assertIn(maximum, body["error"])
        status, body, _ = http("GET", self.url + "/v1/queue?limit=2000&active_cap=10000")
        self.assertEqual(status, 200, body)

        # A filter fills its page from as many rows as it takes: the one finished job of "nobody" is
        # not there, root's are, a page at a time.
        self.assertEqual(self.get("all=1&user=nobody"), {"jobs": [], "more": False, "next": None})
        by_user = self.get("all=1&user=root&page=10")
        self.assertEqual((len(by_user["jobs"]), by_user["more"]), (10, True))
        grouped = self.get(f"group={group}&page=2000")
        self.assertEqual((len(grouped["jobs"]), grouped["more"]), (2000, True))

        # The CLI follows the cursor: every job, as one JSON array.
        _, out, _ = b.run("queue", "--all", "--json", timeout=120)
        listed = json.loads(out)
        self.assertEqual(len(listed), total)
        self.assertEqual(len({j["id"] for j in listed}), total)
        _, table, _ = b.run("queue", "--all", timeout=120)
        self.assertEqual(sum(1 for line in table.splitlines() if line[:1].isdigit()), total)
        self.assertNotIn("the newest", table)
        b.run("cancel", "--all")

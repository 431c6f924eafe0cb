"""Fair share, team quotas and reclaim, end to end (docs/fair-share.md).

Real unix users (the test must run as root, as CI does; it skips, saying so, otherwise) act through their
own tokens over loopback TCP: the CLI runs as root with BERTH_TOKEN=<their secret>, so the server takes
it for them and their jobs run with their uids. Root without a token (loopback) is the admin.

- A 500-job sweep of one vision user fills the cluster, borrowing nlp's idle quota; nlp submits and gets
  its quota back within one job duration plus the reclaim rate-limit window (plus slack for a loaded
  machine); pending vision jobs say they borrow.
- `berth usage` equals the sums of the jobs' own attempts (GPU and CPU seconds, jobs, waits, preemptions),
  by user and by team, with the JSON contract's keys.
- Team quotas and user caps survive a server restart (kill -9) and act: max-pending-jobs refuses a
  submission, max-running-gpus holds a job; bad input is refused with a clear error.
- `berth queue --team T` lists that team's jobs only, even when other teams' newer jobs fill a page.
"""

import json
import os
import pwd
import signal
import subprocess
import time
import unittest
import uuid
from datetime import datetime

from harness import SCALE, TERMINAL, BerthTestCase, http

LIVE = ("STARTING", "SETTING_UP", "RUNNING")


def sh(*args, check=True):
    return subprocess.run(args, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ts(text):
    """RFC 3339 with milliseconds and Z -> seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class FairShareTest(BerthTestCase):

    def setUp(self):
        if os.geteuid() != 0:
            raise unittest.SkipTest("creating unix users needs root (CI runs as root)")
        if subprocess.run(["which", "useradd", "userdel"], stdout=subprocess.DEVNULL).returncode != 0:
            raise unittest.SkipTest("useradd and userdel are needed")
        # The users are created (and their removal registered) before the harness's world, so that they
        # are removed after it has stopped their jobs (cleanups run last-in, first-out).
        tag = uuid.uuid4().hex[:5]
        self.users = {}
        for role in ("va", "vb", "na", "nb"):  # vision's and nlp's
            name = f"bf{role}{tag}"
            sh("useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/bash", name)
            self.addCleanup(sh, "userdel", name, check=False)
            self.users[role] = pwd.getpwnam(name).pw_name
        super().setUp()
        # The users' jobs run in a directory they may enter.
        os.chmod(self.b.tmp, 0o711)
        self.work = self.path("work")
        os.makedirs(self.work)
        os.chmod(self.work, 0o1777)
        self.tokens = {}

    # --- the cluster and its people ---

    def start(self, nodes=1, gpus="V100:4", extra=(), state_dir=None, listen="127.0.0.1:0"):
        self.server = self.b.start_server(state_dir=state_dir, listen=listen,
                                          extra=["--kill-grace", "1s", *extra])
        self.b.env["BERTH_SERVER"] = self.server.url  # root over loopback: the admin
        names = [f"n{i}" for i in range(nodes)]
        for name in names:
            self.b.start_agent(self.server.url, name, gpus, extra=("--cpus", "8"))
        self.b.wait_nodes_up(names)
        return names

    def teams(self, vision_quota="V100:4", nlp_quota="V100:4"):
        self.b.run("admin", "team", "set", "vision", "--gpus", vision_quota)
        self.b.run("admin", "team", "set", "nlp", "--gpus", nlp_quota)
        for role, user in self.users.items():
            self.b.run("admin", "user", "set", user, "--team", "vision" if role[0] == "v" else "nlp")

    def as_(self, role, *args, check=True, timeout=60):
        """`berth ARGS` as one of the test's users: root's CLI presenting that user's token."""
        user = self.users[role]
        if user not in self.tokens:
            self.tokens[user] = self.b.json("admin", "token", "create", "--user", user, "--json")["token"]
        return self.b.run(*args, check=check, timeout=timeout, cwd=self.work,
                          env={"BERTH_TOKEN": self.tokens[user]})

    def submit_as(self, role, *args):
        _, out, _ = self.as_(role, "exec", "-d", "--json", *args)
        return json.loads(out)

    def job(self, job_id):
        """The job object over the API (cheap enough to poll)."""
        status, body, _ = http("GET", f"{self.server.url}/v1/jobs/{job_id}")
        self.assertEqual(status, 200, body)
        return body

    def wait_ended(self, ids, timeout=60):
        def done():
            jobs = [self.job(i) for i in ids]
            return jobs if all(j["status"] in TERMINAL for j in jobs) else None
        return self.b.wait_until(done, timeout, interval=0.2, message=f"jobs {ids} to end")

    def team_uses(self):
        """V100s each team's jobs hold now (GET /v1/teams), by team name (None: the default team)."""
        status, body, _ = http("GET", self.server.url + "/v1/teams")
        self.assertEqual(status, 200, body)
        return {t["name"]: t["uses"].get("V100", 0) for t in body["teams"]}

    def passes(self):
        """Scheduling passes the server ran (berth_scheduler_pass_seconds' count in /metrics)."""
        status, text, _ = http("GET", self.server.url + "/metrics")
        self.assertEqual(status, 200, text)
        for line in text.splitlines():
            if line.startswith("berth_scheduler_pass_seconds_count"):
                return int(float(line.split()[-1]))
        return 0

    def run_passes(self, node="n0", n=2):
        """Makes the scheduler run `n` more passes (each drain and undrain of `node` asks for one) and
        waits until they ran: what a test that checks that nothing changed waits for, instead of a
        sleep."""
        before = self.passes()

        def ran():
            if self.passes() >= before + n:
                return True
            # Asked again until they ran: requests that arrive while a pass is pending are served by
            # that one pass, so one drain and undrain may make a single pass on a loaded machine.
            self.b.run("drain", node)
            self.b.run("undrain", node)
            return False
        self.b.wait_until(ran, 30, interval=0.05, message=f"{n} more scheduling passes")

    # --- 1. a sweep against a quota ---

    def test_sweep_gives_way_to_quota_within_the_reclaim_window(self):
        b = self.b
        job_s, window_s = 2, 5
        self.start(nodes=2, extra=["--reclaim-window", f"{window_s}s", "--reclaim-limit", "2"])
        self.teams()

        # One vision user's sweep of 500 one-GPU jobs fills all 8 GPUs: 4 within vision's quota, 4
        # borrowed from nlp, which is idle.
        sweep = self.submit_as("va", "--num-jobs", "500", "--gpus", "V100:1", "--", f"sleep {job_s}")
        self.assertEqual(len(sweep["jobs"]), 500)
        b.wait_until(lambda: self.team_uses().get("vision") == 8, 60, interval=0.1,
                     message="the sweep to fill the cluster")

        # nlp submits 4 long jobs: they fit in nlp's quota, so they may reclaim (2 per 5 s) and go first
        # onto whatever the sweep frees.
        t0 = time.monotonic()
        nlp_jobs = [self.submit_as("na", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0] for _ in range(4)]

        def nlp_live():
            return all(self.job(j)["status"] in LIVE for j in nlp_jobs)
        bound = job_s + window_s + 20
        b.wait_until(nlp_live, bound, interval=0.1, message=f"nlp's 4 jobs to run within {bound}s")
        took = time.monotonic() - t0
        print(f"\nnlp reached its quota of 4 V100 {took:.1f}s after submitting "
              f"(bound {bound * SCALE:.0f}s: job {job_s}s + reclaim window {window_s}s + 20s slack)")
        self.assertLess(took, bound * SCALE)
        self.assertEqual(self.team_uses().get("nlp"), 4)

        # How nlp got in: by reclaims (each names its victims, which were requeued saying by whom, at
        # most 2 per 5 s) and/or onto GPUs the sweep freed.
        reclaims = {}
        for j in nlp_jobs:
            for e in b.show(j)["events"]:
                marker = "by reclaiming its team's quota from job(s) "
                if marker in (e["reason"] or ""):
                    reclaims[j] = [int(v) for v in e["reason"].split(marker, 1)[1].split(", ")]
        for j, victims in reclaims.items():
            for v in victims:
                shown = b.show(v)
                self.assertEqual(shown["user"], self.users["va"])
                reasons = [a["reason"] or "" for a in shown["attempts"] if a["outcome"] == "PENDING"]
                self.assertTrue(any(f"reclaimed by team nlp for job {j}" in r for r in reasons),
                                (v, shown["attempts"]))
        print(f"nlp jobs placed by reclaiming vision's borrowed jobs: {reclaims}; "
              f"the others started on GPUs the sweep freed")
        self.assertLessEqual(len(reclaims), 2 * (1 + int(took // window_s)))

        # A pending vision job waits because vision, at its quota, would borrow.
        last = sweep["jobs"][-1]

        def borrowing():
            w = b.show(last)["waiting"]
            return w if w and w["quota"]["state"] == "borrowing" else None
        waiting = b.wait_until(borrowing, 30, interval=0.2, message=f"job {last} to wait, borrowing")
        self.assertEqual(waiting["team"], "vision")
        self.assertEqual(waiting["quota"]["quota"], 4)
        self.assertEqual(waiting["quota"]["job_needs"], 1)
        self.assertGreaterEqual(waiting["quota"]["team_uses"], 4)
        self.assertTrue(waiting["reason"])
        _, out, _ = b.run("show", last)
        self.assertIn("borrowing", out)

        # Done: the sweep is cancelled by its owner, nlp's jobs by the admin.
        _, out, _ = self.as_("va", "cancel", "--all", "--json", timeout=120)
        self.assertFalse(json.loads(out)["forbidden"])
        b.run("cancel", "--all-users")
        b.wait_until(lambda: not [j for j in b.queue() if j["status"] not in TERMINAL], 60,
                     interval=0.5, message="every job to end")

    def test_reclaim_is_rate_limited_and_never_goes_back(self):
        """The same with jobs that do not end: only reclaims free GPUs for nlp, 2 per 5 s."""
        b = self.b
        window_s = 5
        self.start(nodes=2, extra=["--reclaim-window", f"{window_s}s", "--reclaim-limit", "2"])
        self.teams()
        sweep = self.submit_as("va", "--num-jobs", "12", "--gpus", "V100:1", "--", "sleep 300")["jobs"]
        b.wait_until(lambda: self.team_uses().get("vision") == 8, 60, interval=0.1,
                     message="the sweep to fill the cluster")

        t0 = time.monotonic()
        nlp_jobs = self.submit_as("na", "--num-jobs", "4", "--gpus", "V100:1", "--", "sleep 300")["jobs"]

        def live(n):
            return lambda: sum(self.job(j)["status"] in LIVE for j in nlp_jobs) >= n
        b.wait_until(live(2), window_s + 20, interval=0.1, message="nlp's first 2 reclaims")
        first = time.monotonic() - t0
        # The other two wait for the window, saying so.
        held = [j for j in map(self.job, nlp_jobs) if j["status"] == "PENDING"]
        if first < window_s - 1:
            self.assertEqual(len(held), 2, held)
            for j in held:
                self.assertIn("reclaims allowed per", j["reason"])
                self.assertIn("the next is allowed in", j["reason"])
        b.wait_until(live(4), window_s + 20, interval=0.1, message="nlp's next 2 reclaims (once the window "
                     "has passed: nothing else happens on the cluster to start a pass)")
        second = time.monotonic() - t0
        print(f"\n2 nlp jobs ran after {first:.1f}s, all 4 after {second:.1f}s (reclaim window {window_s}s)")
        self.assertGreater(second, window_s - 1.5)  # the window held the second pair back
        self.assertLess(second, (window_s + 20) * SCALE)

        # Four of vision's borrowed jobs were requeued; vision, back at its quota, never reclaims them
        # back (its waiting jobs would borrow), and nlp keeps its quota.
        requeued = [j for j in sweep if any("reclaimed by team nlp" in (a["reason"] or "")
                                            for a in self.job(j)["attempts"])]
        self.assertEqual(len(requeued), 4, requeued)
        self.run_passes()  # passes ran since: still so
        uses = self.team_uses()
        self.assertEqual((uses["vision"], uses["nlp"]), (4, 4), uses)
        w = b.show(requeued[0])["waiting"]
        self.assertEqual((w["team"], w["quota"]["state"]), ("vision", "borrowing"), w)
        b.run("cancel", "--all-users")

    # --- 2. usage against the jobs' own records ---

    def test_usage_equals_the_jobs_own_attempts(self):
        b = self.b
        self.start(nodes=2)
        self.teams()
        ids = {}
        ids["va"] = [self.submit_as("va", "--gpus", "V100:2", "--", "sleep 1")["jobs"][0],
                     self.submit_as("va", "--gpus", "V100:1", "--cpus", "2", "--", "sleep 1")["jobs"][0],
                     self.submit_as("va", "--cpus", "1", "--", "sleep 1")["jobs"][0]]
        ids["na"] = [self.submit_as("na", "--gpus", "V100:1", "--", "sleep 1")["jobs"][0],
                     self.submit_as("na", "--num-nodes", "2", "--gpus", "V100:1", "--", "sleep 1")["jobs"][0],
                     self.submit_as("na", "--cpus", "0.5", "--", "true")["jobs"][0]]
        ids["root"] = [b.submit("--gpus", "V100:1", "--", "sleep 1")]  # the default team
        every = [j for js in ids.values() for j in js]
        jobs = {j["id"]: j for j in self.wait_ended(every, timeout=90)}
        self.assertTrue(all(j["status"] == "SUCCEEDED" for j in jobs.values()),
                        {i: (j["status"], j["reason"]) for i, j in jobs.items()})

        # What each job's own record says, summed per user and per team.
        team_of = {"va": "vision", "na": "nlp", "root": None}
        want = {"user": {}, "team": {}}
        for who, js in ids.items():
            for job_id in js:
                shown = b.show(job_id)
                res = shown["resources"]
                for by, key in (("user", self.users.get(who, "root")), ("team", team_of[who])):
                    row = want[by].setdefault(key, {"gpu_seconds": {}, "cpu_seconds": 0.0, "jobs": 0,
                                                    "waits": [], "attempts": 0})
                    row["jobs"] += 1
                    for a in shown["attempts"]:
                        span = ts(a["ended_at"]) - ts(a["placed_at"])
                        nodes = len(a["placement"])
                        for gpu, n in (res["accelerators"] or {}).items():
                            row["gpu_seconds"][gpu] = row["gpu_seconds"].get(gpu, 0.0) + n * nodes * span
                        row["cpu_seconds"] += res["cpus"] * nodes * span
                        row["attempts"] += 1
                    row["waits"].append(ts(shown["attempts"][0]["placed_at"]) - ts(shown["submitted_at"]))

        for by in ("user", "team"):
            _, out, _ = b.run("usage", "--since", "1h", "--json", "--by", by)
            got = json.loads(out)
            self.assertEqual(set(got), {"rows", "since", "until", "by"}, got)
            self.assertEqual(got["by"], by)
            self.assertLessEqual(ts(got["since"]), time.time() - 3600)
            self.assertGreaterEqual(ts(got["until"]), max(ts(j["ended_at"]) for j in jobs.values()))
            rows = {}
            for r in got["rows"]:
                self.assertEqual(set(r), {by, "gpu_seconds", "whole_gpu_seconds", "cpu_seconds", "jobs",
                                          "mean_wait_s", "preemptions", "used_cpu_seconds",
                                          "cpu_efficiency", "memory_efficiency", "sampled_gpu_seconds",
                                          "gpu_efficiency", "idle_gpu_seconds"}, r)
                self.assertEqual(r["whole_gpu_seconds"], r["gpu_seconds"])  # no slices here
                # Sampled GPUs only (docs/idle.md): none without an nvidia-smi on the agents' PATH.
                self.assertGreaterEqual(r["sampled_gpu_seconds"], r["idle_gpu_seconds"], r)
                if not r["sampled_gpu_seconds"]:
                    self.assertIsNone(r["gpu_efficiency"], r)
                rows[r[by]] = r
            self.assertEqual(set(rows), set(want[by]), got)
            for key, w in want[by].items():
                r = rows[key]
                tol = 0.1 * w["attempts"]
                self.assertEqual(r["jobs"], w["jobs"], (by, key, r))
                self.assertEqual(r["preemptions"], 0, (by, key, r))
                self.assertEqual(set(r["gpu_seconds"]) - {t for t, s in r["gpu_seconds"].items() if s == 0},
                                 set(t for t, s in w["gpu_seconds"].items() if s > 0), (by, key, r, w))
                for gpu, s in w["gpu_seconds"].items():
                    self.assertAlmostEqual(r["gpu_seconds"].get(gpu, 0), s, delta=tol, msg=(by, key, r, w))
                self.assertAlmostEqual(r["cpu_seconds"], w["cpu_seconds"], delta=tol, msg=(by, key, r, w))
                self.assertAlmostEqual(r["mean_wait_s"], sum(w["waits"]) / len(w["waits"]), delta=0.1,
                                       msg=(by, key, r, w))
            print(f"\nusage by {by} = the jobs' own attempts: " + "; ".join(
                f"{k or '(default)'}: {rows[k]['gpu_seconds']} GPU-s, {rows[k]['cpu_seconds']:.2f} CPU-s, "
                f"{rows[k]['jobs']} jobs" for k in sorted(rows, key=str)))
            # The table says the same in words.
            _, out, _ = b.run("usage", "--since", "1h", "--by", by)
            for key in want[by]:
                self.assertIn(key or "(default)", out)

    # --- 3. quotas and caps survive a restart, and act ---

    def test_quotas_and_caps_survive_a_restart_and_act(self):
        b = self.b
        state = self.path("server-state")
        self.start(state_dir=state)
        port = self.server.url.rsplit(":", 1)[1]
        va = self.users["va"]
        b.run("admin", "team", "set", "vision", "--gpus", "V100:4", "--borrow-limit", "V100:2", "--weight", "2")
        b.run("admin", "team", "set", "nlp", "--gpus", "V100:2")
        b.run("admin", "user", "set", va, "--team", "vision", "--max-running-gpus", "2", "--max-pending-jobs", "3")
        b.run("admin", "user", "set", self.users["na"], "--team", "nlp")

        def settings():
            teams = {t["name"]: {k: t[k] for k in ("quota", "borrow_limit", "weight", "users", "updated_by")}
                     for t in b.json("admin", "team", "list", "--json")}
            users = {u["name"]: u for u in b.json("admin", "user", "list", "--json")}
            return teams, users
        teams, users = settings()
        self.assertEqual(teams["vision"], {"quota": {"V100": 4}, "borrow_limit": {"V100": 2}, "weight": 2,
                                           "users": [va], "updated_by": "root"})
        self.assertEqual((users[va]["team"], users[va]["max_running_gpus"], users[va]["max_pending_jobs"]),
                         ("vision", 2, 3))

        # kill -9, and back on the same port with the same state dir: the same settings.
        self.server.kill(signal.SIGKILL)
        self.server = b.start_server(state_dir=state, listen=f"127.0.0.1:{port}", extra=["--kill-grace", "1s"])
        b.wait_nodes_up(["n0"])
        self.assertEqual(settings(), (teams, users))

        # max-running-gpus: of 3 one-GPU jobs on 4 free GPUs, 2 run and the third waits, saying why.
        ids = [self.submit_as("va", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0] for _ in range(3)]

        def two_running_one_held():
            jobs = [self.job(i) for i in ids]
            live = [j for j in jobs if j["status"] in LIVE]
            held = [j for j in jobs if j["status"] == "PENDING" and "max-running-gpus" in (j["reason"] or "")]
            return (live, held) if len(live) == 2 and len(held) == 1 else None
        live, held = b.wait_until(two_running_one_held, 60, interval=0.2,
                                  message="2 of va's jobs to run and the third to be held by max-running-gpus")
        print(f"\nheld: {held[0]['reason']}")
        self.assertIn(va, held[0]["reason"])
        _, out, _ = self.as_("va", "show", held[0]["id"])
        self.assertIn("max-running-gpus", out)
        self.run_passes()  # passes later, still 2
        self.assertEqual(sum(self.job(i)["status"] in LIVE for i in ids), 2)

        # max-pending-jobs: 1 pending + 2 more = 3; a 4th pending job, or a group taking her past 3, is
        # refused whole, naming the limit.
        ids += [self.submit_as("va", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0] for _ in range(2)]
        for extra in ((), ("--num-jobs", "2")):
            rc, out, err = self.as_("va", "exec", "-d", *extra, "--gpus", "V100:1", "--", "sleep 300", check=False)
            self.assertNotEqual(rc, 0, out)
            self.assertIn("max-pending-jobs", err)
            self.assertIn(va, err)
        _, out, _ = self.as_("va", "queue", "--json")
        self.assertEqual(sorted(j["id"] for j in json.loads(out) if j["user"] == va and j["status"] not in TERMINAL),
                         sorted(ids), "a refused submission left jobs behind")
        # Other users are not held by her caps.
        other = self.submit_as("na", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0]
        b.wait_status(other, *LIVE, timeout=60)

        # Bad input: clear errors, nothing changed.
        for args, words in (
                (("admin", "team", "set", "vision", "--weight", "0"), ("--weight",)),
                (("admin", "team", "set", "vision", "--gpus", "V100:x"), ("--gpus", "V100:x")),
                (("admin", "team", "set", "vision", "--borrow-limit", "V100"), ("--borrow-limit",)),
                (("admin", "user", "set", va, "--max-running-gpus", "-1"), ("--max-running-gpus",)),
                (("usage", "--by", "nobody"), ("--by", "nobody"))):
            rc, out, err = b.run(*args, check=False)
            self.assertNotEqual(rc, 0, (args, out))
            for w in words:
                self.assertIn(w, err, args)
        status, body, _ = http("POST", self.server.url + "/v1/admin/teams/vision", '{"weight": 0}')
        self.assertEqual(status, 400, body)
        self.assertIn("weight", body["error"])
        rc, out, err = self.as_("va", "admin", "team", "set", "vision", "--gpus", "V100:8", check=False)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("admin role", err)
        self.assertEqual(settings()[0]["vision"], teams["vision"])
        rc, out, err = b.run("server", "--listen", "127.0.0.1:0", "--state-dir", self.path("other-state"),
                             "--fair-share-half-life", "0", check=False, timeout=30)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("half-life", err)
        self.assertIn("forget", err)
        b.run("cancel", "--all-users")

    # --- 4. one team's queue ---

    def test_queue_by_team_lists_only_that_team(self):
        b = self.b
        self.start(nodes=1, gpus="V100:2")
        self.teams(vision_quota="V100:1", nlp_quota="V100:1")
        quick = self.submit_as("vb", "--", "true")["jobs"][0]
        vision = {self.submit_as("va", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0],
                  self.submit_as("vb", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0], quick}
        nlp = {self.submit_as("na", "--gpus", "V100:1", "--", "sleep 300")["jobs"][0]}
        root = {b.submit("--gpus", "V100:1", "--", "sleep 300")}
        # Newer jobs of another team, more than a page of `berth queue` (50), all pending.
        nlp |= set(self.submit_as("nb", "--num-jobs", "60", "--gpus", "V100:1", "--", "sleep 300")["jobs"])
        self.wait_ended([quick])

        def listed(*args):
            _, out, _ = b.run("queue", *args, "--json")
            return json.loads(out)
        for team, ids, members in (("vision", vision, {self.users["va"], self.users["vb"]}),
                                   ("nlp", nlp, {self.users["na"], self.users["nb"]}),
                                   ("-", root, {"root"})):
            jobs = listed("--team", team, "--limit", "0")
            self.assertEqual({j["id"] for j in jobs}, ids, team)
            self.assertLessEqual({j["user"] for j in jobs}, members, team)
            everything = listed("--team", team, "--all")
            self.assertEqual({j["id"] for j in everything}, ids, team)
        # The default page (newest 50 rows) still finds vision's jobs behind 60 newer nlp jobs.
        jobs = listed("--team", "vision")
        self.assertEqual({j["id"] for j in jobs if j["status"] not in TERMINAL},
                         {i for i in vision if self.job(i)["status"] not in TERMINAL}, jobs)
        self.assertEqual({j["user"] for j in listed("--user", self.users["vb"])}, {self.users["vb"]})
        _, out, _ = b.run("queue", "--team", "vision")
        self.assertNotIn(self.users["na"], out)
        self.assertNotIn(self.users["nb"], out)
        self.assertIn(self.users["va"], out)
        b.run("cancel", "--all-users")


if __name__ == "__main__":
    unittest.main()

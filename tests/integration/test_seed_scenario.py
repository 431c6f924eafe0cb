"""The seed scenario: one node with four V100s, five jobs.

Job 1 holds all four GPUs. While it runs, jobs 2 (1 GPU), 3 (1 GPU), 4 (4 GPUs) and 5 (2 GPUs) queue up.
When job 1 ends, 2, 3 and 5 start at once (backfill: 5 does not wait behind 4), and 4 waits, saying why,
until four GPUs are free again. Every job writes when it started (with its CUDA_VISIBLE_DEVICES) and
ended to a shared file; from those lines we check that no device was ever given to two running jobs, that
no more than four were ever in use, and that every job saw exactly the devices it asked for.
"""

import unittest

from harness import BerthTestCase

# Each job records its start (with its devices) and end, then holds its GPUs until the test releases it by
# creating release-<job id>.
JOB_SCRIPT = r"""
echo "$BERTH_JOB_ID start $(date +%s%N) $CUDA_VISIBLE_DEVICES" >> "$TIMELINE"
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
while [ ! -e "$RELEASE_DIR/release-$BERTH_JOB_ID" ]; do sleep 0.05; done
echo "$BERTH_JOB_ID end $(date +%s%N)" >> "$TIMELINE"
"""


class SeedScenarioTest(BerthTestCase):

    def release(self, job_id):
        self.write(f"release-{job_id}", "")

    def statuses(self, ids):
        by_id = {j["id"]: j for j in self.b.queue()}
        return {i: by_id[i]["status"] for i in ids}

    def test_four_v100s_five_jobs(self):
        b = self.b
        b.local_up(gpus="V100:4")
        script = self.write("job.sh", JOB_SCRIPT)
        timeline = self.path("timeline")
        envs = ["--env", f"TIMELINE={timeline}", "--env", f"RELEASE_DIR={b.tmp}"]

        def submit(count):
            return b.submit("--gpus", f"V100:{count}", *envs, "--", "bash", script)

        # Job 1 takes the whole node.
        job1 = submit(4)
        self.assertEqual(job1, 1)
        b.wait_status(job1, "RUNNING")

        # Four more queue up behind it, in this order.
        job2, job3, job4, job5 = submit(1), submit(1), submit(4), submit(2)
        self.assertEqual([job2, job3, job4, job5], [2, 3, 4, 5])
        requested = {job1: 4, job2: 1, job3: 1, job4: 4, job5: 2}
        b.wait_until(lambda: all(b.show(j)["reason"].startswith("waiting") for j in (job2, job3, job4, job5)),
                     message="every queued job to say what it waits for")
        self.assertEqual(self.statuses([job1, job2, job3, job4, job5]),
                         {job1: "RUNNING", job2: "PENDING", job3: "PENDING", job4: "PENDING", job5: "PENDING"})

        # Job 1 ends: 2, 3 and 5 fit in the four GPUs and start; 4 does not fit and waits.
        self.release(job1)
        b.wait_status(job1, "SUCCEEDED")
        for j in (job2, job3, job5):
            b.wait_status(j, "RUNNING")
        job = b.show(job4)
        self.assertEqual(job["status"], "PENDING")
        self.assertIn("waiting", job["reason"])
        self.assertIn("V100", job["reason"])
        self.assertEqual(job["placement"], [])

        # 4 starts only once all four GPUs are free: not after 2 and 3 end, only after 5 ends too.
        self.release(job2)
        self.release(job3)
        b.wait_status(job2, "SUCCEEDED")
        b.wait_status(job3, "SUCCEEDED")
        self.assertEqual(b.status(job4), "PENDING")
        self.assertEqual(b.status(job5), "RUNNING")
        self.release(job5)
        b.wait_status(job5, "SUCCEEDED")
        b.wait_status(job4, "RUNNING")
        self.release(job4)
        b.wait_status(job4, "SUCCEEDED")

        # The placements berth reports match what the jobs saw.
        for j, count in requested.items():
            placement = b.show(j)["placement"]
            self.assertEqual(len(placement), 1)
            self.assertEqual(placement[0]["node"], "local-0")
            self.assertEqual(len(placement[0]["gpus"]), count, f"job {j}: {placement}")

        # The timeline, as the jobs themselves saw it.
        starts, ends = {}, {}
        with open(timeline) as f:
            for line in f:
                parts = line.split()
                if parts[1] == "start":
                    devices = parts[3].split(",") if len(parts) > 3 else []
                    starts[int(parts[0])] = (int(parts[2]), devices)
                else:
                    ends[int(parts[0])] = int(parts[2])
        self.assertEqual(set(starts), set(requested))
        self.assertEqual(set(ends), set(requested))
        for j, count in requested.items():
            devices = starts[j][1]
            self.assertEqual(len(devices), count, f"job {j} saw CUDA_VISIBLE_DEVICES={devices}")
            self.assertEqual(len(set(devices)), count, f"job {j} got a device twice: {devices}")
            self.assertTrue(set(devices) <= {"0", "1", "2", "3"}, devices)
            self.assertEqual(sorted(map(int, devices)), sorted(b.show(j)["placement"][0]["gpus"]))

        # Sweep through every start and end: the devices in use never overlap and never exceed four.
        moments = sorted([(t, 1, j) for j, (t, _) in starts.items()] + [(t, 0, j) for j, t in ends.items()])
        in_use = {}
        for _, is_start, j in moments:  # at equal times, ends (0) sort before starts (1)
            if not is_start:
                del in_use[j]
                continue
            devices = set(starts[j][1])
            for other, theirs in in_use.items():
                self.assertFalse(devices & theirs, f"jobs {j} and {other} both hold devices {devices & theirs}")
            in_use[j] = devices
            self.assertLessEqual(sum(len(d) for d in in_use.values()), 4, in_use)
        # Job 4 started after 5 ended; 5 started while 2 and 3 ran.
        self.assertGreater(starts[job4][0], ends[job5])
        self.assertLess(starts[job5][0], ends[job2])

        # Each job's own output names its devices.
        for j in requested:
            _, out, _ = b.run("logs", j, "--no-follow")
            self.assertEqual(out, f"CUDA_VISIBLE_DEVICES={','.join(starts[j][1])}\n")


if __name__ == "__main__":
    unittest.main()

"""MIG slices as devices of their own (docs/gpus.md), on the real kernel of this machine.

An agent declares two A100s, the first in MIG mode with two 3g.40gb slices
(`--gpus A100:2 --mig '0=3g.40gb,3g.40gb'`), over device files mknod'ed here: nvidia0 and nvidia1
(NVIDIA's major 195) and the slices' capability files under nvidia-caps/ with the driver's table of
their minors (mig-minors). An allowed open fails ENXIO (no driver behind the file), a denied one
EPERM (the rank's cgroup). As root, on a host whose cgroups the agent can use.
"""

import os
import re
import unittest

from harness import BerthTestCase
from test_isolation import cgroup_host_usable

# The capability files of each slice (its GPU instance's, then its compute instance's), as the
# table below gives them: slice 0 is GPU instance 1, slice 1 GPU instance 2 (agent/mig.h).
CAPS = {100: (12, 13), 101: (21, 22)}
CAPS_MAJOR = 238  # the driver's is assigned at load; any major without a driver here will do
MIG_MINORS = ("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
              "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n")


def make_devices(test, cap_minors, table):
    """A device dir as a node with two GPUs has: nvidia0 and nvidia1 (NVIDIA's major 195), the
    capability files `cap_minors` under nvidia-caps/, and the driver's table of them, `table`."""
    devdir = test.path("dev")
    os.makedirs(os.path.join(devdir, "nvidia-caps"))
    for i in range(2):
        os.mknod(os.path.join(devdir, f"nvidia{i}"), 0o666 | 0o020000, os.makedev(195, i))
    for m in cap_minors:
        os.mknod(os.path.join(devdir, "nvidia-caps", f"nvidia-cap{m}"), 0o666 | 0o020000,
                 os.makedev(CAPS_MAJOR, m))
    with open(os.path.join(devdir, "nvidia-caps", "mig-minors"), "w") as f:
        f.write(table)
    return devdir


@unittest.skipIf(cgroup_host_usable() is not None, cgroup_host_usable() or "")
class GpuSlicesTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server()
        self.devdir = make_devices(self, [m for minors in CAPS.values() for m in minors], MIG_MINORS)
        self.env = {"BERTH_SERVER": self.server.url}
        self.start_node()
        b.wait_nodes_up(["mig"], env=self.env)

    def start_node(self):
        self.b.start_agent(self.server.url, name="mig", gpus="A100:2", state_dir=self.path("agent-mig"),
                           extra=["--mig", "0=3g.40gb,3g.40gb", "--cpus", "4", "--memory", "4",
                                  "--gpu-device-dir", self.devdir, "--require-isolation"])

    def probe(self, wait_for=None):
        """A job script that opens both GPUs and every capability file, printing what each open did
        and the job's GPU variables; with `wait_for` (a directory), it first leaves a file there and
        waits until two are there (both jobs run at once)."""
        caps = [m for minors in CAPS.values() for m in minors]
        barrier = ""
        if wait_for:
            barrier = (f"d = {wait_for!r}\nopen(os.path.join(d, os.environ['BERTH_JOB_ID']), 'w').close()\n"
                       "t = time.time()\n"
                       "while len(os.listdir(d)) < 2 and time.time() - t < 60: time.sleep(0.05)\n"
                       "print('together', len(os.listdir(d)))\n")
        script = ("import os, errno, time\n" + barrier +
                  f"dev = {self.devdir!r}\n"
                  "def try_open(name, path):\n"
                  "    try:\n        os.close(os.open(path, os.O_RDWR)); r = 'opened'\n"
                  "    except OSError as e:\n        r = errno.errorcode[e.errno]\n"
                  "    print(name, r)\n"
                  "for i in range(2): try_open('gpu%d' % i, '%s/nvidia%d' % (dev, i))\n"
                  f"for m in {caps!r}: try_open('cap%d' % m, '%s/nvidia-caps/nvidia-cap%d' % (dev, m))\n"
                  "print('ids', os.environ['BERTH_GPU_IDS'], os.environ['CUDA_VISIBLE_DEVICES'])\n")
        self.probes = getattr(self, "probes", 0) + 1
        path = self.path(f"probe-{self.probes}.py")
        with open(path, "w") as f:
            f.write(script)
        return f"python3 {path}"

    def logs(self, job):
        return self.b.run("logs", job, "--no-follow", env=self.env)[1]

    def test_the_node_offers_the_whole_gpu_and_the_two_slices(self):
        node = self.b.nodes(env=self.env)[0]
        self.assertEqual(node["capacity"]["gpus"], {"A100": 1, "A100-3g.40gb": 2})
        self.assertEqual([(d["index"], d["type"], d.get("gpu")) for d in node["devices"]],
                         [(1, "A100", None), (100, "A100-3g.40gb", 0), (101, "A100-3g.40gb", 0)])

    def test_two_jobs_on_two_slices_of_one_gpu_run_at_once_each_opening_only_its_own(self):
        b = self.b
        barrier = self.path("barrier")
        os.makedirs(barrier)
        jobs = [b.submit("--gpus", "A100-3g.40gb:1", "--", self.probe(barrier), env=self.env)
                for _ in range(2)]
        seen = {}
        for job in jobs:
            self.assertEqual(b.wait_status(job, "SUCCEEDED", "FAILED", timeout=90, env=self.env)["status"],
                             "SUCCEEDED", self.logs(job))
            out = self.logs(job)
            self.assertIn("together 2", out)
            m = re.search(r"ids (\d+) (\S+)", out)
            self.assertIsNotNone(m, out)
            index, visible = int(m.group(1)), m.group(2)
            self.assertRegex(visible, r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
            seen[index] = visible
            self.assertIn("gpu0 ENXIO", out)  # the slice's GPU
            self.assertIn("gpu1 EPERM", out)  # the whole A100 next to it
            for slice_index, minors in CAPS.items():
                for minor in minors:
                    self.assertIn(f"cap{minor} {'ENXIO' if slice_index == index else 'EPERM'}", out)
        self.assertEqual(set(seen), {100, 101})
        self.assertEqual(len(set(seen.values())), 2)

    def test_a_whole_gpu_job_gets_the_gpu_not_in_mig_mode_and_no_slice(self):
        b = self.b
        job = b.submit("--gpus", "A100:1", "--", self.probe(), env=self.env)
        self.assertEqual(b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)["status"],
                         "SUCCEEDED")
        out = self.logs(job)
        self.assertIn("ids 1 0", out)
        self.assertIn("gpu0 EPERM", out)
        self.assertIn("gpu1 ENXIO", out)
        for minors in CAPS.values():
            for minor in minors:
                self.assertIn(f"cap{minor} EPERM", out)
        # Two whole A100s are more than the node has whole: the GPU in MIG mode is not one.
        rc, _, err = b.run("exec", "-d", "--gpus", "A100:2", "--", "true", check=False, env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("A100", err)

    def test_usage_counts_slice_hours_by_profile_and_as_whole_gpus(self):
        b = self.b
        job = b.submit("--gpus", "A100-3g.40gb:1", "--", "sleep 1", env=self.env)
        self.assertEqual(b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)["status"],
                         "SUCCEEDED")
        rows = b.json("usage", "--json", env=self.env)["rows"]
        self.assertEqual(len(rows), 1, rows)
        sliced = rows[0]["gpu_seconds"]["A100-3g.40gb"]
        self.assertGreater(sliced, 0.9)
        self.assertAlmostEqual(rows[0]["whole_gpu_seconds"]["A100"], sliced * 3 / 7, places=6)
        table = b.run("usage", env=self.env)[1]
        self.assertIn("AS WHOLE GPUS", table)
        self.assertRegex(table, r"A100-3g\.40gb:0\.\d\d +A100:0\.\d\d")
        # A team quota is of GPU types: a slice type names none.
        rc, _, err = b.run("admin", "team", "set", "vision", "--gpus", "A100-3g.40gb:2", check=False,
                            env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("is a MIG slice type: give A100 GPUs instead", err)

    def test_a_profile_the_cluster_lacks_is_refused_naming_those_it_has(self):
        rc, _, err = self.b.run("exec", "-d", "--gpus", "A100-1g.10gb:1", "--", "true", check=False,
                                env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("unknown GPU type 'A100-1g.10gb'", err)
        self.assertIn("A100-3g.40gb", err)

    def test_a_bad_layout_stops_the_agent_naming_what_is_wrong(self):
        d = self.b.start_agent(self.server.url, name="bad", gpus="A100:1", state_dir=self.path("agent-bad"),
                               extra=["--mig", "0=3g.40gb*3"])
        self.assertNotEqual(d.proc.wait(timeout=30), 0)
        with open(d.log_path) as f:
            self.assertIn("take 9 compute slices; a GPU has 7", f.read())


# What nvidia-smi says on a node with two A100s, the first in MIG mode with two 3g.40gb slices
# (GPU instances 1 and 2, as the capability table above has them), in its real formats.
NVIDIA_SMI = r"""#!/bin/sh
case "$*" in
  "--query-gpu=index,name --format=csv,noheader")
    printf '0, NVIDIA A100-SXM4-80GB\n1, NVIDIA A100-SXM4-80GB\n' ;;
  "--query-gpu=index,memory.total --format=csv,noheader")
    printf '0, 81920 MiB\n1, 81920 MiB\n' ;;
  "--query-gpu=index,pci.bus_id --format=csv,noheader")
    printf '0, 00000000:3B:00.0\n1, 00000000:86:00.0\n' ;;
  --query-gpu=index,pci.bus_id,ecc*)
    printf '0, 00000000:3B:00.0, 0, No, No\n1, 00000000:86:00.0, 0, No, No\n' ;;
  "-L")
    cat <<'EOF'
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 3g.40gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)
EOF
    ;;
  "")
    cat <<'EOF'
+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
|                  |                      |        ECC|                       |
|==================+======================+===========+=======================|
|  0    1   0   0  |     11MiB / 40192MiB | 42      0 |  3   0    2    0    0 |
|                  |      0MiB / 65535MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
|  0    2   0   1  |     11MiB / 40192MiB | 42      0 |  3   0    2    0    0 |
|                  |      0MiB / 65535MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
EOF
    ;;
  *) exit 6 ;;
esac
"""


@unittest.skipIf(cgroup_host_usable() is not None, cgroup_host_usable() or "")
class DiscoveredSlicesTest(GpuSlicesTest):
    """The same node, its GPUs and slices found by asking nvidia-smi (a stand-in on the agent's PATH
    that prints what a real one does) instead of declared; every test of GpuSlicesTest runs on it."""

    def start_node(self):
        bindir = self.path("bin")
        os.makedirs(bindir)
        with open(os.path.join(bindir, "nvidia-smi"), "w") as f:
            f.write(NVIDIA_SMI)
        os.chmod(os.path.join(bindir, "nvidia-smi"), 0o755)
        self.b.start_agent(self.server.url, name="mig", gpus=None, state_dir=self.path("agent-mig"),
                           extra=["--cpus", "4", "--memory", "4", "--gpu-device-dir", self.devdir,
                                  "--require-isolation"],
                           env={"PATH": bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin")})

    def test_the_slices_are_nvidia_smis_with_their_uuids(self):
        job = self.b.submit("--gpus", "A100-3g.40gb:2", "--", "echo $CUDA_VISIBLE_DEVICES", env=self.env)
        self.assertEqual(self.b.wait_status(job, "SUCCEEDED", "FAILED", timeout=60, env=self.env)["status"],
                         "SUCCEEDED")
        self.assertIn("MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f,MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb",
                      self.logs(job))

    def test_a_bad_layout_stops_the_agent_naming_what_is_wrong(self):
        self.skipTest("a declared layout's (GpuSlicesTest)")


# The capability table of a node whose GPU 0 may hold up to seven GPU instances (each re-slice's
# new ones are numbered from 1 again, agent/mig.h DeclaredSlices), and GPU 1's 7g.80gb.
RESLICE_MINORS = "config 1\nmonitor 2\n" + "".join(
    f"gpu0/gi{gi}/access {10 * gi}\ngpu0/gi{gi}/ci0/access {10 * gi + 1}\n" for gi in range(1, 8)) + \
    "gpu1/gi1/access 90\ngpu1/gi1/ci0/access 91\n"


@unittest.skipIf(cgroup_host_usable() is not None, cgroup_host_usable() or "")
class ReslicingTest(BerthTestCase):
    """A node that lets the server re-slice its idle GPUs (`--mig-reconfigure`), its layout declared,
    so the agent simulates each change and records the nvidia-smi commands a real node would run."""

    def setUp(self):
        super().setUp()
        b = self.b
        self.server = b.start_server()
        self.devdir = make_devices(self, [m for gi in range(1, 8) for m in (10 * gi, 10 * gi + 1)],
                                   RESLICE_MINORS)
        self.env = {"BERTH_SERVER": self.server.url}
        self.state = self.path("agent-mig")
        b.start_agent(self.server.url, name="mig", gpus="A100:2", state_dir=self.state,
                      extra=["--mig", "0=3g.40gb,3g.40gb;1=7g.80gb", "--mig-reconfigure", "--cpus", "8",
                             "--memory", "4", "--gpu-device-dir", self.devdir, "--require-isolation"])
        b.wait_nodes_up(["mig"], env=self.env)

    def commands(self):
        try:
            with open(os.path.join(self.state, "mig-commands.log")) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def test_pending_jobs_for_a_profile_re_slice_exactly_one_idle_gpu(self):
        b = self.b
        # GPU 1 is busy: its 7g.80gb runs a job.
        busy = b.submit("--gpus", "A100-7g.80gb:1", "--", "sleep 300", env=self.env)
        b.wait_status(busy, "RUNNING", timeout=60, env=self.env)
        # No node offers a 1g.10gb: accepted all the same, as this node could once re-sliced.
        probe = ("for f in %s/nvidia-caps/nvidia-cap*; do "
                 "python3 -c \"import os,sys\ntry: os.close(os.open(sys.argv[1], os.O_RDWR)); print(sys.argv[1], 'opened')\n"
                 "except OSError as e: print(sys.argv[1], e.strerror)\" $f; done; echo VISIBLE=$CUDA_VISIBLE_DEVICES"
                 % self.devdir)
        jobs = [b.submit("--gpus", "A100-1g.10gb:1", "--", probe, env=self.env) for _ in range(2)]
        for job in jobs:
            done = b.wait_status(job, "SUCCEEDED", "FAILED", timeout=90, env=self.env)
            out = b.run("logs", job, "--no-follow", env=self.env)[1]
            self.assertEqual(done["status"], "SUCCEEDED", out)
            self.assertRegex(out, r"VISIBLE=MIG-[0-9a-f-]{36}")
            # Its own slice's two capability files, and no other's.
            self.assertEqual(len([l for l in out.splitlines() if "No such device or address" in l]), 2, out)
        # Exactly one change, of GPU 0, in the commands a real node would run.
        self.assertEqual(self.commands(), [
            "nvidia-smi mig -i 0 -gi 1 -ci 0 -dci",
            "nvidia-smi mig -i 0 -gi 1 -dgi",
            "nvidia-smi mig -i 0 -gi 2 -ci 0 -dci",
            "nvidia-smi mig -i 0 -gi 2 -dgi",
            "nvidia-smi mig -i 0 -cgi 1g.10gb,1g.10gb,1g.10gb,1g.10gb,3g.40gb -C",
        ])
        node = b.nodes(env=self.env)[0]
        self.assertEqual(node["capacity"]["gpus"], {"A100-1g.10gb": 4, "A100-3g.40gb": 1, "A100-7g.80gb": 1})
        self.assertEqual(node["mig"], {"reconfigure": True, "changing": {}, "error": None})
        self.assertIn("its idle GPUs may be re-sliced", b.run("nodes", "mig", env=self.env)[1])
        audit = [(a["action"], a["target"], a["detail"]) for a in b.json("admin", "audit", "--json", env=self.env)
                 if a["action"].startswith("mig")]
        self.assertEqual(len(audit), 2, audit)
        # (A pass may have seen the first job alone: the second then waited for the change under way.)
        self.assertEqual(audit[0][:2], ("mig layout", "mig"))
        self.assertRegex(audit[0][2], r"^GPU 0: 3g\.40gb,3g\.40gb -> 1g\.10gb,1g\.10gb,1g\.10gb,1g\.10gb,"
                                      r"3g\.40gb for [12] pending A100-1g\.10gb slices?$")
        self.assertEqual(audit[1], ("mig layout done", "mig", "GPU 0: 1g.10gb,1g.10gb,1g.10gb,1g.10gb,3g.40gb"))
        self.assertEqual(b.status(busy, env=self.env), "RUNNING")
        b.run("cancel", busy, env=self.env)

    def test_a_profile_no_gpu_here_could_have_is_refused(self):
        rc, _, err = self.b.run("exec", "-d", "--gpus", "A100-3g.20gb:1", "--", "true", check=False,
                                env=self.env)
        self.assertNotEqual(rc, 0)
        self.assertIn("unknown GPU type 'A100-3g.20gb'", err)


if __name__ == "__main__":
    unittest.main()

"""Jobs in their images (docs/user-guide.md "Containers"): `resources.image_id: docker:REF`.

Offline: the test starts Debian's docker-registry on 127.0.0.1 (a free port, a temp dir) and builds
its own two-layer image from busybox-static, pushed with podman. The agent runs each job's steps
with rootless podman as the job's unix user, inside the rank's cgroup: inside, `id -u` is the
user's, the workdir is the same path and files written there are theirs, only the job's GPU device
files exist (mknod'ed here), the task's envs override the image's ENV. A second job of the image
downloads no blob (the registry's log says so); an unknown tag fails the job naming the registry's
answer and leaves the node up; a cancel leaves no process of the container behind.
"""
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import time
import unittest
import uuid

from browser import Browser, find_chromium
from harness import BerthTestCase, http_unix, wait_until
from image_registry import ImageBuilder, Registry, SlowProxy, sh

TOOLS = ("podman", "docker-registry", "newuidmap", "useradd")


def missing():
    if os.geteuid() != 0:
        return "needs root (it makes a unix user, and the agent runs jobs as them)"
    for tool in TOOLS:
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (scripts/install-deps.sh --for-tests installs it)"
    if not os.path.exists("/bin/busybox"):
        return "busybox-static is not installed"
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers") and not shutil.which("runc"):
        return "runc is needed on a cgroup v1 or hybrid host"
    return None


@unittest.skipIf(missing() is not None, missing() or "")
class ContainerTest(BerthTestCase):

    def setUp(self):
        super().setUp()
        os.chmod(self.b.tmp, 0o711)
        self.start_registry()
        self.build_image()
        name = "btc" + uuid.uuid4().hex[:6]
        home = self.path("home-" + name)
        sh("useradd", "--create-home", "--home-dir", home, "--shell", "/bin/bash", name)
        self.addCleanup(sh, "userdel", "--remove", name, check=False)
        self.user = pwd.getpwnam(name)
        self.addCleanup(self.remove_run_dirs)
        self.devdir = self.path("dev")
        os.makedirs(self.devdir)
        for i in range(2):
            os.mknod(os.path.join(self.devdir, f"nvidia{i}"), 0o666 | 0o020000, os.makedev(195, i))
        self.server = self.b.start_server()
        self.url = self.server.url
        self.agent = self.start_agent("box")
        self.addCleanup(self.no_processes_left)
        sock = os.path.join(self.server.state_dir, "berth.sock")
        status, tok = http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": name}))
        self.assertEqual(status, 201, tok)
        self.env = {"BERTH_SERVER": self.url, "BERTH_TOKEN": tok["token"]}
        self.b.wait_nodes_up(["box"], env=self.env)
        self.work = self.path("work")
        os.makedirs(self.work)
        os.chown(self.work, self.user.pw_uid, self.user.pw_gid)

    def start_agent(self, name, extra=()):
        return self.b.start_agent(
            self.url, name=name, gpus="V100:2", state_dir=self.path("agent-" + name),
            extra=["--gpu-device-dir", self.devdir, "--insecure-registry", f"127.0.0.1:{self.port}",
                   "--insecure-registry", f"127.0.0.1:{self.slow.port}",
                   # Every tag asked of the registry (the moved-tag case; the answer's reuse for
                   # --image-tag-ttl seconds has unit tests).
                   "--pull-retries", "1", "--image-tag-ttl", "0", *extra])

    def remove_run_dirs(self):
        """The agent's per-user run dirs on /run (agent/container.h) go with the test's user."""
        for base in glob.glob("/run/berth-*"):
            shutil.rmtree(os.path.join(base, str(self.user.pw_uid)), ignore_errors=True)
            try:
                os.rmdir(base)
            except OSError:
                pass

    def start_registry(self):
        self.registry = Registry(self.b.tmp)
        self.addCleanup(self.stop_registry)
        self.port = self.registry.port
        self.registry_log = self.registry.log
        # The same registry, far away: 3 MB/s.
        self.slow = SlowProxy(self.port, 3 << 20)
        self.addCleanup(self.slow.stop)

    def stop_registry(self):
        self.registry.stop()

    def build_image(self):
        """bb:2 = busybox (layer 1) + a file and ENV (layer 2), pushed; built in a store of the test's own."""
        self.images = ImageBuilder(self.b.tmp, self.registry)
        self.images.base()
        self.image = self.images.layered("2", "second layer\n")

    def no_processes_left(self):
        """Nothing of the user's runs once their jobs are over (no conmon, runc or job process)."""
        def none():
            p = sh("pgrep", "-u", str(self.user.pw_uid), "-a", check=False)
            left = [line for line in p.stdout.splitlines() if "catatonit" not in line]
            return not left or left
        wait_until(lambda: none() is True, 30, message="the user's processes to be gone")

    def task(self, run, setup="", extra=""):
        text = (f"workdir: node:{self.work}\nresources:\n  image_id: docker:{self.image}\n"
                f"  accelerators: V100:1\n  memory: 0.5\nenvs:\n  FOO: task\n{extra}"
                f"setup: |\n  {setup or 'true'}\nrun: |\n" + "".join(f"  {line}\n" for line in run))
        return self.write(f"task-{uuid.uuid4().hex[:6]}.yaml", text)

    def submit(self, path):
        return self.b.submit(path, env=self.env)

    def logs(self, job):
        return self.b.run("logs", job, "--no-follow", env=self.env)[1]

    def blob_downloads(self):
        """Layers downloaded from the registry (not the image's ~1 KB config, asked with its tag)."""
        config = self.images.config_digest(self.image)
        with open(self.registry_log) as f:
            return sum(1 for line in f if '"GET /v2/bb/blobs/' in line and config not in line)

    def test_runs_in_its_image_as_its_user_with_only_its_gpu(self):
        job = self.submit(self.task([
            "echo uid=$(id -u) gid=$(id -g)", "echo foo=$FOO from_image=$FROM_IMAGE",
            "cat /etc/layer2.txt", "ls /dev | grep nvidia", "echo cvd=$CUDA_VISIBLE_DEVICES",
            "touch made-inside", "pwd", "cat setup-was-here"], setup="echo from setup > setup-was-here"))
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        out = self.logs(job)
        self.assertIn(f"uid={self.user.pw_uid} gid={self.user.pw_gid}", out)
        self.assertIn("foo=task from_image=yes", out)  # the task's envs over the image's ENV
        self.assertIn("second layer", out)
        gpus = [line for line in out.splitlines() if line.startswith("nvidia")]
        self.assertEqual(len(gpus), 1, out)  # only the job's own GPU of the node's two
        self.assertIn(self.work + "\n", out)
        self.assertIn("from setup", out)
        self.assertIn(f"berth: image {self.image} is sha256:", out)
        st = os.stat(os.path.join(self.work, "made-inside"))
        self.assertEqual((st.st_uid, st.st_gid), (self.user.pw_uid, self.user.pw_gid))
        history = self.b.json("show", job, "--json", env=self.env)
        _, text, _ = self.b.run("show", job, env=self.env)
        self.assertIn("pulling image " + self.image, text)
        self.assertRegex(text, r"pulled image " + re.escape(self.image) + r"@sha256:[0-9a-f]{64}")
        # A second job of the same image downloads no layer.
        before = self.blob_downloads()
        self.assertGreater(before, 0)
        again = self.submit(self.task(["echo again"]))
        self.b.wait_status(again, "SUCCEEDED", timeout=120, env=self.env)
        self.assertNotIn("berth: pulling", self.logs(again))
        self.assertEqual(self.blob_downloads(), before)
        self.assertEqual(history["status"], "SUCCEEDED")

    def test_an_interactive_job_in_its_image(self):
        # The rank's terminal is handed on to the container's: a terminal inside, keys typed reach it,
        # and attach exits with its exit code.
        job = self.submit(self.task(["test -t 0 && echo tty-inside-$(tr ' ' - < /etc/layer2.txt)",
                                     "read -r x", 'echo "got:$x"', "exit 3"],
                                    extra="interactive: true\n"))
        self.b.wait_status(job, "RUNNING", timeout=180, env=self.env)
        # exec --into enters the running container: its image, work dir and user.
        rc, out, err = self.b.run("exec", "--into", job, "--", "cat /etc/layer2.txt; pwd; id -u",
                                  env=self.env, check=False, timeout=120)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(out, f"second layer\n{self.work}\n{self.user.pw_uid}\n")
        rc, _, _ = self.b.run("exec", "--into", job, "--", "exit 9", env=self.env, check=False)
        self.assertEqual(rc, 9)
        rc, out, err = self.b.run("attach", job, input="typed\n", env=self.env, check=False,
                                  timeout=120)
        self.assertEqual(rc, 3, out + err)
        self.assertIn("tty-inside-second-layer", out)
        self.assertIn("got:typed", out)
        # berth shell --image: a login shell (sh, where the image has no bash) in this directory.
        rc, out, err = self.b.run("shell", "--image", self.image, "--memory", "0.5", env=self.env,
                                  cwd=self.work, input="echo in-shell-$((6*7)) $PWD; exit 4\n",
                                  check=False, timeout=120)
        self.assertEqual(rc, 4, out + err)
        self.assertIn(f"in-shell-42 {self.work}", out)

    def test_an_unknown_image_fails_the_job_not_the_node(self):
        self.image = f"127.0.0.1:{self.port}/bb:nope"
        job = self.submit(self.task(["echo never"]))
        done = self.b.wait_status(job, "FAILED", timeout=120, env=self.env)
        self.assertIn(f"image pull failed: ", done["reason"])
        self.assertIn("manifest unknown", done["reason"])
        self.assertEqual(self.b.nodes(env=self.env)[0]["state"], "UP")
        # The registry gone: the pull is tried again, then fails with the last error.
        self.stop_registry()
        self.image = f"127.0.0.1:{self.port}/bb:other"
        job = self.submit(self.task(["echo never"]))
        done = self.b.wait_status(job, "FAILED", timeout=120, env=self.env)
        self.assertIn("image pull failed: ", done["reason"])
        self.assertIn("connection refused", done["reason"])
        self.assertIn("trying again", self.logs(job))
        self.assertEqual(self.b.nodes(env=self.env)[0]["state"], "UP")

    def test_a_slow_pull_says_how_far_it_got(self):
        """podman says nothing while a layer downloads: the job's reason does (show, wait, the
        dashboard), from the bytes that came so far; the log has the same lines."""
        self.images.big("big", 24 << 20)
        self.image = f"127.0.0.1:{self.slow.port}/bb:big"
        browser = None
        if find_chromium():  # the dashboard's queue too, where Debian's Chromium is installed
            self.slow.rate = 1 << 20  # 24 s: time for the browser to look
            browser = Browser(self.path("chromium-profile"))
            self.addCleanup(browser.close)
            browser.navigate(self.b.json("dashboard", "--json", env=self.env)["url"])
            browser.wait_for("(document.body.dataset.rendered || '').startsWith('overview:')",
                             message="the overview")
        job = self.submit(self.task(["test -s /big && echo big"]))
        if browser:
            def queue_row():
                # (drawn afresh: a headless page's timer does not poll)
                for page in ("nodes", "queue"):
                    browser.evaluate("delete document.body.dataset.rendered")
                    browser.evaluate(f"location.hash = '#/{page}'")
                    browser.wait_for(f"(document.body.dataset.rendered || '').startsWith('{page}:')",
                                     message=f"the {page} page")
                text = browser.evaluate(
                    f"document.querySelector('#queue tr[data-job=\"{job}\"]')?.children[7].innerText")
                return text if text and "downloaded" in text else None
            row = self.b.wait_until(queue_row, 60, interval=0.5, message="the queue to show the pull's progress")
            self.assertRegex(row, r"^pulling image " + re.escape(self.image) +
                             r" on box: \d+ layers?, [\d.]+ (B|kB|MB) downloaded$")
        reasons = []

        def progress():
            reason = self.b.show(job, env=self.env).get("reason") or ""
            if "downloaded" in reason and reason not in reasons:
                reasons.append(reason)
            return len(reasons) >= 2
        self.b.wait_until(progress, 120, interval=0.3, message="two progress reasons, one after the other")
        self.assertRegex(reasons[0], r"^pulling image " + re.escape(self.image) +
                         r": \d+ layers?, [\d.]+ (B|kB|MB) downloaded$")
        self.slow.rate = 0  # seen: the rest of the pull at full speed
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        out = self.logs(job)
        self.assertIn("berth: pull progress: ", out)
        self.assertIn("big\n", out)
        # The history keeps the pull's start and end, not its progress.
        _, text, _ = self.b.run("show", job, env=self.env)
        self.assertNotIn("downloaded", text)
        self.assertIn("pulled image " + self.image + "@sha256:", text)

    def test_cancel_during_the_pull(self):
        # A registry that cannot be reached keeps the job in its pull (waiting to try again).
        self.stop_registry()
        self.image = f"127.0.0.1:{self.port}/bb:gone"
        job = self.submit(self.task(["echo never"]))
        self.b.wait_until(lambda: "trying again" in self.logs(job), 60, message="the pull to wait for a retry")
        self.assertEqual(self.b.show(job, env=self.env)["status"], "STARTING")
        self.b.run("cancel", job, env=self.env)
        self.b.wait_status(job, "CANCELLED", timeout=60, env=self.env)
        self.no_processes_left()

    def test_cancel_leaves_nothing_running(self):
        job = self.submit(self.task(["echo started", "sleep 300"]))
        self.b.wait_until(lambda: "started" in self.logs(job), 180, message="the job to start")
        self.b.run("cancel", job, env=self.env)
        self.b.wait_status(job, "CANCELLED", timeout=60, env=self.env)
        self.no_processes_left()

    def test_a_moved_tag_brings_its_new_image(self):
        first = self.submit(self.task(["cat /etc/layer2.txt"]))
        self.b.wait_status(first, "SUCCEEDED", timeout=180, env=self.env)
        # The tag now names another image: the next job gets it (and its digest is recorded).
        self.images.layered("2", "moved\n")
        second = self.submit(self.task(["cat /etc/layer2.txt"]))
        self.b.wait_status(second, "SUCCEEDED", timeout=180, env=self.env)
        self.assertIn("moved", self.logs(second))
        digests = [re.search(r"@(sha256:[0-9a-f]{64})", self.b.run("show", j, env=self.env)[1]).group(1)
                   for j in (first, second)]
        self.assertNotEqual(digests[0], digests[1])
        # Pinned by the first digest: the old image, recorded once by its digest.
        self.image = self.image.rsplit(":", 1)[0] + "@" + digests[0]
        pinned = self.submit(self.task(["cat /etc/layer2.txt"]))
        self.b.wait_status(pinned, "SUCCEEDED", timeout=120, env=self.env)
        self.assertIn("second layer", self.logs(pinned))
        self.assertIn(f"pulled image {self.image}\n", self.b.run("show", pinned, env=self.env)[1] + "\n")

    def test_an_image_on_the_node_runs_while_its_registry_is_down(self):
        """An image already on the node cost 35 s of nested retries (podman's 3 inside berth's 3)
        when its registry was unreachable; and podman's "/ is not a shared mount" warning began every
        container job's output."""
        first = self.submit(self.task(["echo hello"]))
        self.b.wait_status(first, "SUCCEEDED", timeout=180, env=self.env)
        self.assertNotIn("shared mount", self.logs(first))
        self.assertNotIn("WARN", self.logs(first))
        self.registry.stop()
        second = self.submit(self.task(["echo again"]))
        self.b.wait_status(second, "SUCCEEDED", timeout=120, env=self.env)
        out = self.logs(second)
        self.assertIn(f"berth: the registry 127.0.0.1:{self.port} could not be reached; using this "
                      f"node's copy of {self.image}", out)
        self.assertNotIn("trying again", out)
        self.assertNotIn("Trying to pull", out)  # podman was not asked: its retries take 14 s
        self.assertIn("again", out)

    def test_a_gang_of_two_ranks_in_containers(self):
        self.start_agent("box2")
        self.b.wait_nodes_up(["box", "box2"], env=self.env)
        job = self.submit(self.task(["echo rank=$SKYPILOT_NODE_RANK uid=$(id -u) gpus=$(ls /dev | grep -c nvidia)"],
                                    extra="num_nodes: 2\n"))
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        out = self.logs(job)
        for rank in (0, 1):
            self.assertIn(f"rank={rank} uid={self.user.pw_uid} gpus=1", out)

    def test_prefetch_warms_every_node(self):
        self.start_agent("box2")
        self.b.wait_nodes_up(["box", "box2"], env=self.env)
        rc, out, err = self.b.run("image", "prefetch", self.image, env=self.env, timeout=180)
        self.assertEqual(rc, 0, err)
        self.assertIn("on 2 node(s)", err)
        self.assertEqual(out.count("berth: pulling " + self.image), 2, out)
        before = self.blob_downloads()
        job = self.submit(self.task(["echo warm"], extra="num_nodes: 2\n"))
        self.b.wait_status(job, "SUCCEEDED", timeout=120, env=self.env)
        self.assertNotIn("berth: pulling", self.logs(job))
        self.assertEqual(self.blob_downloads(), before)

    def test_image_ls_and_rm_on_a_node(self):
        """`berth image ls` and `rm` act on the caller's own store on each node, as jobs."""
        rc, out, err = self.b.run("image", "ls", env=self.env)
        self.assertEqual((rc, out), (0, ""), err)
        self.assertIn("No images of yours on 1 node(s)", err)  # no container job of theirs yet
        job = self.submit(self.task(["true"]))
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        rc, out, err = self.b.run("image", "ls", env=self.env)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"NODE +IMAGE +DIGEST +SIZE +CREATED\nbox +" + re.escape(self.image) +
                         r" +sha256:[0-9a-f]{12} +[\d.]+ [kM]B +.+ ago\n")
        listed = self.b.json("image", "ls", "--node", "box", "--json", env=self.env)["images"]
        self.assertEqual([(i["node"], i["image"]) for i in listed], [("box", self.image)])
        self.assertRegex(listed[0]["digest"], r"^sha256:[0-9a-f]{64}$")
        # The digest is the one the job ran.
        self.assertIn(f"pulled image {self.image}@{listed[0]['digest']}", self.b.run("show", job, env=self.env)[1])

        rc, out, err = self.b.run("image", "rm", self.image, "--node", "box", env=self.env)
        self.assertEqual((rc, out), (0, f"box: removed {self.image}\n"), err)
        self.assertEqual(self.b.json("image", "ls", "--json", env=self.env)["images"], [])
        rc, out, err = self.b.run("image", "rm", self.image, env=self.env)
        self.assertEqual((rc, out), (0, f"box: {self.image} is not there\n"), err)
        rc, _, err = self.b.run("image", "ls", "--node", "nosuch", env=self.env, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("no node named nosuch", err)
        # The next job of the image pulls it again; while it runs in it, the image stays.
        again = self.submit(self.task(["echo started", "sleep 300"]))
        self.b.wait_until(lambda: "started" in self.logs(again), 180, message="the job to start")
        self.assertIn("berth: pulling " + self.image, self.logs(again))
        rc, out, err = self.b.run("image", "rm", self.image, env=self.env, check=False)
        self.assertEqual((rc, out), (1, ""), err)
        self.assertIn("berth: box: ", err)
        self.assertIn("in use", err)
        # The refusal ended a job on the node: the container kept running (its conmon is its job's).
        time.sleep(1)
        self.assertEqual(self.b.show(again, env=self.env)["status"], "RUNNING")
        self.b.run("cancel", again, env=self.env)
        self.b.wait_status(again, "CANCELLED", timeout=60, env=self.env)
        # The image commands' ended jobs do not clutter the queue; --all lists them.
        _, out, _ = self.b.run("queue", env=self.env)
        self.assertNotIn("berth-image-", out)
        self.assertRegex(out, r"\(\d+ ended job\(s\) of berth image ls\|rm\|prefetch are not shown")
        self.assertIn("berth-image-ls", self.b.run("queue", "--all", env=self.env)[1])

    def test_a_full_store_evicts_unused_images_then_fails_naming_sizes(self):
        """A node whose image store is a small tmpfs: a second big image does not fit beside the first,
        so the user's images that no container uses go and the pull succeeds; a third, while a job runs
        in the second, cannot fit and the job fails naming what the images take and what is free. The
        node stays up."""
        state = self.path("agent-tiny")
        store = os.path.join(state, "containers")
        os.makedirs(store)
        sh("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", store)
        self.addCleanup(sh, "umount", "-l", store, check=False)
        self.b.start_agent(self.url, name="tiny", state_dir=state,
                           extra=["--insecure-registry", f"127.0.0.1:{self.port}", "--pull-retries", "0",
                                  "--pool", "tiny"])
        self.b.wait_nodes_up(["box", "tiny"], env=self.env)
        blob = 30 << 20
        big = [self.images.big(f"big{i}", blob) for i in range(3)]

        def job(image, run):
            text = (f"workdir: node:{self.work}\npool: tiny\nresources:\n  image_id: docker:{image}\n"
                    f"  memory: 0.5\nrun: |\n" + "".join(f"  {line}\n" for line in run))
            return self.submit(self.write(f"task-{uuid.uuid4().hex[:6]}.yaml", text))
        first = job(big[0], ["true"])
        done = self.b.wait_status(first, "SUCCEEDED", "FAILED", timeout=180, env=self.env)
        self.assertEqual(done["status"], "SUCCEEDED", self.logs(first))
        # What one image takes here (with the copy of its layers that --userns=keep-id makes where the
        # storage driver cannot map ids, vfs on these machines), and room for half a download more: a
        # second pull (its blob, then its layer) does not fit beside it; alone, it and its job do.
        used = int(sh("du", "-sk", store).stdout.split()[0])
        sh("mount", "-o", f"remount,size={used + (blob >> 10) * 3 // 2}k", store)
        second = job(big[1], ["echo started", "sleep 300"])
        self.b.wait_until(lambda: "started" in self.logs(second) or self.b.show(second, env=self.env)["status"]
                          == "FAILED", 180, message="the second job to start")
        self.assertIn("the disk is full; removing your images that no container uses", self.logs(second))
        self.assertIn("started", self.logs(second))
        listed = self.b.json("image", "ls", "--node", "tiny", "--json", env=self.env)["images"]
        self.assertEqual([i["image"] for i in listed], [big[1]])
        third = job(big[2], ["true"])
        done = self.b.wait_status(third, "FAILED", timeout=180, env=self.env)
        self.assertRegex(done["reason"], r"^image pull failed: no space left on device for " + re.escape(big[2]) +
                         r": your images on this node take \S+, the disk has \S+ free$")
        self.assertEqual({n["name"]: n["state"] for n in self.b.nodes(env=self.env)}["tiny"], "UP")
        self.b.run("cancel", second, env=self.env)
        self.b.wait_status(second, "CANCELLED", timeout=60, env=self.env)

    def test_a_mount_goes_where_it_is_allowed(self):
        """Placement looks at container.mounts: of two nodes that run containers, the one that lets
        containers mount the path gets the job (box, which allows none, is not tried)."""
        data = self.path("datasets")
        os.makedirs(os.path.join(data, "imagenet"))
        with open(os.path.join(data, "imagenet", "labels.txt"), "w") as f:
            f.write("cat dog\n")
        os.chmod(data, 0o755)
        self.start_agent("box2", extra=["--container-mount", data])
        self.b.wait_nodes_up(["box", "box2"], env=self.env)
        jobs = [self.submit(self.task(["cat /data/labels.txt"],
                                      extra=f"container:\n  mounts: [\"{data}/imagenet:/data:ro\"]\n"))
                for _ in range(2)]
        for job in jobs:
            self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
            self.assertIn("cat dog", self.logs(job))
            self.assertEqual([p["node"] for p in self.b.show(job, env=self.env)["placement"]], ["box2"])

    def test_a_tasks_home_variable_mounts_nothing(self):
        """The container got the job's HOME mounted, whatever that variable said: `envs: {HOME: DIR}`
        mounted any directory past the node's mount policy (box allows none). Only the user's real
        home is mounted now."""
        # The user's own directory (podman itself keeps its config under the task's HOME), outside
        # the home and the work dir: the policy lets no container mount it.
        secret = self.path("not-allowed")
        os.makedirs(secret)
        with open(os.path.join(secret, "secret.txt"), "w") as f:
            f.write("root's secret\n")
        os.chmod(os.path.join(secret, "secret.txt"), 0o644)
        os.chown(secret, self.user.pw_uid, self.user.pw_gid)
        job = self.submit(self.task([f"cat {secret}/secret.txt || echo not-mounted",
                                     f"test -d {self.user.pw_dir} && echo real-home-mounted"],
                                    extra=f"  HOME: {secret}\n"))
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        out = self.logs(job)
        self.assertIn("not-mounted", out)
        self.assertNotIn("root's secret", out)
        self.assertIn("real-home-mounted", out)

    def test_the_pull_policy_from_the_command_line(self):
        """The task file had container.pull; the command line had no way to say it."""
        _, out, _ = self.b.run("exec", "-d", "--json", "--image", self.image, "--pull", "always",
                               "--workdir", "node:" + self.work, "--", "true", env=self.env)
        job = json.loads(out)["jobs"][0]
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        self.assertEqual(self.b.show(job, env=self.env)["spec"]["container"]["pull"], "always")
        rc, _, err = self.b.run("exec", "-d", "--pull", "sometimes", "--image", self.image, "--", "true",
                                env=self.env, check=False)
        self.assertEqual(rc, 2, err)
        self.assertIn("--pull: expected missing, always or never", err)

    def test_refused_where_no_node_runs_containers(self):
        self.start_agent("plain", extra=["--containers", "off", "--pool", "plain"])
        self.b.wait_nodes_up(["box", "plain"], env=self.env)
        nodes = {n["name"]: n for n in self.b.nodes(env=self.env)}
        self.assertEqual(nodes["box"]["labels"].get("berth.container_runtime"), "podman")
        self.assertNotIn("berth.container_runtime", nodes["plain"]["labels"])
        rc, out, err = self.b.run("exec", "-d", "--pool", "plain", "--image", self.image, "--", "true",
                                  env=self.env, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("resources.image_id: no node in pool 'plain' runs containers", err)
        # --image on exec; a mount outside the node's allowed paths fails the launch saying so.
        job = self.b.submit("--image", self.image, "--workdir", "node:" + self.work, "--", "id -u",
                            env=self.env)
        self.b.wait_status(job, "SUCCEEDED", timeout=180, env=self.env)
        self.assertIn(str(self.user.pw_uid), self.logs(job))
        bad = self.task(["true"], extra="container:\n  mounts: [\"/etc:/host-etc:ro\"]\n")
        rc, out, err = self.b.run("exec", "-d", bad, env=self.env, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("container.mounts: '/etc:/host-etc:ro': /etc is not among the paths box lets "
                      "containers mount (none)", err)


if __name__ == "__main__":
    unittest.main()

"""Workdirs travel with the job: content-addressed uploads, no shared file system needed.

`workdir: DIR` is walked on the client with its .gitignore files, hashed, and only the blobs the server
lacks from this user are sent; the node fetches what its cache lacks and builds each attempt its own
copy, owned by the job's user. The agent here runs in a mount namespace of its own with a tmpfs over
the client's project, so the job can see the files only through the upload.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import unittest

from harness import BERTH_BIN, SCALE, BerthTestCase, http, http_unix, wait_until


def counter(url, name):
    status, text, _ = http("GET", url + "/metrics")
    m = re.search(rf"^{name} (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("unshare"),
                     "needs root and unshare(1): the agent runs in a mount namespace of its own")
class WorkdirUploadTest(BerthTestCase):
    def setUp(self):
        super().setUp()
        self.proj = self.path("proj")
        os.makedirs(os.path.join(self.proj, "sub"))
        os.makedirs(os.path.join(self.proj, ".git"))
        files = {
            "train.py": "print('train')\n",
            ".gitignore": "*.log\n!keep.log\n/build/\n",
            "a.log": "ignored\n",
            "keep.log": "kept\n",
            "sub/data.txt": "data\n",
            "sub/.gitignore": "*.tmp\n",
            "sub/x.tmp": "ignored too\n",
            "build/out.o": "ignored dir\n",
            ".git/HEAD": "ref: refs/heads/main\n",
        }
        for rel, text in files.items():
            self.write(os.path.join("proj", rel), text)
        os.chmod(os.path.join(self.proj, "train.py"), 0o755)
        os.symlink("train.py", os.path.join(self.proj, "link.py"))
        b = self.b
        self.server = b.start_server()
        self.url = self.server.url
        # The agent: its own mount namespace, the client's project hidden under an empty tmpfs.
        state = self.path("agent-state")
        os.makedirs(state)
        with open(self.path("agent.log"), "ab") as log:
            self.agent = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "sh", "-c",
                 f"mount -t tmpfs none {self.proj} && exec {BERTH_BIN} agent --server {self.url} "
                 f"--name node-0 --gpus V100:1 --state-dir {state}"],
                env=b.env, cwd=self.b.tmp, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT)
        self.addCleanup(self.stop_agent)
        b.wait_nodes_up(["node-0"], env={"BERTH_SERVER": self.url})
        self.env = {"BERTH_SERVER": self.url}

    def stop_agent(self):
        if self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()

    def exec(self, *args, check=True, env=None):
        return self.b.run("exec", *args, env={**self.env, **(env or {})}, cwd=self.b.tmp, check=check,
                          timeout=120)

    def test_job_sees_the_upload_and_not_the_ignored_files(self):
        task = self.write("task.yaml", "workdir: proj\nrun: |\n"
                          f"  ls -A {self.proj} | wc -l\n"
                          "  find . | sort\n  readlink link.py\n  cat sub/data.txt\n"
                          "  stat -c %a train.py\n")
        rc, out, err = self.exec(task)
        lines = out.splitlines()
        # The client's directory is empty on the node: the job runs in its own copy.
        self.assertEqual(lines[0], "0", out)
        listed = set(lines[1:-3])
        for want in ["./train.py", "./keep.log", "./sub/data.txt", "./link.py", "./.gitignore",
                     "./.git/HEAD", "./sub/.gitignore"]:
            self.assertIn(want, listed, out)
        for gone in ["./a.log", "./sub/x.tmp", "./build", "./build/out.o"]:
            self.assertNotIn(gone, listed, out)
        self.assertEqual(lines[-3:], ["train.py", "data", "755"], out)

    def test_resubmit_sends_only_what_changed(self):
        task = self.write("task.yaml", "workdir: proj\nrun: cat train.py\n")
        self.exec(task)
        first = counter(self.url, "berth_upload_blobs_total")
        self.assertGreaterEqual(first, 6)
        # The same tree again: nothing is sent.
        self.exec(task)
        self.assertEqual(counter(self.url, "berth_upload_blobs_total"), first)
        # One file edited: one blob.
        self.write("proj/train.py", "print('edited')\n")
        _, out, _ = self.exec(task)
        self.assertEqual(out, "print('edited')\n")
        self.assertEqual(counter(self.url, "berth_upload_blobs_total"), first + 1)

    def test_a_job_writing_into_its_copy_changes_nobody_elses(self):
        task = self.write("task.yaml", "workdir: proj\nrun: cat train.py; echo changed > train.py\n")
        _, out1, _ = self.exec(task)
        _, out2, _ = self.exec(task)
        self.assertEqual(out1, out2)
        self.assertEqual(out2, "print('train')\n")
        # The node's cached blob is intact.
        digest = hashlib.sha256(b"print('train')\n").hexdigest()
        cached = os.path.join(self.path("agent-state"), "uploads", digest[:2], digest)
        with open(cached, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
        self.assertEqual(os.stat(cached).st_nlink, 1)

    def test_uploads_are_checked_and_private(self):
        url = self.url
        data = "hello\n"
        digest = hashlib.sha256(data.encode()).hexdigest()
        wrong = hashlib.sha256(b"other").hexdigest()
        # A blob sent under another digest: 409, naming both.
        status, body, _ = http("POST", url + "/v1/uploads/blobs", f"{wrong} 0 {len(data)}\n{data}")
        self.assertEqual(status, 409, body)
        self.assertIn(digest, body["error"])
        status, body, _ = http("PUT", url + f"/v1/uploads/blobs/{wrong}?offset=0&size=6&last=1", data)
        self.assertEqual(status, 409, body)
        # Root uploads it; another user still hears it is missing (nobody learns what others sent).
        status, body, _ = http("POST", url + "/v1/uploads/blobs", f"{digest} 0 {len(data)}\n{data}")
        self.assertEqual(status, 200, body)
        ask = json.dumps({"digests": [digest]})
        status, body, _ = http("POST", url + "/v1/uploads/missing", ask)
        self.assertEqual(body, {"missing": []})
        sock = os.path.join(self.server.state_dir, "berth.sock")
        status, tok = http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": "bob"}))
        self.assertEqual(status, 201, tok)
        status, body, _ = http("POST", url + "/v1/uploads/missing", ask, token=tok["token"])
        self.assertEqual(body, {"missing": [digest]})
        # Nor may bob register a manifest naming root's blob, or submit a job that uses one.
        manifest = json.dumps({"version": 1, "entries": [["f", "x", 420, 6, digest]]})
        status, body, _ = http("POST", url + "/v1/uploads/manifests", manifest, token=tok["token"])
        self.assertEqual(status, 409, body)
        self.assertIn("not uploaded", body["error"])
        spec = {"spec": {"run": "cat x", "workdir_upload": hashlib.sha256(manifest.encode()).hexdigest()}}
        status, body, _ = http("POST", url + "/v1/jobs", json.dumps(spec), token=tok["token"])
        self.assertEqual(status, 400, body)
        self.assertIn("not one of your uploads", body["error"])
        # A manifest that would write through a symlink is refused.
        bad = json.dumps({"version": 1, "entries": [["l", "a", "/etc"], ["f", "a/passwd", 420, 6, digest]]})
        status, body, _ = http("POST", url + "/v1/uploads/manifests", bad)
        self.assertEqual(status, 400, body)
        self.assertIn("not a directory", body["error"])

    def test_over_the_limits_names_the_biggest(self):
        os.makedirs(os.path.join(self.proj, "data"))
        with open(os.path.join(self.proj, "data", "huge.bin"), "wb") as f:
            f.truncate(600 << 20)  # sparse: nothing is read, the size alone is over
        task = self.write("task.yaml", "workdir: proj\nrun: true\n")
        rc, out, err = self.exec(task, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("data/huge.bin is 600 MiB, over the limit of 512 MiB per file", err)

    def test_node_prefix_keeps_a_shared_path(self):
        shared = self.path("shared")
        os.makedirs(shared)
        task = self.write("task.yaml", f"workdir: node:{shared}\nrun: pwd\n")
        _, out, _ = self.exec(task)
        self.assertEqual(out, shared + "\n")
        rc, _, err = self.exec("--workdir", "node:relative", "--", "true", check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("must be absolute", err)

    def test_workdir_ls_shows_what_goes_and_why_the_rest_stays(self):
        _, out, err = self.b.run("workdir", "ls", self.proj)
        self.assertIn("train.py\n", out)
        self.assertIn("sub/\n", out)
        self.assertNotIn("a.log", out)
        self.assertIn("files", err)
        _, out, _ = self.b.run("workdir", "ls", "--ignored", self.proj)
        self.assertIn("a.log\t.gitignore:1: *.log", out)
        self.assertIn("build/\t.gitignore:3: /build/", out)
        self.assertIn("sub/x.tmp\tsub/.gitignore:1: *.tmp", out)

    def test_a_git_directory_is_one_line_and_an_upload_says_how_far_it_got(self):
        """`workdir ls` listed every .git/objects file; a 2 GiB upload was 40 s of silence."""
        import subprocess
        subprocess.run(["git", "init", "-q", self.proj], check=True)
        subprocess.run(["git", "-C", self.proj, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"],
                       check=True)
        subprocess.run(["git", "-C", self.proj, "-c", "user.name=t", "-c", "user.email=t@t", "commit",
                        "-qm", "x"], check=True)
        _, out, err = self.b.run("workdir", "ls", self.proj)
        self.assertRegex(out, r"(^|\n)\.git/ \(\d+ files, [0-9.]+ [KMG]?i?B; --all lists them\)\n")
        self.assertNotIn(".git/objects", out)
        self.assertIn("train.py\n", out)
        _, every, _ = self.b.run("workdir", "ls", "--all", self.proj)
        self.assertIn(".git/objects/", every)
        self.assertIn(".git/HEAD\n", every)
        # Progress, where it takes long (here: at once), then the summary.
        with open(os.path.join(self.proj, "weights.bin"), "wb") as f:
            f.write(os.urandom(3 << 20))
        task = self.write("task.yaml", "workdir: proj\nrun: test -d .git && ls weights.bin\n")
        _, out, err = self.exec(task, env={"BERTH_UPLOAD_PROGRESS_AFTER_MS": "0"})
        self.assertEqual(out, "weights.bin\n")
        self.assertRegex(err, r"workdir: hashing [0-9.]+ [KMG]?i?B of [0-9.]+ [KMG]?i?B \(\d+%\)\n")
        self.assertRegex(err, r"workdir: uploading [0-9.]+ [KMG]?i?B of [0-9.]+ [KMG]?i?B \(\d+%\)\n")

    def test_file_mounts_land_at_their_targets(self):
        self.write("cfg.yaml", "lr: 0.1\n")
        self.write("data/a.txt", "alpha\n")
        self.write("data/deep/b.txt", "beta\n")
        remote = self.path("remote")
        task = self.write("task.yaml", f"""\
workdir: proj
file_mounts:
  {remote}/data: ./data
  {remote}/cfg.yaml: cfg.yaml
  rel/inside: ./data
run: |
  cat {remote}/data/a.txt {remote}/data/deep/b.txt {remote}/cfg.yaml rel/inside/a.txt
""")
        _, out, _ = self.exec(task)
        self.assertEqual(out, "alpha\nbeta\nlr: 0.1\nalpha\n")
        # Object stores are refused, naming the field.
        bad = self.write("bad.yaml", "run: true\nfile_mounts:\n  /data: s3://bucket/data\n")
        rc, _, err = self.exec(bad, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("file_mounts: /data: s3://bucket/data: object-store sources are not supported", err)

    def test_an_upload_cut_short_by_the_server_resumes(self):
        big = os.path.join(self.proj, "weights.bin")
        with open(big, "wb") as f:
            f.write(os.urandom(40 << 20))
        with open(big, "rb") as f:
            data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        piece = 16 << 20
        status, body, _ = http("PUT", self.url + f"/v1/uploads/blobs/{digest}?offset=0&size={len(data)}&last=0",
                               data[:piece])
        self.assertEqual((status, body), (200, {"received": piece}))
        # The server dies mid-upload and comes back on the same port and state.
        port = self.url.rsplit(":", 1)[1]
        self.server.kill()
        self.server = self.b.start_server(state_dir=self.server.state_dir, listen=f"127.0.0.1:{port}")
        self.b.wait_nodes_up(["node-0"], env=self.env, timeout=60)
        task = self.write("task.yaml", "workdir: proj\nrun: sha256sum weights.bin | cut -d' ' -f1\n")
        _, out, _ = self.exec(task)
        self.assertEqual(out, digest + "\n")
        # Only the rest went: the first piece was kept across the restart.
        self.assertEqual(counter(self.url, "berth_upload_piece_bytes_total"), len(data) - piece)


if __name__ == "__main__":
    unittest.main()

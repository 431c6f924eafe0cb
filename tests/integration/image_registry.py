"""A registry and an image of the tests' own (no registry outside is reachable from these machines).

Debian's docker-registry on 127.0.0.1 (a free port, a temp dir), and a two-layer image built from
busybox-static with podman in a store of the caller's own, pushed to it. Used by test_containers.py and
bench/container.py.
"""
import os
import shutil
import socket
import subprocess
import threading
import time

from harness import http, wait_until

APPLETS = ("sh", "id", "ls", "cat", "sleep", "echo", "touch", "stat", "env", "true", "grep")


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """docker-registry serving `root` on 127.0.0.1; its access log at `log`."""

    def __init__(self, tmp):
        self.port = free_port()
        self.root = os.path.join(tmp, "registry")
        os.makedirs(self.root)
        config = os.path.join(tmp, "registry.yml")
        with open(config, "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {self.root}\n"
                    f"http:\n  addr: 127.0.0.1:{self.port}\n")
        self.log = os.path.join(tmp, "registry.log")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["docker-registry", "serve", config], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        wait_until(lambda: http("GET", f"http://127.0.0.1:{self.port}/v2/")[0] == 200, 30,
                   message="the registry to answer")

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


class SlowProxy:
    """A TCP proxy on 127.0.0.1 in front of `port` that sends answers at `rate` bytes a second (a
    registry far away): a pull through it lasts long enough to be watched. `rate` is read as each
    chunk goes, so a test can let the rest of a pull go at full speed (0: no limit)."""

    def __init__(self, port, rate):
        self.target, self.rate = port, rate
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self.pump, args=(client, upstream, lambda: 0), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client, lambda: self.rate),
                             daemon=True).start()

    @staticmethod
    def pump(src, dst, rate):
        chunk = 16384
        try:
            while data := src.recv(chunk):
                dst.sendall(data)
                if limit := rate():
                    time.sleep(len(data) / limit)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def stop(self):
        self.sock.close()


class ImageBuilder:
    """Builds and pushes images to `registry` with podman in a store under `tmp` (nobody else's)."""

    def __init__(self, tmp, registry):
        self.tmp = tmp
        self.registry = registry
        self.podman = ["podman", "--root", os.path.join(tmp, "build-store"), "--runroot",
                       os.path.join(tmp, "build-run"), "--cgroup-manager=cgroupfs", "--events-backend=file"]
        self.repo = f"{registry.host}/bb"

    def base(self):
        """bb:base: busybox alone (one layer), with ENV PATH and FOO=image."""
        rootfs = os.path.join(self.tmp, "rootfs")
        os.makedirs(os.path.join(rootfs, "bin"))
        os.makedirs(os.path.join(rootfs, "tmp"))
        os.chmod(os.path.join(rootfs, "tmp"), 0o1777)
        shutil.copy("/bin/busybox", os.path.join(rootfs, "bin", "busybox"))
        for applet in APPLETS:
            os.symlink("busybox", os.path.join(rootfs, "bin", applet))
        layer = os.path.join(self.tmp, "layer.tar")
        sh("tar", "-C", rootfs, "-cf", layer, ".")
        sh(*self.podman, "import", "--change", "ENV PATH=/bin", "--change", "ENV FOO=image", layer,
           f"{self.repo}:base")
        self.push(f"{self.repo}:base")

    def layered(self, tag, text):
        """bb:TAG = bb:base + /etc/layer2.txt holding `text` (a second layer) + ENV FROM_IMAGE=yes."""
        ctx = os.path.join(self.tmp, "ctx")
        os.makedirs(ctx, exist_ok=True)
        with open(os.path.join(ctx, "layer2.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(ctx, "Containerfile"), "w") as f:
            f.write(f"FROM {self.repo}:base\nCOPY layer2.txt /etc/layer2.txt\nENV FROM_IMAGE=yes\n")
        sh(*self.podman, "build", "--pull=never", "-t", f"{self.repo}:{tag}", ctx)
        self.push(f"{self.repo}:{tag}")
        return f"{self.repo}:{tag}"

    def big(self, tag, size):
        """bb:TAG = bb:base + /big, `size` random bytes (a layer that compresses to about as much)."""
        ctx = os.path.join(self.tmp, "ctx-" + tag)
        os.makedirs(ctx, exist_ok=True)
        with open(os.path.join(ctx, "big"), "wb") as f:
            f.write(os.urandom(size))
        with open(os.path.join(ctx, "Containerfile"), "w") as f:
            f.write(f"FROM {self.repo}:base\nCOPY big /big\n")
        sh(*self.podman, "build", "--pull=never", "-t", f"{self.repo}:{tag}", ctx)
        self.push(f"{self.repo}:{tag}")
        return f"{self.repo}:{tag}"

    def push(self, ref):
        sh(*self.podman, "push", "--tls-verify=false", ref)

    def config_digest(self, ref):
        return sh(*self.podman, "image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()

#!/usr/bin/env python3
"""A container job from a warm image store against podman itself: ratios from one run.

  python3 bench/container.py [--berth PATH] [--repeat N] [--json OUT]

As root: starts a registry on 127.0.0.1 with a two-layer busybox image (tests/integration/image_registry.py), a
server and one agent, and a unix user of its own. Then, each case --repeat times in turn (medians reported):

  floor    `podman run --rm IMAGE true` as that user, with the same store and flags the agent uses
  floor_halfcpu  the same inside a cgroup of this process's with a 0.5 CPU CFS quota: the floor under the
           limit a job that names no CPUs runs under (cgroup v1 cpu controller, or v2 cpu.max)
  tag      `berth exec --image REG/bb:2 -- true` as that user (a tag: asked of its registry once a minute)
  pinned   the same with the image pinned by digest (REG/bb@sha256:...: nothing asked of the registry)
  *_2cpu   the same with --cpus 2 (the default 0.5 CPU is a CPU limit that podman's own start-up runs under)
  plain    `berth exec -- true` without an image: berth's own share, for the profile

`berth exec` without -d returns when the job has ended, so each berth figure is submit-to-end: the server's
placement, the agent's launch, the pull step (the image is on the node) and the run step. Target: pinned /
floor and tag / floor <= 1.3 (with the job's default 0.5 CPU); also reported against floor_halfcpu, the
peer under the same CPU limit. Needs root, podman, runc (on a cgroup v1 host) and docker-registry.
"""
import argparse
import glob
import json
import os
import pwd
import statistics
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)

TARGET = 1.3


def half_cpu_cgroup():
    """A cgroup below this process's own with a 0.5 CPU quota (v1 cpu controller, else v2 cpu.max), or
    None where none can be made."""
    lines = open("/proc/self/cgroup").read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            d = f"/sys/fs/cgroup/cpu{path.rstrip('/')}/berth-bench-{os.getpid()}"
            try:
                os.mkdir(d)
                open(d + "/cpu.cfs_period_us", "w").write("100000")
                open(d + "/cpu.cfs_quota_us", "w").write("50000")
                return d
            except OSError:
                return None
    for line in lines:
        if line.startswith("0::"):
            base = "/sys/fs/cgroup" + line[3:].rstrip("/")
            d = f"{base}/berth-bench-{os.getpid()}"
            try:
                os.mkdir(d)
                open(d + "/cpu.max", "w").write("50000 100000")
                return d
            except OSError:
                return None
    return None


def timed(cmd, **kw):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(ROOT, "build", "src", "berth"))
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (it makes a unix user; the agent runs jobs as them)", file=sys.stderr)
        return 2
    os.environ["BERTH_BIN"] = os.path.abspath(args.berth)
    import bulk  # noqa: E402  (machine())
    import harness  # noqa: E402
    from image_registry import ImageBuilder, Registry, sh  # noqa: E402

    b = harness.Berth()
    os.chmod(b.tmp, 0o711)
    name = "bcb" + uuid.uuid4().hex[:6]
    home = os.path.join(b.tmp, "home-" + name)
    sh("useradd", "--create-home", "--home-dir", home, "--shell", "/bin/bash", name)
    registry = None
    try:
        user = pwd.getpwnam(name)
        registry = Registry(b.tmp)
        images = ImageBuilder(b.tmp, registry)
        images.base()
        image = images.layered("2", "layer\n")
        server = b.start_server()
        state = os.path.join(b.tmp, "agent")
        b.start_agent(server.url, name="box", gpus="V100:1", state_dir=state,
                      extra=["--insecure-registry", registry.host])
        sock = os.path.join(server.state_dir, "berth.sock")
        status, tok = harness.http_unix("POST", sock, "/v1/admin/tokens", json.dumps({"user": name}))
        assert status == 201, tok
        env = dict(b.env, BERTH_SERVER=server.url, BERTH_TOKEN=tok["token"])
        b.wait_nodes_up(["box"], env=env)
        work = os.path.join(b.tmp, "work")
        os.makedirs(work)
        os.chown(work, user.pw_uid, user.pw_gid)

        def berth_job(ref, cpus="0.5"):
            image_args = ["--image", ref] if ref else []
            return timed([args.berth, "exec", *image_args, "--cpus", cpus, "--workdir", "node:" + work, "--",
                          "true"], env=env, cwd=work)

        berth_job(image)  # pulls it: the store is warm from here on
        store = os.path.join(state, "containers", str(user.pw_uid))
        run = next(os.path.join(d, str(user.pw_uid)) for d in glob.glob("/run/berth-*")
                   if os.path.isdir(os.path.join(d, str(user.pw_uid))))
        # podman as the user, with the store and flags the agent gives it (agent/container.cpp).
        v1 = not os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "env",
                   f"XDG_RUNTIME_DIR={run}/xdg", f"HOME={home}", "podman", "--root", store + "/storage",
                   "--runroot", run + "/run", "--tmpdir", store + "/tmp", "--cgroup-manager=cgroupfs",
                   "--events-backend=file", *(["--runtime", "runc"] if v1 else [])]
        digest = sh(*as_user, "image", "inspect", "--format", "{{.Digest}}", image).stdout.strip().splitlines()[-1]
        pinned = image.rsplit(":", 1)[0] + "@" + digest
        floor_cmd = [*as_user, "run", "--rm", "--pull=never", "--userns=keep-id", "--network=host",
                     *([] if v1 else ["--cgroups=disabled"]), image, "true"]
        timed(floor_cmd, cwd=work)
        berth_job(pinned)
        cgroup = half_cpu_cgroup()
        cases = {
            "floor": lambda: timed(floor_cmd, cwd=work),
            **({"floor_halfcpu": lambda: timed(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup,
                                                *floor_cmd], cwd=work)} if cgroup else {}),
            "tag": lambda: berth_job(image),
            "pinned": lambda: berth_job(pinned),
            "tag_2cpu": lambda: berth_job(image, "2"),
            "pinned_2cpu": lambda: berth_job(pinned, "2"),
            "plain": lambda: berth_job(None),
        }
        times = {k: [] for k in cases}
        for _ in range(args.repeat):
            for k, run in cases.items():
                times[k].append(run())
        med = {k: statistics.median(v) for k, v in times.items()}
        result = {
            "machine": bulk.machine(),
            "repeat": args.repeat,
            "median_s": med,
            "ratios": {k: med[k] / med["floor"] for k in cases if k not in ("floor", "floor_halfcpu", "plain")},
            "ratios_to_halfcpu_floor": ({k: med[k] / med["floor_halfcpu"] for k in ("tag", "pinned")}
                                        if cgroup else None),
            "target": TARGET,
        }
        print(f"machine: {result['machine']}")
        for k in cases:
            print(f"{k:12s} median {med[k] * 1000:7.1f} ms  (min {min(times[k]) * 1000:.1f}, "
                  f"max {max(times[k]) * 1000:.1f})")
        for k, ratio in result["ratios"].items():
            print(f"{k + ' / floor':20s} = {ratio:.2f}  (target <= {TARGET})")
        for k, ratio in (result["ratios_to_halfcpu_floor"] or {}).items():
            print(f"{k + ' / floor_halfcpu':20s} = {ratio:.2f}  (the peer under the same 0.5 CPU limit)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
        return 0
    finally:
        if "cgroup" in locals() and cgroup:
            for _ in range(50):
                try:
                    os.rmdir(cgroup)
                    break
                except OSError:
                    time.sleep(0.1)
        b.cleanup()
        if registry:
            registry.stop()
        uid = pwd.getpwnam(name).pw_uid
        # The floor's podman left its pause process (a job's goes with the job's cgroup).
        subprocess.run(["pkill", "-u", str(uid)])
        time.sleep(0.5)
        sh("userdel", "--remove", name, check=False)
        for base in glob.glob("/run/berth-*"):
            subprocess.run(["rm", "-rf", os.path.join(base, str(uid))])
            subprocess.run(["rmdir", base], stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What knowing who asks costs a request, side by side in one run on one server.

Starts `berth server` on 127.0.0.1 (port 0, a temp state dir) and times N sequential requests over one
kept-alive connection each way:

  health     GET /v1/health over TCP: answered before any identification (the floor)
  loopback   GET /v1/whoami over TCP without a token: the kernel is asked which uid owns the client's
             socket (NETLINK_SOCK_DIAG) and the uid is named (passwd, cached)
  socket     GET /v1/whoami over the unix socket: SO_PEERCRED, read once per connection
  token      GET /v1/whoami over TCP with a user's token: SHA-256 of the secret, looked up by hash
  tls        GET /v1/whoami over TLS (a second server, --tls) with the token

and prints the median and p99 of each, and each median's ratio to the health floor. Needs only python3's
standard library.

    python3 bench/identity.py [--berth build/src/berth] [-n 2000]
"""

import argparse
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def start_server(berth, state, extra=()):
    url_file = os.path.join(state, "server.url")
    proc = subprocess.Popen([berth, "server", "--listen", "127.0.0.1:0", "--state-dir", state,
                             "--url-file", url_file, *extra],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(state, "..", os.path.basename(state) + ".log"), "w"))
    while not (os.path.exists(url_file) and open(url_file).read().strip()):
        if proc.poll() is not None:
            raise SystemExit("the server did not start")
        time.sleep(0.01)
    return proc, open(url_file).read().strip()


def timed(conn, path, n, headers=None):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        r.read()
        out.append((time.perf_counter() - t) * 1e6)
        if r.status != 200:
            raise SystemExit(f"{path}: {r.status}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--berth", default=os.path.join(HERE, "..", "build", "src", "berth"))
    ap.add_argument("-n", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain_state = os.path.join(tmp, "plain")
        tls_state = os.path.join(tmp, "tls")
        os.makedirs(plain_state)
        os.makedirs(tls_state)
        procs = []
        try:
            p, url = start_server(args.berth, plain_state)
            procs.append(p)
            p, tls_url = start_server(args.berth, tls_state, ["--tls"])
            procs.append(p)
            host, port = url.split("//")[1].split(":")
            sock = os.path.join(plain_state, "berth.sock")
            admin = UnixConnection(sock)
            admin.request("POST", "/v1/admin/tokens", body=json.dumps({"user": "bench"}),
                          headers={"Content-Type": "application/json"})
            token = json.loads(admin.getresponse().read())["token"]
            tls_admin = UnixConnection(os.path.join(tls_state, "berth.sock"))
            tls_admin.request("POST", "/v1/admin/tokens", body=json.dumps({"user": "bench"}),
                              headers={"Content-Type": "application/json"})
            tls_token = json.loads(tls_admin.getresponse().read())["token"]
            bearer = {"Authorization": "Bearer " + token}
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # pinning is the CLI's business; this measures the channel
            tls_host, tls_port = tls_url.split("//")[1].split(":")

            results = {}
            for name, conn, path, headers in [
                ("health", http.client.HTTPConnection(host, int(port)), "/v1/health", None),
                ("loopback", http.client.HTTPConnection(host, int(port)), "/v1/whoami", None),
                ("socket", UnixConnection(sock), "/v1/whoami", None),
                ("token", http.client.HTTPConnection(host, int(port)), "/v1/whoami", bearer),
                ("tls", http.client.HTTPSConnection(tls_host, int(tls_port), context=ctx), "/v1/whoami",
                 {"Authorization": "Bearer " + tls_token}),
            ]:
                timed(conn, path, 100, headers)  # warm up
                results[name] = timed(conn, path, args.n, headers)
            floor = statistics.median(results["health"])
            print(f"{args.n} sequential requests each, one kept-alive connection, median / p99 in µs:")
            for name, xs in results.items():
                xs = sorted(xs)
                med = statistics.median(xs)
                p99 = xs[int(len(xs) * 0.99) - 1]
                print(f"  {name:9s} {med:8.1f} / {p99:8.1f}   x{med / floor:.2f} of health")
        finally:
            for p in procs:
                p.terminate()
                p.wait()


if __name__ == "__main__":
    main()

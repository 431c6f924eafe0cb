"""A real headless Chromium (Debian's `chromium`), driven over the DevTools protocol, for the dashboard's
tests.

Chromium is started with --remote-debugging-pipe: protocol messages are NUL-terminated JSON on its fd 3
(in) and fd 4 (out), so no port is opened and nothing but the standard library is needed here. One page
(a target attached in flat mode) is driven with Page/Runtime commands; `evaluate` runs an expression in
the page and returns its value, `wait_for` polls one until it is truthy, `screenshot` saves a PNG.
"""

import base64
import json
import os
import shutil
import subprocess
import threading
import time

from harness import SCALE


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, profile_dir, width=1400, height=900):
        exe = find_chromium()
        if not exe:
            raise BrowserError("no chromium on PATH (scripts/install-deps.sh installs Debian's)")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()

        def wire_fds():  # in the child: its fd 3 reads our commands, its fd 4 writes the answers
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        args = [exe, "--headless=new", "--remote-debugging-pipe", f"--user-data-dir={profile_dir}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-dev-shm-usage", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--metrics-recording-only", "--mute-audio",
                f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root
        self.log_path = os.path.join(profile_dir, "chromium.log")
        os.makedirs(profile_dir, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         close_fds=False, preexec_fn=wire_fds)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._out = to_chrome_w
        self._in = from_chrome_r
        self._next_id = 0
        self._answers = {}
        self._events = []
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self._cond:
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self._events.append(msg)
                    self._cond.notify_all()

    def call(self, method, params=None, session=False, timeout=30):
        with self._cond:
            self._next_id += 1
            mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout * SCALE
        with self._cond:
            while mid not in self._answers:
                if self._closed:
                    raise BrowserError(f"chromium went away during {method}:\n{self.log()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError(f"chromium did not answer {method} in {timeout * SCALE:.0f}s")
                self._cond.wait(left)
            answer = self._answers.pop(mid)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def events(self, method):
        with self._cond:
            return [e for e in self._events if e.get("method") == method]

    # --- the page ---

    def navigate(self, url):
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for("document.readyState === 'complete'", message=f"{url} to load")

    def evaluate(self, expression, await_promise=True):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": await_promise}, session=True)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression!r} threw: {r['exceptionDetails'].get('exception', r['exceptionDetails'])}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout=30, message=None):
        deadline = time.monotonic() + timeout * SCALE
        last = None
        while True:
            try:
                last = self.evaluate(expression)
            except BrowserError as e:
                last = e
            if last and not isinstance(last, Exception):
                return last
            if time.monotonic() >= deadline:
                page = ""
                try:
                    page = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
                except BrowserError:
                    pass
                raise BrowserError(f"timed out after {timeout * SCALE:.0f}s waiting for "
                                   f"{message or expression}; last value: {last!r}\npage text:\n{page}")
            time.sleep(0.05)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass

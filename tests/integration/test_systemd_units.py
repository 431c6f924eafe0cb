"""The systemd units in packaging/systemd (docs/security.md "Isolation") are valid: `systemd-analyze verify`
accepts each without a word (it warns about unknown keys but still exits 0, so any output fails), with
ExecStart pointed at the built binary; the agent's unit delegates its cgroup and leaves the jobs running when it
stops."""

import os
import re
import shutil
import subprocess
import unittest

from harness import BERTH_BIN, BerthTestCase

UNITS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "packaging", "systemd")


@unittest.skipIf(shutil.which("systemd-analyze") is None, "systemd-analyze is not installed")
class SystemdUnitsTest(BerthTestCase):

    def verify(self, name):
        with open(os.path.join(UNITS, name)) as f:
            text = f.read()
        text = text.replace("/usr/local/bin/berth", os.path.realpath(BERTH_BIN))
        path = self.b.tmp + "/" + name
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""), name)
        return text

    def test_the_agents_unit_delegates_its_cgroup_and_keeps_jobs_across_restarts(self):
        text = self.verify("berth-agent.service")
        self.assertRegex(text, r"(?m)^Delegate=yes$")
        self.assertRegex(text, r"(?m)^KillMode=process$")
        self.assertIn("--require-isolation", text)

    def test_the_servers_unit(self):
        text = self.verify("berth-server.service")
        self.assertRegex(text, r"(?m)^User=berth$")
        self.assertTrue(re.search(r"(?m)^ExecStart=\S+ server ", text))


if __name__ == "__main__":
    unittest.main()

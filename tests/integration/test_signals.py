"""Jobs start with every signal's default disposition and nothing blocked, whatever their agent had.

An agent started from a script with `&` ignores SIGINT and SIGQUIT, and an ignored disposition passes
through exec: its jobs inherited it (`SigIgn: ...1006`), so Ctrl-C in `berth exec -it -- python3` did
nothing and `timeout -s INT` could not stop a batch job. The job's step resets every disposition and the
signal mask before it execs, as Slurm's stepd does.
"""

import os
import signal

from harness import BerthTestCase


class SignalsTest(BerthTestCase):

    def test_a_job_of_an_agent_that_ignores_sigint_does_not(self):
        b = self.b
        server = b.start_server()
        env = {"BERTH_SERVER": "unix:" + os.path.join(server.state_dir, "berth.sock")}
        # Started the way `berth agent ... &` from a script starts it: SIGINT and SIGQUIT ignored.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        old_quit = signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        try:
            agent = b.start_agent(server.url, name="node-0", gpus="",
                                  extra=["--token-file", os.path.join(server.state_dir, "token")])
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGQUIT, old_quit)
        with open(f"/proc/{agent.pid}/status") as f:
            ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
        self.assertTrue(ignored & (1 << (signal.SIGINT - 1)), "the agent itself ignores SIGINT")
        b.wait_nodes_up(["node-0"], env=env)
        job = b.submit("--", "grep -E '^Sig(Ign|Blk):' /proc/self/status; "
                              "timeout -s INT 1 sleep 20; echo timeout=$?", env=env)
        b.wait_status(job, "SUCCEEDED", timeout=60, env=env)
        out = b.run("logs", job, "--no-follow", env=env)[1]
        masks = {line.split(":")[0]: int(line.split()[1], 16) for line in out.splitlines()
                 if line.startswith("Sig")}
        self.assertEqual(masks["SigBlk"], 0, out)
        self.assertFalse(masks["SigIgn"] & (1 << (signal.SIGINT - 1)), out)
        self.assertFalse(masks["SigIgn"] & (1 << (signal.SIGQUIT - 1)), out)
        self.assertIn("timeout=124", out)  # SIGINT stopped the sleep

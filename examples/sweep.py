#!/usr/bin/env python3
"""A learning-rate sweep from plain Python with berth's client (docs/python.md).

Runs examples/train.py once per point of a grid (learning rates x epochs) as one bulk group on the cluster
the `berth` command would use (the local cluster by default: `berth local up` first), shows the
group's progress until every job has ended, then reads each job's log for its final loss and names the
best point. From the repository's root:

    PYTHONPATH=python python3 examples/sweep.py [--lrs 0.5,0.1,0.01] [--epochs 1,2] [--max-running 8]

(or without PYTHONPATH once the client is installed: pip install ./python). The jobs run in this
repository's directory on the nodes (workdir node:...), so every node must see it at the same path, as
the local cluster's does. Exits 0 when every job succeeded.
"""

import argparse
import os
import sys

try:
    import berth
except ImportError:  # not installed: the copy in this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    import berth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def numbers(text, kind):
    """A comma-separated list of numbers, for argparse."""
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got '{text}'")


def final_loss(client, job):
    """The last loss a job's log reports (None when it printed none)."""
    losses = [line.split("loss ")[1] for line in client.logs(job, follow=False) if "loss " in line]
    return float(losses[-1]) if losses else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lrs", type=lambda t: numbers(t, float), default=[0.5, 0.1, 0.01])
    parser.add_argument("--epochs", type=lambda t: numbers(t, int), default=[1, 2])
    parser.add_argument("--max-running", type=int, default=None,
                        help="at most this many of the sweep's jobs at once")
    args = parser.parse_args()

    client = berth.Client()
    group = client.sweep({"lr": args.lrs, "epochs": args.epochs},
                         "python3 examples/train.py --lr $lr --epochs $epochs",
                         name="lr-sweep", workdir="node:" + ROOT, max_running=args.max_running)
    print(f"Submitted group {group.id}: jobs {group.job_ids[0]}-{group.job_ids[-1]} "
          f"({len(group)} points) on {client.server}")
    result = client.wait(group)  # a progress line on stderr until every job has ended

    best = None
    for rank, params in enumerate(group.params):
        job = group.job(rank)
        loss = final_loss(client, job)
        print(f"job {job.id} lr={params['lr']} epochs={params['epochs']}: "
              f"{result.statuses[job.id]}, final loss {loss}")
        if loss is not None and (best is None or loss < best[0]):
            best = (loss, params)
    if best is not None:
        print(f"best: lr={best[1]['lr']} epochs={best[1]['epochs']} (loss {best[0]:.4f})")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

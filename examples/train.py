"""A stand-in training script for the README's tour: reads --lr and --epochs, prints a loss per
epoch and where it runs, and exits 0. Standard library only."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
print(f"job {os.environ.get('BERTH_JOB_ID', '-')} rank {os.environ.get('BERTH_JOB_RANK', '0')} "
      f"on {os.uname().nodename}, GPUs {os.environ.get('CUDA_VISIBLE_DEVICES', '') or 'none'}",
      flush=True)
loss = 1.0
for epoch in range(args.epochs):
    loss *= 1 - min(args.lr, 0.9)
    print(f"epoch {epoch}: loss {loss:.4f}", flush=True)
    time.sleep(0.5)

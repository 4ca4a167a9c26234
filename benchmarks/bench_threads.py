"""Why the lessons use one torch thread: 15 GRPO steps of the shipped policy with 1 and with 2 threads.

    python benchmarks/bench_threads.py             # on a quiet machine, ~25 s
    python benchmarks/bench_threads.py --repeats 2 # run it again while another job keeps one core busy

Each measurement runs in its own process (the thread count of a process is best set once). The time is the sum
of the 15 steps' `step_seconds` (sampling, scoring, one update each; the step-0 evaluation is not counted).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ONE_RUN = """
import torch; torch.set_num_threads({threads})
from minirl import Countdown, RLConfig, load_policy, train
run = train(load_policy(device="cpu"), Countdown(), RLConfig.preset("grpo", steps=15, eval_every=0, eval_n=20),
            progress=False)
print(sum(r["step_seconds"] for r in run.history[1:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="measurements per thread count, alternated")
    args = parser.parse_args()
    print("| threads | seconds for 15 GRPO steps (each measurement) |\n|---|---|")
    times = {1: [], 2: []}
    for _ in range(args.repeats):
        for threads in times:
            out = subprocess.run([sys.executable, "-c", ONE_RUN.format(threads=threads)], capture_output=True,
                                 text=True, check=True, env={"TOKENIZERS_PARALLELISM": "false", **os.environ})
            times[threads].append(float(out.stdout.split()[-1]))
    for threads, ts in times.items():
        print(f"| {threads} | {', '.join(f'{t:.1f}' for t in ts)} |")


if __name__ == "__main__":
    main()

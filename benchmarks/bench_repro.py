"""Where do same-seed reruns stop being bit-identical? GRPO runs repeated in fresh processes, compared bit for bit.

    python benchmarks/bench_repro.py                 # GRPO, ~4 min on 2 idle cores
    python benchmarks/bench_repro.py --algo dapo --steps 40 --repeats 3

Each variant trains the shipped policy with a preset (default GRPO: 8 prompts x G 8; the compact task, seed 0) for --steps steps,
--repeats times, each time in a new Python process, and prints per run: a hash of the final weights, the step
at which the logged metrics first differ from the variant's first run, and the held-out accuracy at the end.
Variants:
  threads=1 / threads=2         torch.set_num_threads
  2 runs in one process         the second run in the same process as the first (other memory addresses)
  deterministic algorithms      torch.use_deterministic_algorithms(True)
  as without AVX-512            MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2: the code paths a CPU
                                without AVX-512 takes. They round differently: these runs show how far float-level
                                differences carry, what a rerun on another machine sees.
  MKL_CBWR=COMPATIBLE           Intel MKL's conditional numerical reproducibility: one matmul path whatever the CPU
  portable                      MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default: also torch's own kernels on one
                                (non-vectorised) path; "portable, as without AVX-512" adds the AVX2 limits on top,
                                so equal hashes there mean the switch removes the CPU's instruction set from the bits
and, for each, the median seconds per step, to show what a switch costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import hashlib, json, sys, torch
threads, steps, runs, deterministic, algo = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
torch.set_num_threads(threads)
torch.use_deterministic_algorithms(deterministic)
from minirl.config import RLConfig
from minirl.policy import load_policy
from minirl.tasks import Countdown
from minirl.trainer import train
out = []
for _ in range(runs):
    policy = load_policy()
    cfg = RLConfig.preset(algo, steps=steps, eval_every=0, eval_n=300, seed=0)
    run = train(policy, Countdown(), cfg, progress=False)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in policy.model.parameters())).hexdigest()
    rows = [{k: v for k, v in r.items() if not (k.startswith("time/") or k in ("wall_time", "step_seconds",
            "tokens_per_s", "peak_mem_mb"))} for r in run.history]
    secs = sorted(r["step_seconds"] for r in run.history[1:])
    out.append({"hash": digest[:12], "rows": rows, "acc": run.history[-1].get("eval/accuracy_sampled"),
                "step_s": secs[len(secs) // 2]})
print("RESULT" + json.dumps(out))
"""


# what a CPU without AVX-512 would run: MKL's AVX2 code path and torch's own AVX2 kernels (both read these at load)
NO_AVX512 = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
# one code path on every x86 CPU: MKL's conditional numerical reproducibility and torch's non-vectorised kernels
PORTABLE = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"}


def launch(algo: str, threads: int, steps: int, runs: int, deterministic: bool = False,
           env: dict | None = None) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(steps), str(runs), str(int(deterministic)), algo],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def first_difference(a: list[dict], b: list[dict]) -> str:
    for ra, rb in zip(a, b):
        if json.dumps(ra, sort_keys=True) != json.dumps(rb, sort_keys=True):
            return f"step {ra['step']}"
    return "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--algo", choices=["ppo", "grpo", "dapo"], default="grpo")
    args = parser.parse_args()
    variants = {
        "threads=1": dict(threads=1),
        "threads=2": dict(threads=2),
        "threads=2, 2 runs in one process": dict(threads=2, runs=2),
        "threads=2, deterministic algorithms": dict(threads=2, deterministic=True),
        "threads=2, as without AVX-512": dict(threads=2, env=NO_AVX512),
        "threads=2, MKL_CBWR=COMPATIBLE": dict(threads=2, env={"MKL_CBWR": "COMPATIBLE"}),
        "threads=2, portable": dict(threads=2, env=PORTABLE),
        "threads=2, portable, as without AVX-512": dict(threads=2, env={**NO_AVX512, **PORTABLE}),
    }
    print(f"# bench_repro: {args.algo}, compact task, seed 0, {args.steps} steps; {args.repeats} fresh processes per "
          "variant; held-out sampled accuracy on 300 problems")
    reference = None
    for name, v in variants.items():
        results = []
        for _ in range(1 if v.get("runs") else args.repeats):
            results += launch(args.algo, v["threads"], args.steps, v.get("runs", 1), v.get("deterministic", False), v.get("env"))
        reference = reference or results[0]
        first = results[0]
        print(f"\n## {name}: median {statistics.median(r['step_s'] for r in results) * 1e3:.0f} ms per step")
        for i, r in enumerate(results):
            print(f"  run {i + 1}: weights {r['hash']}  first metric difference vs run 1: "
                  f"{first_difference(first['rows'], r['rows']):9s} vs threads=1 run 1: "
                  f"{first_difference(reference['rows'], r['rows']):9s} held-out sampled {r['acc']:.3f}")
    print("\nsha256 of the final weights' bytes, first 12 hex digits; metrics compared exactly, step by step")


if __name__ == "__main__":
    main()

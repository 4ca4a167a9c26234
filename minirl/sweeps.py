"""Recorded sweeps for the exercises: `python -m minirl.sweeps lr --out minirl/assets/sweeps/lr_sweep.json`.

The learning-rate sweep trains every algorithm's preset from the shipped policy at each learning rate
(seed 0, one run at a time, in this process) and writes one small JSON file. Per run it stores the config,
how the run ended (a diverged or exhausted run is kept, with its error) and, column by column, the metrics
of every step: `null` where a metric was not measured (held-out accuracy only every `eval_every` steps).
`load_sweep(path)` turns the file back into `minirl.runs.Run` objects for `minirl.plots.plot_runs`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from .config import RLConfig
from .runs import Run, code_version

LRS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)
ALGOS = ("ppo", "grpo", "dapo")
METRICS = ("reward_mean", "entropy", "completion_len_mean", "frac_reward_zero_std",
           "eval/accuracy_sampled", "eval/accuracy_greedy")


def _number(value) -> float | None:
    """A metric rounded to 4 significant digits; None for missing or non-finite values (strict JSON)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return float(f"{value:.4g}") if math.isfinite(value) else None


def run_point(algo: str, lr: float, steps: int, eval_every: int, eval_n: int, seed: int = 0) -> dict:
    """Train one (algo, lr) point from the shipped policy; return its record, whether it finished or not."""
    from . import load_policy
    from .tasks import Countdown
    from .trainer import DynamicSamplingExhausted, TrainingDiverged, train

    config = RLConfig.preset(algo, lr=lr, steps=steps, eval_every=eval_every, eval_n=eval_n, seed=seed)
    status, error, t0 = "finished", None, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="minirl-sweep-") as run_dir:  # the run's rows survive a failure
        try:
            train(load_policy(device="cpu"), Countdown(), config, run_dir=run_dir, progress=False)
        except (TrainingDiverged, DynamicSamplingExhausted) as err:  # a collapse is a result, not a crash
            status, error = "failed", f"{type(err).__name__}: {err}"
        history = Run.load(run_dir).history
    return {
        "algo": algo, "lr": lr, "status": status, "error": error,
        "seconds": round(time.perf_counter() - t0, 1), "config": config.to_dict(),
        "metrics": {"step": [row["step"] for row in history],
                    **{m: [_number(row.get(m)) for row in history] for m in METRICS}},
    }


def lr_sweep(out: Path, lrs=LRS, algos=ALGOS, steps: int = 150, eval_every: int = 25, eval_n: int = 200,
             threads: int = 2) -> dict:
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    record = {
        "what": "learning-rate sweep of the presets from the shipped policy on Countdown, seed 0",
        "command": "python -m minirl.sweeps " + " ".join(sys.argv[1:]) if sys.argv[1:] else "lr_sweep()",
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "code_version": code_version(), "torch": torch.__version__, "threads": threads,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "runs": [],
    }
    for algo in algos:
        for lr in lrs:
            point = run_point(algo, lr, steps, eval_every, eval_n)
            record["runs"].append(point)
            acc = [a for a in point["metrics"]["eval/accuracy_sampled"] if a is not None]
            print(f"{algo:5s} lr={lr:<7g} {point['status']:8s} {point['seconds']:6.1f}s  sampled accuracy "
                  f"{acc[0] if acc else float('nan'):.3f} -> {acc[-1] if acc else float('nan'):.3f}"
                  + (f"  ({point['error'][:60]})" if point["error"] else ""), flush=True)
    record["seconds_total"] = round(time.perf_counter() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB) in {record['seconds_total']:.0f} s")
    return record


RECORDED_LR_SWEEP = Path(__file__).parent / "assets" / "sweeps" / "lr_sweep.json"  # shipped with the package


def load_sweep(path: str | Path = RECORDED_LR_SWEEP) -> list[Run]:
    """The runs of a recorded sweep as `Run` objects (history rows without the metrics that were not measured).

    Each run's meta holds "status", "error" and "seconds" as recorded."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = []
    for point in record["runs"]:
        columns = point["metrics"]
        history = [{"step": step, **{m: columns[m][i] for m in METRICS if columns[m][i] is not None}}
                   for i, step in enumerate(columns["step"])]
        meta = {"status": point["status"], "error": point["error"], "seconds": point["seconds"]}
        runs.append(Run(config=RLConfig.from_dict(point["config"]), history=history, meta=meta))
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minirl.sweeps", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="sweep", required=True)
    p = sub.add_parser("lr", help="learning-rate sweep of ppo, grpo and dapo")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--lrs", default=",".join(f"{lr:g}" for lr in LRS), help="comma-separated learning rates")
    p.add_argument("--algos", default=",".join(ALGOS), help="comma-separated presets")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--eval-n", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    lr_sweep(args.out, [float(x) for x in args.lrs.split(",")], args.algos.split(","), args.steps,
             args.eval_every, args.eval_n, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())

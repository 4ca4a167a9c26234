"""Recorded sweeps for the exercises and the lessons' panels.

    python -m minirl.course.sweeps lr --out minirl/assets/sweeps/lr_sweep.json     # exercise 7
    python -m minirl.course.sweeps lessons --study studies/claims-compact  # lessons 05-07 (compact-study runs)
    python -m minirl.course.sweeps length --out minirl/assets/sweeps/lesson04_length.json   # lesson 04

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

from ..config import PAPER_ALGOS, RLConfig
from ..runs import Run, code_version

LRS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)
METRICS = ("reward_mean", "entropy", "completion_len_mean", "frac_reward_zero_std",
           "eval/accuracy_sampled", "eval/accuracy_greedy", "samples", "kl_ref", "clip_frac_low", "clip_frac_high",
           "completion_len_correct", "completion_len_incorrect", "truncation_rate", "reward/attempts", "accuracy",
           "retry_rate_after_miss")


def _number(value) -> float | None:
    """A metric rounded to 4 significant digits; None for missing or non-finite values (strict JSON)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return float(f"{value:.4g}") if math.isfinite(value) else None


def columns(history: list[dict]) -> dict:
    """A run's metrics, column by column: "step" plus one list per METRICS entry, None where not measured."""
    return {"step": [row["step"] for row in history], **{m: [_number(row.get(m)) for row in history] for m in METRICS}}


def run_point(algo: str, lr: float, steps: int, eval_every: int, eval_n: int, seed: int = 0) -> dict:
    """Train one (algo, lr) point from the shipped policy; return its record, whether it finished or not."""
    from .. import load_policy
    from ..tasks import Countdown
    from ..trainer import DynamicSamplingExhausted, TrainingDiverged, train

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
        "metrics": columns(history),
    }


def lr_sweep(out: Path, lrs=LRS, algos=PAPER_ALGOS, steps: int = 150, eval_every: int = 25, eval_n: int = 200,
             threads: int = 2) -> dict:
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    record = {
        "what": "learning-rate sweep of the presets from the shipped policy on Countdown, seed 0",
        "command": "python -m minirl.course.sweeps " + " ".join(sys.argv[1:]) if sys.argv[1:] else "lr_sweep()",
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


LESSON_DIR = Path(__file__).parent.parent / "assets" / "sweeps"  # shipped with the package
RECORDED_LR_SWEEP = LESSON_DIR / "lr_sweep.json"


def load_sweep(path: str | Path = RECORDED_LR_SWEEP) -> list[Run]:
    """The runs of a recorded sweep as `Run` objects (history rows without the metrics that were not measured).

    Each run's meta holds "status", "error" and "seconds" as recorded."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    runs = []
    for point in record["runs"]:
        columns = point["metrics"]
        names = [m for m in columns if m != "step"]  # older files have fewer metrics
        history = [{"step": step, **{m: columns[m][i] for m in names if columns[m][i] is not None}}
                   for i, step in enumerate(columns["step"])]
        meta = {"status": point["status"], "error": point["error"], "seconds": point["seconds"]}
        if point.get("label"):
            meta["label"] = point["label"]
        runs.append(Run(config=RLConfig.from_dict(point["config"]), history=history, meta=meta))
    return runs


# Lessons 05-07: which points each panel shows from the start (seed 0), trained at the compact study's scale
# (studies/claims-compact): its sweeps of lr, group size and clip-higher plus a few of the lesson's own, as
# (preset, RLConfig overrides, label). Every one is a configuration the panel can reproduce with its sliders
# (study base config + slider values), so a click on it is answered from the file.
LR_MULTIPLIERS = (10 ** -0.5, 1.0, 10 ** 0.5, 10.0)  # 3.2e-5 .. 1e-3: the lesson's log slider values 10^(k/10)


def _study_points(name: str) -> list:
    from ..study import Point

    if name == "lr":
        return [Point(f"{a} lr x{m:.3g}", a, {"lr_x": m}, a, m) for a in ("ppo", "grpo", "dapo") for m in LR_MULTIPLIERS]
    if name == "group":
        return [Point(f"{a} G={g}", a, {"group_size": g}, a, g) for a in ("grpo", "dapo") for g in (2, 4, 8, 16)]
    return [Point(f"dapo clip_high={h:g}", "dapo", {"clip_high": h}, "dapo", h) for h in (0.2, 0.28)]


LESSON_SWEEPS = {
    "lr": ("lesson05_lr.json", "learning rate: ppo, grpo, dapo at 3.2e-5 .. 1e-3 (the compact study's H7)", ()),
    "group": ("lesson06_batch_group.json", "group size G 2..16 (grpo, dapo; the compact study's H1) and batch size "
              "B 2..16 (grpo, G 8)", tuple(("grpo", {"batch_size": b}, f"grpo B={b}") for b in (2, 4, 16))),
    "clip": ("lesson07_clip.json", "dapo clipping: symmetric 0.1/0.2/0.3 and clip-higher 0.2/0.28 (the compact "
             "study's H8)", tuple(("dapo", {"clip_low": c, "clip_high": c}, f"dapo clip={c:g}/{c:g}") for c in (0.1, 0.3))),
}


def lesson_sweep(name: str, study_dir: Path, out_dir: Path = LESSON_DIR, seed: int = 0, threads: int | None = None) -> dict:
    """Write the lesson sweep `name` from the study's run folders, training (seed 0) any point not there yet."""
    from ..study import SCALES, Point, run_point

    if threads:
        torch.set_num_threads(threads)
    file, what, extras = LESSON_SWEEPS[name]
    points = _study_points(name) + [Point(label, preset, over) for preset, over, label in extras]
    record = {"what": what, "command": f"python -m minirl.course.sweeps lessons --only {name} --study {study_dir}",
              "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "code_version": code_version(), "torch": torch.__version__, "runs": []}
    for point in points:
        path = run_point(point, SCALES["cpu"], seed, Path(study_dir) / "runs")
        run = Run.load(path)
        study = json.loads((path / "study.json").read_text(encoding="utf-8"))
        record["runs"].append({
            "algo": run.config.algo, "lr": run.config.lr, "label": point.label,
            "status": "failed" if study["error"] else "finished", "error": study["error"],
            "seconds": round(float(study["train_seconds"]), 1), "config": run.config.to_dict(),
            "metrics": columns(run.history)})
    out = Path(out_dir) / file
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {len(points)} runs)")
    return record


# Lesson 04: does GRPO's per-sequence mean let wrong answers grow (Dr. GRPO, arXiv 2503.20783, section 3)? GRPO on
# the worked-steps task with its three aggregations and nothing else changed: per-sequence token mean (GRPO),
# a constant normaliser (Dr. GRPO's), the token mean (DAPO's); seeds 0-2, the task's compare budget, GRPO's tuned lr.
LENGTH_AGGREGATIONS = {"seq-mean-token-mean": "GRPO", "seq-mean-token-sum-norm": "Dr. GRPO", "token-mean": "DAPO"}
LENGTH_FILE = "lesson04_length.json"


def length_configs(seeds=(0, 1, 2), **overrides) -> list[tuple[str, RLConfig]]:
    """(label, config) of every run of the lesson 04 length experiment: GRPO without KL, one aggregation each."""
    from ..tasks import get_task, task_budget

    entry = get_task("worked")
    budget = dict(steps=entry.compare_steps, eval_every=entry.compare_eval_every, eval_n=300,
                  **task_budget(entry.make()))
    return [(f"{name} seed {seed}", RLConfig.preset("grpo", task="worked", kl_coef=0.0, loss_agg=agg, seed=seed,
                                                    **{**budget, **overrides}))
            for seed in seeds for agg, name in LENGTH_AGGREGATIONS.items()]


def _train_worked(config: RLConfig) -> dict:
    """One run from the shipped worked-steps policy (in a worker process with one torch thread)."""
    from .. import load_policy
    from ..tasks import get_task
    from ..trainer import train

    torch.set_num_threads(1)
    entry = get_task("worked")
    t0 = time.perf_counter()
    run = train(load_policy(entry.policy, device="cpu"), entry.make(), config, progress=False)
    return {"status": run.status, "seconds": round(time.perf_counter() - t0, 1), "metrics": columns(run.history)}


def length_sweep(out: Path = LESSON_DIR / LENGTH_FILE, seeds=(0, 1, 2), jobs: int = 2, **overrides) -> dict:
    """Train the lesson 04 length experiment, `jobs` runs at a time (fresh worker processes, one thread each)."""
    import concurrent.futures
    import multiprocessing

    runs = length_configs(seeds, **overrides)
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_train_worked, [config for _, config in runs]))
    record = {"what": "GRPO on the worked-steps task with each loss aggregation, seeds " + ", ".join(map(str, seeds)),
              "command": "python -m minirl.course.sweeps " + " ".join(sys.argv[1:]), "code_version": code_version(),
              "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "seconds": round(time.perf_counter() - t0), "torch": torch.__version__,
              "runs": [{"label": label, "algo": config.algo, "lr": config.lr, "error": None, "config": config.to_dict(),
                        **result} for (label, config), result in zip(runs, results)]}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(runs)} runs, {record['seconds']} s)")
    return record


def load_lesson_sweep(name: str) -> list[Run]:
    """The precomputed runs a lesson panel starts with: "lr" (05), "group" (06) or "clip" (07)."""
    if name not in LESSON_SWEEPS:
        raise ValueError(f"name={name!r} is not allowed: choose one of {list(LESSON_SWEEPS)}")
    return load_sweep(LESSON_DIR / LESSON_SWEEPS[name][0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minirl.course.sweeps", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="sweep", required=True)
    p = sub.add_parser("lr", help="learning-rate sweep of ppo, grpo and dapo")
    p.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    p.add_argument("--lrs", default=",".join(f"{lr:g}" for lr in LRS), help="comma-separated learning rates")
    p.add_argument("--algos", default=",".join(PAPER_ALGOS), help="comma-separated presets")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--eval-n", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    q = sub.add_parser("lessons", help="the lessons' panel sweeps, from a `python -m minirl study` folder")
    q.add_argument("--study", type=Path, default=Path("studies/claims-compact"),
                   help="the compact study's --out folder (its run folders)")
    q.add_argument("--only", default=",".join(LESSON_SWEEPS), help="comma-separated: " + ", ".join(LESSON_SWEEPS))
    q.add_argument("--out", type=Path, default=LESSON_DIR, help="folder for the lesson JSON files")
    q.add_argument("--threads", type=int, default=None)
    w = sub.add_parser("length", help="lesson 04: GRPO's three loss aggregations on the worked-steps task")
    w.add_argument("--out", type=Path, default=LESSON_DIR / LENGTH_FILE, help="the JSON file to write")
    w.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default 3)")
    w.add_argument("--jobs", type=int, default=2, help="runs at a time, one torch thread each")
    args = parser.parse_args(argv)
    if args.sweep == "length":
        length_sweep(args.out, tuple(range(args.seeds)), args.jobs)
        return 0
    if args.sweep == "lessons":
        for name in args.only.split(","):
            if name not in LESSON_SWEEPS:
                parser.error(f"--only {name!r} is not allowed: choose from {list(LESSON_SWEEPS)}")
            lesson_sweep(name, args.study, args.out, threads=args.threads)
        return 0
    lr_sweep(args.out, [float(x) for x in args.lrs.split(",")], args.algos.split(","), args.steps,
             args.eval_every, args.eval_n, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())

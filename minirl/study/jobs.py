"""The study's runs: which (point, seed) jobs the claims need, and one run folder per job.

Every job is trained from the same base policy, one at a time, into `<out>/runs/<run_key>`: the same key as the
run cache, so a folder names exactly one (policy, task, config, code version). Next to config.json, metrics.jsonl
and the checkpoint it holds `study.json` with the final evaluation: greedy and sampled accuracy on the held-out
3-number split and, for the algorithms' default runs, sampled accuracy on shifts it never trained on (SHIFTS).
A folder with a `study.json` is done; a killed study starts again at the first job without one. When the RL
core changes, every key changes and the study trains again: results always come from the code that ships.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import json
import multiprocessing
import os
import platform
import shutil
import time
from pathlib import Path

import torch

from ..config import RLConfig
from ..evaluate import evaluate
from ..policy import load_policy
from ..runs import Run, _write_atomic, code_version, run_key
from ..tasks import get_task, task_identity
from ..trainer import DynamicSamplingExhausted, TrainingDiverged, train
from .claims import CLAIMS
from .points import Point, Scale

STUDY_FILE = "study.json"  # written into a run folder once its final evaluation is done


def load_base_policy(scale: Scale, device: str | None):
    """The policy every run of the scale starts from: its model, or its task's shipped policy."""
    return load_policy(scale.model or get_task(scale.task).policy, device=device, dtype=scale.dtype)


@functools.cache
def base_identity(scale: Scale) -> str:
    """`Policy.identity()` of the scale's base policy, which every run key of the scale names (loaded once)."""
    return load_base_policy(scale, "cpu").identity()


def run_folder(point: Point, scale: Scale, seed: int, runs_root: Path) -> Path:
    """Where (point, seed) is trained: `<runs_root>/<run_key>`."""
    return Path(runs_root) / run_key(base_identity(scale), task_identity(point.task(scale)), point.config(scale, seed))


class AboveTraining:
    """The problems of `task` that hold at least one number above `trained_max`: numbers the policy never saw in
    training (it trained on 1-12). Everything else (prompts, scoring, budget) is `task`'s."""

    def __init__(self, task, trained_max: int):
        self.task, self.trained_max = task, trained_max

    def __getattr__(self, name):
        return getattr(self.task, name)

    def problems(self, split: str, n: int, seed: int = 0) -> list:
        # with numbers 1-20, about 1 - (12/20)^3 = 78 % of problems qualify: 2n draws are enough
        drawn = self.task.problems(split, 2 * n, seed=seed)
        kept = [p for p in drawn if max(p.answer["numbers"]) > self.trained_max][:n]
        if len(kept) < n:
            raise ValueError(f"AboveTraining: only {len(kept)} of {2 * n} problems have a number above "
                             f"{self.trained_max}; ask for fewer than n={n}")
        return kept


# the final evaluations: the held-out split of the trained task, and shifts it never trained on (the paper's
# transfer test, in miniature): 4 numbers instead of 3; on the steps task also numbers 1-20 with at least one
# above the training range 1-12 (a range of only unseen numbers, 13-24, is 0 % for every policy: the pilot)
SHIFTS = {"heldout": dict(num_count=3), "transfer4": dict(num_count=4), "range": dict(number_range=(1, 20))}
TRAINED_MAX = 12  # WorkedCountdown's default number_range is (1, 12)


def final_evaluation(policy, point: Point, scale: Scale, config: RLConfig) -> dict:
    """Held-out accuracy, greedy and sampled (scale.eval_k samples per problem; `scale.eval_n` problems), and for
    a `transfer` point sampled accuracy on each shift (`scale.shift_n` problems).
    The evaluation seed is the run's seed: every arm of seed s and the base policy's evaluation for seed s see the
    same problems and the same sampling seed, so differences between arms are paired down to the evaluation."""
    out = {}
    for name, shift in SHIFTS.items():
        if (name != "heldout" and not point.transfer) or (name == "range" and scale.task != "worked"):
            continue  # the compact task has no numbers-above-12 shift
        task, n = point.task(scale, **shift), scale.eval_n if name == "heldout" else scale.shift_n
        if name == "range":
            task = AboveTraining(task, TRAINED_MAX)
        for mode, greedy in (("greedy", True), ("sampled", False)) if name == "heldout" else (("sampled", False),):
            m = evaluate(policy, task, n=n, greedy=greedy, k=1 if greedy else scale.eval_k, seed=config.seed,
                         temperature=config.temperature, max_new_tokens=config.max_new_tokens, progress=False)
            out[f"{name}/{mode}"] = m["accuracy"]
            out[f"{name}/{mode}_numbers_ok"] = m.get("rate/numbers_ok")
            out[f"{name}/{mode}_format_ok"] = m.get("rate/format_ok")
            out[f"{name}/{mode}_length"] = m["mean_length"]
    return out


def run_point(point: Point, scale: Scale, seed: int, runs_root: Path, device: str | None = None,
              verbose: bool = True) -> Path:
    """Train (point, seed) unless its folder already has a study.json; return the folder."""
    config = point.config(scale, seed)
    path = run_folder(point, scale, seed, runs_root)
    if (path / STUDY_FILE).is_file():
        return path
    if path.exists():  # a run that was killed before its final evaluation: start it again
        shutil.rmtree(path)
    policy = load_base_policy(scale, device)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    error = None
    try:
        train(policy, point.task(scale), config, run_dir=path, progress=False)
    except (TrainingDiverged, DynamicSamplingExhausted) as err:  # a collapse is a result: keep it, evaluate it
        error = f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - t0
    t_eval = time.perf_counter()
    final = final_evaluation(policy, point, scale, config)
    record = {"point": point.label, "preset": point.preset, "seed": seed, "scale": scale.name, "error": error,
              "code_version": code_version(), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "train_seconds": Run.load(path).meta.get("seconds", seconds),
              "eval_seconds": round(time.perf_counter() - t_eval, 1), "started_at": started,
              "ended_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "final": final}
    _write_atomic(path / STUDY_FILE, json.dumps(record, indent=1, allow_nan=False) + "\n")
    if verbose:
        f = record["final"]
        shifts = "".join(f"  {k.split('/')[0]} {v:.3f}" for k, v in f.items() if k.endswith("/sampled") and "held" not in k)
        print(f"  {point.label:24s} seed {seed}: {seconds:5.1f} s  held-out sampled {f['heldout/sampled']:.3f} "
              f"greedy {f['heldout/greedy']:.3f}{shifts}"
              + (f"  [{error[:50]}]" if error else ""), flush=True)
    return path


def plan(claims: list[str], scale: Scale, seeds: int, registry: dict | None = None) -> list[tuple[Point, int]]:
    """Every (point, seed) the claims of `registry` (default CLAIMS) need, seed by seed (so an early stop still
    covers every claim), without repeating a configuration two claims share (H4's GRPO is H1's GRPO G=8, ...)."""
    registry = CLAIMS if registry is None else registry
    jobs, seen = [], {}
    for seed in scale.seeds(seeds):
        for name in claims:
            for point in registry[name].points:
                folder = run_folder(point, scale, seed, Path())
                if folder in seen and seen[folder].transfer != point.transfer:
                    raise ValueError(f"points {seen[folder].label!r} and {point.label!r} train the same run but "
                                     "disagree on transfer: give both the same value")
                if folder not in seen:
                    seen[folder] = point
                    jobs.append((point, seed))
    return jobs


def _one_thread_worker() -> None:
    torch.set_num_threads(1)


def run_study(claims: list[str], scale: Scale, seeds: int, out: Path, device: str | None = None,
              registry: dict | None = None, jobs: int = 1) -> float:
    """Run every job of `claims` that has not finished yet; return the seconds spent. jobs=1: one at a time with
    the process's threads; jobs > 1: that many side by side with one torch thread each (on a 2-core CPU two
    one-thread runs finish sooner than the same two one after the other with two threads; BENCHMARKS.md)."""
    planned = plan(claims, scale, seeds, registry)
    todo = [(point, seed) for point, seed in planned
            if not (run_folder(point, scale, seed, Path(out) / "runs") / STUDY_FILE).is_file()]
    total = len(planned)
    t0 = time.perf_counter()
    print(f"study: {total} runs for {', '.join(claims)} ({seeds} seeds, scale {scale.name}), {len(todo)} to train",
          flush=True)
    if jobs <= 1:
        for i, (point, seed) in enumerate(todo, 1):
            print(f"[{i}/{len(todo)} {time.perf_counter() - t0:6.0f} s]", end="", flush=True)
            run_point(point, scale, seed, Path(out) / "runs", device)
    else:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: no forked torch state
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_one_thread_worker) as pool:
            futures = [pool.submit(run_point, point, scale, seed, Path(out) / "runs", device) for point, seed in todo]
            for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
                future.result()  # a crash (not a collapse: those are results) stops the study here
                print(f"[{i}/{len(todo)} done, {time.perf_counter() - t0:6.0f} s]", flush=True)
    seconds = time.perf_counter() - t0
    print(f"study: done in {seconds:.0f} s", flush=True)
    return seconds

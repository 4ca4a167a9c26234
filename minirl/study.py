"""`python -m minirl study`: re-test the findings of Lian 2025 (arXiv 2512.07611) at small scale.

The paper trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. Here every claim (H1..H9) is
a sweep of a few `Point`s (a preset plus overrides), each trained from the same base policy with several
seeds, one run at a time:

    python -m minirl study                         # every claim, 3 seeds, the tiny policy on this CPU
    python -m minirl study --only H1 --seeds 3     # one claim
    python -m minirl study --scale gpu --model Qwen/Qwen2.5-0.5B-Instruct --device cuda   # a real model

Every (point, seed) is a run folder `<out>/runs/<run_key>` (config.json, metrics.jsonl, checkpoint) plus
`study.json` with its final evaluation: greedy and sampled accuracy on the held-out 3-number split and on
4-number Countdown, a task it never trained on (the paper's transfer test, in miniature). A folder with a
`study.json` is done; a killed study starts again at the first run without one. `minirl.study_report` turns
the folders into results/<claim>.json, figures/<claim>.png and STUDY.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .config import RLConfig
from .runs import Run, _write_atomic, code_version, run_key

STUDY_FILE = "study.json"  # written into a run folder once its final evaluation is done


@dataclass(frozen=True)
class Scale:
    """How big every run of the study is. `cpu` is what the committed results used."""

    name: str
    model: str | None = None  # None = the shipped tiny policy; else a folder or hub id for load_policy
    steps: int = 80  # rollout steps per run
    eval_every: int = 40  # held-out evaluation every this many steps (and at the end)
    eval_n: int = 300  # held-out problems per evaluation (greedy and sampled)
    batch_size: int = 8  # prompts per step for the group methods (PPO: batch_size * group_size prompts, G = 1)
    group_size: int = 8  # completions per prompt (G) unless a claim varies it
    lr: float = 1e-4  # base learning rate; H7 sweeps 0.3x .. 10x of it
    max_new_tokens: int = 16  # completion limit
    prompt_style: str = "compact"  # Countdown prompt: "compact" for the tiny policy, "chat" for instruct models
    mixed_precision: str = "no"  # "bf16" on a GPU
    micro_batch_size: int = 0  # rows per forward/backward (0 = whole minibatch)
    dtype: str | None = None  # load_policy dtype of the weights (None: its default; "float32" to train with small lrs)

    def smoke(self) -> "Scale":
        """The same model and prompts, but runs of two steps on a handful of problems (tests, CI)."""
        return dataclasses.replace(self, name=self.name + "-smoke", steps=2, eval_every=0, eval_n=4, batch_size=2,
                                   group_size=2, micro_batch_size=0, max_new_tokens=min(self.max_new_tokens, 24))


SCALES = {
    # 80 steps x 64 completions, ~15-40 s per run on 2 CPU cores: the committed study.
    "cpu": Scale("cpu"),
    # The paper-sized experiment on one GPU: an instruct model, natural-language prompts with <answer> tags,
    # long completions, a small learning rate as for 1B-class models, bf16. Not run by us (no GPU here).
    "gpu": Scale("gpu", model="Qwen/Qwen2.5-0.5B-Instruct", steps=200, eval_every=50, eval_n=200, batch_size=16,
                 group_size=8, lr=1e-6, max_new_tokens=256, prompt_style="chat", mixed_precision="bf16",
                 micro_batch_size=16, dtype="float32"),  # fp32 weights + bf16 autocast: bf16 weights lose 1e-6 updates
}


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep: a preset with overrides; `series` and `x` place it on the claim's plot."""

    label: str
    preset: str  # "ppo", "grpo", "dapo"; "dapo-noDS" is DAPO without dynamic sampling
    overrides: dict = field(default_factory=dict)  # RLConfig fields; "lr_x" multiplies the scale's lr, "steps_x"
    # its steps (a longer run, evaluated twice as often)
    series: str = ""  # the line this point belongs to (e.g. the algorithm)
    x: float | str = ""  # its position on that line (e.g. G = 8)
    reward_scheme: str = "binary"  # Countdown reward: binary 0/1, tinyzero 0/0.1/1, dapo -1/+1

    def config(self, scale: Scale, seed: int) -> RLConfig:
        over = dict(self.overrides)
        lr = scale.lr * over.pop("lr_x", 1.0)
        preset, extra = (("dapo", {"dynamic_sampling": False}) if self.preset == "dapo-noDS" else (self.preset, {}))
        group = over.pop("group_size", scale.group_size)
        shape = (dict(batch_size=scale.batch_size * group, group_size=1) if preset == "ppo"  # same completions per step
                 else dict(batch_size=scale.batch_size, group_size=group))
        steps_x = over.pop("steps_x", 1)
        every = scale.eval_every if steps_x == 1 or not scale.eval_every else max(1, scale.eval_every // 2)
        base = dict(steps=int(scale.steps * steps_x), eval_every=every, eval_n=scale.eval_n,
                    lr=lr, max_new_tokens=scale.max_new_tokens, mixed_precision=scale.mixed_precision,
                    micro_batch_size=scale.micro_batch_size, seed=seed, algo=self.preset)
        return RLConfig.preset(preset, **{**base, **shape, **extra, **over})

    def task(self, scale: Scale, num_count: int = 3):
        from .tasks import Countdown

        return Countdown(num_count=num_count, prompt_style=scale.prompt_style, reward_scheme=self.reward_scheme)


@dataclass(frozen=True)
class Claim:
    """A finding of the paper, the points that test it, and what we expect to see if it holds here."""

    name: str
    title: str
    expectation: str
    points: tuple[Point, ...]


# 1.5 decades around the base lr in half-decade steps (3.2e-5 .. 1e-3 at the cpu scale): the points of the
# lessons' log-scale lr slider (10^(k/10)), so the panel can answer them from the recorded runs.
LR_MULTIPLIERS = (10 ** -0.5, 1.0, 10 ** 0.5, 10.0)
KL_VALUES = (0.0, 1e-3, 1e-2, 1e-1)

CLAIMS: dict[str, Claim] = {c.name: c for c in (
    Claim("H1", "Group size", "larger G (at a fixed number of prompts per step) gives a smoother reward curve and "
          "higher final accuracy, for GRPO and DAPO; it also costs more compute per step",
          tuple(Point(f"{a} G={g}", a, {"group_size": g}, a, g) for a in ("grpo", "dapo") for g in (2, 4, 8, 16))),
    Claim("H2", "KL coefficient", "the effect of beta is non-monotonic: some beta > 0 beats both no KL and a large KL "
          "(PPO: per-token KL in the reward; GRPO: k3 KL in the loss)",
          tuple(Point(f"{a} kl={k:g}", a, {"kl_coef": k}, a, k) for a in ("ppo", "grpo") for k in KL_VALUES)),
    Claim("H3", "Dynamic sampling", "DAPO's dynamic sampling does not help: DAPO without it is as good or better, "
          "compared at equal steps and at equal numbers of generated completions",
          (Point("dapo", "dapo", {}, "dapo", "with DS"),
           Point("dapo-noDS 2x steps", "dapo-noDS", {"steps_x": 2}, "dapo-noDS", "without DS"))),
    Claim("H4", "Algorithm ranking", "after tuning, DAPO without dynamic sampling is best overall, and every "
          "algorithm beats the base policy",
          tuple(Point(a, a, {}, "algorithm", a) for a in ("ppo", "grpo", "dapo", "dapo-noDS"))),
    Claim("H5", "Token-level loss and reward hacking", "under the 0 / 0.1 / 1 reward (0.1 for a well-formed wrong "
          "answer), a token-level loss curbs reward hacking (fewer well-formed-but-wrong answers) and allows "
          "longer completions than the per-sequence mean (GRPO)",
          tuple(Point(f"grpo {agg}", "grpo", {"loss_agg": agg}, "grpo", agg, "tinyzero")
                for agg in ("seq-mean-token-mean", "token-mean"))),
    Claim("H6", "Entropy bonus", "an entropy bonus can lower accuracy (GRPO)",
          tuple(Point(f"grpo ent={e:g}", "grpo", {"entropy_coef": e}, "grpo", e) for e in (0.0, 1e-3, 1e-2))),
    Claim("H7", "Learning rate", "sensitivity to the learning rate differs between algorithms: each has its own "
          "best value and its own point of collapse",
          tuple(Point(f"{a} lr x{m:.3g}", a, {"lr_x": m}, a, m) for a in ("ppo", "grpo", "dapo") for m in LR_MULTIPLIERS)),
    Claim("H8", "Clip-higher", "DAPO's clip-higher (eps_high 0.28 instead of 0.2) slows the decline of the "
          "policy's entropy",
          tuple(Point(f"dapo clip_high={h:g}", "dapo", {"clip_high": h}, "dapo", h) for h in (0.2, 0.28))),
    Claim("H9", "Completion length", "GRPO's completions grow longer over training than PPO's (per-sequence "
          "normalisation favours long wrong answers)",
          tuple(Point(a, a, {}, "algorithm", a) for a in ("ppo", "grpo"))),
)}


# Not claims of the paper: the extra points lessons 06 and 07 show next to H1 and H8 (one seed).
LESSON_POINTS: dict[str, tuple[Point, ...]] = {
    "batch": tuple(Point(f"grpo B={b}", "grpo", {"batch_size": b}, "grpo", b) for b in (2, 4, 16)),
    "clip": tuple(Point(f"dapo clip={lo:g}/{hi:g}", "dapo", {"clip_low": lo, "clip_high": hi}, "dapo", hi)
                  for lo, hi in ((0.1, 0.1), (0.3, 0.3))),
}


def load_base_policy(scale: Scale, device: str | None):
    from .policy import load_policy

    return load_policy(scale.model, device=device, dtype=scale.dtype) if scale.model else load_policy(device=device)


def final_evaluation(policy, point: Point, scale: Scale, config: RLConfig) -> dict:
    """Greedy and sampled accuracy on the held-out 3-number split and on 4-number Countdown (never trained on)."""
    from .evaluate import evaluate

    out = {}
    for name, num_count in (("heldout", 3), ("transfer4", 4)):
        task = point.task(scale, num_count)
        for mode, greedy in (("greedy", True), ("sampled", False)):
            m = evaluate(policy, task, n=scale.eval_n, greedy=greedy, temperature=config.temperature,
                         max_new_tokens=config.max_new_tokens, progress=False)
            out[f"{name}/{mode}"] = m["accuracy"]
            out[f"{name}/{mode}_numbers_ok"] = m.get("rate/numbers_ok")
            out[f"{name}/{mode}_format_ok"] = m.get("rate/format_ok")
            out[f"{name}/{mode}_length"] = m["mean_length"]
    return out


def finished_runs(runs_root: Path) -> dict[str, Path]:
    """{identity: folder} of every run under runs_root that has its study.json (see `identity`)."""
    found = {}
    for path in sorted(runs_root.glob(f"*/{STUDY_FILE}")):
        try:
            meta = json.loads((path.parent / "meta.json").read_text(encoding="utf-8"))
            config = json.loads((path.parent / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found[identity(meta.get("policy", ""), meta.get("task", ""), config)] = path.parent
    return found


def identity(policy: str, task_description: str, config: RLConfig | dict) -> str:
    """What a study point is, without the code version that `run_key` adds: a finished run of the same policy,
    task and config is reused even if the package changed since (delete <out>/runs to start from scratch)."""
    config = config.to_dict() if isinstance(config, RLConfig) else config
    return json.dumps([policy, task_description, config], sort_keys=True)


def policy_name(scale: Scale) -> str:
    """The name a run of this scale records for its base policy (`Policy.name` of `load_base_policy`)."""
    return "minirl/tiny-countdown" if scale.model is None else scale.model


def find_finished(point: Point, scale: Scale, seed: int, runs_root: Path, name: str,
                  done: dict[str, Path] | None = None) -> tuple[Path, bool]:
    """(the run folder of (point, seed), whether it is finished). The folder is `<runs_root>/<run_key>`, or an
    earlier folder of the same run made by another version of the package (found through `done`)."""
    from .trainer import describe_task

    task, config = describe_task(point.task(scale)), point.config(scale, seed)
    path = runs_root / run_key(name, task, config)
    if (path / STUDY_FILE).is_file():
        return path, True
    done = finished_runs(runs_root) if done is None else done
    earlier = done.get(identity(name, task, config))
    return (earlier, True) if earlier is not None else (path, False)


def run_point(point: Point, scale: Scale, seed: int, runs_root: Path, device: str | None = None,
              name: str | None = None, verbose: bool = True, done: dict[str, Path] | None = None) -> Path:
    """Train (point, seed) unless a finished run of it exists (its folder has a study.json); return the folder.

    done: `finished_runs(runs_root)`, when the caller already has it."""
    from .trainer import DynamicSamplingExhausted, TrainingDiverged, train

    config = point.config(scale, seed)
    task = point.task(scale)
    path, finished = find_finished(point, scale, seed, runs_root, name or policy_name(scale), done)
    if finished:
        return path
    if path.exists():  # a run that was killed before its final evaluation: start it again
        shutil.rmtree(path)
    policy = load_base_policy(scale, device)
    t0 = time.perf_counter()
    error = None
    try:
        train(policy, task, config, run_dir=path, progress=False)
    except (TrainingDiverged, DynamicSamplingExhausted) as err:  # a collapse is a result: keep it, evaluate it
        error = f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - t0
    record = {"point": point.label, "preset": point.preset, "seed": seed, "scale": scale.name, "error": error,
              "code_version": code_version(), "threads": torch.get_num_threads(),
              "train_seconds": Run.load(path).meta.get("seconds", seconds),
              "final": final_evaluation(policy, point, scale, config)}
    _write_atomic(path / STUDY_FILE, json.dumps(record, indent=1, allow_nan=False) + "\n")
    if verbose:
        f = record["final"]
        print(f"  {point.label:24s} seed {seed}: {seconds:5.1f} s  held-out sampled {f['heldout/sampled']:.3f} "
              f"greedy {f['heldout/greedy']:.3f}  4-number {f['transfer4/sampled']:.3f}"
              + (f"  [{error[:50]}]" if error else ""), flush=True)
    return path


def plan(claims: list[str], scale: Scale, seeds: int, policy: str) -> list[tuple[Point, int]]:
    """Every (point, seed) the claims need, seed by seed (so an early stop still covers every claim), without
    repeating a configuration two claims share (H4's GRPO is H1's GRPO G=8, ...)."""
    from .trainer import describe_task

    jobs, seen = [], set()
    for seed in range(seeds):
        for name in claims:
            for point in CLAIMS[name].points:
                key = run_key(policy, describe_task(point.task(scale)), point.config(scale, seed))
                if key not in seen:
                    seen.add(key)
                    jobs.append((point, seed))
    return jobs


def run_study(claims: list[str], scale: Scale, seeds: int, out: Path, device: str | None = None,
              threads: int | None = None, report: bool = True) -> float:
    """Run every job of `claims` (skipping finished ones), then write the report. Returns the seconds spent."""
    if threads:
        torch.set_num_threads(threads)
    name = policy_name(scale)
    jobs = plan(claims, scale, seeds, name)
    runs_root = out / "runs"
    t0 = time.perf_counter()
    print(f"study: {len(jobs)} runs for {', '.join(claims)} ({seeds} seeds, scale {scale.name}) -> {out}", flush=True)
    done = finished_runs(runs_root)
    for i, (point, seed) in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)} {time.perf_counter() - t0:6.0f} s]", end="", flush=True)
        run_point(point, scale, seed, runs_root, device, name, done=done)
    seconds = time.perf_counter() - t0
    print(f"study: done in {seconds:.0f} s", flush=True)
    if report:
        from .study_report import write_report

        write_report(out, claims, scale, seeds, session_seconds=seconds, threads=threads)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minirl study", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help=f"comma-separated claims to run, from {list(CLAIMS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per point (>= 3 for the verdicts)")
    parser.add_argument("--out", type=Path, default=Path("study"), help="folder for runs/, results/, figures/, STUDY.md")
    parser.add_argument("--scale", default="cpu", choices=sorted(SCALES), help="cpu (the tiny policy) or gpu")
    parser.add_argument("--model", default=None, help="a folder or hub id replacing the scale's model")
    parser.add_argument("--smoke", action="store_true", help="two-step runs on a few problems (tests)")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: the best available)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from finished runs")
    args = parser.parse_args(argv)
    claims = list(CLAIMS) if args.only is None else [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in claims if c not in CLAIMS]
    if unknown or not claims:
        parser.error(f"--only {args.only!r} is not allowed: choose from {list(CLAIMS)}")
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds} is not allowed: use an integer >= 1 (3 or more for verdicts)")
    scale = SCALES[args.scale]
    if args.model:
        scale = dataclasses.replace(scale, model=args.model)
    if args.smoke:
        scale = scale.smoke()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.report_only:
        from .study_report import write_report

        write_report(args.out, claims, scale, args.seeds, threads=args.threads)
        return 0
    run_study(claims, scale, args.seeds, args.out, args.device, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The study's vocabulary: a `Scale` (how big every run is), a `Point` (one configuration of a sweep) and a
`Claim` (a finding of the paper: its points, its verdict rule and what its figure shows).

The claims themselves are in claims.py, each one next to its rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..config import RLConfig, tuned_lr
from ..tasks import get_task, task_budget


@dataclass(frozen=True)
class Scale:
    """How big every run of the study is. `worked` is the registered study (studies/claims-worked), `cpu` the older
    compact-task one (studies/claims-compact)."""

    name: str
    model: str | None = None  # None = the task's shipped tiny policy; else a folder or hub id for load_policy
    task: str = "compact"  # a task of the registry (minirl.tasks.TASKS): "compact" or "worked"
    steps: int = 80  # rollout steps per run
    eval_every: int = 40  # held-out evaluation every this many steps (and at the end)
    eval_n: int = 300  # held-out problems per evaluation (greedy and sampled)
    eval_k: int = 1  # final evaluation: sampled completions per problem (its accuracy estimates pass@1 from k)
    shift_n: int = 300  # final evaluation: problems of each shifted task (4 numbers; worked: numbers above 12 too)
    batch_size: int = 8  # prompts per step for the group methods (PPO: batch_size * group_size prompts, G = 1)
    group_size: int = 8  # completions per prompt (G) unless a claim varies it
    lr: float = 1e-4  # base learning rate; H7 sweeps 0.3x .. 10x of it
    tuned_lr: bool = False  # True: each preset starts at its tuned learning rate on `task` (config.TUNED_LR), not `lr`
    max_new_tokens: int | None = None  # completion limit; None: the task's budget (tasks.task_budget)
    prompt_style: str = "compact"  # Countdown prompt: "compact" for the tiny policy, "chat" for instruct models
    mixed_precision: str = "no"  # "bf16" on a GPU
    micro_batch_size: int = 0  # rows per forward/backward (0 = whole minibatch)
    dtype: str | None = None  # load_policy dtype of the weights (None: its default; "float32" to train with small lrs)
    seed0: int = 0  # the first seed: a study of n seeds runs seeds seed0 .. seed0 + n - 1
    val_fraction: float | None = None  # the task's validation share (None: its default); 0.0 gives the train draws
    #                                    of a study registered before tasks had a validation split

    def seeds(self, n: int) -> range:
        """The seed list every arm of the study runs (the same list for every arm: differences are paired)."""
        return range(self.seed0, self.seed0 + n)

    def make_task(self, **options):
        """The scale's task from the registry with `options` (Countdown gets the scale's prompt style)."""
        entry = get_task(self.task)
        if "prompt_style" in entry.options:
            options.setdefault("prompt_style", self.prompt_style)
        if self.val_fraction is not None:
            options.setdefault("val_fraction", self.val_fraction)
        return entry.make(**options)

    def budget(self) -> dict[str, int]:
        """max_new_tokens (L_max) and overlong_cache (L_cache) of every run: the task's, or L_max capped at
        `max_new_tokens` with L_cache no more than a quarter of it."""
        budget = task_budget(self.make_task())
        if self.max_new_tokens is None or self.max_new_tokens >= budget["max_new_tokens"]:
            return budget
        return {"max_new_tokens": self.max_new_tokens,
                "overlong_cache": min(budget["overlong_cache"], max(1, self.max_new_tokens // 4))}

    def smoke(self) -> "Scale":
        """The same model and prompts, but runs of two steps on a handful of problems (tests, CI)."""
        return dataclasses.replace(self, name=self.name + "-smoke", steps=2, eval_every=0, eval_n=4, shift_n=4,
                                   eval_k=min(self.eval_k, 2), batch_size=2, group_size=4, micro_batch_size=0,
                                   max_new_tokens=24)


SCALES = {
    # The compact task and the tiny policy: 80 steps x 64 completions (the older study, studies/claims-compact;
    # `--task compact`).
    "cpu": Scale("cpu", val_fraction=0.0),
    # The worked-steps task (the default study) with the policy, budget and train draws it was registered with: the
    # first worked-steps policy, tiny-steps, 64 tokens (L_cache 16) and no validation split; at the end
    # of a run the whole held-out split (1 158 problems) with 4 samples each, and 500 problems of each shift. Seeds
    # from 10, so that no run of the registered study repeats a pilot run (seeds 0, 1).
    "worked": Scale("worked", model="tiny-steps", task="worked", steps=100, eval_every=50, eval_n=1158, eval_k=4,
                    shift_n=500, seed0=10, max_new_tokens=64, val_fraction=0.0),
    # The paper-sized experiment on one GPU: an instruct model, natural-language prompts with <answer> tags,
    # long completions, a small learning rate as for 1B-class models, bf16. Not run by us (no GPU here).
    # The worked-steps task as the tuning sweep left it (the new study, issue 33): the shipped tiny-worked policy, the
    # task's budget (80 tokens, L_cache 32) and validation split, each preset at its tuned learning rate; the final
    # evaluation as in "worked". Seeds from 20: no tuning run (100-102), compare (0) or earlier study (10-14) used them.
    "tuned": Scale("tuned", task="worked", steps=100, eval_every=50, eval_n=1158, eval_k=4, shift_n=500, seed0=20,
                   tuned_lr=True),
    "gpu": Scale("gpu", model="Qwen/Qwen2.5-0.5B-Instruct", steps=200, eval_every=50, eval_n=200, batch_size=16,
                 group_size=8, lr=1e-6, prompt_style="chat", mixed_precision="bf16",
                 micro_batch_size=16, dtype="float32"),  # fp32 weights + bf16 autocast: bf16 weights lose 1e-6 updates
}


TUNED_NAMES = {"dapo-noDS": "dapo_nods"}  # a point's preset label -> its name in config.TUNED_LR


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep: a preset with overrides; `series` and `x` place it on the claim's plot."""

    label: str
    preset: str  # "ppo", "grpo", "dapo"; "dapo-noDS" is DAPO without dynamic sampling
    overrides: dict = field(default_factory=dict)  # RLConfig fields; "lr_x" multiplies the scale's lr, "steps_x"
    # its steps (a longer run, evaluated twice as often)
    series: str = ""  # the line this point belongs to (e.g. the algorithm)
    x: float | str = ""  # its position on that line (e.g. G = 8)
    reward_scheme: str = "binary"  # Countdown reward: binary 0/1, tinyzero 0/0.1/1 (steps task: per_step), dapo -1/+1
    transfer: bool = False  # its final evaluation also covers the shifted tasks (jobs.SHIFTS)

    def config(self, scale: Scale, seed: int) -> RLConfig:
        over = dict(self.overrides)
        start = tuned_lr(TUNED_NAMES.get(self.preset, self.preset), scale.task) if scale.tuned_lr else scale.lr
        lr = start * over.pop("lr_x", 1.0)
        preset, extra = (("dapo", {"dynamic_sampling": False}) if self.preset == "dapo-noDS" else (self.preset, {}))
        group = over.pop("group_size", scale.group_size)
        shape = (dict(batch_size=scale.batch_size * group, group_size=1) if preset == "ppo"  # same completions per step
                 else dict(batch_size=scale.batch_size, group_size=group))
        steps_x = over.pop("steps_x", 1)
        every = scale.eval_every if steps_x == 1 or not scale.eval_every else max(1, scale.eval_every // 2)
        base = dict(steps=int(scale.steps * steps_x), eval_every=every, eval_n=min(scale.eval_n, 300), lr=lr,
                    **scale.budget(), mixed_precision=scale.mixed_precision, micro_batch_size=scale.micro_batch_size,
                    seed=seed, algo=self.preset)
        return RLConfig.preset(preset, **{**base, **shape, **extra, **over})

    def task(self, scale: Scale, num_count: int = 3, number_range: tuple[int, int] | None = None):
        """The scale's task with this point's reward; `num_count` / `number_range` shift it for transfer tests."""
        options = {"num_count": num_count, "reward_scheme": self.reward_scheme}
        if number_range is not None:
            options["number_range"] = number_range
        if scale.task == "worked":  # its partial-credit reward is per right step ("tinyzero" rewards the format)
            options["reward_scheme"] = {"tinyzero": "per_step"}.get(self.reward_scheme, self.reward_scheme)
        return scale.make_task(**options)


@dataclass(frozen=True)
class Claim:
    """A finding of the paper, the points that test it, and the rule that turns their runs into a verdict."""

    name: str  # "H1" ...
    title: str
    expectation: str  # what we expect to see if the finding holds here
    points: tuple[Point, ...]
    verdict: Callable  # (points, base, m) -> (verdict, what we measured, the rule in words, tests); claims.py
    figure: tuple[str, ...]  # the training metrics its figure shows, one panel each
    x: str = "step"  # the figure's x axis: "step" or "samples"
    tests: int = 1  # paired tests its rule makes (the table's Bonferroni divisor is their sum over claims)

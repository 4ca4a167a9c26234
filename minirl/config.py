"""`RLConfig`: every knob of PPO, GRPO and DAPO (and GSPO, CISPO) in one dataclass, and the presets that name them.

The algorithms are switches of one machine (GSPO and CISPO, which came after DAPO, are DAPO-like runs with
another policy loss):

| switch            | PPO            | GRPO               | DAPO            | GSPO              | CISPO             |
|-------------------|----------------|--------------------|-----------------|-------------------|-------------------|
| advantage         | gae + critic   | group (r-mean)/std | group           | group             | group             |
| samples / prompt  | 1              | G                  | G               | G                 | G                 |
| policy loss       | clip           | clip               | clip            | clip              | sg(clip w)·A·logπ |
| ratio             | token          | token              | token           | sequence          | token             |
| clip              | 0.2 / 0.2      | 0.2 / 0.2          | 0.2 / 0.28      | 3e-4 / 4e-4       | w ≤ 1 + 4         |
| aggregation       | token-mean     | seq-mean-tok-mean  | token-mean      | seq-mean-tok-mean | token-mean        |
| KL to reference   | k1, in reward  | k3, in the loss    | none            | none              | none              |
| dynamic sampling  | -              | -                  | unmixed dropped | -                 | -                 |
| overlong          | -              | -                  | soft punishment | -                 | -                 |
| updates / rollout | 4 (2 ep. x 2)  | 1                  | 4 (minibatches) | 4 (minibatches)   | 4 (minibatches)   |
| learning rate     | tuned per task | tuned per task     | tuned per task  | tuned (compact)   | tuned (compact)   |

`RLConfig.preset("dapo_nods")` is "DAPO without dynamic sampling", as in Lian 2025. Every preset starts at the learning
rate tuned for it on its task (TUNED_LR, below the presets; `preset(name, task=...)`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field, fields

from .losses import AGGREGATION_MODES, KL_ESTIMATORS, POLICY_LOSSES, RATIO_LEVELS


class ConfigError(ValueError):
    """An RLConfig field has a value that is out of range or inconsistent with another field."""


def knob(default, help: str):
    """A field and its help: the one text that `--help`, `field_help()` and the docs table show."""
    return field(default=default, metadata={"help": help})


@dataclass
class RLConfig:
    """Every knob of one run; `field_help()` says what each one does (the same text as `--help`)."""

    # --- what is trained on, per step ---
    algo: str = knob("grpo", "a label for records and plots (set by `preset`); no behaviour depends on it")
    batch_size: int = knob(8, "prompts per rollout step")
    group_size: int = knob(8, "completions sampled per prompt (G); PPO uses 1")
    steps: int = knob(60, "RL steps of the run (each: sample, score, learn)")
    # --- optimisation ---
    lr: float = knob(3e-5, "AdamW learning rate of the policy")
    epochs: int = knob(1, "mu: passes over each rollout (1 = on-policy, ratio stays 1 on the first pass)")
    minibatches: int = knob(1, "optimiser steps per epoch; the rollout is split into this many minibatches")
    micro_batch_size: int = knob(0, "rows per forward/backward (gradient accumulation); 0 = the minibatch in "
                                    "length_buckets passes")
    length_buckets: int = knob(2, "passes per minibatch when micro_batch_size = 0: rows sorted by length, each pass "
                                  "padded only to its own longest completion (same gradient); one pass when that "
                                  "saves < 1/5 of the padding (step.length_sorted_passes); 1 = always one padded "
                                  "pass")
    share_prompts: bool = knob(True, "forward each distinct prompt of a pass once and continue its G completions "
                                     "from its KV cache (same log-probs and gradient); False = prompt + completion "
                                     "for every row")
    max_grad_norm: float = knob(1.0, "clip the global gradient norm (0 = off)")
    warmup_steps: int = knob(0, "linear learning-rate warm-up, in optimiser steps")
    weight_decay: float = knob(0.0, "AdamW weight decay")
    adam_beta1: float = knob(0.9, "AdamW beta1")
    adam_beta2: float = knob(0.999, "AdamW beta2 (TRL / verl default)")
    adam_eps: float = knob(1e-8, "AdamW epsilon")
    fused_adamw: bool = knob(True, "torch's fused AdamW kernel: one kernel for the whole update instead of a dozen "
                                   "small ops per tensor, the same update to float tolerance (BENCHMARKS.md section "
                                   "6 times it); not used under fp16; False = the plain per-tensor loop")
    # --- policy loss ---
    policy_loss: str = knob("clip", '"clip": the clipped surrogate (PPO, GRPO, DAPO, GSPO); "cispo": a clipped, '
                                    "stop-gradient importance weight times A * log pi, every token keeps its gradient "
                                    "(MiniMax-M1); losses.policy_loss")
    ratio_level: str = knob("token", '"token": one importance ratio per token; "sequence": one per answer, the '
                                     "geometric mean of its token ratios (GSPO, Zheng 2025)")
    clip_low: float = knob(0.2, "epsilon_low: ratio is clipped below at 1 - clip_low")
    clip_high: float = knob(0.2, "epsilon_high: ratio is clipped above at 1 + clip_high (DAPO: 0.28; CISPO bounds its "
                                 "weight at 1 + clip_high, up to 10)")
    dual_clip: float = knob(0.0, "dual-clip constant c > 1 (Ye et al. 2020) caps the loss of A < 0 tokens; 0 = off")
    loss_agg: str = knob("seq-mean-token-mean", "how per-token losses become one number, see losses.aggregate")
    entropy_coef: float = knob(0.0, "bonus on the policy's entropy (subtracted from the loss)")
    # --- KL to a frozen reference (only then is a reference model kept) ---
    kl_coef: float = knob(0.0, "beta; 0 = no KL term and no reference model")
    kl_estimator: str = knob("k3", "k1 = l, k2 = l^2/2, k3 = exp(-l) - 1 + l with l = log pi - log pi_ref")
    kl_placement: str = knob("loss", '"loss" (GRPO: + beta * KL in the loss) or "reward" (PPO: - beta * KL per token)')
    # --- advantages ---
    advantage: str = knob("group", '"gae" (PPO, needs a critic), "group" (GRPO/DAPO), "rloo" (leave-one-out)')
    adv_scale: str = knob("group", "divide by each group's std (group), the batch's std (batch) or nothing (none, "
                                   "Dr. GRPO)")
    adv_eps: float = knob(1e-4, "added to the std so near-uniform groups cannot blow advantages up")
    whiten_advantages: bool = knob(False, "normalise advantages over the batch (PPO's usual trick)")
    gamma: float = knob(1.0, "discount per token (GAE)")
    lam: float = knob(0.95, "GAE lambda")
    # --- critic (PPO) ---
    critic: str = knob("none", '"none", "head" (value head on the policy trunk) or "separate" (own small model)')
    vf_coef: float = knob(0.5, "weight of the value loss")
    value_clip: float = knob(0.2, "PPO2 value clipping around the old values (0 = off)")
    critic_lr: float = knob(0.0, "learning rate of the critic's own parameters (0 = 10x lr)")
    # --- DAPO (Yu et al. 2025), each its own switch ---
    dynamic_sampling: bool = knob(False, "drop groups that teach nothing (see dynamic_sampling_metric), sample more "
                                         "until the batch is full")
    dynamic_sampling_metric: str = knob("correct", 'a kept group must mix right and wrong answers ("correct", DAPO eq. '
                                                   '11, verl metric=acc) or have two different rewards ("reward")')
    max_gen_batches: int = knob(4, "give up (clear error) after this many generation rounds per step")
    overlong_filter: bool = knob(False, "truncated completions get no loss (mask them out)")
    overlong_punishment: bool = knob(False, "soft length penalty in the last `overlong_cache` tokens (DAPO eq. 13)")
    overlong_cache: int = knob(4, "L_cache, in tokens; L_max is max_new_tokens")
    # --- sampling ---
    temperature: float = knob(1.0, "sampling temperature; log-probs are always computed at this temperature")
    top_p: float = knob(1.0, "nucleus sampling mass")
    max_new_tokens: int = knob(16, "completion length limit (L_max)")
    # --- evaluation, checkpoints, reproducibility ---
    eval_every: int = knob(10, "held-out evaluation every this many steps (0 = only at the end)")
    eval_n: int = knob(200, "held-out problems per evaluation")
    eval_sampled_k: int = knob(1, "samples per problem for the sampled (T = temperature) evaluation")
    eval_split: str = knob("test", "the split the evaluations use: test (held-out, for results) or val (train problems "
                                   "that training never draws, for tuning)")
    checkpoint_every: int = knob(0, "save a checkpoint every this many steps (0 = only at the end); needs a run dir")
    mixed_precision: str = knob("no", '"no", "bf16" or "fp16" (GPU): the autocast dtype of every forward pass '
                                      '(weights stay as loaded); fp16 on a GPU also scales the loss (a GradScaler)')
    seed: int = knob(0, "seeds problem order, sampling and initialisation of new heads")

    # ------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, task: str = "compact", **overrides) -> "RLConfig":
        """A named starting point at its learning rate tuned on `task` (a registry task name, TUNED_LR); keyword
        arguments override single fields. See PRESETS and TUNED_LR for where each value comes from."""
        if name not in PRESETS:
            raise ConfigError(f"preset name={name!r} is unknown; choose one of {sorted(PRESETS)}")
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"preset({name!r}) got unknown fields {sorted(unknown)}; see RLConfig's fields")
        return cls(**{**PRESETS[name], "algo": name, "lr": tuned_lr(name, task), **overrides}).validate()

    def replace(self, **changes) -> "RLConfig":
        return dataclasses.replace(self, **changes).validate()

    @property
    def samples_per_step(self) -> int:
        return self.batch_size * self.group_size

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "RLConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"config has unknown fields {sorted(unknown)}")
        return cls(**data).validate()

    def validate(self) -> "RLConfig":
        """Raise ConfigError naming the field, its value and what is allowed; return self if all is well."""

        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ConfigError(f"RLConfig.{name}={getattr(self, name)!r} is not allowed: {allowed}")

        def is_int(x) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        def is_number(x) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        for f in fields(self):  # types first, so every later comparison is between numbers
            value, kind = getattr(self, f.name), str(f.type)
            ok = {"int": lambda v: is_int(v), "float": is_number, "bool": lambda v: isinstance(v, bool),
                  "str": lambda v: isinstance(v, str)}.get(kind, lambda v: True)(value)
            need(ok, f.name, f"use a value of type {kind}")
        for name in ("batch_size", "group_size", "steps", "epochs", "minibatches", "max_gen_batches",
                     "max_new_tokens", "eval_n", "eval_sampled_k", "length_buckets"):
            need(is_int(getattr(self, name)) and getattr(self, name) >= 1, name, "use an integer >= 1")
        for name in ("micro_batch_size", "warmup_steps", "eval_every", "checkpoint_every", "seed"):
            need(is_int(getattr(self, name)) and getattr(self, name) >= 0, name, "use an integer >= 0")
        need(isinstance(self.lr, (int, float)) and 0 < self.lr < 1, "lr", "use a number in (0, 1), e.g. 3e-5")
        need(0 <= self.critic_lr < 1, "critic_lr", "use a number in [0, 1) (0 = 10 x lr)")
        for name in ("max_grad_norm", "weight_decay", "entropy_coef", "kl_coef", "vf_coef", "value_clip"):
            need(isinstance(getattr(self, name), (int, float)) and getattr(self, name) >= 0, name,
                 "use a number >= 0")
        need(0 < self.clip_low <= 1, "clip_low", "use a number in (0, 1] (the ratio is clipped at 1 - clip_low)")
        if self.policy_loss == "cispo":  # a bound on a weight, not a trust region: MiniMax-M1 and ScaleRL use 1 + 4
            need(0 < self.clip_high <= 10, "clip_high", "with policy_loss='cispo' use a number in (0, 10] (the "
                 "weight is capped at 1 + clip_high)")
            need(self.dual_clip == 0, "dual_clip", "use 0: dual clip caps the clipped surrogate's loss, which "
                 "policy_loss='cispo' does not have")
        else:
            need(0 < self.clip_high <= 1, "clip_high", "use a number in (0, 1] (the ratio is clipped at 1 + "
                 "clip_high)")
        need(self.dual_clip == 0 or self.dual_clip > 1, "dual_clip", "use 0 (off) or a number > 1, e.g. 3")
        need(0 <= self.adam_beta1 < 1, "adam_beta1", "use a number in [0, 1)")
        need(0 <= self.adam_beta2 < 1, "adam_beta2", "use a number in [0, 1)")
        need(self.adam_eps > 0, "adam_eps", "use a number > 0")
        need(self.adv_eps >= 0, "adv_eps", "use a number >= 0")
        need(0 <= self.gamma <= 1, "gamma", "use a number in [0, 1]")
        need(0 <= self.lam <= 1, "lam", "use a number in [0, 1]")
        need(self.temperature > 0, "temperature", "use a number > 0")
        need(0 < self.top_p <= 1, "top_p", "use a number in (0, 1]")
        choices = {"loss_agg": AGGREGATION_MODES, "kl_estimator": KL_ESTIMATORS, "kl_placement": ("loss", "reward"),
                   "advantage": ("gae", "group", "rloo"), "adv_scale": ("group", "batch", "none"),
                   "critic": ("none", "head", "separate"), "mixed_precision": ("no", "bf16", "fp16"),
                   "eval_split": ("test", "val"), "policy_loss": POLICY_LOSSES, "ratio_level": RATIO_LEVELS,
                   "dynamic_sampling_metric": ("correct", "reward")}
        for name, allowed in choices.items():
            need(getattr(self, name) in allowed, name, f"choose one of {list(allowed)}")
        # --- consistency between fields ---
        if self.advantage == "gae":
            need(self.critic != "none", "critic", "advantage='gae' needs a critic: use critic='head' or 'separate'")
        else:
            need(self.critic == "none", "critic", f"a critic is only used by advantage='gae', not "
                 f"advantage={self.advantage!r}: set critic='none'")
            need(self.group_size >= 2, "group_size", f"advantage={self.advantage!r} compares completions of the "
                 "same prompt: use group_size >= 2")
        if self.dynamic_sampling:
            need(self.advantage != "gae" and self.group_size >= 2, "dynamic_sampling",
                 "dynamic sampling filters groups: it needs a group advantage and group_size >= 2")
        if self.kl_placement == "reward" and self.kl_coef > 0:
            need(self.advantage == "gae", "kl_placement", "a per-token KL in the reward needs per-token credit "
                 "assignment (advantage='gae'); use kl_placement='loss' for group advantages")
        need(self.samples_per_step % self.minibatches == 0, "minibatches",
             f"batch_size * group_size = {self.samples_per_step} must split evenly into minibatches")
        rows = self.samples_per_step // self.minibatches
        need(self.micro_batch_size == 0 or rows % self.micro_batch_size == 0, "micro_batch_size",
             f"each minibatch has {rows} rows; use 0 or a divisor of {rows}")
        need(self.overlong_cache < self.max_new_tokens, "overlong_cache",
             f"use a number of tokens below max_new_tokens={self.max_new_tokens}")
        need(self.overlong_cache >= 1, "overlong_cache", "use an integer >= 1")
        return self


def field_help() -> dict[str, str]:
    """Each RLConfig field's help, by name, in field order."""
    return {f.name: f.metadata["help"] for f in fields(RLConfig)}


def fields_table() -> str:
    """A Markdown table of every field: name, type, default, help (minirl/README.md holds it; a test compares)."""
    rows = [f"| `{f.name}` | {f.type} | `{f.default!r}` | " + f.metadata["help"].replace("|", "\\|") + " |"
            for f in fields(RLConfig)]
    return "\n".join(["| field | type | default | what it does |", "|---|---|---|---|", *rows])


# Where each default comes from:
# - PPO: Schulman et al. 2017 (eps 0.2, several epochs of minibatches), GAE lambda 0.95 (Schulman 2016),
#   value clipping and advantage whitening as in the PPO-for-LLM implementations (Ouyang 2022, TRL PPOTrainer),
#   per-token k1 KL penalty in the reward (Ziegler 2019 / InstructGPT).
# - GRPO: DeepSeekMath (Shao et al. 2024): G samples, (r - mean) / std, k3 KL in the loss, per-sequence token
#   mean; beta = 0.04 in the paper, 0 in TRL's current default (also Dr. GRPO / DAPO argue it is unneeded for
#   verifiable rewards) — we follow the paper; the KL sweep of `minirl study` varies it.
# - DAPO: Yu et al. 2025, arXiv 2503.14476: eps_low 0.2 / eps_high 0.28, dynamic sampling, token-level loss,
#   soft overlong punishment, no KL; several gradient updates per rollout (the paper: 16; we use 4 minibatches,
#   without which the ratio stays 1 and clip-higher never acts); max_gen_batches 10 as in verl's DAPO recipe.
# - Dr. GRPO: Liu et al. 2025: mean-only advantages, constant normaliser (sum / (B * L_max)).
# - RLOO: Ahmadian et al. 2024: leave-one-out baseline.
# - GSPO: Zheng et al. 2025, arXiv 2507.18071, section 5.1: the sequence-level ratio, clip range 3e-4 / 4e-4 (on the
#   length-normalised sequence ratio, hence so small), each rollout split into 4 minibatches, the per-sequence mean
#   (TRL's loss_type="grpo" in its GSPO recipe), no KL (TRL's paper index, after verl#2775).
# - CISPO: MiniMax-M1, Chen et al. 2025, arXiv 2506.13585, section 3.1: the clipped stop-gradient weight, no lower
#   bound (clip_low 1: weights from 0), the upper one at 1 + 4 = 5 (ScaleRL, Khatri 2025, arXiv 2510.13786; TRL's
#   recommended epsilon_high 5.0), the token-level loss, no KL; 4 minibatches so the weight leaves 1 as in GSPO.
PRESETS: dict[str, dict] = {  # the algorithms minirl offers, by name
    "ppo": dict(advantage="gae", critic="head", group_size=1, batch_size=64, whiten_advantages=True,
                kl_coef=0.01, kl_estimator="k1", kl_placement="reward", loss_agg="token-mean",
                epochs=2, minibatches=2, vf_coef=0.5, value_clip=0.2, gamma=1.0, lam=0.95),
    "grpo": dict(advantage="group", adv_scale="group", kl_coef=0.04, kl_estimator="k3", kl_placement="loss",
                 loss_agg="seq-mean-token-mean"),
    "dapo": dict(advantage="group", adv_scale="group", clip_low=0.2, clip_high=0.28, dynamic_sampling=True,
                 max_gen_batches=10, minibatches=4, loss_agg="token-mean", overlong_punishment=True,
                 overlong_filter=False, kl_coef=0.0),
    "dapo_nods": dict(advantage="group", adv_scale="group", clip_low=0.2, clip_high=0.28, dynamic_sampling=False,
                      minibatches=4, loss_agg="token-mean", overlong_punishment=True, overlong_filter=False,
                      kl_coef=0.0),
    "dr_grpo": dict(advantage="group", adv_scale="none", loss_agg="seq-mean-token-sum-norm", kl_coef=0.0),
    "rloo": dict(advantage="rloo", loss_agg="token-mean", kl_coef=0.0),
    "gspo": dict(advantage="group", adv_scale="group", ratio_level="sequence", clip_low=3e-4, clip_high=4e-4,
                 minibatches=4, loss_agg="seq-mean-token-mean", kl_coef=0.0),
    "cispo": dict(advantage="group", adv_scale="group", policy_loss="cispo", clip_low=1.0, clip_high=4.0,
                  minibatches=4, loss_agg="token-mean", kl_coef=0.0),
}
PAPER_ALGOS = ("ppo", "grpo", "dapo")  # the three that Lian 2025 compares, and the course with it

# The learning rate each preset starts at, per task (minirl.tasks.TASKS): the one with the best mean validation
# accuracy (the task's "val" split, 3 seeds) in the learning-rate sweep `python -m minirl tune`, whose runs, figure
# and table are in studies/lr-sweep (SWEEP.md says how each value was chosen). The presets make different numbers of
# updates per rollout (GRPO 1, DAPO 4, PPO 4), so one shared learning rate would compare step sizes, not algorithms.
# Measured 2026-12-07 (180 runs, grid 1e-5 .. 1e-3): on the compact task every preset is best at 3e-5 and breaks
# down at 3e-4 (CISPO, whose weight keeps every token's gradient, already at 1e-4); on the worked task GRPO (1 update per rollout) and PPO are best at 1e-4, DAPO with and without dynamic
# sampling (4 updates) at 3e-5, and PPO is the flattest (within 2 points from 1e-5 to 1e-4).
TUNED_LR: dict[str, dict[str, float]] = {
    "compact": {"ppo": 3e-5, "grpo": 3e-5, "dapo": 3e-5, "dapo_nods": 3e-5, "dr_grpo": 3e-5, "rloo": 3e-5,
                "gspo": 3e-5, "cispo": 3e-5},
    "worked": {"ppo": 1e-4, "grpo": 1e-4, "dapo": 3e-5, "dapo_nods": 3e-5},
}


def tuned_lr(algo: str, task: str = "compact") -> float:
    """The tuned learning rate of preset `algo` on `task` (TUNED_LR); a task or preset it lacks is a ConfigError."""
    if task not in TUNED_LR:
        raise ConfigError(f"task={task!r} has no tuned learning rates: choose one of {sorted(TUNED_LR)}")
    if algo not in TUNED_LR[task]:
        raise ConfigError(f"preset {algo!r} has no tuned learning rate on task {task!r}: tuned are "
                          f"{sorted(TUNED_LR[task])}; pass lr=... yourself")
    return TUNED_LR[task][algo]

"""A step's metrics as totals, added over processes before any mean is taken.

Under data parallelism (`accelerate launch`, torchrun) every process samples and learns from its own share of
the batch. A mean that rank 0 logs from its share alone is not the batch's mean (and its standard deviation
or maximum even less so). So each phase of the step first counts *totals* on every process (sums, counts,
sums of squares, maxima), `combine` gathers them from all processes (one `gather_object` per phase) and adds
them, and only then are the means taken. The logged reward, entropy or clip fraction of 2 processes is then the
one 1 process logs on the same rows (tests/test_distributed.py checks it).

    totals = rollout_totals(...)                          # this process's share, plain floats
    row = rollout_metrics(combine(accelerator, totals))   # means over every process's rows
"""

from __future__ import annotations

import math

import torch
from accelerate.utils import gather_object

from . import dapo
from .losses import approx_kl, masked_sum


def combine(accelerator, totals: dict[str, float]) -> dict[str, float]:
    """Add every process's totals key by key; keys ending in `_max` take the maximum. One process: as is."""
    if accelerator is None or accelerator.num_processes == 1:
        return dict(totals)
    out: dict[str, float] = {}
    for part in gather_object([totals]):  # a list with one dict per process, the same on every process
        for key, value in part.items():
            if key not in out:
                out[key] = value
            else:
                out[key] = max(out[key], value) if key.endswith("_max") else out[key] + value
    return out


def moments(x: torch.Tensor, prefix: str) -> dict[str, float]:
    """n, sum and sum of squares of a 1-D tensor, in float64 (they are added over processes)."""
    x = x.double()
    return {f"{prefix}_n": float(x.numel()), f"{prefix}_sum": x.sum().item(), f"{prefix}_sq": (x * x).sum().item()}


def unbiased_std(t: dict[str, float], prefix: str) -> float:
    """sqrt of sum((x - mean)^2) / (n - 1) from the moment totals; 0 for fewer than 2 values."""
    n, s, sq = t[f"{prefix}_n"], t[f"{prefix}_sum"], t[f"{prefix}_sq"]
    return math.sqrt(max(sq - s * s / n, 0.0) / (n - 1)) if n > 1 else 0.0


# ----------------------------------------------------------------------------- sampling and rewards
def rollout_totals(rewards: list[torch.Tensor], parts: list[torch.Tensor], names: list[str],
                   lengths: list[torch.Tensor], truncated: list[torch.Tensor], first_group_ids: torch.Tensor,
                   kept_groups: int, group_size: int) -> dict[str, float]:
    """This process's counts over every generation round (lists: one tensor per round).

    rewards (N_r,), parts (N_r, C) reward components named `names` (nan where a task leaves one out),
    lengths/truncated (N_r,), first_group_ids: the first round's group ids (for the zero-std fraction)."""
    every = torch.cat(rewards)
    first_groups = len(first_group_ids.unique())
    t = {**moments(every, "reward"), "generated": float(len(every)),
         "groups_first": float(first_groups),
         "groups_zero_std_first": dapo.frac_reward_zero_std(rewards[0], first_group_ids) * first_groups,
         "groups_seen": float(len(every) // group_size), "groups_kept": float(kept_groups),
         "gen_batches_max": float(len(rewards)),
         "length_sum": float(torch.cat(lengths).sum()), "completion_len_max": float(torch.cat(lengths).max()),
         "truncated": float(torch.cat(truncated).sum())}
    every_part = torch.cat(parts)  # (N, C)
    if "correct" in names:  # lengths of right and of wrong answers apart: a mean length hides which ones grow
        right = every_part[:, names.index("correct")] >= 1  # (N,)
        every_length = torch.cat(lengths).double()  # (N,)
        t.update(length_right_sum=every_length[right].sum().item(), right_n=float(right.sum()),
                 length_wrong_sum=every_length[~right].sum().item(), wrong_n=float((~right).sum()))
    for j, name in enumerate(names):
        column = every_part[:, j]
        present = ~torch.isnan(column)
        t[f"reward/{name}_sum"], t[f"reward/{name}_count"] = column[present].double().sum().item(), float(present.sum())
    return t


def rollout_metrics(t: dict[str, float]) -> dict[str, float]:
    """Totals (added over processes) -> the row's sampling metrics. `generated` counts every process's samples."""
    n = t["generated"]
    row = {"reward_mean": t["reward_sum"] / n, "reward_std": unbiased_std(t, "reward"),
           "frac_reward_zero_std": t["groups_zero_std_first"] / t["groups_first"] if t["groups_first"] else math.nan,
           "kept_group_frac": t["groups_kept"] / t["groups_seen"], "gen_batches": int(t["gen_batches_max"]),
           "generated": int(n), "completion_len_mean": t["length_sum"] / n,
           "completion_len_max": int(t["completion_len_max"]), "truncation_rate": t["truncated"] / n,
           "generated_tokens": int(t["length_sum"])}
    if "right_n" in t:
        row["completion_len_correct"] = t["length_right_sum"] / t["right_n"] if t["right_n"] else math.nan
        row["completion_len_incorrect"] = t["length_wrong_sum"] / t["wrong_n"] if t["wrong_n"] else math.nan
    for key in sorted(k for k in t if k.startswith("reward/") and k.endswith("_sum")):
        name = key[: -len("_sum")]
        count = t[f"{name}_count"]
        row[name] = t[key] / count if count else math.nan
    row["accuracy"] = row.get("reward/correct", math.nan)
    if t.get("reward/first_missed_sum"):  # worked steps: of the answers whose first attempt missed, the share that
        row["retry_rate_after_miss"] = t["reward/retried_sum"] / t["reward/first_missed_sum"]  # tried again
    return row


# ----------------------------------------------------------------------------- the updates
def value_totals(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Moments of the returns R and of the critic's errors R - V over the valid tokens (explained variance)."""
    m = mask.bool()
    return {**moments(returns[m], "returns"), **moments((returns - values)[m], "residuals")}


def explained_variance(t: dict[str, float]) -> float:
    """1 - Var[R - V] / Var[R] from the totals (the same quantity as `losses.explained_variance`); nan if
    fewer than 2 tokens or Var[R] = 0."""
    if t["returns_n"] < 2:
        return math.nan
    var_r = unbiased_std(t, "returns") ** 2
    return 1.0 - unbiased_std(t, "residuals") ** 2 / var_r if var_r > 0 else math.nan


# The update's logging sums, kept as tensors (no .item() per micro-batch: each one would stall a GPU) and read once
# at the end of the step: token sums of entropy, KL, clip flags and approx_kl, and the aggregated losses
UPDATE_SUMS = ("policy_loss", "value_loss", "entropy", "kl_ref", "clip_frac_low", "clip_frac_high", "approx_kl",
               "tokens")


def zero_update_sums(device) -> dict[str, torch.Tensor]:
    return {k: torch.zeros((), device=device) for k in UPDATE_SUMS}


def add_update_sums(sums: dict, policy_loss: torch.Tensor, entropy: torch.Tensor, clip, logp: torch.Tensor,
                    old_logp: torch.Tensor, mask: torch.Tensor) -> None:
    """Add one micro-batch's share: its aggregated policy loss, and token sums over `mask` (n, T) of the entropy,
    the clip flags (losses.ClipStats) and approx_kl."""
    sums["policy_loss"] += policy_loss
    sums["entropy"] += masked_sum(entropy.detach(), mask)
    sums["clip_frac_low"] += masked_sum(clip.clipped_low, mask)
    sums["clip_frac_high"] += masked_sum(clip.clipped_high, mask)
    sums["approx_kl"] += approx_kl(logp.detach(), old_logp, mask) * mask.sum()
    sums["tokens"] += mask.sum()


def add_to(sums: dict, update: dict) -> None:
    for k in sums:
        sums[k] += update[k]


def update_metrics(accelerator, sums: dict, batch, applied: int, grad_norms: list[float],
                   skipped: int) -> dict[str, float]:
    """The step's update metrics: totals over every process's rows, then the means. The policy and value losses
    are already shares of one loss over all processes, so their sum over processes is the loss."""
    t = {k: v.item() for k, v in sums.items()}
    if batch.old_values is not None:
        t.update(value_totals(batch.old_values, batch.returns, batch.loss_mask))
    t = combine(accelerator, t)
    tokens = max(t["tokens"], 1.0)
    stats = {k: t[k] / tokens for k in ("entropy", "kl_ref", "clip_frac_low", "clip_frac_high", "approx_kl")}
    stats["policy_loss"] = t["policy_loss"] / applied if applied else math.nan
    if batch.old_values is not None:
        stats["value_loss"] = t["value_loss"] / applied if applied else math.nan
        stats["explained_variance"] = explained_variance(t)
    if batch.ref_logprobs is None:
        stats["kl_ref"] = math.nan
    stats["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else math.nan  # the same on every process
    stats["updates_skipped"] = skipped
    return stats

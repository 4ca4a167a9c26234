"""DAPO's data-side tricks (Yu et al. 2025, "DAPO: an open-source LLM reinforcement learning system
at scale", arXiv 2503.14476 - "Decoupled Clip and Dynamic sAmpling Policy Optimization").

DAPO = GRPO + four changes. Two of them are loss-side and live in `losses.py`:
  * Clip-Higher       -> `clipped_surrogate(..., clip_low=0.2, clip_high=0.28)`
  * token-level loss  -> `aggregate(..., mode="token-mean")`
The other two decide which samples (and rewards) reach the loss, and live here:
  * Dynamic Sampling  -> drop prompts whose answers were all right or all wrong (zero advantage,
                         zero gradient, they only dilute the batch) and sample more instead.
  * Overlong handling -> either filter truncated answers out of the loss, or add a soft,
                         length-aware penalty to the reward.
All functions are pure. N = sampled answers, B = sequences (the same thing here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirl.advantages import _as_float, _group_index, _zero_variance


# ----------------------------------------------------------------------------- dynamic sampling


def zero_variance_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """(N,) bool: True for samples whose group's rewards are all equal (groups of one included).

    Such a group has group-relative advantage exactly 0 for every member: no learning signal.
    Groups need not be contiguous: group_ids [0, 1, 0, 1] are two groups of two.
    """
    r = _as_float(rewards)
    inverse, _, G = _group_index(r, group_ids)
    return _zero_variance(r, inverse, G)


def dynamic_sampling_keep(values: Tensor, group_ids: Tensor) -> Tensor:
    """(N,) bool: which samples DAPO keeps (eq. 11: 0 < |{correct answers}| < G).

    Keeps a group iff its values are not all equal. Pass correctness (1.0 right, 0.0 wrong) for eq. 11, as the
    trainer does by default (`RLConfig.dynamic_sampling_metric="correct"`, verl's `metric=acc`); rewards give
    "any two rewards differ" (`"reward"`). The two agree for a 0/1 reward. The trap: with a shaped reward
    (partial credit, the overlong penalty) a group of wrong answers has different rewards, and a rule on rewards
    keeps it although it holds no right answer to learn from.
    The trainer keeps sampling prompts until it has enough kept groups to fill a batch.
    """
    return ~zero_variance_groups(values, group_ids)  # (N,)


def frac_reward_zero_std(rewards: Tensor, group_ids: Tensor) -> float:
    """Fraction of GROUPS (not samples) whose rewards are all equal, the metric TRL logs.

    When it climbs toward 1 the task has become too easy (or too hard) and GRPO stops learning.
    """
    r = _as_float(rewards)
    inverse, _, G = _group_index(r, group_ids)
    if G == 0:
        return float("nan")
    per_sample = _zero_variance(r, inverse, G).to(r.dtype)  # (N,)
    per_group = torch.zeros(G, dtype=r.dtype, device=r.device).scatter_reduce(
        0, inverse, per_sample, "amax", include_self=False
    )  # (G,), the same value for every member of a group
    return float(per_group.mean())


# ----------------------------------------------------------------------------- overlong answers


def overlong_filter_mask(truncated: Tensor) -> Tensor:
    """(B,) bool -> (B,) float: 0.0 for answers cut off at the length limit, 1.0 otherwise.

    DAPO "Overlong Filtering": a truncated answer may have been correct reasoning that simply ran
    out of room, so punishing it is noise. Multiply the loss mask by this (mask * f[:, None]) and
    truncated samples carry no loss.
    """
    if truncated.dim() != 1:
        raise ValueError(f"truncated must be (B,), got shape {tuple(truncated.shape)}")
    if truncated.is_floating_point():
        raise ValueError(f"truncated must be a bool (or 0/1 integer) tensor, got dtype {truncated.dtype}")
    return (~truncated.bool()).float()


def soft_overlong_punishment(lengths: Tensor, max_len: int, cache_len: int) -> Tensor:
    """DAPO eq. 13, a length-aware reward added to the task reward. (B,) int -> (B,) float.

        R(L) = 0                                if L <= L_max - L_cache
             = ((L_max - L_cache) - L) / L_cache if L_max - L_cache < L <= L_max
             = -1                               if L > L_max

    The penalty ramps linearly from 0 to -1 over the last `cache_len` tokens of the budget, so
    the model learns "shorter is safer" smoothly instead of from a cliff.
    """
    if not (isinstance(max_len, int) and max_len > 0):
        raise ValueError(f"max_len={max_len!r} is not allowed; it must be a positive integer")
    if not (isinstance(cache_len, int) and 0 < cache_len <= max_len):
        raise ValueError(
            f"cache_len={cache_len!r} is not allowed; it must be an integer in (0, max_len={max_len}]"
        )
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be (B,), got shape {tuple(lengths.shape)}")
    L = lengths.float()
    expected = max_len - cache_len  # the length from which the penalty starts
    ramp = (expected - L) / cache_len  # (B,), in [-1, 0) on the ramp
    return torch.where(L <= expected, 0.0, torch.where(L <= max_len, ramp, -1.0))

"""Advantage estimators: how much better was this action (token) or this answer than expected?

Two families live here:

* PPO's per-token **GAE** (Schulman et al. 2016, "High-Dimensional Continuous Control Using
  Generalized Advantage Estimation"), which needs a learned value function V(s_t).
* Critic-free **group baselines** for one scalar reward per sampled answer: several answers are
  drawn for the same prompt (a "group") and each is compared with its siblings.
  GRPO (DeepSeekMath, Shao et al. 2024) uses (r - mean) / std, Dr. GRPO (Liu et al. 2025) drops the
  std, REINFORCE++ divides by the batch std, and RLOO (Ahmadian et al. 2024) uses the
  leave-one-out mean of the others.

All functions are pure: tensors in, tensors out, no grad flows into the results (advantages and
returns are *targets*, treated as constants by the losses).
Shapes: B = sequences, T = completion tokens, N = sampled answers (N = B for the group functions).
"""

from __future__ import annotations

import torch
from torch import Tensor

GROUP_SCALES = ("group", "batch", "none")


def _check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"expected tensors of the same shape, got {shapes}")


# ----------------------------------------------------------------------------- PPO: GAE


@torch.no_grad()
def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman 2016, eq. 16), vectorised over the batch.

    delta_t = r_t + gamma * V_{t+1} - V_t            (TD error)
    A_t     = delta_t + gamma * lam * A_{t+1}         (exponentially-weighted sum of TD errors)
    R_t     = A_t + V_t                               (the value target, "lambda-return")

    rewards, values, mask: (B, T). `mask` is 1 on completion tokens: a contiguous prefix of each
    row, possibly followed by padding. Rewards are per token (PPO puts the sequence reward on the
    last valid token and adds per-token KL penalties). The episode ends after the last valid token,
    so V there is 0. Padded positions get advantage 0 and return 0, whatever garbage they hold.

    >>> A, R = gae(torch.tensor([[0., 0., 1.]]), torch.zeros(1, 3), torch.ones(1, 3), 1.0, 0.95)
    >>> A
    tensor([[0.9025, 0.9500, 1.0000]])
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma={gamma!r} is not allowed; it must be in [0, 1]")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam={lam!r} is not allowed; it must be in [0, 1]")
    _check_same_shape(rewards=rewards, values=values, mask=mask)
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (B, T), got shape {tuple(rewards.shape)}")

    m = mask.to(values.dtype)  # (B, T)
    # torch.where (not `* m`) so that inf/nan garbage on padding cannot leak in.
    r = torch.where(m.bool(), rewards.to(values.dtype), 0.0)  # (B, T)
    v = torch.where(m.bool(), values, 0.0)  # (B, T)
    B, T = r.shape

    advantages = torch.zeros_like(v)  # (B, T)
    next_adv = torch.zeros(B, dtype=v.dtype, device=v.device)  # A_{t+1}, (B,)
    next_value = torch.zeros(B, dtype=v.dtype, device=v.device)  # V_{t+1}, 0 after the episode, (B,)
    for t in reversed(range(T)):
        delta = r[:, t] + gamma * next_value - v[:, t]  # (B,)
        next_adv = (delta + gamma * lam * next_adv) * m[:, t]  # padding resets the recursion to 0
        advantages[:, t] = next_adv
        next_value = v[:, t]  # already 0 on padding: bootstrap value after the last token is 0
    returns = (advantages + v) * m  # (B, T)
    return advantages, returns


# ----------------------------------------------------------------------------- group baselines


def _group_index(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, int]:
    """Map arbitrary prompt ids to 0..G-1. Returns (inverse (N,), counts (G,), G).

    Groups need not be contiguous nor equal-sized: [7, 3, 7, 3] are two groups of two.
    """
    if rewards.dim() != 1 or group_ids.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must both be (N,) with the same N, got shapes "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got dtype {group_ids.dtype}")
    _, inverse = torch.unique(group_ids, return_inverse=True)  # (N,) in 0..G-1
    G = int(inverse.max()) + 1 if inverse.numel() else 0
    counts = torch.bincount(inverse, minlength=G)  # (G,)
    return inverse, counts, G


def _group_mean(r: Tensor, inverse: Tensor, counts: Tensor, G: int) -> Tensor:
    """Mean reward of each sample's group, gathered back per sample. (N,)"""
    sums = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, inverse, r)  # (G,)
    return (sums / counts.to(r.dtype))[inverse]  # (N,)


def _zero_variance(r: Tensor, inverse: Tensor, G: int) -> Tensor:
    """True for samples whose group has all-equal rewards (including groups of one). (N,) bool

    Compared with max == min (not std == 0) so the answer is exact, with no rounding.
    """
    gmax = torch.full((G,), -torch.inf, dtype=r.dtype, device=r.device).scatter_reduce(0, inverse, r, "amax")
    gmin = torch.full((G,), torch.inf, dtype=r.dtype, device=r.device).scatter_reduce(0, inverse, r, "amin")
    return (gmax == gmin)[inverse]  # (N,)


def _as_float(rewards: Tensor) -> Tensor:
    return rewards if rewards.is_floating_point() else rewards.float()


@torch.no_grad()
def group_advantages(
    rewards: Tensor, group_ids: Tensor, scale: str = "group", eps: float = 1e-4, unbiased: bool = True, reduce=None
) -> Tensor:
    """GRPO's group-relative advantage (Shao 2024, eq. for outcome supervision): (N,) -> (N,).

        A_i = (r_i - mean_{group(i)} r) / (std + eps)

    scale="group": std of the sample's own group (GRPO).
    scale="batch": std of the whole batch (REINFORCE++ style, Hu 2025) - less noisy for small groups.
    scale="none":  no division at all (Dr. GRPO, Liu 2025: the std rescaling biases the objective
                   toward too-easy / too-hard prompts).
    A group whose rewards are all equal (including a group of one) gets exactly 0: it carries no
    learning signal. Two groups never mix. A group lives on one process, but the batch does not: with
    scale="batch", `reduce` (sums over processes, see _mean_var) makes the std the whole batch's.

    >>> group_advantages(torch.tensor([1., 0., 0., 0.]), torch.tensor([0, 0, 0, 0]), scale="none")
    tensor([ 0.7500, -0.2500, -0.2500, -0.2500])
    """
    if scale not in GROUP_SCALES:
        raise ValueError(f"scale={scale!r} is not allowed; choose one of {GROUP_SCALES}")
    if eps < 0:
        raise ValueError(f"eps={eps!r} is not allowed; it must be >= 0")
    r = _as_float(rewards)
    inverse, counts, G = _group_index(r, group_ids)
    centred = r - _group_mean(r, inverse, counts, G)  # (N,)

    correction = 1 if unbiased else 0
    if scale == "group":
        sq = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, inverse, centred**2)  # (G,)
        # A group of one has no spread; clamp the divisor so it gives 0 / eps, never 0 / 0.
        var = sq / (counts - correction).clamp(min=1).to(r.dtype)  # (G,)
        adv = centred / (var.sqrt()[inverse] + eps)
    elif scale == "batch":
        std = _mean_var(r, torch.ones_like(r, dtype=torch.bool), reduce, correction)[1].sqrt()  # the batch's
        adv = centred / (std + eps)
    else:
        adv = centred
    return torch.where(_zero_variance(r, inverse, G), 0.0, adv)


@torch.no_grad()
def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE Leave-One-Out (Ahmadian 2024): baseline = mean of the *other* answers. (N,) -> (N,)

        A_i = r_i - (sum_group r - r_i) / (n - 1)

    The baseline does not depend on r_i itself, so the policy-gradient estimate stays unbiased.
    Groups of one (no "others") and all-equal groups get 0.

    >>> rloo_advantages(torch.tensor([1., 0., 0., 0.]), torch.tensor([0, 0, 0, 0]))
    tensor([ 1.0000, -0.3333, -0.3333, -0.3333])
    """
    r = _as_float(rewards)
    inverse, counts, G = _group_index(r, group_ids)
    sums = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, inverse, r)[inverse]  # (N,)
    n = counts[inverse].to(r.dtype)  # (N,)
    adv = r - (sums - r) / (n - 1).clamp(min=1)
    return torch.where(_zero_variance(r, inverse, G), 0.0, adv)


# ----------------------------------------------------------------------------- token helpers


@torch.no_grad()
def _mean_var(x: Tensor, m: Tensor, reduce=None, correction: int = 1) -> tuple[Tensor, Tensor]:
    """Mean and variance (unbiased with correction=1) of x where m is True. `reduce(t)` sums a tensor over the processes of a
    data-parallel run (two passes: the mean first, then the squared deviations from it), so every process gets
    the statistics of the whole batch; None: this process's rows are the batch."""
    reduce = reduce or (lambda t: t)
    n = reduce(m.sum())
    x = torch.where(m, x, 0.0)
    mean = reduce(x.sum()) / n.clamp(min=1)
    var = reduce(torch.where(m, (x - mean) ** 2, 0.0).sum()) / (n - correction).clamp(min=1)
    return mean, var


@torch.no_grad()
def whiten(values: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8, reduce=None) -> Tensor:
    """Normalise `values` to zero mean and unit variance over the valid (mask = 1) entries.

    Classic PPO-for-LMs advantage whitening (as in OpenAI's lm-human-preferences and TRL).
    The variance is the unbiased (Bessel-corrected) one. With shift_mean=False the mean is kept
    (used for rewards: the sign of a reward matters). Padded entries come back as 0.
    reduce: sums a tensor over processes (see _mean_var). The trap: whitening each process's share with its own
    mean and std gives every process another advantage scale, and 2 processes no longer make 1 process's update.
    """
    _check_same_shape(values=values, mask=mask)
    m = mask.bool()
    x = torch.where(m, values, 0.0)
    mean, var = _mean_var(x, m, reduce)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, 0.0)


@torch.no_grad()
def broadcast_to_tokens(seq_advantages: Tensor, mask: Tensor) -> Tensor:
    """Give every completion token its sequence's advantage: (B,), (B, T) -> (B, T), 0 on padding.

    This is how GRPO/RLOO credit assignment works without a critic: every token of an answer
    shares the answer's outcome.
    """
    if seq_advantages.dim() != 1 or mask.dim() != 2 or seq_advantages.shape[0] != mask.shape[0]:
        raise ValueError(
            f"seq_advantages must be (B,) and mask (B, T), got shapes "
            f"{tuple(seq_advantages.shape)} and {tuple(mask.shape)}"
        )
    return torch.where(mask.bool(), seq_advantages[:, None], 0.0).to(seq_advantages.dtype)  # (B, T)

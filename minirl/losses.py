"""The loss functions of PPO, GRPO and DAPO, as pure per-token tensor functions.

Everything is computed per token, (B, T), and only then reduced to a scalar by `aggregate`:
*how* you average over tokens and sequences is itself a design choice that differs between
GRPO (per-sequence mean), DAPO (per-token mean) and Dr. GRPO (a constant normaliser).

Conventions: B = sequences, T = completion tokens, V = vocabulary. `mask` is 1 on the
completion tokens that count and 0 on padding. Values on padding may be arbitrary (finite)
garbage: they never reach a result or a gradient.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
POLICY_LOSSES = ("clip", "cispo")  # PPO's clipped surrogate (PPO, GRPO, DAPO, GSPO); CISPO's clipped weight
RATIO_LEVELS = ("token", "sequence")  # one importance ratio per token (PPO ... DAPO), or per sequence (GSPO)
KL_ESTIMATORS = ("k1", "k2", "k3")

# exp() of a log-ratio above ~88 overflows float32; beyond e^20 the number is meaningless anyway.
# Same guard as verl's policy loss and KL penalty.
LOG_RATIO_CLAMP = 20.0


# ----------------------------------------------------------------------------- masked reductions


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of x over entries where mask is 1 (all dims, or just `dim`).

    torch.where rather than x * mask: 0 * inf would be nan, and garbage on padding must not leak.
    """
    kept = torch.where(mask.bool(), x, 0.0)
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of x over entries where mask is 1. An empty selection gives 0, not nan."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


# ----------------------------------------------------------------------------- policy loss


def importance_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor | None = None,
                         level: str = "token") -> Tensor:
    """log(pi_theta / pi_old) for every token, (B, T): the log of the importance ratio the policy losses use.

        "token"     l_t = log pi_theta(y_t) - log pi_old(y_t)                     PPO, GRPO, DAPO
        "sequence"  l_i = (1 / |y_i|) sum_t l_t, the same for every token of y_i  GSPO (Zheng 2025, eq. 7)

    GSPO's sequence ratio s_i = (pi_theta(y_i) / pi_old(y_i))^(1/|y_i|) is the geometric mean of the token ratios:
    one number per answer, so a single surprising token cannot push its own ratio out of the clip range, and the
    clip keeps or drops a whole answer. Its gradient reaches every token of y_i with weight 1/|y_i|, as in TRL's
    `importance_sampling_level="sequence"`. The trap: a length normaliser is needed, or a long answer's summed
    log-ratio would leave any clip range after one update; GSPO's clip range is tiny (3e-4 / 4e-4) because the
    mean of many small token drifts is tiny.
    old_logprobs is a constant (detached); "sequence" needs the (B, T) mask, rows without tokens get 0.
    """
    if level not in RATIO_LEVELS:
        raise ValueError(f"level={level!r} is not allowed; choose one of {RATIO_LEVELS}")
    if logprobs.shape != old_logprobs.shape:  # broadcasting would pair the wrong tokens silently
        raise ValueError(f"logprobs and old_logprobs must have the same shape, got {tuple(logprobs.shape)} and "
                         f"{tuple(old_logprobs.shape)}")
    log_ratio = logprobs - old_logprobs.detach()  # (B, T)
    if level == "token":
        return log_ratio
    if mask is None or mask.shape != logprobs.shape:
        raise ValueError(f"level='sequence' needs a (B, T) mask like logprobs {tuple(logprobs.shape)}, got "
                         f"{None if mask is None else tuple(mask.shape)}")
    per_seq = masked_mean(log_ratio, mask, dim=1)  # (B,), the mean over each answer's own tokens
    return per_seq[:, None].expand_as(log_ratio)  # (B, T)


def _per_token_advantages(advantages: Tensor, logprobs: Tensor) -> Tensor:
    """(B,) or (B, T) advantages as a detached (B, 1) or (B, T) tensor in logprobs' dtype."""
    A = advantages.detach()
    if A.dim() == 1 and logprobs.dim() == 2 and A.shape[0] == logprobs.shape[0]:
        A = A[:, None]  # (B, 1): one advantage for every token of the sequence
    elif A.shape != logprobs.shape:
        raise ValueError(
            f"advantages must be (B,) or (B, T) matching logprobs {tuple(logprobs.shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    return A.to(logprobs.dtype)


class ClipStats(NamedTuple):
    """Per-token diagnostics of the clipped surrogate, all (B, T) float tensors, no grad.

    Average them with `masked_mean` to log the clip fractions.
    """

    ratio: Tensor  # pi_theta / pi_old
    clipped_low: Tensor  # 1 where A < 0 and ratio < 1 - clip_low: the clip is active, no gradient
    clipped_high: Tensor  # 1 where A > 0 and ratio > 1 + clip_high: the clip is active, no gradient
    dual_clipped: Tensor  # 1 where A < 0 and the dual-clip cap -c*A is active, no gradient


def clipped_surrogate(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    *,
    mask: Tensor | None = None,
    ratio_level: str = "token",
) -> tuple[Tensor, ClipStats]:
    """PPO's clipped surrogate objective (Schulman 2017, eq. 7), negated into a per-token loss.

        ratio = exp(logpi_theta - logpi_old)
        loss  = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)

    Separate clip_low / clip_high is DAPO's "Clip-Higher" (Yu 2025, eq. 10): a larger upper bound
    (e.g. 0.28) lets unlikely-but-good tokens grow, which fights entropy collapse.
    dual_clip=c (> 1) is dual-clip PPO (Ye et al. 2020): for A < 0 the loss is also capped at
    -c * A, so a huge ratio on a bad token cannot blow the update up.

    ratio_level="sequence" (with the mask) is GSPO (Zheng 2025, eq. 5-7): the ratio of every token is its
    answer's length-normalised sequence ratio (`importance_log_ratio`), so the clip acts on whole answers.

    logprobs, old_logprobs: (B, T); advantages: (B,) (one per sequence, broadcast) or (B, T).
    old_logprobs and advantages are treated as constants (detached).
    Returns the per-token loss (B, T) and ClipStats.
    """
    if not 0.0 < clip_low <= 1.0:
        raise ValueError(f"clip_low={clip_low!r} is not allowed; it must be in (0, 1]")
    if not clip_high > 0.0:
        raise ValueError(f"clip_high={clip_high!r} is not allowed; it must be > 0")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip={dual_clip!r} is not allowed; it must be > 1 or None")
    log_ratio = importance_log_ratio(logprobs, old_logprobs, mask, ratio_level)  # (B, T)
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    A = _per_token_advantages(advantages, logprobs)  # (B, 1) or (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    unclipped = -ratio * A  # (B, T)
    clipped = -ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * A  # (B, T), no grad outside the range
    loss = torch.maximum(unclipped, clipped)  # -min(rA, clip(r)A) = max(-rA, -clip(r)A)

    dual = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        cap = -dual_clip * A  # (B, 1) or (B, T); only meaningful where A < 0
        dual = (A < 0) & (loss > cap)
        loss = torch.where(dual, cap.expand_as(loss), loss)

    with torch.no_grad():
        stats = ClipStats(
            ratio=ratio.detach(),
            clipped_low=((A < 0) & (ratio < 1.0 - clip_low)).to(loss.dtype),
            clipped_high=((A > 0) & (ratio > 1.0 + clip_high)).to(loss.dtype),
            dual_clipped=dual.to(loss.dtype),
        )
    return loss, stats


def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_low: float = 1.0,
    clip_high: float = 4.0,
    *,
    mask: Tensor | None = None,
    ratio_level: str = "token",
) -> tuple[Tensor, ClipStats]:
    """CISPO (MiniMax-M1, arXiv 2506.13585, eq. 4-5): clip the importance weight, not the update, per token.

        ratio  = exp(logpi_theta - logpi_old)
        weight = sg(clip(ratio, 1 - clip_low, 1 + clip_high))        sg = stop-gradient (detach)
        loss   = -weight * A * logpi_theta

    The clipped surrogate drops the gradient of a token whose ratio has left the band (ClipStats says which);
    CISPO keeps every token's REINFORCE gradient A * grad logpi and only bounds how much an off-policy token
    counts. The trap: without the stop-gradient the loss would be the clipped ratio times A again, with its
    zero gradient outside the band. MiniMax-M1 sets no lower bound (clip_low = 1: weights in [0, 1 + clip_high])
    and tunes the upper one. TRL's `loss_type="cispo"` clamps at `epsilon_high` itself (its 5.0 = our
    clip_high 4.0); verl's `clip_ratio_low/high` are ours.
    Returns the per-token loss (B, T) and ClipStats, whose clipped_low/high mark the tokens whose *weight* was
    capped (their gradient is kept); dual_clipped is all 0.
    """
    if not 0.0 < clip_low <= 1.0:
        raise ValueError(f"clip_low={clip_low!r} is not allowed; it must be in (0, 1]")
    if not clip_high > 0.0:
        raise ValueError(f"clip_high={clip_high!r} is not allowed; it must be > 0")
    log_ratio = importance_log_ratio(logprobs.detach(), old_logprobs, mask, ratio_level)  # (B, T), no grad
    A = _per_token_advantages(advantages, logprobs)  # (B, 1) or (B, T)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # (B, T)
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # (B, T), a constant: the gradient flows through logpi
    loss = -weight * A * logprobs  # (B, T)
    with torch.no_grad():
        stats = ClipStats(
            ratio=ratio,
            clipped_low=((A < 0) & (ratio < 1.0 - clip_low)).to(loss.dtype),
            clipped_high=((A > 0) & (ratio > 1.0 + clip_high)).to(loss.dtype),
            dual_clipped=torch.zeros_like(loss),
        )
    return loss, stats


def policy_loss(kind: str, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
                clip_low: float, clip_high: float, dual_clip: float | None = None,
                ratio_level: str = "token") -> tuple[Tensor, ClipStats]:
    """The per-token policy loss that `RLConfig.policy_loss` names, (B, T), and its ClipStats: the one place
    where the trainer's policy loss is chosen.

        kind="clip",  ratio_level="token"     PPO, GRPO, DAPO        `clipped_surrogate`
        kind="clip",  ratio_level="sequence"  GSPO                   `clipped_surrogate` on the sequence ratio
        kind="cispo"                          CISPO (MiniMax-M1)     `cispo_loss`
    """
    if kind == "clip":
        return clipped_surrogate(logprobs, old_logprobs, advantages, clip_low, clip_high, dual_clip, mask=mask,
                                 ratio_level=ratio_level)
    if kind == "cispo":
        if dual_clip:
            raise ValueError(f"dual_clip={dual_clip!r} is not allowed with kind='cispo': it caps the clipped "
                             "surrogate's loss, which CISPO does not have; use 0 / None")
        return cispo_loss(logprobs, old_logprobs, advantages, clip_low, clip_high, mask=mask, ratio_level=ratio_level)
    raise ValueError(f"kind={kind!r} is not allowed; choose one of {POLICY_LOSSES}")


# ----------------------------------------------------------------------------- aggregation


def _check_positive(name: str, value) -> None:
    if isinstance(value, (int, float)) and not value > 0:
        raise ValueError(f"{name}={value!r} is not allowed; it must be > 0 (or None for this batch's own)")


def aggregate(
    loss_tokens: Tensor,
    mask: Tensor,
    mode: str,
    *,
    num_tokens: int | float | Tensor | None = None,
    num_seqs: int | float | Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Reduce a per-token loss (B, T) to a scalar.

    "token-mean"              sum(loss) / num_tokens                    DAPO's token-level loss (eq. 12):
                                                                         every token weighs the same, so
                                                                         long answers are not down-weighted.
    "seq-mean-token-mean"     sum_seq mean_tokens(loss) / num_seqs      GRPO paper (Shao 2024, eq. 3).
    "seq-mean-token-sum"      sum_seq sum_tokens(loss) / num_seqs
    "seq-mean-token-sum-norm" sum(loss) / (num_seqs * max_len)          Dr. GRPO (Liu 2025): a constant
                                                                         normaliser, no length bias.

    The normalisers default to this batch's own (mask.sum(), number of rows, mask.shape[1]).
    For gradient accumulation pass the totals of the WHOLE optimiser step: then the sum of the
    micro-batch aggregates equals the full-batch value. (Averaging per-micro-batch token means
    does not: a short answer in a small micro-batch would weigh more.)
    Rows with no valid token contribute 0 (but still count as rows in the default num_seqs).
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"mode={mode!r} is not allowed; choose one of {AGGREGATION_MODES}")
    if loss_tokens.dim() != 2 or loss_tokens.shape != mask.shape:
        raise ValueError(
            f"loss_tokens and mask must both be (B, T), got {tuple(loss_tokens.shape)} and {tuple(mask.shape)}"
        )
    _check_positive("num_tokens", num_tokens)
    _check_positive("num_seqs", num_seqs)
    _check_positive("max_len", max_len)
    if num_seqs is None:
        num_seqs = mask.shape[0]
    if max_len is None:
        max_len = mask.shape[1]

    if mode == "token-mean":
        if num_tokens is None:
            num_tokens = mask.sum().clamp(min=1)
        return masked_sum(loss_tokens, mask) / num_tokens
    if mode == "seq-mean-token-mean":
        per_seq = masked_mean(loss_tokens, mask, dim=1)  # (B,), 0 for empty rows
        return per_seq.sum() / num_seqs
    if mode == "seq-mean-token-sum":
        return masked_sum(loss_tokens, mask) / num_seqs
    return masked_sum(loss_tokens, mask) / (num_seqs * max_len)  # seq-mean-token-sum-norm


# ----------------------------------------------------------------------------- KL penalty


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from tokens sampled from pi_theta.

    With l = log pi_theta - log pi_ref (Schulman, "Approximating KL divergence", 2020):
        k1 = l                    unbiased, high variance, can be negative
        k2 = l^2 / 2              biased, low variance, always >= 0
        k3 = exp(-l) - 1 + l      unbiased, low variance, always >= 0 (GRPO's choice, eq. 4)
    For k3, l is first clamped to [-20, 20]: exp(20) is already absurd and exp(89) overflows float32.
    Returns a per-token tensor of the input shape.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator={estimator!r} is not allowed; choose one of {KL_ESTIMATORS}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs and ref_logprobs must have the same shape, got "
            f"{tuple(logprobs.shape)} and {tuple(ref_logprobs.shape)}"
        )
    log_ratio = logprobs - ref_logprobs.detach()
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(-log_ratio) - 1.0 + log_ratio


# ----------------------------------------------------------------------------- value loss


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None = None) -> Tensor:
    """Per-token critic loss, (B, T).

    Plain:   0.5 * (V - R)^2
    Clipped: 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -clip, clip) - R)^2)   (PPO2 baselines)
    The clipped form is pessimistic: the critic may not move more than `clip` from V_old to
    lower its loss. old_values and returns are treated as constants.
    """
    if clip is not None and not clip > 0:
        raise ValueError(f"clip={clip!r} is not allowed; it must be > 0 or None")
    if not values.shape == old_values.shape == returns.shape:
        raise ValueError(
            f"values, old_values and returns must have the same shape, got {tuple(values.shape)}, "
            f"{tuple(old_values.shape)} and {tuple(returns.shape)}"
        )
    R = returns.detach()
    loss = (values - R) ** 2
    if clip is not None:
        V_old = old_values.detach()
        v_clipped = V_old + (values - V_old).clamp(-clip, clip)
        loss = torch.maximum(loss, (v_clipped - R) ** 2)
    return 0.5 * loss


# ----------------------------------------------------------------------------- diagnostics


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax distribution at each position: (B, T, V) -> (B, T)."""
    return entropy_from_logprobs(torch.log_softmax(logits, dim=-1))


def entropy_from_logprobs(logprobs: Tensor) -> Tensor:
    """H = -sum p log p from log-probabilities (B, T, V) -> (B, T); reuse a log_softmax you already have.

    Tokens with log-prob -inf (masked vocabulary) have p = 0 and are skipped, so 0 * -inf is not nan.
    """
    probs = logprobs.exp()
    return -torch.where(probs > 0, probs * logprobs, 0.0).sum(dim=-1)


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var[R - V] / Var[R] over valid tokens: 1 = perfect critic, 0 = no better than a constant.

    Returns float('nan') when Var[R] = 0 (e.g. every return equal): the ratio is undefined, and
    nan shows up as a gap in a plot instead of a misleading number.
    """
    m = mask.bool()
    n = m.sum()
    if n < 2:
        return float("nan")

    def var(x: Tensor) -> Tensor:  # unbiased masked variance
        mean = masked_sum(x, m) / n
        return masked_sum((x - mean) ** 2, m) / (n - 1)

    var_r = var(returns)
    if var_r == 0:
        return float("nan")
    return float(1.0 - var(returns - values) / var_r)


@torch.no_grad()
def approx_kl(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """How far has the policy moved since sampling? KL(pi_old || pi_theta), averaged over valid tokens.

    The tokens were sampled from pi_old, so with ratio r = pi_theta / pi_old the k3 estimator is
    (r - 1) - log r (Schulman's blog; what PPO implementations log as `approx_kl`).
    Returns a detached 0-dim tensor (call .item() to log it).
    """
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask)

"""Reference values and invariants for minirl/losses.py."""

import math

import pytest
import torch

from minirl.losses import (
    AGGREGATION_MODES,
    aggregate,
    approx_kl,
    cispo_loss,
    clipped_surrogate,
    entropy_from_logits,
    importance_log_ratio,
    explained_variance,
    kl_penalty,
    masked_mean,
    masked_sum,
    policy_loss,
    value_loss,
)

ATOL = 1e-6


def close(a, b, atol=ATOL):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                               atol=atol, rtol=0.0)


# ----------------------------------------------------------------------------- masked reductions


def test_masked_reductions():
    x = torch.tensor([[1.0, 2.0, float("inf")], [3.0, float("nan"), 5.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 1]])
    close(masked_sum(x, m), 11.0)
    close(masked_mean(x, m), 11.0 / 4)
    close(masked_mean(x, m, dim=1), [1.5, 4.0])
    close(masked_mean(x, torch.zeros_like(m), dim=1), [0.0, 0.0])  # empty rows: 0, not nan


# ----------------------------------------------------------------------------- clipped surrogate


def _one_token(A, r, **kw):
    lp = torch.tensor([[math.log(r)]], requires_grad=True)
    loss, stats = clipped_surrogate(lp, torch.zeros(1, 1), torch.tensor([A]), **kw)
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    return loss.item(), grad.item(), stats


@pytest.mark.parametrize(
    "A, r, want_loss, zero_grad, which",
    [
        (+1.0, 1.5, -1.28, True, "clipped_high"),
        (+1.0, 0.5, -0.5, False, None),
        (-1.0, 0.5, 0.8, True, "clipped_low"),
        (-1.0, 1.5, 1.5, False, None),
    ],
)
def test_clipped_surrogate_reference(A, r, want_loss, zero_grad, which):
    loss, grad, stats = _one_token(A, r, clip_low=0.2, clip_high=0.28)
    assert loss == pytest.approx(want_loss, abs=ATOL)
    if zero_grad:
        assert grad == 0.0
    else:  # d(-r A)/d logpi = -r A
        assert grad == pytest.approx(-r * A, abs=ATOL)
    for name in ("clipped_low", "clipped_high", "dual_clipped"):
        assert getattr(stats, name).item() == (1.0 if name == which else 0.0)
    assert stats.ratio.item() == pytest.approx(r, abs=ATOL)


def test_dual_clip():
    loss, grad, stats = _one_token(-1.0, 5.0, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    assert loss == pytest.approx(3.0, abs=ATOL)
    assert grad == 0.0
    assert stats.dual_clipped.item() == 1.0
    # Below the cap, and for A > 0, dual clip changes nothing.
    assert _one_token(-1.0, 1.5, dual_clip=3.0)[0] == pytest.approx(1.5, abs=ATOL)
    assert _one_token(+1.0, 5.0, clip_high=0.28, dual_clip=3.0)[0] == pytest.approx(-1.28, abs=ATOL)


def test_first_step_on_policy():
    torch.manual_seed(0)
    B, T, V = 3, 4, 5
    logits = torch.randn(B, T, V, requires_grad=True)
    tokens = torch.randint(V, (B, T))
    lp = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)  # (B, T)
    A = torch.randn(B, T)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    loss_tok, stats = clipped_surrogate(lp, lp.detach(), A)
    close(stats.ratio, torch.ones(B, T))
    close(loss_tok, -A)
    for s in (stats.clipped_low, stats.clipped_high, stats.dual_clipped):
        assert s.sum() == 0
    (g,) = torch.autograd.grad(aggregate(loss_tok, mask, "token-mean"), logits, retain_graph=True)
    (g_ref,) = torch.autograd.grad(-(A * lp * mask).sum() / mask.sum(), logits)  # vanilla policy gradient
    close(g, g_ref)


def test_sequence_advantages_broadcast():
    lp = torch.randn(2, 3)
    old = lp + 0.1 * torch.randn(2, 3)
    A = torch.tensor([1.0, -2.0])
    close(clipped_surrogate(lp, old, A)[0], clipped_surrogate(lp, old, A[:, None].expand(2, 3))[0])


def test_clipped_surrogate_errors():
    x = torch.zeros(1, 2)
    for kw, name in [({"clip_low": 0.0}, "clip_low"), ({"clip_low": 1.5}, "clip_low"),
                     ({"clip_high": 0.0}, "clip_high"), ({"dual_clip": 1.0}, "dual_clip")]:
        with pytest.raises(ValueError, match=name):
            clipped_surrogate(x, x, torch.zeros(1), **kw)
    with pytest.raises(ValueError, match="advantages"):
        clipped_surrogate(x, x, torch.zeros(1, 3))


# ----------------------------------------------------------------------------- aggregation

LOSS = torch.tensor([[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 0.0]])
MASK = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
WANT = {"token-mean": 1.75, "seq-mean-token-mean": 1.5, "seq-mean-token-sum": 3.5, "seq-mean-token-sum-norm": 0.875}


def test_aggregate_reference():
    assert set(WANT) == set(AGGREGATION_MODES)
    for mode, want in WANT.items():
        close(aggregate(LOSS, MASK, mode), want)


def test_aggregate_microbatch_invariance():
    totals = dict(num_tokens=int(MASK.sum()), num_seqs=2, max_len=4)
    # Each micro-batch trimmed to its own width, as a per-micro-batch collator would pad it.
    micro = [(LOSS[:1, :1], MASK[:1, :1]), (LOSS[1:, :3], MASK[1:, :3])]
    for mode, want in WANT.items():
        close(sum(aggregate(l, m, mode, **totals) for l, m in micro), want)
    # The trap: averaging per-micro-batch token means gives 1.5, not 1.75.
    naive = sum(aggregate(l, m, "token-mean") for l, m in micro) / len(micro)
    close(naive, 1.5)


def test_aggregate_padding_changes_nothing():
    torch.manual_seed(0)
    lp = torch.randn(2, 3, requires_grad=True)
    old, A = torch.randn(2, 3), torch.randn(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # Two extra padded columns of finite garbage: log-ratios whose exp would overflow, huge advantages.
    garbage = torch.tensor([[40.0, -50.0], [-60.0, 1e4]], requires_grad=True)
    lp_pad = torch.cat([lp, garbage], 1)  # (2, 5)
    old_pad = torch.cat([old, torch.tensor([[-90.0, 3.0], [90.0, 0.0]])], 1)
    A_pad = torch.cat([A, torch.tensor([[1e6, -1e6], [-1e6, 5.0]])], 1)
    mask_pad = torch.cat([mask, torch.zeros(2, 2, dtype=mask.dtype)], 1)
    for mode in AGGREGATION_MODES:
        kw = {"max_len": 8} if mode == "seq-mean-token-sum-norm" else {}
        for dual in (None, 3.0):
            out = aggregate(clipped_surrogate(lp, old, A, dual_clip=dual)[0], mask, mode, **kw)
            out_pad = aggregate(clipped_surrogate(lp_pad, old_pad, A_pad, dual_clip=dual)[0], mask_pad, mode, **kw)
            close(out_pad, out)
            (g,) = torch.autograd.grad(out, lp)
            g_pad, g_garbage = torch.autograd.grad(out_pad, (lp, garbage))
            close(g_pad, g)
            assert (g_garbage == 0).all()  # no gradient (and no nan) flows into padded positions


def test_aggregate_empty_rows():
    loss = torch.tensor([[float("nan"), 1.0], [2.0, 4.0]])
    mask = torch.tensor([[0, 0], [1, 1]])
    close(aggregate(loss, mask, "seq-mean-token-mean"), 1.5)  # (0 + 3) / 2 rows
    close(aggregate(loss, mask, "token-mean"), 3.0)
    for mode in AGGREGATION_MODES:
        close(aggregate(loss, torch.zeros_like(mask), mode), 0.0)


def test_aggregate_errors():
    with pytest.raises(ValueError, match="token-mean"):  # lists the allowed modes
        aggregate(LOSS, MASK, "mean")
    with pytest.raises(ValueError, match="num_tokens"):
        aggregate(LOSS, MASK, "token-mean", num_tokens=0)


# ----------------------------------------------------------------------------- KL


def test_kl_reference():
    l = torch.tensor([0.1, 1.0, -1.0])
    close(kl_penalty(l, torch.zeros(3), "k3"), [0.0048374, 0.3678794, 0.7182818])
    close(kl_penalty(l, torch.zeros(3), "k1"), l)
    close(kl_penalty(l, torch.zeros(3), "k2"), 0.5 * l**2)
    assert torch.isfinite(kl_penalty(torch.tensor([-500.0, 500.0]), torch.zeros(2))).all()


def test_kl_expectations_exact():
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    e = {k: (p * kl_penalty(p.log(), q.log(), k)).sum().item() for k in ("k1", "k2", "k3")}
    assert e["k1"] == pytest.approx(0.5838147, abs=ATOL)
    assert e["k3"] == pytest.approx(0.5838147, abs=ATOL)
    assert e["k2"] == pytest.approx(0.6936016, abs=ATOL)


def test_kl_errors():
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")


# ----------------------------------------------------------------------------- value loss, diagnostics


def test_value_loss():
    V, V_old, R = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[2.0, 0.5]])
    close(value_loss(V, V_old, R), [[0.5, 0.125]])
    # clip 0.2: V clipped to 0.2 -> (0.2 - 2)^2 = 3.24 > 1 ; second token unchanged
    close(value_loss(V, V_old, R, clip=0.2), [[0.5 * 3.24, 0.125]])
    # Pessimistic only: when the clipped value is closer to R, the unclipped loss is kept.
    close(value_loss(torch.tensor([3.0]), torch.tensor([0.0]), torch.tensor([1.0]), clip=0.2), [2.0])
    with pytest.raises(ValueError, match="clip"):
        value_loss(V, V_old, R, clip=0.0)


def test_entropy_from_logits():
    close(entropy_from_logits(torch.zeros(1, 2, 4)), torch.full((1, 2), math.log(4)))
    logits = torch.tensor([[[1000.0, 0.0, float("-inf")]]])
    close(entropy_from_logits(logits), [[0.0]])
    logits = torch.randn(2, 3, 5)
    p = logits.softmax(-1)
    close(entropy_from_logits(logits), -(p * p.log()).sum(-1), atol=1e-5)


def test_explained_variance():
    R = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    m = torch.tensor([[1, 1, 1, 0]])
    assert explained_variance(R, R, m) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(R, 2.0), R, m) == pytest.approx(0.0, abs=ATOL)
    assert math.isnan(explained_variance(R, torch.ones_like(R), m))


def test_approx_kl():
    lp = torch.tensor([[0.0, -1.0, 5.0]])
    assert approx_kl(lp, lp, torch.ones(1, 3)).item() == 0.0
    l = torch.tensor(0.5)
    want = (torch.exp(l) - 1 - l).item()
    assert approx_kl(torch.tensor([[0.5, 9.0]]), torch.zeros(1, 2), torch.tensor([[1, 0]])).item() == pytest.approx(want)


# ----------------------------------------------------------------------------- after DAPO: GSPO and CISPO


def test_sequence_ratio_is_the_geometric_mean_of_the_token_ratios():
    """GSPO eq. 7 on numbers you can check by hand: token log-ratios 0.3, -0.1, 0.1 (and padding) -> 0.1."""
    logp = torch.tensor([[-1.0, -2.0, -0.5, 9.0], [-1.0, -1.0, 0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.3, -1.9, -0.6, 0.0], [-1.2, -1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    seq = importance_log_ratio(logp, old, mask, "sequence")
    close(seq, [[0.1] * 4, [0.1] * 4])  # every token of a row carries its row's mean (padding never leaks in)
    tok = importance_log_ratio(logp, old, mask, "token")
    close(torch.exp(seq[0, 0]), torch.exp(tok[0, :3]).prod() ** (1 / 3))
    seq[0, 0].backward()  # d mean / d log pi_t = 1/|y| for the row's own tokens, 0 elsewhere
    close(logp.grad, [[1 / 3, 1 / 3, 1 / 3, 0.0], [0.0, 0.0, 0.0, 0.0]])


def test_gspo_clips_whole_answers():
    """With the sequence ratio a row is clipped as a whole: all its tokens, or none."""
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(6, 5, generator=gen)).requires_grad_(True)
    old = logp.detach() + 0.02 * torch.randn(6, 5, generator=gen)
    mask = torch.ones(6, 5)
    A = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    loss, stats = clipped_surrogate(logp, old, A, 3e-4, 4e-4, mask=mask, ratio_level="sequence")
    clipped = stats.clipped_low + stats.clipped_high  # (6, 5)
    assert ((clipped.sum(1) == 0) | (clipped.sum(1) == 5)).all()
    assert 0 < clipped[:, 0].sum() < 6  # these drifts clip some answers, not all
    loss.sum().backward()
    for row in range(6):  # a clipped answer gets no gradient at all; the others get theirs on every token
        assert (logp.grad[row] == 0).all() == bool(clipped[row, 0])


def test_cispo_keeps_the_gradient_the_clip_drops():
    """Outside the band the clipped surrogate's gradient is 0; CISPO's is the capped weight times -A."""
    logp = torch.log(torch.tensor([[0.5, 0.2, 0.9]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.2, 0.2, 0.3]]))  # ratios 2.5, 1.0, 3.0
    A = torch.tensor([1.0])
    clip_loss, clip_stats = clipped_surrogate(logp, old, A, 0.2, 0.28)
    (g_clip,) = torch.autograd.grad(clip_loss.sum(), logp)
    close(g_clip, [[0.0, -1.0, 0.0]])  # ratios 2.5 and 3.0 are past 1.28: no gradient
    cispo, stats = cispo_loss(logp, old, A, clip_low=1.0, clip_high=1.0)  # weights capped at 2
    (g_cispo,) = torch.autograd.grad(cispo.sum(), logp)
    close(g_cispo, [[-2.0, -1.0, -2.0]])  # every token keeps -w * A, with w = min(ratio, 2)
    close(stats.clipped_high, [[1.0, 0.0, 1.0]])
    close(cispo.detach(), -torch.tensor([[2.0, 1.0, 2.0]]) * logp.detach())  # loss = -sg(w) * A * log pi


def test_cispo_weight_has_no_gradient_and_a_negative_advantage_pushes_down():
    logp = torch.log(torch.tensor([[0.4, 0.1]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.1, 0.1]]))  # ratios 4 and 1
    loss, _ = cispo_loss(logp, old, torch.tensor([-1.0]), clip_low=1.0, clip_high=4.0)
    (g,) = torch.autograd.grad(loss.sum(), logp)
    close(g, [[4.0, 1.0]])  # descending the loss lowers log pi of both tokens, the off-policy one 4 times as much


def test_policy_loss_chooses_and_refuses():
    logp, old, A = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.2, -1.5]]), torch.tensor([0.5])
    mask = torch.ones(1, 2)
    close(policy_loss("clip", logp, old, A, mask, clip_low=0.2, clip_high=0.28)[0],
          clipped_surrogate(logp, old, A, 0.2, 0.28)[0])
    close(policy_loss("cispo", logp, old, A, mask, clip_low=1.0, clip_high=4.0)[0], cispo_loss(logp, old, A)[0])
    with pytest.raises(ValueError, match="kind='gspo' is not allowed"):
        policy_loss("gspo", logp, old, A, mask, clip_low=0.2, clip_high=0.2)
    with pytest.raises(ValueError, match="dual_clip=3.0 is not allowed with kind='cispo'"):
        policy_loss("cispo", logp, old, A, mask, clip_low=1.0, clip_high=4.0, dual_clip=3.0)
    with pytest.raises(ValueError, match="level='sequence' needs a"):
        importance_log_ratio(logp, old, None, "sequence")
    with pytest.raises(ValueError, match="level='seq' is not allowed"):
        importance_log_ratio(logp, old, mask, "seq")

"""Reference values and invariants for minirl/losses.py."""

import math

import pytest
import torch

from minirl.losses import (
    AGGREGATION_MODES,
    aggregate,
    approx_kl,
    clipped_surrogate,
    entropy_from_logits,
    explained_variance,
    kl_penalty,
    masked_mean,
    masked_sum,
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

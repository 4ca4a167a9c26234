"""Reference values and invariants for minirl/advantages.py."""

import pytest
import torch

from minirl.advantages import broadcast_to_tokens, gae, group_advantages, rloo_advantages, whiten

ATOL = 1e-6


def close(a, b, atol=ATOL, rtol=0.0):
    torch.testing.assert_close(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                               atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------- GAE


def test_gae_reference():
    A, R = gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 3), torch.ones(1, 3), gamma=1.0, lam=0.95)
    close(A, [[0.9025, 0.95, 1.0]])
    close(R, A)  # V = 0 -> returns = advantages


def test_gae_lambda_extremes():
    r = torch.tensor([[0.5, -1.0, 2.0]])
    v = torch.tensor([[0.1, 0.4, -0.3]])
    m = torch.ones(1, 3)
    # lam = 0: one-step TD error, V after the last token is 0.
    A, R = gae(r, v, m, gamma=0.9, lam=0.0)
    close(A, [[0.5 + 0.9 * 0.4 - 0.1, -1.0 + 0.9 * -0.3 - 0.4, 2.0 + 0.3]])
    # lam = 1, gamma = 1: returns are Monte Carlo reward-to-go.
    A, R = gae(r, v, m, gamma=1.0, lam=1.0)
    close(R, [[1.5, 1.0, 2.0]])
    close(A, R - v)


def test_gae_padding_is_ignored_and_zero():
    r = torch.tensor([[0.0, 1.0], [0.3, 0.2]])
    v = torch.tensor([[0.2, 0.5], [0.1, -0.4]])
    A_ref, R_ref = gae(r, v, torch.ones(2, 2), 0.99, 0.95)
    # Row 1 unchanged; row 2 becomes length 1 and gets garbage after it.
    r_pad = torch.tensor([[0.0, 1.0, 7.0, -3.0], [0.3, 9.0, 9.0, 9.0]])
    v_pad = torch.tensor([[0.2, 0.5, 5.0, 4.0], [0.1, 8.0, -8.0, 8.0]])
    m_pad = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    A, R = gae(r_pad, v_pad, m_pad, 0.99, 0.95)
    close(A[0, :2], A_ref[0])
    close(R[0, :2], R_ref[0])
    close(A[1, 0], 0.3 - 0.1)  # last valid token: bootstrap value is 0
    close(A[m_pad == 0], torch.zeros(5))
    close(R[m_pad == 0], torch.zeros(5))


def test_gae_no_grad_and_errors():
    v = torch.zeros(1, 3, requires_grad=True)
    A, R = gae(torch.ones(1, 3), v, torch.ones(1, 3), 1.0, 1.0)
    assert not A.requires_grad and not R.requires_grad
    with pytest.raises(ValueError, match="gamma"):
        gae(torch.ones(1, 3), v, torch.ones(1, 3), 1.5, 1.0)
    with pytest.raises(ValueError, match="lam"):
        gae(torch.ones(1, 3), v, torch.ones(1, 3), 1.0, -0.1)


# ----------------------------------------------------------------------------- group baselines


def test_group_advantages_reference():
    r, g = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    close(group_advantages(r, g), [1.5, -0.5, -0.5, -0.5], rtol=1e-3, atol=0.0)
    close(group_advantages(r, g, scale="none"), [0.75, -0.25, -0.25, -0.25])
    # biased std = sqrt(3)/4
    close(group_advantages(r, g, unbiased=False, eps=0.0), torch.tensor([0.75, -0.25, -0.25, -0.25]) / (3**0.5 / 4))


def test_group_advantages_groups_do_not_mix_and_order_free():
    r = torch.tensor([1.0, 0.0, 0.0, 3.0, 0.0, 1.0])
    contiguous = group_advantages(r, torch.tensor([0, 0, 0, 1, 1, 1]))
    close(contiguous[:3], group_advantages(r[:3], torch.zeros(3, dtype=torch.long)))
    close(contiguous[3:], group_advantages(r[3:], torch.zeros(3, dtype=torch.long)))
    perm = torch.tensor([0, 3, 1, 4, 2, 5])  # interleave: group ids [0,1,0,1,0,1], arbitrary labels
    for fn in (lambda r, g: group_advantages(r, g), lambda r, g: group_advantages(r, g, scale="none"),
               lambda r, g: group_advantages(r, g, scale="batch"), rloo_advantages):
        ref = fn(r, torch.tensor([0, 0, 0, 1, 1, 1]))
        close(fn(r[perm], torch.tensor([7, 42, 7, 42, 7, 42])), ref[perm])


def test_group_advantages_degenerate_groups():
    r = torch.tensor([0.1, 0.1, 0.1, 5.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 0, 1, 2, 2])  # all-equal group, singleton group, normal group
    for scale in ("group", "batch", "none"):
        a = group_advantages(r, g, scale=scale)
        assert torch.isfinite(a).all()
        assert (a[:4] == 0.0).all()  # exactly zero
        assert a[4] > 0 > a[5]
    a = group_advantages(torch.tensor([2.0]), torch.tensor([0]), scale="batch")
    assert a.item() == 0.0


def test_group_advantages_batch_scale():
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    close(group_advantages(r, g, scale="batch", eps=0.0), torch.tensor([0.5, -0.5, 1.0, -1.0]) / r.std())


def test_group_advantages_errors():
    r, g = torch.zeros(4), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="scale='std'"):
        group_advantages(r, g, scale="std")
    with pytest.raises(ValueError, match="group_ids"):
        group_advantages(r, g.float())
    with pytest.raises(ValueError, match="shapes"):
        group_advantages(r, g[:3])


def test_rloo_reference():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 4.0])
    g = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    close(rloo_advantages(r, g), [1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0])
    r = torch.tensor([1.0, 2.0, 6.0])
    close(rloo_advantages(r, torch.zeros(3, dtype=torch.long)), [1 - 4.0, 2 - 3.5, 6 - 1.5])


# ----------------------------------------------------------------------------- token helpers


def test_whiten():
    x = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 5.0, -99.0, 7.0]])
    m = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    w = whiten(x, m)
    valid = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    close(w[m.bool()], (valid - valid.mean()) / valid.std(), atol=1e-5)
    close(w[~m.bool()], torch.zeros(3))
    w = whiten(x, m, shift_mean=False)
    close(w[m.bool()], (valid - valid.mean()) / valid.std() + valid.mean(), atol=1e-5)
    close(w[~m.bool()], torch.zeros(3))


def test_broadcast_to_tokens():
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    close(out, [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="seq_advantages"):
        broadcast_to_tokens(torch.zeros(3), torch.ones(2, 3))

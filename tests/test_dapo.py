"""Reference values and invariants for minirl/dapo.py."""

import pytest
import torch

from minirl.dapo import (
    dynamic_sampling_keep,
    frac_reward_zero_std,
    overlong_filter_mask,
    soft_overlong_punishment,
    zero_variance_groups,
)

R = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5])
G = torch.tensor([0, 0, 1, 1, 2, 2, 3])  # all correct, mixed, all wrong, singleton


def test_zero_variance_and_keep():
    want = torch.tensor([True, True, False, False, True, True, True])
    assert torch.equal(zero_variance_groups(R, G), want)
    assert torch.equal(dynamic_sampling_keep(R, G), ~want)


def test_non_contiguous_groups():
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5])
    labels = torch.tensor([10, 20, 30, 40])[G]  # arbitrary prompt ids
    assert torch.equal(zero_variance_groups(R[perm], labels[perm]), zero_variance_groups(R, G)[perm])
    assert torch.equal(
        dynamic_sampling_keep(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 1, 0, 1])),
        torch.tensor([True, False, True, False]),
    )


def test_frac_reward_zero_std():
    assert frac_reward_zero_std(R, G) == pytest.approx(3 / 4)  # counts groups, not samples (5/7)
    assert frac_reward_zero_std(torch.tensor([1, 0, 1, 0]), torch.tensor([0, 0, 1, 1])) == 0.0


def test_overlong_filter_mask():
    out = overlong_filter_mask(torch.tensor([True, False, True]))
    assert out.dtype == torch.float32
    assert out.tolist() == [0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="truncated"):
        overlong_filter_mask(torch.tensor([0.0, 1.0]))


def test_soft_overlong_punishment_reference():
    out = soft_overlong_punishment(torch.tensor([10, 80, 90, 100, 110]), max_len=100, cache_len=20)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]), atol=1e-6, rtol=0.0)
    out = soft_overlong_punishment(torch.tensor([0, 1, 2]), max_len=2, cache_len=2)  # cache = whole budget
    torch.testing.assert_close(out, torch.tensor([0.0, -0.5, -1.0]), atol=1e-6, rtol=0.0)


@pytest.mark.parametrize("max_len, cache_len, name", [(100, 0, "cache_len"), (100, 101, "cache_len"),
                                                       (0, 1, "max_len"), (100, -5, "cache_len")])
def test_soft_overlong_punishment_errors(max_len, cache_len, name):
    with pytest.raises(ValueError, match=name):
        soft_overlong_punishment(torch.tensor([1]), max_len=max_len, cache_len=cache_len)

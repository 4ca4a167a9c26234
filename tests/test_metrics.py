"""metrics.py: statistics from totals equal the direct tensor computations, also when the rows are split."""

import math

import pytest
import torch

from minirl import losses, metrics


def test_explained_variance_from_totals_is_the_loss_module_one():
    gen = torch.Generator().manual_seed(0)
    values, returns = torch.randn(6, 5, generator=gen), torch.randn(6, 5, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).float()
    direct = losses.explained_variance(values, returns, mask)
    whole = metrics.explained_variance(metrics.value_totals(values, returns, mask))
    # split the rows as two processes would, add the totals
    halves = [metrics.value_totals(values[s], returns[s], mask[s]) for s in (slice(0, 3), slice(3, 6))]
    added = metrics.explained_variance({k: halves[0][k] + halves[1][k] for k in halves[0]})
    assert whole == pytest.approx(direct, rel=1e-6) and added == pytest.approx(direct, rel=1e-6)
    assert math.isnan(metrics.explained_variance(metrics.value_totals(values, torch.ones(6, 5), mask)))


def test_reward_mean_and_std_from_moments():
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.5, 0.25, 0.0, 1.0, 0.0])
    t = metrics.moments(rewards, "reward")
    assert t["reward_sum"] / t["reward_n"] == pytest.approx(rewards.mean().item())
    assert metrics.unbiased_std(t, "reward") == pytest.approx(rewards.std().item(), rel=1e-6)
    assert metrics.unbiased_std(metrics.moments(rewards[:1], "reward"), "reward") == 0.0


def test_combine_in_one_process_is_the_identity():
    totals = {"a_sum": 1.5, "completion_len_max": 3.0}
    assert metrics.combine(None, totals) == totals

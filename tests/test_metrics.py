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


def test_lengths_of_right_and_wrong_answers_apart_also_when_the_rows_are_split():
    correct = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])  # the task's "correct" component
    lengths = torch.tensor([10, 40, 64, 12, 20, 30])
    parts, names = torch.stack([correct, correct * 0.5], 1), ["correct", "reward_part"]
    group_ids = torch.arange(6)  # groups of one: the lengths are what this test is about

    def row(rows: slice) -> dict:
        n = len(range(6)[rows])
        return metrics.rollout_totals([correct[rows]], [parts[rows]], names, [lengths[rows]],
                                      [lengths[rows] >= 64], group_ids[rows], kept_groups=n, group_size=1)

    whole = metrics.rollout_metrics(row(slice(0, 6)))
    assert (whole["completion_len_correct"], whole["completion_len_incorrect"]) == (11.0, 38.5)
    halves = [row(slice(0, 3)), row(slice(3, 6))]  # what two processes hold: added, then divided
    added = metrics.rollout_metrics({k: halves[0][k] + halves[1][k] for k in halves[0]})
    assert added["completion_len_correct"] == 11.0 and added["completion_len_incorrect"] == 38.5
    none_right = metrics.rollout_metrics(row(slice(1, 3)))
    assert math.isnan(none_right["completion_len_correct"]) and none_right["completion_len_incorrect"] == 52.0


def test_the_share_of_missed_first_attempts_that_were_retried_is_a_ratio_of_totals():
    """worked steps: retry_rate_after_miss = answers retried after a missed first attempt / answers whose first
    attempt missed, summed over every row (and process) first: not a mean of per-process ratios."""
    first_missed = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    retried = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    parts, names = torch.stack([first_missed, retried], 1), ["first_missed", "retried"]

    def totals(rows: slice) -> dict:
        n = len(range(6)[rows])
        return metrics.rollout_totals([first_missed[rows]], [parts[rows]], names, [torch.full((n,), 5)],
                                      [torch.zeros(n, dtype=torch.bool)], torch.arange(6)[rows], kept_groups=n,
                                      group_size=1)

    assert metrics.rollout_metrics(totals(slice(0, 6)))["retry_rate_after_miss"] == pytest.approx(1 / 5)
    halves = [totals(slice(0, 2)), totals(slice(2, 6))]  # 1 of 2 and 0 of 3: the batch's share is 1 of 5
    assert metrics.rollout_metrics({k: halves[0][k] + halves[1][k] for k in halves[0]})["retry_rate_after_miss"] \
        == pytest.approx(1 / 5)
    assert "retry_rate_after_miss" not in metrics.rollout_metrics(totals(slice(2, 3)))  # no miss: nothing to share

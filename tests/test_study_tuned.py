"""The tuned study (claims_tuned.py): its registration's points and families, Holm's correction, the band width
of claim L, and the fact that lets claim C leave GRPO out (its clip cannot act)."""

import math

import pytest
import torch

from minirl.study import SCALES, plan
from minirl.study.claims import CLAIMS, count_tests
from minirl.study.claims_tuned import (FAMILIES, GRID, REGISTERED_ORDER, SEEDS, TUNED_CLAIMS, band_width, judge,
                                       steps_to)
from minirl.study.power import compare, holm, p_value

pytestmark = pytest.mark.usefixtures("one_thread")


def test_grpo_makes_one_update_per_rollout_so_its_clip_cannot_act():
    """Claim C runs no GRPO points: with one update per rollout the ratio is exactly 1, so eps 0.1 and 0.3 train
    bit-identical weights (a PPO-style second update would make them differ)."""
    from minirl.config import RLConfig
    from minirl.policy import load_policy
    from minirl.tasks import get_task
    from minirl.trainer import train

    def weights(**overrides):
        policy = load_policy("tiny-worked", device="cpu")
        config = RLConfig.preset("grpo", steps=2, batch_size=2, group_size=4, max_new_tokens=24, eval_every=0,
                                 seed=3, lr=1e-3, **overrides)
        train(policy, get_task("worked").make(), config, progress=False)
        return torch.cat([p.detach().flatten() for p in policy.model.parameters()])

    tight, loose = weights(clip_low=0.1, clip_high=0.1), weights(clip_low=0.3, clip_high=0.3)
    assert torch.equal(tight, loose)
    # the same two settings with two updates per rollout (the ratio leaves 1) do differ: the check can fail
    assert not torch.equal(weights(clip_low=0.1, clip_high=0.1, minibatches=2),
                           weights(clip_low=0.3, clip_high=0.3, minibatches=2))

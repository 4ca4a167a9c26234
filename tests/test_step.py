"""The RL step's bookkeeping (minirl/step.py): every draw seeded from (seed, step), so a step is the same whatever
ran before it; one step numbering (1 for the first, as metrics.jsonl); a micro-batch's rows selected together."""

import json

import pytest
import torch

from minirl import Countdown, RLConfig, load_policy
from minirl.step import MINIBATCH_ORDER, Batch, compute_advantages, generate, rl_step, step_seed
from minirl.trainer import make_learner

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = Countdown()
TIMINGS = ("time/generation", "time/reference", "time/learn")


def small(**overrides) -> RLConfig:
    return RLConfig.preset("dapo", **{**dict(batch_size=4, group_size=4, max_new_tokens=12, overlong_cache=2,
                                             dynamic_sampling=False, seed=3), **overrides})


def test_every_draw_of_a_step_is_seeded_from_the_seed_and_the_step():
    config = small()
    # pinned: every recorded run drew with these numbers, so changing them changes every run
    assert step_seed(config, 1, 0) == 3 * 1_000_003  # step 1's prompts
    assert step_seed(config, 5, 17 * 2 + 1) == 3 * 1_000_003 + 4 * 1009 + 35  # step 5, round 2, rank 1's samples
    assert step_seed(config, 5, MINIBATCH_ORDER) == 3 * 1_000_003 + 5 * 1009 + 99 * 17  # step 5's minibatch order
    # no two draws of a run share a seed: 10 generation rounds x 4 ranks and the shuffle, for 200 steps
    seeds = [step_seed(config, s, offset) for s in range(1, 201)
             for offset in [17 * r + k for r in range(10) for k in range(4)] + [MINIBATCH_ORDER]]
    assert len(set(seeds)) == len(seeds)


def test_a_step_draws_from_its_own_seeds_not_from_the_global_random_state():
    """Resuming needs no generator state: whatever the global generators did before, step 2 is step 2."""
    config = small(minibatches=2)  # a shuffled minibatch order too
    rows = []
    for noise in (1, 2):
        policy = load_policy(device="cpu")
        learner = make_learner(policy, config)[0]
        torch.manual_seed(noise), torch.rand(noise * 1000)  # what any earlier code may have done
        row = rl_step(policy, TASK, config, learner, step=2)
        rows.append(json.dumps({k: v for k, v in row.items() if k not in TIMINGS}, sort_keys=True))  # NaN == NaN
    assert rows[0] == rows[1]


def test_a_steps_prompts_are_the_train_problems_of_its_seed():
    config = small()
    policy = load_policy(device="cpu")
    roll, _, group_ids, _, _ = generate(policy, TASK, config, step=2, round_=0, rank=0, world=1)
    problems = TASK.problems("train", config.batch_size, seed=step_seed(config, 2, 0))
    ids, _ = policy.encode_prompts([p.prompt for p in problems for _ in range(config.group_size)])
    assert torch.equal(roll.prompt_ids, ids)  # G completions of each prompt, groups contiguous
    assert group_ids.tolist() == [g for g in range(config.batch_size) for _ in range(config.group_size)]


def test_select_takes_the_same_rows_of_every_field_cut_to_their_longest_completion():
    config = small()
    policy = load_policy(device="cpu")
    roll, rewards, group_ids, _, _ = generate(policy, TASK, config, step=1, round_=0, rank=0, world=1)
    mask = roll.completion_mask.float()
    advantages, _ = compute_advantages(config, rewards, group_ids, mask, None, None, None)
    batch = Batch(roll, advantages, mask, old_logprobs=mask * -1.0, ref_logprobs=None, old_values=None, returns=None)
    index = roll.lengths.argsort()[:5]  # the five shortest completions
    part = batch.select(index)
    T = int(roll.lengths[index].max())
    assert len(part) == 5 and part.advantages.shape == part.loss_mask.shape == part.old_logprobs.shape == (5, T)
    assert torch.equal(part.advantages, advantages[index, :T]) and torch.equal(part.loss_mask, mask[index, :T])
    assert torch.equal(part.rollout.completion_ids, roll.completion_ids[index, :T]) and part.ref_logprobs is None

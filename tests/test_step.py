"""The RL step's bookkeeping (minirl/step.py): every draw seeded from (seed, step), so a step is the same whatever
ran before it; one step numbering (1 for the first, as metrics.jsonl); a micro-batch's rows selected together."""

import json

import pytest
import torch

from minirl import Countdown, FunctionTask, RLConfig, load_policy
from minirl.step import (MINIBATCH_ORDER, Batch, DynamicSamplingExhausted, collect, compute_advantages, generate,
                         micro_batches, rl_step, step_seed)
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
    roll, _, _, group_ids, _, _ = generate(policy, TASK, config, step=2, round_=0, rank=0, world=1)
    problems = TASK.problems("train", config.batch_size, seed=step_seed(config, 2, 0))
    ids, _ = policy.encode_prompts([p.prompt for p in problems for _ in range(config.group_size)])
    assert torch.equal(roll.prompt_ids, ids)  # G completions of each prompt, groups contiguous
    assert group_ids.tolist() == [g for g in range(config.batch_size) for _ in range(config.group_size)]


def test_select_takes_the_same_rows_of_every_field_cut_to_their_longest_completion():
    config = small()
    policy = load_policy(device="cpu")
    roll, rewards, _, group_ids, _, _ = generate(policy, TASK, config, step=1, round_=0, rank=0, world=1)
    mask = roll.completion_mask.float()
    advantages, _ = compute_advantages(config, rewards, group_ids, mask, None, None, None)
    batch = Batch(roll, advantages, mask, old_logprobs=mask * -1.0, ref_logprobs=None, old_values=None, returns=None)
    index = roll.lengths.argsort()[:5]  # the five shortest completions
    part = batch.select(index)
    T = int(roll.lengths[index].max())
    assert len(part) == 5 and part.advantages.shape == part.loss_mask.shape == part.old_logprobs.shape == (5, T)
    assert torch.equal(part.advantages, advantages[index, :T]) and torch.equal(part.loss_mask, mask[index, :T])
    assert torch.equal(part.rollout.completion_ids, roll.completion_ids[index, :T]) and part.ref_logprobs is None


@pytest.mark.parametrize("micro_batch_size", [0, 4])
def test_micro_batches_choose_their_rows_on_the_cpu_whatever_device_the_lengths_are_on(micro_batch_size):
    """On a GPU the completions' lengths live on the model's device and the minibatch's row indices on the CPU; a
    CPU tensor indexed with a GPU's indices is an error. This machine has no GPU, so the lengths here are fake CUDA
    tensors (torch's FakeTensorMode): any computation on them fails on a CPU-only build, so micro_batches passes
    only if it moves the lengths to the CPU before choosing rows. The same rows as with CPU lengths."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    lengths, mb = torch.tensor([5, 2, 9, 4, 4, 7, 1, 3]), torch.tensor([6, 1, 3, 0, 7, 2, 5, 4])
    config = RLConfig.preset("dapo", micro_batch_size=micro_batch_size)
    on_cpu = micro_batches(mb, lengths, config)
    if micro_batch_size == 0:  # length_sorted_passes reads the lengths' values: check the device move itself
        assert [m.device.type for m in on_cpu] == ["cpu"] * len(on_cpu)
        return
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        on_gpu = torch.empty(len(lengths), dtype=torch.long, device="cuda")  # values unknown: only devices count
        assert on_gpu.device.type == "cuda"
        with pytest.raises(RuntimeError):  # the bug this guards against: rows chosen with the device's tensors
            mb[on_gpu[mb].argsort(stable=True)]
        rows = micro_batches(mb, on_gpu, config)
        assert [r.device.type for r in rows] == ["cpu", "cpu"] and [r.shape for r in rows] == [(4,), (4,)]
    assert [r.tolist() for r in on_cpu] == [[6, 1, 7, 3], [4, 0, 5, 2]]  # by length, 4 rows per pass


def length_reward(answer, completion):
    """A shaped reward that never solves: longer answers earn more, and nothing is correct."""
    return {"reward": len(completion) / 100, "correct": 0.0}


SHAPED = FunctionTask("shaped-never-right", lambda rng: (f"{rng.randint(1, 9)}=", "x", None), length_reward)


def test_dynamic_sampling_keeps_groups_with_right_and_wrong_answers_not_just_different_rewards():
    """DAPO eq. 11 counts correct answers. With a shaped reward and no right answer, every group has different
    rewards and none has a right answer: the reward rule keeps them all, the correctness rule (the default) none."""
    policy = load_policy(device="cpu")
    config = small(dynamic_sampling=True, max_gen_batches=2)
    by_reward = collect(policy, SHAPED, config.replace(dynamic_sampling_metric="reward"), 1, 0, 1)
    assert len(by_reward[1]) == config.batch_size * config.group_size  # one round filled the batch
    assert config.dynamic_sampling_metric == "correct"
    with pytest.raises(DynamicSamplingExhausted, match="kept 0 of 4 groups"):
        collect(policy, SHAPED, config, 1, 0, 1)


def test_for_a_0_1_reward_both_rules_keep_the_same_groups():
    policy = load_policy(device="cpu")
    config = small(dynamic_sampling=True, max_gen_batches=10, batch_size=8)
    a = collect(policy, TASK, config, 2, 0, 1)
    b = collect(policy, TASK, config.replace(dynamic_sampling_metric="reward"), 2, 0, 1)
    assert torch.equal(a[2], b[2]) and torch.equal(a[1], b[1])  # the same groups, the same rewards

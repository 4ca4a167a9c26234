"""The fast path changes no result: each saving is checked against the plain version it replaces.

- sampling: shared prefill of a group's prompt and dropping finished rows vs one full-batch loop with
  torch.multinomial (the sampler before these savings), token for token; the decode mask built once vs per step;
- learning: a group's prompt forwarded once and shared through its KV cache vs prompt + completion per row;
  length-sorted micro-batches cut to their own longest completion vs one padded pass;
- the optimiser: torch's fused AdamW vs the plain per-tensor loop.
"""

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from minirl import Countdown, completion_logprobs, load_policy, new_tiny_policy, sample
from minirl.config import RLConfig
from minirl import rollout
from minirl.rollout import _cache_kwarg, additive_decode_mask, draw, position_ids_from_mask, top_p_filter
from minirl.step import generate, length_sorted_passes, rl_step
from minirl.tasks import WorkedCountdown
from minirl.trainer import make_learner, train

pytestmark = pytest.mark.usefixtures("one_thread")


@torch.no_grad()
def plain_sample(policy, prompt_ids, prompt_mask, *, max_new_tokens, temperature=1.0, top_p=1.0, generator=None):
    """The textbook loop: every row through every step, finished rows padded, one multinomial per step."""
    model, pad_id = policy.model, policy.tokenizer.pad_token_id
    eos = torch.tensor(policy.eos_token_ids)
    cache = DynamicCache()
    kw = {_cache_kwarg(model): cache, "use_cache": True}
    attn = prompt_mask.long()
    next_pos = attn.sum(-1, keepdim=True)
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                   **kw).logits[:, -1].float()
    finished = torch.zeros(len(prompt_ids), dtype=torch.bool)
    tokens, logps, alive = [], [], []
    for step in range(max_new_tokens):
        scaled = logits / temperature
        token = torch.multinomial(top_p_filter(scaled, top_p).softmax(-1), 1, generator=generator).squeeze(-1)
        alive.append(~finished)
        tokens.append(torch.where(finished, pad_id, token))
        logps.append(torch.where(finished, 0.0, scaled.log_softmax(-1).gather(-1, token[:, None]).squeeze(-1)))
        finished = finished | torch.isin(token, eos)
        if finished.all():
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], 1)
        logits = model(input_ids=tokens[-1][:, None], attention_mask=attn, position_ids=next_pos + step,
                       **kw).logits[:, -1].float()
    return torch.stack(tokens, 1), torch.stack(alive, 1).long(), torch.stack(logps, 1), ~finished


def test_draw_is_multinomial_over_the_whole_batch_whatever_rows_are_live():
    probs = torch.rand(6, 11).softmax(-1)
    whole = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5)).squeeze(-1)
    rows = torch.tensor([0, 2, 3, 5])
    live = draw(probs[rows], rows, 6, torch.Generator().manual_seed(5))
    assert torch.equal(live, whole[rows])
    # and it samples the distribution: frequencies of 20k draws from one row match its probabilities
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.cat([draw(p, torch.tensor([0]), 1, gen) for _ in range(20_000)]), minlength=4)
    assert torch.allclose(counts / 20_000, p[0], atol=0.015)


@pytest.mark.parametrize("which", ["shipped", "untrained"])
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (1.3, 0.9)])
def test_sampler_gives_the_plain_loops_tokens(tiny_policy, which, temperature, top_p):
    policy = tiny_policy if which == "shipped" else new_tiny_policy(seed=3)
    policy.model.eval()
    # 3 prompts x G = 4 copies each, left-padded: the prefill is shared, rows finish at different steps
    prompts = [p for p in ["12,34,56,78:0090=", "3,5,7:026=", "1:1="] for _ in range(4)]
    ids, mask = policy.encode_prompts(prompts)
    fast = sample(policy, ids, mask, max_new_tokens=16, temperature=temperature, top_p=top_p,
                  generator=torch.Generator().manual_seed(1))
    tokens, alive, logps, truncated = plain_sample(policy, ids, mask, max_new_tokens=16, temperature=temperature,
                                                   top_p=top_p, generator=torch.Generator().manual_seed(1))
    assert len(set(fast.lengths.tolist())) > 1, "rows must finish at different steps for this to test anything"
    assert torch.equal(fast.completion_ids, tokens) and torch.equal(fast.completion_mask, alive)
    assert torch.equal(fast.truncated, truncated)
    torch.testing.assert_close(fast.logprobs, logps, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_decode_mask_built_once_gives_the_per_step_masks_samples(tiny_policy, monkeypatch, attention):
    policy = copy.deepcopy(tiny_policy)
    policy.model.set_attn_implementation(attention)
    prompts = [p for p in ["12,34,56,78:0090=", "3,5,7:026=", "1:1="] for _ in range(4)]  # left-padded
    ids, mask = policy.encode_prompts(prompts)
    assert additive_decode_mask(policy.model, mask) is not None
    once = sample(policy, ids, mask, max_new_tokens=16, generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(rollout, "additive_decode_mask", lambda model, attn: None)  # the 2-D mask at every step
    per_step = sample(policy, ids, mask, max_new_tokens=16, generator=torch.Generator().manual_seed(2))
    assert torch.equal(once.completion_ids, per_step.completion_ids) and len(set(once.lengths.tolist())) > 1
    torch.testing.assert_close(once.logprobs, per_step.logprobs, atol=1e-6, rtol=1e-6)


def test_decode_mask_is_left_to_transformers_where_it_builds_its_own():
    def model(**config):
        return SimpleNamespace(config=SimpleNamespace(**{"_attn_implementation": "sdpa", **config}))
    attn = torch.tensor([[0, 1, 1]])
    assert additive_decode_mask(model(_attn_implementation="flash_attention_2"), attn) is None
    assert additive_decode_mask(model(sliding_window=4096), attn) is None  # Mistral-style window
    assert additive_decode_mask(model(sliding_window=4096, use_sliding_window=True), attn) is None
    assert additive_decode_mask(model(layer_types=["full_attention", "sliding_attention"]), attn) is None
    # Qwen2's config names a window it does not use: the whole sequence is attended, the mask is built once
    qwen2 = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa", sliding_window=4096,
                                                   use_sliding_window=False, layer_types=["full_attention"] * 2),
                            get_input_embeddings=lambda: torch.nn.Embedding(3, 2).to(torch.bfloat16))
    blocked = additive_decode_mask(qwen2, attn)
    assert blocked.shape == (1, 1, 1, 3) and blocked.dtype == torch.bfloat16
    assert blocked[0, 0, 0, 0] == torch.finfo(torch.bfloat16).min and (blocked[0, 0, 0, 1:] == 0).all()


@pytest.mark.parametrize("with_hidden", [False, True])
def test_shared_prompt_forward_gives_the_one_pass_logprobs_and_gradient(tiny_policy, with_hidden):
    policy = copy.deepcopy(tiny_policy)
    prompts = [p for p in ["12,34,56,78:0090=", "3,5,7:026=", "1:1="] for _ in range(4)]
    ids, mask = policy.encode_prompts(prompts)
    roll = sample(policy, ids, mask, max_new_tokens=16, generator=torch.Generator().manual_seed(2))
    results = []
    for share in (False, True):
        policy.model.zero_grad()
        out = completion_logprobs(policy.model, *roll.inputs(), 1.3, with_entropy=True, with_hidden=with_hidden,
                                  share_prompts=share)
        loss = (out["logprobs"].sum() + out["entropy"].sum() + (out["hidden"].sum() if with_hidden else 0))
        loss.backward()
        results.append((out, [p.grad.clone() for p in policy.model.parameters()]))
    (plain, g_plain), (shared, g_shared) = results
    assert plain.keys() == shared.keys()
    for key in plain:
        assert plain[key].shape == shared[key].shape
        torch.testing.assert_close(shared[key], plain[key], atol=1e-5, rtol=1e-5)
    scale = max(g.abs().max().item() for g in g_plain)  # float rounding, relative to the largest gradient entry
    assert max((a - b).abs().max().item() for a, b in zip(g_shared, g_plain)) <= 1e-6 * scale


def test_same_seed_training_is_bit_identical_on_two_threads():
    # a prompt's results are copied to its group's rows: the copies' gradients must be added in a fixed order
    # (x[index]'s backward adds them in a thread-dependent one: with it, these weights differed in every run)
    def weights_after_three_steps() -> bytes:
        policy = load_policy()
        train(policy, Countdown(), RLConfig.preset("grpo", steps=3, eval_every=0, eval_n=1, seed=0), progress=False)
        return b"".join(p.detach().numpy().tobytes() for p in policy.model.parameters())

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first, second = weights_after_three_steps(), weights_after_three_steps()
    finally:
        torch.set_num_threads(before)
    assert first == second


WORKED_ROLLOUT = dict(batch_size=4, group_size=4, max_new_tokens=64, overlong_cache=16, seed=1)


def one_update(config: RLConfig, sgd: bool = True, worked_task: bool = False) -> list[torch.Tensor]:
    """The change of the parameters in one rl_step of `config` from a shipped policy (the compact one, or the
    worked-steps one on its task); with SGD at lr 1 that change is the gradient."""
    policy, task = ((load_policy("tiny-worked", device="cpu"), WorkedCountdown()) if worked_task
                    else (load_policy(device="cpu"), Countdown()))
    learner, _ = make_learner(policy, config)
    if sgd:  # AdamW's first step is ~lr * sign(g): it would magnify float rounding of near-zero gradients
        learner.optimizer = torch.optim.SGD(learner.model.parameters(), lr=1.0)
    before = [p.detach().clone() for p in learner.model.parameters()]
    row = rl_step(policy, task, config, learner, step=1)
    assert row["time/learn"] > 0
    return [p.detach() - b for p, b in zip(learner.model.parameters(), before)]


def test_length_sorted_passes_cut_only_where_it_saves_padding():
    rows = torch.arange(8)
    uneven = torch.tensor([30, 5, 64, 12, 40, 7, 50, 9])
    passes = length_sorted_passes(rows, uneven, 2)
    assert [p.tolist() for p in passes] == [[1, 5, 7, 3], [0, 4, 6, 2]]  # sorted by length, then cut
    assert sorted(torch.cat(passes).tolist()) == rows.tolist()
    even = torch.tensor([7, 6, 8, 7, 8, 6, 7, 7])  # cutting saves 1/16 of the padding: one pass
    assert [p.tolist() for p in length_sorted_passes(rows, even, 2)] == [rows[even.argsort(stable=True)].tolist()]
    assert len(length_sorted_passes(rows, uneven, 1)) == 1


@pytest.mark.parametrize("algo,loss_agg", [("grpo", "seq-mean-token-mean"), ("dapo", "token-mean"),
                                           ("dr_grpo", "seq-mean-token-sum-norm"), ("ppo", "token-mean")])
def test_length_buckets_give_the_one_pass_gradient(algo, loss_agg):
    # the worked-steps task, seed 1: completions of 12-32 tokens, so the passes are cut (checked just below)
    base = dict(WORKED_ROLLOUT, loss_agg=loss_agg, dynamic_sampling=False, max_grad_norm=0.0, minibatches=1,
                epochs=1)  # one SGD step
    if algo == "ppo":
        base.update(batch_size=16, group_size=1)
    one = one_update(RLConfig.preset(algo, **base, length_buckets=1), worked_task=True)
    for buckets in (2, 4):
        other = one_update(RLConfig.preset(algo, **base, length_buckets=buckets), worked_task=True)
        diff = max((a - b).abs().max().item() for a, b in zip(one, other))
        scale = max(a.abs().max().item() for a in one)
        # float32 sums of ~1000 token terms in another order: ~1e-5 of the scale apart (1.6e-5 seen with dr_grpo on
        # the tiny-worked policy); a wrong normaliser would be off by tens of percent
        assert scale > 0 and diff <= 1e-4 * scale, f"{buckets} buckets: update differs by {diff:.2e} (scale {scale:.2e})"


def test_the_worked_rollout_is_cut_into_passes():
    """The rollout of the test above (step 1 of seed 1, whatever the preset: the prompts and samples are drawn
    the same way) is cut into 2 and into 4 passes, so that test compares cut passes with one."""
    config = RLConfig.preset("grpo", **WORKED_ROLLOUT)
    roll = generate(load_policy("tiny-worked", device="cpu"), WorkedCountdown(), config, step=1, round_=0, rank=0,
                    world=1)[0]
    for passes in (2, 4):
        assert len(length_sorted_passes(torch.arange(16), roll.lengths, passes)) == passes


def test_shared_prompts_give_the_plain_update():
    base = dict(batch_size=4, group_size=4, max_new_tokens=16, max_grad_norm=0.0)
    shared = one_update(RLConfig.preset("grpo", **base))
    plain = one_update(RLConfig.preset("grpo", **base, share_prompts=False))
    scale = max(a.abs().max().item() for a in plain)
    assert scale > 0
    torch.testing.assert_close(shared, plain, atol=1e-5 * scale, rtol=0)


def test_fused_adamw_makes_the_plain_update():
    config = RLConfig.preset("grpo", batch_size=4, group_size=4, lr=1e-3)
    fused = one_update(config, sgd=False)
    plain = one_update(RLConfig.preset("grpo", batch_size=4, group_size=4, lr=1e-3, fused_adamw=False), sgd=False)
    assert max(a.abs().max().item() for a in fused) > 5e-4  # the step moved the weights by ~lr
    # the same update up to the last bit of a weight of size ~1 (fp32 spacing there: 1.2e-7)
    torch.testing.assert_close(fused, plain, atol=2.5e-7, rtol=0)


def test_fused_adamw_switch_reaches_the_optimiser(tiny_policy):
    policy = copy.deepcopy(tiny_policy)
    for fused in (True, False):
        learner, _ = make_learner(policy, RLConfig.preset("grpo", fused_adamw=fused))
        assert bool(learner.optimizer.param_groups[0]["fused"]) is fused

"""Sampling with a KV cache vs one fresh forward: log-probs, masks, EOS, padding, top-p, Rollout helpers."""

import copy

import pytest
import torch

from minirl import Rollout, completion_logprobs, new_tiny_policy, sample
from minirl.rollout import position_ids_from_mask, top_p_filter

# prompts of different lengths, so the batch is left-padded (the first one is the longest)
# sampling with a KV cache and one fresh forward agree up to fp32 rounding (in float64 they agree
# exactly, see test_float64_sampled_logprobs_are_exact; in fp32 a few entries differ by ~1.2e-5)
TOL = dict(atol=1e-5, rtol=1e-5)
PROMPTS = ["12,34,56,78:0090=", "3,5,7:026=", "1:1=", "9,9:081=", "4,8,2,6:0120=", "7:7="]


pytestmark = pytest.mark.usefixtures("one_thread")


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def untrained():
    """An untrained tiny Llama: long, random completions that often run out of tokens."""
    policy = new_tiny_policy(seed=3)
    policy.model.eval()
    return policy


def fresh_logprobs(policy, roll: Rollout, temperature: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        return completion_logprobs(policy.model, roll.prompt_ids, roll.prompt_mask, roll.completion_ids,
                                   roll.completion_mask, temperature=temperature)["logprobs"]


def check_structure(roll: Rollout, eos_ids: list[int], pad_id: int, max_new_tokens: int) -> None:
    """completion_mask is 1 up to and including the first EOS, pad after it, truncated iff no EOS."""
    B, T = roll.completion_ids.shape
    assert T <= max_new_tokens
    assert roll.completion_mask.shape == roll.logprobs.shape == (B, T)
    assert roll.truncated.shape == (B,) and roll.truncated.dtype == torch.bool
    assert len(roll.texts) == B
    eos = torch.tensor(eos_ids)
    for i in range(B):
        ids, mask = roll.completion_ids[i].tolist(), roll.completion_mask[i].tolist()
        hits = [t for t, tok in enumerate(ids) if tok in eos_ids and mask[t] == 1]
        if hits:
            first = hits[0]
            assert hits == [first], "nothing is generated after the first EOS"
            assert mask == [1] * (first + 1) + [0] * (T - first - 1)
            assert ids[first + 1:] == [pad_id] * (T - first - 1)
            assert not roll.truncated[i]
        else:
            assert roll.truncated[i]
            assert mask == [1] * T and T == max_new_tokens
            assert not torch.isin(roll.completion_ids[i], eos).any()
        assert (roll.logprobs[i][roll.completion_mask[i] == 0] == 0).all()
        assert (roll.logprobs[i][roll.completion_mask[i] == 1] <= 0).all()
    assert torch.equal(roll.lengths, roll.completion_mask.sum(-1))


# ----------------------------------------------------------------------------- log-probs


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
@pytest.mark.parametrize("which", ["shipped", "untrained"])
def test_sampled_logprobs_equal_a_fresh_forward(tiny_policy, untrained, which, temperature):
    policy = tiny_policy if which == "shipped" else untrained
    ids, mask = policy.encode_prompts(PROMPTS * 2)
    assert (mask == 0).any(), "the batch must be left-padded"
    roll = sample(policy, ids, mask, max_new_tokens=12, temperature=temperature, generator=gen(1))
    check_structure(roll, policy.eos_token_ids, policy.tokenizer.pad_token_id, 12)
    torch.testing.assert_close(roll.logprobs, fresh_logprobs(policy, roll, temperature), **TOL)
    # the temperature matters: a forward at another temperature gives other log-probs
    other = fresh_logprobs(policy, roll, temperature + 0.5)
    assert (other - roll.logprobs).abs().max() > 1e-3


@pytest.mark.parametrize("which", ["shipped", "untrained"])
def test_float64_sampled_logprobs_are_exact(tiny_policy, untrained, which):
    """With fp64 weights, any difference between the two code paths would be bookkeeping, not rounding."""
    policy = copy.deepcopy(tiny_policy if which == "shipped" else untrained)
    policy.model.double()
    plus = policy.tokenizer.convert_tokens_to_ids("+")
    ids, mask = policy.encode_prompts(PROMPTS * 2)
    for temperature, eos in ((0.7, None), (1.3, [2, plus])):
        roll = sample(policy, ids, mask, max_new_tokens=12, temperature=temperature, eos_token_ids=eos,
                      generator=gen(5))
        torch.testing.assert_close(roll.logprobs, fresh_logprobs(policy, roll, temperature), atol=1e-6, rtol=0)


def test_untrained_policy_gives_both_ended_and_truncated_rows(untrained):
    ids, mask = untrained.encode_prompts(PROMPTS * 4)
    roll = sample(untrained, ids, mask, max_new_tokens=12, generator=gen(0))
    check_structure(roll, untrained.eos_token_ids, untrained.tokenizer.pad_token_id, 12)
    assert roll.truncated.any() and not roll.truncated.all()
    assert roll.completion_ids.shape[1] == 12


def test_truncation_flag_with_few_tokens(tiny_policy):
    ids, mask = tiny_policy.encode_prompts(PROMPTS)
    roll = sample(tiny_policy, ids, mask, max_new_tokens=3, greedy=True)
    check_structure(roll, [2], tiny_policy.tokenizer.pad_token_id, 3)
    assert roll.truncated.all()  # "3*7+5<eos>" needs more than 3 tokens
    assert roll.completion_ids.shape[1] == 3


def test_several_eos_ids(tiny_policy):
    plus = tiny_policy.tokenizer.convert_tokens_to_ids("+")
    eos = [2, plus]
    ids, mask = tiny_policy.encode_prompts(PROMPTS * 4)
    roll = sample(tiny_policy, ids, mask, max_new_tokens=16, eos_token_ids=eos, generator=gen(0))
    check_structure(roll, eos, tiny_policy.tokenizer.pad_token_id, 16)
    last = roll.completion_ids.gather(1, (roll.lengths - 1)[:, None]).squeeze(1)[~roll.truncated]
    assert (last == plus).any() and (last == 2).any()
    # decoding drops the pad after EOS, but "+" is an ordinary character and stays in the text
    ended_on_plus = (~roll.truncated).nonzero().flatten()[last == plus]
    assert all(roll.texts[i].endswith("+") for i in ended_on_plus.tolist())
    torch.testing.assert_close(roll.logprobs, fresh_logprobs(tiny_policy, roll), **TOL)


def test_stops_early_when_all_sequences_ended(tiny_policy):
    ids, mask = tiny_policy.encode_prompts(PROMPTS)
    for roll in (sample(tiny_policy, ids, mask, max_new_tokens=16, greedy=True),
                 sample(tiny_policy, ids, mask, max_new_tokens=16, generator=gen(2))):
        check_structure(roll, [2], tiny_policy.tokenizer.pad_token_id, 16)
        assert not roll.truncated.any()
        assert roll.completion_ids.shape[1] < 16
        assert roll.completion_ids.shape[1] == int(roll.lengths.max())  # not one step more than needed


def test_greedy_is_deterministic_and_the_argmax_of_a_fresh_forward(tiny_policy, untrained):
    for policy in (tiny_policy, untrained):
        ids, mask = policy.encode_prompts(PROMPTS)
        a = sample(policy, ids, mask, max_new_tokens=12, greedy=True)
        b = sample(policy, ids, mask, max_new_tokens=12, greedy=True, temperature=0.5)
        assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
        full = torch.cat([a.prompt_ids, a.completion_ids], 1)
        attn = torch.cat([a.prompt_mask, a.completion_mask], 1)
        with torch.no_grad():
            logits = policy.model(input_ids=full, attention_mask=attn,
                                  position_ids=position_ids_from_mask(attn)).logits
        P, T = ids.shape[1], a.completion_ids.shape[1]
        argmax = logits[:, P - 1:P + T - 1].argmax(-1)
        on = a.completion_mask.bool()
        assert torch.equal(argmax[on], a.completion_ids[on])
        torch.testing.assert_close(a.logprobs, fresh_logprobs(policy, a), **TOL)


def test_same_generator_seed_gives_the_same_samples(untrained):
    ids, mask = untrained.encode_prompts(PROMPTS * 2)
    a = sample(untrained, ids, mask, max_new_tokens=10, generator=gen(7))
    b = sample(untrained, ids, mask, max_new_tokens=10, generator=gen(7))
    c = sample(untrained, ids, mask, max_new_tokens=10, generator=gen(8))
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logprobs, b.logprobs)
    assert a.texts == b.texts and torch.equal(a.truncated, b.truncated)
    assert not torch.equal(a.completion_ids, c.completion_ids)


# ----------------------------------------------------------------------------- top-p


def test_top_p_filter_keeps_the_smallest_nucleus():
    probs = torch.tensor([[0.1, 0.6, 0.05, 0.25]])  # sorted: 0.6, 0.25, 0.1, 0.05
    logits = probs.log()
    keep = {0.3: [1], 0.5: [1], 0.7: [1, 3], 0.8: [1, 3], 0.9: [0, 1, 3], 0.97: [0, 1, 2, 3]}
    for top_p, want in keep.items():
        out = top_p_filter(logits, top_p)
        kept = torch.isfinite(out[0]).nonzero().flatten().tolist()
        assert kept == want, top_p
        assert torch.equal(out[0, want], logits[0, want])  # kept logits are unchanged
        renorm = out.softmax(-1)[0, want]
        torch.testing.assert_close(renorm, probs[0, want] / probs[0, want].sum())


def test_top_p_filter_is_row_wise():
    logits = torch.tensor([[0.0, 5.0, 0.0], [5.0, 0.0, 0.0]])
    out = top_p_filter(logits, 0.9)
    assert torch.isfinite(out).tolist() == [[False, True, False], [True, False, False]]


def test_top_p_one_is_the_identity():
    logits = torch.randn(3, 22, generator=gen(0))
    assert torch.equal(top_p_filter(logits, 1.0), logits)


def test_tiny_top_p_samples_the_argmax_and_records_untruncated_logprobs(tiny_policy):
    ids, mask = tiny_policy.encode_prompts(PROMPTS)
    greedy = sample(tiny_policy, ids, mask, max_new_tokens=12, greedy=True)
    nucleus = sample(tiny_policy, ids, mask, max_new_tokens=12, top_p=1e-6, generator=gen(0))
    assert torch.equal(nucleus.completion_ids, greedy.completion_ids)
    torch.testing.assert_close(nucleus.logprobs, fresh_logprobs(tiny_policy, nucleus), **TOL)
    assert (nucleus.logprobs[nucleus.completion_mask.bool()] < 0).any()  # not log(1) after truncation


# ----------------------------------------------------------------------------- Rollout helpers


def test_select_keeps_rows_consistent(untrained):
    ids, mask = untrained.encode_prompts(PROMPTS)
    roll = sample(untrained, ids, mask, max_new_tokens=8, generator=gen(0))
    for index in ([4, 0, 2], torch.tensor([4, 0, 2]), torch.tensor([True, False, True, False, True, False])):
        part = roll.select(index)
        rows = [0, 2, 4] if isinstance(index, torch.Tensor) and index.dtype == torch.bool else [4, 0, 2]
        assert len(part) == 3
        for j, i in enumerate(rows):
            for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "truncated"):
                assert torch.equal(getattr(part, name)[j], getattr(roll, name)[i]), name
            assert part.texts[j] == roll.texts[i]
        torch.testing.assert_close(part.logprobs, fresh_logprobs(untrained, part), **TOL)


def test_cat_pads_different_widths(tiny_policy, untrained):
    pad = untrained.tokenizer.pad_token_id
    ids1, mask1 = untrained.encode_prompts(PROMPTS[:2])  # wide prompts
    ids2, mask2 = untrained.encode_prompts(PROMPTS[2:4])  # narrow prompts
    r1 = sample(untrained, ids1, mask1, max_new_tokens=5, generator=gen(0))
    r2 = sample(untrained, ids2, mask2, max_new_tokens=11, generator=gen(1))
    assert r1.prompt_ids.shape[1] > r2.prompt_ids.shape[1]
    assert r1.completion_ids.shape[1] < r2.completion_ids.shape[1]
    both = Rollout.cat([r1, r2], pad_id=pad)
    P, T = r1.prompt_ids.shape[1], r2.completion_ids.shape[1]
    assert both.prompt_ids.shape == both.prompt_mask.shape == (4, P)
    assert both.completion_ids.shape == both.completion_mask.shape == both.logprobs.shape == (4, T)
    assert both.texts == r1.texts + r2.texts
    assert torch.equal(both.truncated, torch.cat([r1.truncated, r2.truncated]))
    # each row is its old row plus padding: prompts on the left, completions on the right
    for j, (src, i) in enumerate([(r1, 0), (r1, 1), (r2, 0), (r2, 1)]):
        p, t = src.prompt_ids.shape[1], src.completion_ids.shape[1]
        assert torch.equal(both.prompt_ids[j, P - p:], src.prompt_ids[i])
        assert (both.prompt_ids[j, :P - p] == pad).all() and (both.prompt_mask[j, :P - p] == 0).all()
        assert torch.equal(both.completion_ids[j, :t], src.completion_ids[i])
        assert (both.completion_ids[j, t:] == pad).all() and (both.completion_mask[j, t:] == 0).all()
        assert (both.logprobs[j, t:] == 0).all()
    assert torch.equal(both.lengths, torch.cat([r1.lengths, r2.lengths]))
    torch.testing.assert_close(both.logprobs, fresh_logprobs(untrained, both), **TOL)
    # and with the shipped policy, whose completions end early, too
    a = sample(tiny_policy, ids1, mask1, max_new_tokens=16, greedy=True)
    b = sample(tiny_policy, ids2, mask2, max_new_tokens=3, greedy=True)
    c = Rollout.cat([b, a], pad_id=pad)
    torch.testing.assert_close(c.logprobs, fresh_logprobs(tiny_policy, c), **TOL)


# ----------------------------------------------------------------------------- padding and errors


def test_left_padding_does_not_change_a_row(tiny_policy, untrained):
    for policy in (tiny_policy, untrained):
        ids, mask = policy.encode_prompts(PROMPTS)
        batch = sample(policy, ids, mask, max_new_tokens=10, greedy=True)
        for i in (1, 2):  # padded rows (the first prompt is the longest)
            assert (mask[i] == 0).any()
            one_ids, one_mask = policy.encode_prompts([PROMPTS[i]])
            alone = sample(policy, one_ids, one_mask, max_new_tokens=10, greedy=True)
            t = alone.completion_ids.shape[1]
            assert torch.equal(batch.completion_ids[i, :t], alone.completion_ids[0])
            assert (batch.completion_mask[i, t:] == 0).all()
            torch.testing.assert_close(batch.logprobs[i, :t], alone.logprobs[0], **TOL)
            # and the fresh forward of the row alone matches the batched sample's log-probs
            row = batch.select([i])
            with torch.no_grad():
                lp = completion_logprobs(policy.model, one_ids, one_mask, row.completion_ids,
                                         row.completion_mask)["logprobs"]
            torch.testing.assert_close(lp, row.logprobs, **TOL)


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=-3), "max_new_tokens"),
    (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(max_new_tokens=4, temperature=0), "temperature"),
    (dict(max_new_tokens=4, temperature=-1.0), "temperature"),
    (dict(max_new_tokens=4, temperature=float("nan")), "temperature"),
    (dict(max_new_tokens=4, top_p=0), "top_p"),
    (dict(max_new_tokens=4, top_p=1.5), "top_p"),
    (dict(max_new_tokens=4, top_p=-0.1), "top_p"),
])
def test_invalid_sampling_arguments(tiny_policy, kwargs, name):
    ids, mask = tiny_policy.encode_prompts(PROMPTS[:2])
    with pytest.raises(ValueError, match=f"{name}="):
        sample(tiny_policy, ids, mask, **kwargs)

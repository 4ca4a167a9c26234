"""Sampling speed on the shipped tiny policy: minirl's KV-cache loop vs no cache vs Hugging Face generate.

    python benchmarks/bench_sampling.py            # 10 repeats per case, ~15 s on 2 idle cores
    python benchmarks/bench_sampling.py --repeats 3
    python benchmarks/bench_sampling.py --task worked --group 8  # worked steps: 8 prompts x G 8, 64 new tokens

Batch of 64 Countdown train prompts (left-padded by the policy's tokenizer; with --group G, 64/G prompts each
repeated G times, as in training), temperature 1, top_p 1, the task's token budget (compact: 16 new tokens,
the shipped tiny policy; worked: 64, the tiny-worked policy). Three samplers:
  (a) minirl.rollout.sample        one forward per distinct prompt, then one token per step with a DynamicCache;
                                   rows that have produced EOS leave the batch
  (b) the same loop with no cache  every step re-runs the full prompt + completion so far (written here)
  (c) HF model.generate(do_sample=True, max_new_tokens=16, output_scores=True, return_dict_in_generate=True)
Two modes:
  fixedN   EOS is ignored, so every sampler does exactly N decoding steps (equal work: 64 x N tokens)
  eos      normal stopping: a batch ends when every row has produced EOS (or 16 tokens)
tokens/s = mean real tokens per batch (up to and including EOS) / median seconds per batch.
Also checks that the log-probs recorded while sampling equal a fresh `completion_logprobs` forward.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _common import header, timeit  # noqa: E402
from minirl.policy import load_policy  # noqa: E402
from minirl.rollout import completion_logprobs, position_ids_from_mask, sample  # noqa: E402
from minirl.tasks import TASKS, get_task, task_budget  # noqa: E402

B = 64
NO_EOS = [10**6]  # an id outside the vocabulary, never sampled: every sampler runs all max_new_tokens steps


@torch.no_grad()
def sample_no_cache(policy, prompt_ids, prompt_mask, max_new_tokens, eos_ids, generator=None):
    """(b): the same loop as minirl.rollout.sample (T = 1, no top-p) but without a KV cache."""
    model, pad_id = policy.model, policy.tokenizer.pad_token_id
    eos = torch.tensor(eos_ids)
    ids, attn = prompt_ids, prompt_mask.long()
    finished = torch.zeros(ids.shape[0], dtype=torch.bool)
    tokens, logps, alive = [], [], []
    for _ in range(max_new_tokens):
        logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                       logits_to_keep=1, use_cache=False).logits[:, -1].float()
        logp_all = logits.log_softmax(-1)
        token = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        alive.append(~finished)
        tokens.append(torch.where(finished, pad_id, token))
        logps.append(torch.where(finished, 0.0, logp_all.gather(-1, token[:, None]).squeeze(-1)))
        finished = finished | torch.isin(token, eos)
        if finished.all():
            break
        ids = torch.cat([ids, tokens[-1][:, None]], 1)
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], 1)
    return torch.stack(tokens, 1), torch.stack(alive, 1).long(), torch.stack(logps, 1)


def hf_generate(policy, prompt_ids, prompt_mask, gen_config):
    out = policy.model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=gen_config)
    completion = out.sequences[:, prompt_ids.shape[1]:]  # (B, T')
    return completion, out.scores


def completion_mask_from(completion, eos_ids):
    """1 up to and including the first EOS (HF pads after EOS with the pad id)."""
    is_eos = torch.isin(completion, torch.tensor(eos_ids))
    before = (is_eos.long().cumsum(-1) - is_eos.long()) == 0  # no EOS strictly before this position
    return before.long()


def max_masked_diff(a, b, mask):
    return (a - b).abs().masked_fill(mask == 0, 0).max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--task", choices=sorted(TASKS), default="compact", help="a task of minirl.tasks.TASKS")
    parser.add_argument("--group", type=int, default=1, help="G: 64/G distinct prompts, each G times (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header("bench_sampling")

    entry = get_task(args.task)
    task = entry.make()
    NEW_TOKENS = task_budget(task)["max_new_tokens"]
    policy = load_policy(entry.policy, device="cpu")
    policy.model.eval()
    model, eos_ids = policy.model, policy.eos_token_ids
    prompts = [p.prompt for p in task.problems("train", B // args.group, seed=0) for _ in range(args.group)]
    ids, mask = policy.encode_prompts(prompts)
    print(f"policy: {policy.name}, {policy.num_parameters:,} parameters, vocab {model.config.vocab_size}; "
          f"batch {tuple(ids.shape)} prompt tokens, {int((mask == 0).sum())} of them padding; eos ids {eos_ids}")

    gen_eos = copy.deepcopy(model.generation_config)
    gen_eos.pad_token_id = policy.tokenizer.pad_token_id
    gen_eos.eos_token_id = eos_ids
    gen_fixed = copy.deepcopy(gen_eos)
    gen_fixed.eos_token_id = NO_EOS  # never stop early (eos_token_id=None falls back to the model's EOS)
    for g in (gen_eos, gen_fixed):  # plain multinomial sampling at T = 1, as minirl does
        g.temperature, g.top_k, g.top_p = 1.0, None, None
        # the arguments of model.generate(do_sample=True, max_new_tokens=16, output_scores=True,
        # return_dict_in_generate=True), set on the config (transformers 5 warns when both are passed)
        g.do_sample, g.max_new_tokens, g.output_scores, g.return_dict_in_generate = True, NEW_TOKENS, True, True

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    FIXED = f"fixed{NEW_TOKENS}"
    cases = {
        "(a) minirl sample, KV cache": {
            FIXED: lambda: sample(policy, ids, mask, max_new_tokens=NEW_TOKENS, eos_token_ids=NO_EOS, generator=gen),
            "eos": lambda: sample(policy, ids, mask, max_new_tokens=NEW_TOKENS, generator=gen),
        },
        "(b) same loop, no KV cache": {
            FIXED: lambda: sample_no_cache(policy, ids, mask, NEW_TOKENS, NO_EOS, gen),
            "eos": lambda: sample_no_cache(policy, ids, mask, NEW_TOKENS, eos_ids, gen),
        },
        "(c) HF generate (do_sample, output_scores)": {
            FIXED: lambda: hf_generate(policy, ids, mask, gen_fixed),
            "eos": lambda: hf_generate(policy, ids, mask, gen_eos),
        },
    }

    def tokens_of(name, mode, result):
        """(completion ids, mask) of one result, whatever sampler made it."""
        if name.startswith("(a)"):
            return result.completion_ids, result.completion_mask
        if name.startswith("(b)"):
            return result[0], result[1]
        comp = result[0]
        return comp, (torch.ones_like(comp) if mode == FIXED else completion_mask_from(comp, eos_ids))

    rows = []
    results = {}
    for mode in (FIXED, "eos"):
        for name, fns in cases.items():
            t = timeit(fns[mode], repeats=args.repeats, warmup=args.warmup)
            results[(name, mode)] = t["result"]
            shapes = [tokens_of(name, mode, r) for r in t["results"]]
            steps = sum(c.shape[1] for c, _ in shapes) / len(shapes)  # decoding steps per batch
            real_tokens = sum(int(m.sum()) for _, m in shapes) / len(shapes)  # tokens up to and incl. EOS
            rows.append((mode, name, t["median_s"] * 1e3, t["min_s"] * 1e3, t["max_s"] * 1e3, steps,
                         real_tokens, real_tokens / t["median_s"]))

    print(f"\nmedian of {args.repeats} batches after {args.warmup} warm-up; batch {B}; up to {NEW_TOKENS} new tokens")
    print("| mode | sampler | median ms/batch | min | max | mean steps/batch | mean tokens/batch | tokens/s |")
    print("|---|---|---|---|---|---|---|---|")
    base = {}
    for mode, name, med, lo, hi, steps, toks, tps in rows:
        base.setdefault(mode, med)
        print(f"| {mode} | {name} | {med:.1f} | {lo:.1f} | {hi:.1f} | {steps:.1f} | {toks:.0f} | {tps:,.0f} |")
    print("\nspeed relative to (a), same mode (median ms / median ms of (a)):")
    for mode, name, med, *_ in rows:
        print(f"  {mode:8s} {name:45s} x{med / base[mode]:.2f}")

    # --- log-prob checks: recorded while sampling vs one fresh forward over prompt + completion
    print("\nlog-prob check (max |difference| over real completion tokens, vs a fresh completion_logprobs forward):")
    with torch.no_grad():
        for mode in (FIXED, "eos"):
            roll = results[("(a) minirl sample, KV cache", mode)]
            fresh = completion_logprobs(model, ids, mask, roll.completion_ids, roll.completion_mask)["logprobs"]
            print(f"  {mode:8s} (a) sample() logprobs:            {max_masked_diff(roll.logprobs, fresh, roll.completion_mask):.2e}")
            comp, cmask, lp = results[("(b) same loop, no KV cache", mode)]
            fresh = completion_logprobs(model, ids, mask, comp, cmask)["logprobs"]
            print(f"  {mode:8s} (b) no-cache loop logprobs:       {max_masked_diff(lp, fresh, cmask):.2e}")
            comp, scores = results[("(c) HF generate (do_sample, output_scores)", mode)]
            cmask = torch.ones_like(comp) if mode == FIXED else completion_mask_from(comp, eos_ids)
            hf_lp = torch.stack([s.float().log_softmax(-1) for s in scores], 1).gather(-1, comp[..., None]).squeeze(-1)
            fresh = completion_logprobs(model, ids, mask, comp, cmask)["logprobs"]
            print(f"  {mode:8s} (c) HF log_softmax(output_scores): {max_masked_diff(hf_lp, fresh, cmask):.2e}")

        # The Countdown prompts above all have the same length, so left padding is a no-op there. Repeat the
        # check on a batch that really is left-padded: half of the prompts with 2-digit targets (1 token shorter).
        short = [p.prompt for p in Countdown(target_range=(1, 99)).problems("train", B // 2, seed=0)]
        pids, pmask = policy.encode_prompts(prompts[: B // 2] + short)
        roll = sample(policy, pids, pmask, max_new_tokens=NEW_TOKENS, generator=gen)
        fresh = completion_logprobs(model, pids, pmask, roll.completion_ids, roll.completion_mask)["logprobs"]
        print(f"  padded batch ({int((pmask == 0).sum())} pad tokens) (a) sample() logprobs: "
              f"{max_masked_diff(roll.logprobs, fresh, roll.completion_mask):.2e}")
        comp, scores = hf_generate(policy, pids, pmask, gen_eos)
        cmask = completion_mask_from(comp, eos_ids)
        hf_lp = torch.stack([s.float().log_softmax(-1) for s in scores], 1).gather(-1, comp[..., None]).squeeze(-1)
        fresh = completion_logprobs(model, pids, pmask, comp, cmask)["logprobs"]
        print(f"  padded batch ({int((pmask == 0).sum())} pad tokens) (c) HF output_scores:  "
              f"{max_masked_diff(hf_lp, fresh, cmask):.2e}")



if __name__ == "__main__":
    main()

"""The speed levers tried on minirl's hot paths, each measured against the plain version on the same inputs.

    python benchmarks/bench_levers.py              # ~2 min on 2 idle cores (add --compile: +1-2 min)
    python benchmarks/bench_levers.py --compile    # also torch.compile of the decode step

Worked-steps task, the tiny-worked policy (and for learn also the compact task), 8 prompts x G 8 (64 rows). Levers:
  decode step, 64 rows, cache of 13-45 positions:
    DynamicCache under torch.no_grad (the old loop) | under torch.inference_mode (kept) | + the additive 4-D
    attention mask built once and sliced per step (kept) instead of transformers rebuilding it | HF StaticCache
    (pre-allocated, attends over all its positions) | torch.compile(model, dynamic=True) with a DynamicCache
  decode step with 4 rows left (what dropping finished rows leaves at the end of a batch), no_grad vs inference_mode
  prefill of 64 rows vs of the 8 distinct prompts (kept: sample() shares it across the group)
  learn's forward + backward over a 64-row rollout of each task (compact and worked): prompt + completion for
    every row in one pass padded to the longest completion (before) | length_buckets 2 | 4 | each distinct
    prompt once, its KV cache shared by the group (share_prompts), one pass | 2 | 4 | 2 unless that saves < 1/5
    of the padding (kept: length_sorted_passes) | bf16 autocast (= mixed_precision "bf16")
  AdamW step over the policy's parameters: for-loop (torch's CPU default) | foreach | fused (kept)
Medians of --repeats timings after warm-up; each line says what it timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from transformers import DynamicCache, StaticCache  # noqa: E402

from _common import header  # noqa: E402
from minirl.policy import load_policy  # noqa: E402
from minirl.rollout import additive_decode_mask, completion_logprobs, sample  # noqa: E402
from minirl.step import length_sorted_passes  # noqa: E402
from minirl.tasks import get_task, task_budget  # noqa: E402


def median_ms(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def decode_ms(model, ids, mask, *, context, cache="dynamic", compiled=False, mask_once=False,
              steps: int = 32) -> tuple[float, float]:
    """(ms per decode step over `steps` steps after a prefill, seconds of the first 3 steps: compile time)."""
    B, P = ids.shape
    forward = torch.compile(model, dynamic=True) if compiled else model
    attn = torch.cat([mask, torch.ones(B, steps + 3, dtype=torch.long)], 1)
    with context():
        kv = DynamicCache() if cache == "dynamic" else StaticCache(config=model.config, max_cache_len=P + steps + 3)
        full_mask = cache == "static"  # a static cache attends over every position it holds
        forward(input_ids=ids, attention_mask=attn[:, :P], cache=kv, use_cache=True, logits_to_keep=1,
                **({"cache_position": torch.arange(P)} if full_mask else {}))
        token = ids[:, -1:]
        step_mask = additive_decode_mask(model, attn) if mask_once else None  # (B, 1, 1, P+T), as sample() does

        def one(i):
            width = attn.shape[1] if full_mask else P + i + 1
            extra = {"cache_position": torch.tensor([P + i])} if full_mask else {}
            step_attn = attn[:, :width] if step_mask is None else step_mask[..., :width]
            forward(input_ids=token, attention_mask=step_attn, cache=kv, use_cache=True,
                    position_ids=mask.sum(-1, keepdim=True) + i, **extra)

        t0 = time.perf_counter()
        for i in range(3):
            one(i)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(3, steps + 3):
            one(i)
    return (time.perf_counter() - t0) / steps * 1e3, first


def learn_section(task_name: str, repeats: int) -> None:
    """learn's forward + backward over one 64-row rollout, every variant timed in turn within each round (so a
    slow spell of a shared machine hits all of them), median over rounds."""
    task, policy = get_task(task_name).make(), load_policy(get_task(task_name).policy)
    model = policy.model
    ids, mask = policy.encode_prompts([p.prompt for p in task.problems("train", 8, seed=0) for _ in range(8)])
    roll = sample(policy, ids, mask, max_new_tokens=task_budget(task)["max_new_tokens"],
                  generator=torch.Generator().manual_seed(0))
    print(f"\n## learn, {task_name} task: forward + backward over the rollout (64 rows, prompts of {ids.shape[1]} "
          f"tokens, completions {int(roll.lengths.min())}-{int(roll.lengths.max())}, mean "
          f"{roll.lengths.float().mean():.1f}; ms)")

    def fwd_bwd(buckets: int, share: bool, bf16: bool = False):
        rows = torch.arange(len(roll))
        # buckets 0: what learn does (2 passes unless that saves < 1/5 of the padding); n: always n passes
        passes = length_sorted_passes(rows, roll.lengths, 2) if buckets == 0 else \
            rows[roll.lengths.argsort(stable=True)].split(-(-len(roll) // buckets))
        for idx in passes:
            part = roll.select(idx)
            part = part.trim(int(part.lengths.max()))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = completion_logprobs(model, *part.inputs(), with_entropy=True, entropy_grad=False,
                                          share_prompts=share)
            (out["logprobs"].float().sum() / 1000).backward()

    cases = [("one pass per row, padded to the longest (before)", 1, False, False),
             ("2 passes, sorted by length", 2, False, False), ("4 passes", 4, False, False),
             ("shared prompts, one pass", 1, True, False), ("shared prompts, 2 passes", 2, True, False),
             ("shared prompts, 4 passes", 4, True, False),
             ("shared prompts, 2 passes unless < 1/5 less padding (kept)", 0, True, False),
             ("bf16 autocast, shared prompts, one pass", 1, True, True),
             ("bf16 autocast, shared prompts, kept passes", 0, True, True)]
    times = {name: [] for name, *_ in cases}
    for round_ in range(repeats + 2):
        for name, buckets, share, bf16 in cases:
            t0 = time.perf_counter()
            fwd_bwd(buckets, share, bf16)
            if round_ >= 2:  # the first two rounds warm up
                times[name].append(time.perf_counter() - t0)
    for name, *_ in cases:
        print(f"  {name:60s} {statistics.median(times[name]) * 1e3:6.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the decode step")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header("bench_levers")
    policy = load_policy("tiny-worked")
    model = policy.model.eval()
    task = get_task("worked").make()
    ids, mask = policy.encode_prompts([p.prompt for p in task.problems("train", 8, seed=0) for _ in range(8)])

    print(f"\n## decode step, 64 rows (ms per step, median of {args.repeats} rounds of 32 steps, the cases in turn)")
    cases = [("DynamicCache, torch.no_grad (before)", dict(context=torch.no_grad)),
             ("DynamicCache, torch.inference_mode (kept)", dict(context=torch.inference_mode)),
             ("  + the 4-D mask built once, not per step (kept)", dict(context=torch.inference_mode, mask_once=True)),
             ("StaticCache, torch.inference_mode", dict(context=torch.inference_mode, cache="static"))]
    if args.compile:
        cases.append(("torch.compile(dynamic=True), DynamicCache, inference_mode",
                      dict(context=torch.inference_mode, compiled=True)))
    runs = {name: [] for name, _ in cases}
    for _ in range(args.repeats):  # every case once per round, so a slow spell of a shared machine hits them all
        for name, kw in cases:
            runs[name].append(decode_ms(model, ids, mask, **kw))
    for name, _ in cases:
        print(f"  {name:60s} {statistics.median(r[0] for r in runs[name]):6.2f} ms/step   first 3 steps of the first "
              f"pass: {runs[name][0][1]:.2f} s")
    few = slice(0, 4)
    for name, ctx in (("no_grad", torch.no_grad), ("inference_mode", torch.inference_mode)):
        ms = statistics.median(decode_ms(model, ids[few], mask[few], context=ctx)[0] for _ in range(3))
        print(f"  4 rows left, {name:47s} {ms:6.2f} ms/step")

    print("\n## prefill (ms)")
    with torch.inference_mode():
        for name, rows in (("64 rows (every copy of every prompt)", slice(None)), ("8 distinct prompts (kept)", slice(0, 64, 8))):
            ms = median_ms(lambda: model(input_ids=ids[rows], attention_mask=mask[rows], cache=DynamicCache(),
                                         use_cache=True, logits_to_keep=1), args.repeats)
            print(f"  {name:60s} {ms:6.2f} ms")

    for task_name in ("compact", "worked"):
        learn_section(task_name, args.repeats)

    print("\n## AdamW step over the policy's parameters (ms)")
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    for name, kw in (("for-loop (torch's default on CPU, before)", {}), ("foreach=True", {"foreach": True}),
                     ("fused=True (kept)", {"fused": True})):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-9, **kw)
        print(f"  {name:60s} {median_ms(opt.step, 20 * args.repeats):6.2f} ms")


if __name__ == "__main__":
    main()

"""Where the time of one RL step goes, on the shipped tiny policy (CPU).

    python benchmarks/bench_step.py                 # ~40 s on 2 quiet cores
    python benchmarks/bench_step.py --steps 5

1. Step time of `minirl.train` for the presets grpo (8 prompts x G 8, k3 KL to a reference with beta 0.04),
   ppo (64 x 1, value head, 2 epochs x 2 minibatches) and dapo (8 x 8, dynamic sampling, clip-higher), split
   into the phases that `minirl.step.rl_step` records in every metrics row: time/generation (sampling and
   scoring, every dynamic-sampling round included), time/reference (no-grad forwards: old log-probs and values,
   the reference model) and time/learn (advantages, forward + backward + grad clip + AdamW for every update).
2. bf16 autocast vs fp32 for the learning part only, on a fixed batch of 64 sampled completions:
   forward (`completion_logprobs` with entropy) + clipped loss + backward + AdamW, each precision on its own
   copy of the policy; and the max |log-prob difference| of a bf16-autocast forward vs an fp32 one.
   bf16 autocast is NOT used by minirl on CPU: this only measures the lever.
Every timing is the median over the timed steps after warm-up (evaluation excluded).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _common import header, timeit  # noqa: E402
from minirl import losses as L  # noqa: E402
from minirl.config import RLConfig  # noqa: E402
from minirl.policy import load_policy  # noqa: E402
from minirl.rollout import completion_logprobs, sample  # noqa: E402
from minirl.tasks import Countdown  # noqa: E402
from minirl.trainer import train  # noqa: E402

PHASES = ("time/generation", "time/reference", "time/learn")


def train_steps(name: str, steps: int, warmup: int) -> dict:
    config = RLConfig.preset(name, steps=warmup + steps, eval_every=0, eval_n=8)
    policy, task = load_policy(device="cpu"), Countdown()
    t0 = time.perf_counter()
    run = train(policy, task, config, progress=False)
    wall = time.perf_counter() - t0
    rows = [r for r in run.history if r["step"] > warmup]
    secs = [r["step_seconds"] for r in rows]
    tps = [r["tokens_per_s"] for r in rows]
    gen_batches = statistics.mean(r["gen_batches"] for r in rows)
    zero_std = statistics.mean(r["frac_reward_zero_std"] for r in rows)  # of the first round's groups
    phases = {k: statistics.median(r[k] for r in rows) * 1e3 for k in PHASES}
    return {"algo": name, "shape": f"{config.batch_size} x {config.group_size}", "median_ms": statistics.median(secs) * 1e3,
            "min_ms": min(secs) * 1e3, "max_ms": max(secs) * 1e3, "tokens_per_s": statistics.median(tps),
            "gen_batches": gen_batches, "updates": config.epochs * config.minibatches, "n": len(secs), "wall": wall,
            "kl": config.kl_coef, "critic": config.critic, "zero_std": zero_std,
            "phases": phases}


def bf16_vs_fp32(repeats: int, warmup: int) -> None:
    config = RLConfig.preset("grpo")
    policy, task = load_policy(device="cpu"), Countdown()
    problems = task.problems("train", config.batch_size, seed=123)
    ids, mask = policy.encode_prompts([p.prompt for p in problems for _ in range(config.group_size)])
    roll = sample(policy, ids, mask, max_new_tokens=16, generator=torch.Generator().manual_seed(123))
    cmask = roll.completion_mask
    adv = torch.randn(len(roll), generator=torch.Generator().manual_seed(1))  # fixed fake advantages

    def make_step(model, optimizer, dtype):
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else (lambda: torch.autocast("cpu", enabled=False))

        def step():
            with ctx():
                out = completion_logprobs(model, roll.prompt_ids, roll.prompt_mask, roll.completion_ids, cmask,
                                          with_entropy=True)
                logp = out["logprobs"].float()
                pg, _ = L.clipped_surrogate(logp, logp.detach(), adv, 0.2, 0.2)
                loss = L.aggregate(pg, cmask, "seq-mean-token-mean")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.item()
        return step

    results = {}
    for dtype in ("fp32", "bf16"):
        model = copy.deepcopy(policy.model).train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-5)
        results[dtype] = timeit(make_step(model, opt, dtype), repeats=repeats, warmup=warmup)
    # a second fp32 pass, so slow drift of the machine shows up as fp32-vs-fp32 spread
    model = copy.deepcopy(policy.model).train()
    results["fp32 (again)"] = timeit(make_step(model, torch.optim.AdamW(model.parameters(), lr=3e-5), "fp32"),
                                     repeats=repeats, warmup=warmup)

    with torch.no_grad():
        args = (roll.prompt_ids, roll.prompt_mask, roll.completion_ids, cmask)
        fp32 = completion_logprobs(policy.model, *args)["logprobs"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = completion_logprobs(policy.model, *args)["logprobs"]
    diff = (bf16 - fp32).abs()[cmask.bool()]
    ratio = torch.exp(bf16 - fp32)[cmask.bool()]
    print(f"\n## Learn step (forward + loss + backward + clip + AdamW) on a fixed batch of {len(roll)} completions "
          f"({int(cmask.sum())} tokens, prompt {roll.prompt_ids.shape[1]} + completion {cmask.shape[1]} positions); "
          f"median of {repeats} after {warmup} warm-up")
    print("| precision | median ms | min | max |")
    print("|---|---|---|---|")
    for k, r in results.items():
        print(f"| {k} | {r['median_s'] * 1e3:.1f} | {r['min_s'] * 1e3:.1f} | {r['max_s'] * 1e3:.1f} |")
    print(f"speed ratio fp32 / bf16 (median): {results['fp32']['median_s'] / results['bf16']['median_s']:.2f}x "
          f"(>1 means bf16 is faster)")
    print(f"log-probs bf16 autocast vs fp32 (same weights, {diff.numel()} tokens): max |diff| {diff.max():.3e}, "
          f"mean |diff| {diff.mean():.3e}; ratio exp(bf16 - fp32) in [{ratio.min():.4f}, {ratio.max():.4f}], "
          f"{(ratio - 1).abs().gt(0.2).float().mean():.1%} of tokens outside the PPO clip range [0.8, 1.2]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header("bench_step")

    print(f"\n## Step time of minirl.train (its step_seconds and the phases rl_step records), median of {args.steps} "
          f"steps after {args.warmup} warm-up (evaluation excluded)")
    print("| preset | prompts x G | updates/step | critic | kl_coef | median ms/step | min | max | generation ms | "
          "reference ms | learn ms | mean generation rounds | groups with all-equal rewards (1st round) | "
          "generated tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("grpo", "ppo", "dapo"):
        r = train_steps(name, args.steps, args.warmup)
        ph = r["phases"]
        print(f"| {r['algo']} | {r['shape']} | {r['updates']} | {r['critic']} | {r['kl']} | {r['median_ms']:.1f} | "
              f"{r['min_ms']:.1f} | {r['max_ms']:.1f} | {ph['time/generation']:.1f} | {ph['time/reference']:.1f} | "
              f"{ph['time/learn']:.1f} | {r['gen_batches']:.2f} | "
              f"{'-' if r['shape'].endswith('x 1') else format(r['zero_std'], '.0%')} | {r['tokens_per_s']:,.0f} |")
    bf16_vs_fp32(repeats=max(args.steps // 2, 3), warmup=args.warmup)


if __name__ == "__main__":
    main()

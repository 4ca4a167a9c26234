"""Where the time of one RL step goes, on the shipped tiny policy (CPU).

    python benchmarks/bench_step.py                 # ~25 s on 2 idle cores
    python benchmarks/bench_step.py --steps 5 --no-wait

1. GRPO (RLConfig.preset("grpo"): batch 8 prompts x G 8 = 64 completions, up to 16 tokens, k3 KL to a
   reference with beta 0.04) split into its parts, by running the body of `minirl.trainer.train`'s loop here
   with a timer around each part: generation (`sample`, prompt encoding and decoding included), reward
   (`task.score` on 64 texts), the no-grad forwards (old log-probs: skipped by this preset since
   epochs x minibatches = 1; reference log-probs), advantages, and `learn` (forward + backward + grad clip +
   AdamW, plus its metric bookkeeping).
2. Total step time of `minirl.trainer.train` itself (its `step_seconds` metric) for the presets grpo, ppo
   (batch 64 x 1, value head, 2 epochs x 2 minibatches) and dapo (8 x 8, dynamic sampling, clip-higher).
3. bf16 autocast vs fp32 for the learning part only, on a fixed batch of 64 sampled completions:
   forward (`completion_logprobs` with entropy) + clipped loss + backward + AdamW, each precision on its own
   copy of the policy; and the max |log-prob difference| of a bf16-autocast forward vs an fp32 one.
   bf16 autocast is NOT used by minirl on CPU: this only measures the lever.
Every timing is the median over the timed steps after warm-up.
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
from accelerate import Accelerator  # noqa: E402

from _common import CpuMonitor, footer, header, other_jobs, timeit, wait_for_quiet  # noqa: E402
from minirl import losses as L  # noqa: E402
from minirl.actor_critic import ActorCritic  # noqa: E402
from minirl.config import RLConfig  # noqa: E402
from minirl.policy import load_policy  # noqa: E402
from minirl.rollout import completion_logprobs, sample  # noqa: E402
from minirl.tasks import Countdown  # noqa: E402
from minirl.trainer import _seed, compute_advantages, forward_in_chunks, learn, train  # noqa: E402


def grpo_breakdown(steps: int, warmup: int) -> None:
    config = RLConfig.preset("grpo", batch_size=8, group_size=8, max_new_tokens=16)
    policy, task = load_policy(device="cpu"), Countdown()
    # --- the set-up of train(), minus runs, checkpoints and evaluation
    acc = Accelerator(mixed_precision=config.mixed_precision, cpu=True)
    torch.manual_seed(config.seed)
    ref_model = copy.deepcopy(policy.model).eval().requires_grad_(False) if config.kl_coef > 0 else None
    actor_critic = ActorCritic(policy.model, config.critic)
    optimizer = torch.optim.AdamW(actor_critic.parameters(), lr=config.lr, betas=(config.adam_beta1, config.adam_beta2),
                                  eps=config.adam_eps, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    model, optimizer = acc.prepare(actor_critic, optimizer)

    parts = {k: [] for k in ("generation", "reward", "old forward", "ref forward", "advantages", "learn", "total")}
    gen_tokens = []
    for step in range(warmup + steps):
        clock = {}
        t_start = t = time.perf_counter()

        def lap(name):
            nonlocal t
            now = time.perf_counter()
            clock[name] = now - t
            t = now

        # generation: the body of trainer.generate, split into sampling and scoring
        problems = task.problems("train", config.batch_size, seed=_seed(config, step, 0))
        prompts = [p.prompt for p in problems for _ in range(config.group_size)]
        ids, mask = policy.encode_prompts(prompts)
        gen = torch.Generator().manual_seed(_seed(config, step, 0, 0))
        with acc.autocast():
            roll = sample(policy, ids, mask, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                          top_p=config.top_p, generator=gen)
        lap("generation")
        scores = [task.score(problems[i // config.group_size], text) for i, text in enumerate(roll.texts)]
        rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)
        group_ids = torch.arange(len(problems)).repeat_interleave(config.group_size)
        lap("reward")
        # the rest: as in train()'s loop
        cmask = roll.completion_mask.float()
        rows = config.micro_batch_size or len(roll) // config.minibatches
        need_old = config.epochs * config.minibatches > 1 or config.critic != "none"
        with acc.autocast():
            old = forward_in_chunks(lambda *a: model(*a, config.temperature, with_entropy=False), roll, rows,
                                    ("logprobs",)) if need_old else {}
            lap("old forward")
            ref = forward_in_chunks(lambda *a: completion_logprobs(ref_model, *a, config.temperature), roll, rows,
                                    ("logprobs",))["logprobs"] if ref_model is not None else None
            lap("ref forward")
        advantages, returns = compute_advantages(config, rewards, group_ids, cmask, old.get("logprobs"), ref, None)
        lap("advantages")
        learn(acc, model, optimizer, scheduler, config, roll, advantages, returns, cmask, old.get("logprobs"), None,
              ref, step + 1)
        lap("learn")
        clock["total"] = time.perf_counter() - t_start
        if step >= warmup:
            for k, v in clock.items():
                parts[k].append(v)
            gen_tokens.append(int(roll.completion_mask.sum()))

    total = statistics.median(parts["total"])
    print(f"\n## GRPO step breakdown (preset grpo: {config.batch_size} x {config.group_size}, "
          f"max_new_tokens {config.max_new_tokens}, kl_coef {config.kl_coef}); median of {steps} steps after "
          f"{warmup} warm-up")
    print(f"old forward needed: {need_old} (epochs={config.epochs}, minibatches={config.minibatches}); "
          f"mean generated tokens per step {statistics.mean(gen_tokens):.0f} (of 64 x 16 = 1024 max)")
    print("| part | median ms | share of median total |")
    print("|---|---|---|")
    for k, v in parts.items():
        med = statistics.median(v) * 1e3
        print(f"| {k} | {med:.1f} | {'' if k == 'total' else f'{med / (total * 1e3):.0%}'} |")


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
    return {"algo": name, "shape": f"{config.batch_size} x {config.group_size}", "median_ms": statistics.median(secs) * 1e3,
            "min_ms": min(secs) * 1e3, "max_ms": max(secs) * 1e3, "tokens_per_s": statistics.median(tps),
            "gen_batches": gen_batches, "updates": config.epochs * config.minibatches, "n": len(secs), "wall": wall,
            "kl": config.kl_coef, "critic": config.critic, "zero_std": zero_std}


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
    parser.add_argument("--max-wait", type=float, default=25.0, help="minutes to wait for other jobs, then run anyway")
    parser.add_argument("--no-wait", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    deadline = time.monotonic() + args.max_wait * 60  # one waiting budget for the whole script

    def section(label: str, run) -> None:
        """Wait for quiet before each part and say afterwards whether another job showed up meanwhile."""
        quiet_before = True if args.no_wait else wait_for_quiet(max_wait_s=max(0.0, deadline - time.monotonic()))
        with CpuMonitor() as cpu:
            run()
        busy_after = bool(other_jobs())
        print(f"[{label}: other heavy jobs before: {'none' if quiet_before else 'YES'}, after: "
              f"{'YES - contended' if busy_after else 'none'}; {cpu.describe()}]")

    quiet = True if args.no_wait else wait_for_quiet(max_wait_s=args.max_wait * 60)
    header("bench_step", quiet)
    section("GRPO breakdown", lambda: grpo_breakdown(args.steps, args.warmup))

    def totals():
        print(f"\n## Total step time of minirl.trainer.train (its step_seconds), median of {args.steps} steps after "
              f"{args.warmup} warm-up (evaluation excluded)")
        print("| preset | prompts x G | updates/step | critic | kl_coef | median ms/step | min | max | "
              "mean generation rounds | groups with all-equal rewards (1st round) | generated tokens/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name in ("grpo", "ppo", "dapo"):
            r = train_steps(name, args.steps, args.warmup)
            print(f"| {r['algo']} | {r['shape']} | {r['updates']} | {r['critic']} | {r['kl']} | {r['median_ms']:.1f} | "
                  f"{r['min_ms']:.1f} | {r['max_ms']:.1f} | {r['gen_batches']:.2f} | "
                  f"{'-' if r['shape'].endswith('x 1') else format(r['zero_std'], '.0%')} | {r['tokens_per_s']:,.0f} |")

    section("train() totals", totals)
    section("bf16 vs fp32", lambda: bf16_vs_fp32(repeats=max(args.steps // 2, 3), warmup=args.warmup))
    footer(quiet)

if __name__ == "__main__":
    main()

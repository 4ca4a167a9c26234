"""Seconds per GRPO step: minirl.train vs trl.GRPOTrainer on identical work, alternated A B A B in one run.

    pip install trl                          # not a minirl dependency: only this script needs it
    python benchmarks/bench_speed.py         # both tasks, 3 pairs, ~6 min on 2 idle cores
    python benchmarks/bench_speed.py --task steps --pairs 5 --steps 8

Identical work, per task (compact Countdown, 16 new tokens; worked steps, 64 new tokens):
  the task's shipped policy, loaded fresh for every run · the same prompts in the same order (TRL reads them
  from a dataset in minirl's step order, shuffle off) · the same reward (task.score) · 8 prompts x G = 8 ·
  temperature 1, top_p 1 · beta 0 (no reference model) · one on-policy update per step (TRL
  num_iterations 1, minirl epochs = minibatches = 1) · loss "grpo" = minirl "seq-mean-token-mean" · eps 0.2 ·
  AdamW lr 1e-4, no weight decay, constant schedule, grad-norm clip 1 · fp32 · no gradient checkpointing.
A pair = one minirl run then one TRL run of warmup + steps steps; a step's time is its wall clock (minirl:
rl_step; TRL: on_step_begin -> on_step_end, generation included). Per run the median over the timed steps; the
ratio is minirl / TRL within each pair, and the summary gives the median over pairs.

Also printed: minirl's phase split (generation / reference / learn), and the achieved FLOP/s of learn's forward +
backward passes over one 64-row rollout (FLOPs counted by torch.utils.flop_counter, the passes split as learn
splits them) next to this machine's measured fp32 and bf16 matmul peak (2048^3 torch.mm, same thread count).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _common import header  # noqa: E402
from minirl.config import RLConfig  # noqa: E402
from minirl.evaluate import task_budget  # noqa: E402
from minirl.policy import load_policy  # noqa: E402
from minirl.rollout import completion_logprobs  # noqa: E402
from minirl.step import length_sorted_passes, step_seed  # noqa: E402
from minirl.tasks import Countdown  # noqa: E402
from minirl.tasks.steps import CountdownSteps  # noqa: E402
from minirl.trainer import train  # noqa: E402

TASKS = {"compact": (Countdown, None), "steps": (CountdownSteps, "tiny-steps")}
BATCH, G, LR = 8, 8, 1e-4


def minirl_config(task, steps: int) -> RLConfig:
    return RLConfig.preset("grpo", batch_size=BATCH, group_size=G, steps=steps, lr=LR, kl_coef=0.0,
                           loss_agg="seq-mean-token-mean", eval_every=0, eval_n=8, seed=0, **task_budget(task))


def run_minirl(task_name: str, steps: int, warmup: int) -> dict:
    task_cls, policy_name = TASKS[task_name]
    task, policy = task_cls(), load_policy(policy_name)
    run = train(policy, task, minirl_config(task, warmup + steps), progress=False)
    rows = [r for r in run.history if r["step"] > warmup]
    phases = {k: statistics.median(r[f"time/{k}"] for r in rows) for k in ("generation", "reference", "learn")}
    return {"step_s": statistics.median(r["step_seconds"] for r in rows), "phases": phases,
            "length": statistics.mean(r["completion_len_mean"] for r in rows)}


def run_trl(task_name: str, steps: int, warmup: int) -> dict:
    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    task_cls, policy_name = TASKS[task_name]
    task, policy = task_cls(), load_policy(policy_name)
    config = minirl_config(task, warmup + steps)
    # minirl's prompts of every step, in order; TRL's RepeatSampler repeats each one G times, as minirl does
    problems = [p for s in range(config.steps) for p in task.problems("train", BATCH, seed=step_seed(config, s))]
    bos = policy.tokenizer.bos_token or ""  # TRL tokenises with add_special_tokens=False; minirl's prompts start with BOS
    data = datasets.Dataset.from_dict({"prompt": [bos + p.prompt for p in problems], "index": list(range(len(problems)))})

    def reward(prompts, completions, index, **_):
        return [task.score(problems[i], text).reward for i, text in zip(index, completions)]

    times = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            times.append(time.perf_counter() - self.t0)

    args = GRPOConfig(
        output_dir="/tmp/minirl-bench-trl", per_device_train_batch_size=BATCH * G, num_generations=G,
        max_completion_length=config.max_new_tokens, max_steps=config.steps, learning_rate=LR, beta=0.0,
        loss_type="grpo", epsilon=0.2, scale_rewards="group", num_iterations=1, temperature=1.0, top_p=1.0,
        top_k=0, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        gradient_checkpointing=False, use_cpu=True, bf16=False, fp16=False, report_to="none",
        logging_steps=10**6, save_strategy="no", shuffle_dataset=False, disable_tqdm=True, seed=0,
        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=policy.model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=policy.tokenizer, callbacks=[Clock()])
    trainer.train()
    return {"step_s": statistics.median(times[warmup:])}


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of an n x n x n torch.mm at this thread count (the best of `repeats`)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def learn_flops(task_name: str) -> tuple[float, float]:
    """FLOPs of the forward + backward passes `step.learn` makes over a 64-row rollout of the task (the passes of
    step.length_sorted_passes, each cut to its longest completion, shared prompts), counted; and their seconds."""
    from torch.utils.flop_counter import FlopCounterMode

    from minirl.rollout import sample

    task_cls, policy_name = TASKS[task_name]
    task, policy = task_cls(), load_policy(policy_name)
    prompts = [p.prompt for p in task.problems("train", BATCH, seed=0) for _ in range(G)]
    ids, mask = policy.encode_prompts(prompts)
    roll = sample(policy, ids, mask, max_new_tokens=task_budget(task)["max_new_tokens"],
                  generator=torch.Generator().manual_seed(0))
    passes = length_sorted_passes(torch.arange(len(roll)), roll.lengths, RLConfig().length_buckets)  # as learn() cuts

    def fwd_bwd():
        for idx in passes:
            part = roll.select(idx)
            part = part.trim(int(part.lengths.max()))
            out = completion_logprobs(policy.model, *part.inputs(), with_entropy=True, entropy_grad=False)
            (out["logprobs"].sum() / roll.completion_mask.sum()).backward()

    with FlopCounterMode(display=False) as counter:
        fwd_bwd()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fwd_bwd()
        times.append(time.perf_counter() - t0)
    return counter.get_total_flops(), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["compact", "steps", "both"], default="both")
    parser.add_argument("--pairs", type=int, default=3, help="A B pairs per task (default 3)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run (default 6)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed first steps per run (default 2)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import trl
    except ImportError:
        sys.exit("this benchmark times TRL too: pip install trl")
    header(f"minirl vs trl {trl.__version__} GRPOTrainer: seconds per step")
    fp32, bf16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
    print(f"matmul peak (2048^3 torch.mm, {args.threads} threads): fp32 {fp32:.1f} GFLOP/s, bf16 {bf16:.1f} GFLOP/s")
    for task_name in (["compact", "steps"] if args.task == "both" else [args.task]):
        print(f"\n## {task_name}: {BATCH} prompts x G {G}, {task_budget(TASKS[task_name][0]())['max_new_tokens']} new "
              f"tokens at most, {args.warmup} warm-up + {args.steps} timed steps per run")
        ratios, mini_s, trl_s, phase_rows = [], [], [], []
        for pair in range(args.pairs):
            a, b = run_minirl(task_name, args.steps, args.warmup), run_trl(task_name, args.steps, args.warmup)
            ratios.append(a["step_s"] / b["step_s"])
            mini_s.append(a["step_s"]), trl_s.append(b["step_s"]), phase_rows.append(a["phases"])
            ph = a["phases"]
            print(f"pair {pair + 1}: minirl {a['step_s'] * 1e3:6.0f} ms (generation {ph['generation'] * 1e3:.0f}, "
                  f"reference {ph['reference'] * 1e3:.0f}, learn {ph['learn'] * 1e3:.0f}; mean length "
                  f"{a['length']:.1f})   trl {b['step_s'] * 1e3:6.0f} ms   ratio {ratios[-1]:.2f}")
        med = statistics.median
        print(f"median: minirl {med(mini_s) * 1e3:.0f} ms, trl {med(trl_s) * 1e3:.0f} ms, paired ratio minirl/trl "
              f"{med(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")
        flops, seconds = learn_flops(task_name)
        print(f"learn's forward + backward passes over 64 rows: {flops / 1e9:.2f} GFLOP in {seconds * 1e3:.0f} ms = "
              f"{flops / seconds / 1e9:.1f} GFLOP/s ({100 * flops / seconds / 1e9 / fp32:.1f} % of the fp32 matmul "
              f"peak, {100 * flops / seconds / 1e9 / bf16:.1f} % of bf16's)")


if __name__ == "__main__":
    main()

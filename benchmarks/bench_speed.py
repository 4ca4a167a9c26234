"""Seconds per GRPO step: minirl.train vs trl.GRPOTrainer on identical work, alternated A B A B in one run.

    pip install trl                          # not a minirl dependency: only this script needs it
    python benchmarks/bench_speed.py         # both tasks, 3 pairs, ~6 min on 2 idle cores
    python benchmarks/bench_speed.py --task worked --pairs 5 --steps 8
    python benchmarks/bench_speed.py --task qwen0.5b --pairs 2 --steps 3   # on a GPU: Qwen2.5-0.5B-sized, random

Identical work, per task (compact Countdown, 16 new tokens; worked steps, 64 new tokens; qwen0.5b: random weights
at Qwen2.5-0.5B-Instruct's size, saved and loaded through load_policy(folder) like a hub model, bf16 on a GPU, chat
Countdown prompts, 256 new tokens, which random weights nearly always fill):
  the task's policy, loaded fresh for every run · the same prompts in the same order (TRL reads them
  from a dataset in minirl's step order, shuffle off) · the same reward (task.score) · 8 prompts x G = 8 ·
  temperature 1, top_p 1 · beta 0 (no reference model) · one on-policy update per step (TRL
  num_iterations 1, minirl epochs = minibatches = 1) · loss "grpo" = minirl "seq-mean-token-mean" · eps 0.2 ·
  AdamW lr 1e-4, no weight decay, constant schedule, grad-norm clip 1 · fp32 on the CPU (bf16 weights on a GPU) ·
  no gradient checkpointing.
A pair = one minirl run then one TRL run of warmup + steps steps; a step's time is its wall clock (minirl:
rl_step; TRL: on_step_begin -> on_step_end, generation included). Per run the median over the timed steps; the
ratio is minirl / TRL within each pair, and the summary gives the median over pairs.

Also printed: minirl's phase split (generation / reference / learn), and the achieved FLOP/s of learn's forward +
backward passes over one 64-row rollout (FLOPs counted by torch.utils.flop_counter, the passes split as learn
splits them) next to this machine's measured fp32 and bf16 matmul peak (2048^3 torch.mm at the same thread
count; 8192^3 on a GPU). On a GPU also: tokens/s of minirl's sampler vs model.generate, 64 rows, EOS ignored.
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
from minirl.policy import load_policy  # noqa: E402
from minirl.rollout import completion_logprobs  # noqa: E402
from minirl.step import length_sorted_passes, step_seed  # noqa: E402
from minirl.tasks import Countdown, get_task, task_budget  # noqa: E402
from minirl.trainer import train  # noqa: E402

BATCH, G, LR = 8, 8, 1e-4
QWEN_DIR = Path("/tmp/minirl-bench-qwen0.5b")  # written once per machine by qwen_folder()


def qwen_folder() -> str:
    """A random Qwen2.5-0.5B-sized chat model saved like a hub model (no download: random weights)."""
    if not (QWEN_DIR / "config.json").exists():
        from minirl.tiny_hf import QWEN25_05B, save_tiny_chat_model

        save_tiny_chat_model(QWEN_DIR, **QWEN25_05B)
    return str(QWEN_DIR)


# task name -> (task, policy to load); the policy is loaded fresh for every run
TASKS = {name: (get_task(name).make, lambda name=name: load_policy(get_task(name).policy))
         for name in ("compact", "worked")}
TASKS["qwen0.5b"] = (lambda: Countdown(prompt_style="chat", reward_scheme="tinyzero"),  # 256 new tokens
                     lambda: load_policy(qwen_folder()))


def minirl_config(task, steps: int) -> RLConfig:
    return RLConfig.preset("grpo", batch_size=BATCH, group_size=G, steps=steps, lr=LR, kl_coef=0.0,
                           loss_agg="seq-mean-token-mean", eval_every=0, eval_n=8, seed=0, **task_budget(task))


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run_minirl(task_name: str, steps: int, warmup: int) -> dict:
    make_task, make_policy = TASKS[task_name]
    task, policy = make_task(), make_policy()
    run = train(policy, task, minirl_config(task, warmup + steps), progress=False)
    rows = [r for r in run.history if r["step"] > warmup]
    phases = {k: statistics.median(r[f"time/{k}"] for r in rows) for k in ("generation", "reference", "learn")}
    return {"step_s": statistics.median(r["step_seconds"] for r in rows), "phases": phases,
            "length": statistics.mean(r["completion_len_mean"] for r in rows)}


def run_trl(task_name: str, steps: int, warmup: int) -> dict:
    import datasets
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    make_task, make_policy = TASKS[task_name]
    task, policy = make_task(), make_policy()
    config = minirl_config(task, warmup + steps)
    # minirl's prompts of every step, in order; TRL's RepeatSampler repeats each one G times, as minirl does
    problems = [p for s in range(1, config.steps + 1) for p in task.problems("train", BATCH, seed=step_seed(config, s, 0))]
    # TRL tokenises text prompts with add_special_tokens=False: give it the text minirl's encode_prompts tokenises
    if policy.use_chat_template:
        texts = [policy.tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}], tokenize=False,
                                                      add_generation_prompt=True) for p in problems]
    else:
        texts = [(policy.tokenizer.bos_token or "") + p.prompt for p in problems]
    data = datasets.Dataset.from_dict({"prompt": texts, "index": list(range(len(problems)))})

    def reward(prompts, completions, index, **_):
        return [task.score(problems[i], text).reward for i, text in zip(index, completions)]

    times = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            sync()
            times.append(time.perf_counter() - self.t0)

    args = GRPOConfig(
        output_dir="/tmp/minirl-bench-trl", per_device_train_batch_size=BATCH * G, num_generations=G,
        max_completion_length=config.max_new_tokens, max_steps=config.steps, learning_rate=LR, beta=0.0,
        loss_type="grpo", epsilon=0.2, scale_rewards="group", num_iterations=1, temperature=1.0, top_p=1.0,
        top_k=0, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        gradient_checkpointing=False, use_cpu=policy.device.type == "cpu",
        bf16=policy.model.dtype == torch.bfloat16, fp16=False, report_to="none",
        logging_steps=10**6, save_strategy="no", shuffle_dataset=False, disable_tqdm=True, seed=0,
        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=policy.model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=policy.tokenizer, callbacks=[Clock()])
    trainer.remove_callback(PrinterCallback)  # its per-run dict of metrics is not this benchmark's output
    trainer.train()
    return {"step_s": statistics.median(times[warmup:])}


def matmul_peak(dtype: torch.dtype, device: str, repeats: int = 5) -> float:
    """GFLOP/s of an n x n x n torch.mm (n 2048 on the CPU at this thread count, 8192 on a GPU; best of `repeats`)."""
    n = 8192 if device == "cuda" else 2048
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def learn_flops(task_name: str) -> tuple[float, float]:
    """FLOPs of the forward + backward passes `step.learn` makes over a 64-row rollout of the task (the passes of
    step.length_sorted_passes, each cut to its longest completion, shared prompts), counted; and their seconds."""
    from torch.utils.flop_counter import FlopCounterMode

    from minirl.rollout import sample

    make_task, make_policy = TASKS[task_name]
    task, policy = make_task(), make_policy()
    prompts = [p.prompt for p in task.problems("train", BATCH, seed=0) for _ in range(G)]
    ids, mask = policy.encode_prompts(prompts)
    roll = sample(policy, ids, mask, max_new_tokens=task_budget(task)["max_new_tokens"],
                  generator=torch.Generator(policy.device).manual_seed(0))
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
        sync()
        t0 = time.perf_counter()
        fwd_bwd()
        sync()
        times.append(time.perf_counter() - t0)
    return counter.get_total_flops(), statistics.median(times)


def sampler_vs_generate(task_name: str, new_tokens: int, repeats: int = 3) -> None:
    """tokens/s of minirl's sample() and of model.generate on the same 64 rows (8 prompts x G 8), EOS ignored so
    that both make exactly 64 x new_tokens tokens; median of `repeats` after one warm-up."""
    from transformers import GenerationConfig

    from minirl.rollout import sample

    make_task, make_policy = TASKS[task_name]
    task, policy = make_task(), make_policy()
    ids, mask = policy.encode_prompts([p.prompt for p in task.problems("train", BATCH, seed=0) for _ in range(G)])
    never = [policy.model.config.vocab_size + 1]  # an EOS id no sample can be
    gen = GenerationConfig(do_sample=True, max_new_tokens=new_tokens, temperature=1.0, top_p=None, top_k=None,
                           pad_token_id=policy.tokenizer.pad_token_id, eos_token_id=never)
    cases = {"minirl sample": lambda: sample(policy, ids, mask, max_new_tokens=new_tokens, eos_token_ids=never),
             "HF generate": lambda: policy.model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)}
    for name, fn in cases.items():
        times = []
        for i in range(repeats + 1):
            sync()
            t0 = time.perf_counter()
            with torch.inference_mode():
                fn()
            sync()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times[1:])
        print(f"  {name:14s} {med * 1e3:8.0f} ms per batch of {len(ids)} x {new_tokens} tokens = "
              f"{len(ids) * new_tokens / med:,.0f} tokens/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["compact", "worked", "both", "qwen0.5b"], default="both")
    parser.add_argument("--pairs", type=int, default=3, help="A B pairs per task (default 3)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run (default 6)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed first steps per run (default 2)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = "cuda" if args.task == "qwen0.5b" else "cpu"
    try:
        import trl

        with_trl = True
        header(f"minirl vs trl {trl.__version__} GRPOTrainer: seconds per step")
    except ImportError as e:
        if device == "cpu":
            sys.exit("this benchmark times TRL too: pip install trl")
        with_trl = False  # a GPU machine without TRL still measures minirl
        header(f"minirl (TRL not importable here: {e}): seconds per step")
    if device == "cuda":
        print(f"GPU: {torch.cuda.get_device_name()}")
    fp32, bf16 = matmul_peak(torch.float32, device), matmul_peak(torch.bfloat16, device)
    print(f"matmul peak ({'8192^3 torch.mm on the GPU' if device == 'cuda' else f'2048^3 torch.mm, {args.threads} threads'}): "
          f"fp32 {fp32:.1f} GFLOP/s, bf16 {bf16:.1f} GFLOP/s")
    for task_name in (["compact", "worked"] if args.task == "both" else [args.task]):
        new_tokens = task_budget(TASKS[task_name][0]())["max_new_tokens"]
        if device == "cuda":
            print(f"\n## sampling, {task_name}: minirl sample vs HF generate")
            sampler_vs_generate(task_name, new_tokens)
        print(f"\n## {task_name}: {BATCH} prompts x G {G}, {new_tokens} new "
              f"tokens at most, {args.warmup} warm-up + {args.steps} timed steps per run")
        ratios, mini_s, trl_s, phase_rows = [], [], [], []
        for pair in range(args.pairs):
            a = run_minirl(task_name, args.steps, args.warmup)
            b = run_trl(task_name, args.steps, args.warmup) if with_trl else None
            mini_s.append(a["step_s"]), phase_rows.append(a["phases"])
            if b:
                ratios.append(a["step_s"] / b["step_s"]), trl_s.append(b["step_s"])
            ph = a["phases"]
            print(f"pair {pair + 1}: minirl {a['step_s'] * 1e3:6.0f} ms (generation {ph['generation'] * 1e3:.0f}, "
                  f"reference {ph['reference'] * 1e3:.0f}, learn {ph['learn'] * 1e3:.0f}; mean length "
                  f"{a['length']:.1f})" + (f"   trl {b['step_s'] * 1e3:6.0f} ms   ratio {ratios[-1]:.2f}" if b else ""))
        med = statistics.median
        if ratios:
            print(f"median: minirl {med(mini_s) * 1e3:.0f} ms, trl {med(trl_s) * 1e3:.0f} ms, paired ratio minirl/trl "
                  f"{med(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})")
        else:
            print(f"median: minirl {med(mini_s) * 1e3:.0f} ms")
        flops, seconds = learn_flops(task_name)
        print(f"learn's forward + backward passes over 64 rows: {flops / 1e9:.2f} GFLOP in {seconds * 1e3:.0f} ms = "
              f"{flops / seconds / 1e9:.1f} GFLOP/s ({100 * flops / seconds / 1e9 / fp32:.1f} % of the fp32 matmul "
              f"peak, {100 * flops / seconds / 1e9 / bf16:.1f} % of bf16's)")


if __name__ == "__main__":
    main()

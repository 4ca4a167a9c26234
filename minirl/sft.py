"""Supervised warm start: teach a policy the task's answer format from one reference solution per problem.

This is how the shipped tiny policies are made: `python -m minirl sft` (tiny-countdown: an untrained Llama
learns to write *some* well-formed Countdown expression) and `python -m minirl sft --task worked` (tiny-worked:
worked traces with restarts, WORKED_RECIPE). Both are stopped early on purpose, so that sampled accuracy is
low enough to leave room for RL to show what it does.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from .rollout import completion_logprobs


def encode_examples(policy, prompts: list[str], completions: list[str]):
    """Prompts left-padded, completions right-padded and ended by EOS -> tensors for `completion_logprobs`."""
    prompt_ids, prompt_mask = policy.encode_prompts(prompts)
    eos, pad = policy.eos_token_ids[0], policy.tokenizer.pad_token_id
    targets = [policy.tokenizer(c, add_special_tokens=False)["input_ids"] + [eos] for c in completions]
    T = max(len(t) for t in targets)
    completion_ids = torch.tensor([t + [pad] * (T - len(t)) for t in targets], device=policy.device)
    completion_mask = torch.tensor([[1] * len(t) + [0] * (T - len(t)) for t in targets], device=policy.device)
    return prompt_ids, prompt_mask, completion_ids, completion_mask


# The shipped worked-steps policy (assets/tiny-worked), chosen by a few SFT runs on 2 cores (its sft_trials.md):
# mostly 3-number problems with a share of 4-number ones, and a share of traces that miss, restart and solve.
WORKED_RECIPE = dict(steps=2400, batch_size=64, lr=3e-3, cosine=True, hidden_size=128, four_share=0.3, retry_rate=0.3,
                     giveup_rate=0.15)


def worked_mixture(four_share: float, retry_rate: float, giveup_rate: float = 0.0) -> list:
    """The SFT data of tiny-worked: [(3-number task, 1 - four_share), (4-number task, four_share)], each with
    `retry_rate` of its reference traces showing a missed attempt, '|' and a solution, and `giveup_rate` of the rest
    one or two missed attempts and then the end."""
    from .tasks import WorkedCountdown

    return [(WorkedCountdown(num_count=n, retry_rate=retry_rate, giveup_rate=giveup_rate), share)
            for n, share in ((3, 1 - four_share), (4, four_share))]


def training_mix(task, n: int, seed: int) -> list:
    """n training problems of `task`, or of a mixture [(task, share), ...]: round(share * n) problems of each
    (the last takes the rest), shuffled together with `seed`."""
    if not isinstance(task, (list, tuple)):
        return task.problems("train", n, seed=seed)
    shares = [share for _, share in task]
    if not task or any(not 0 < share <= 1 for share in shares) or abs(sum(shares) - 1) > 1e-9:
        raise ValueError(f"sft: task shares {shares} are not allowed: use shares in (0, 1] that add up to 1")
    counts = [round(share * n) for share in shares[:-1]]
    counts.append(n - sum(counts))
    problems = [p for (t, _), k in zip(task, counts) for p in t.problems("train", k, seed=seed)]
    random.Random(seed).shuffle(problems)
    return problems


def sft(policy, task, *, steps: int = 300, batch_size: int = 128, lr: float = 1e-3, warmup_steps: int = 20,
        weight_decay: float = 0.0, cosine: bool = False, seed: int = 0, progress: bool = True) -> list[dict]:
    """Train `policy` in place with cross-entropy on the task's reference solutions (completion tokens only).
    `task` is a task or a mixture [(task, share), ...] (see `training_mix`).

    Deterministic given `seed` on a given machine. Returns the per-step history [{step, loss, seconds}].
    """
    for name, value, lo in (("steps", steps, 1), ("batch_size", batch_size, 1), ("warmup_steps", warmup_steps, 0)):
        if not isinstance(value, int) or value < lo:
            raise ValueError(f"sft: {name}={value!r} is not allowed: use an integer >= {lo}")
    if not lr > 0:
        raise ValueError(f"sft: lr={lr!r} is not allowed: use a number > 0")
    torch.manual_seed(seed)
    problems = training_mix(task, steps * batch_size, seed)
    if any(p.solution is None for p in problems):
        raise ValueError(f"sft: task {getattr(task, 'name', task)!r} gives no reference solutions (Problem.solution is None)")
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr, weight_decay=weight_decay)
    def lr_factor(s: int) -> float:  # linear warm-up, then constant (or a cosine down to 10 % with `cosine`)
        warm = min(1.0, (s + 1) / max(1, warmup_steps))
        if not cosine or s < warmup_steps:
            return warm
        done = (s - warmup_steps) / max(1, steps - warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    policy.model.train()
    history, start = [], time.perf_counter()
    bar = tqdm(range(steps), desc="sft", disable=not progress, file=sys.stdout)
    for step in bar:
        batch = problems[step * batch_size:(step + 1) * batch_size]
        tensors = encode_examples(policy, [p.prompt for p in batch], [p.solution for p in batch])
        logprobs = completion_logprobs(policy.model, *tensors)["logprobs"]  # (B, T), 0 on padding
        loss = -logprobs.sum() / tensors[3].sum()  # mean negative log-likelihood per completion token
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        history.append({"step": step + 1, "loss": loss.item(), "seconds": time.perf_counter() - start})
        bar.set_postfix(loss=f"{loss.item():.3f}")
    policy.model.eval()
    return history


# ----------------------------------------------------------------------------- the shipped policies
COMPACT_TASK = "3 numbers from 1-9, operators + - *, compact prompt"


def ship_compact(out, *, steps: int, batch_size: int, lr: float, seed: int, eval_n: int, eval_k: int, command: str):
    """tiny-countdown: a new tiny Llama, SFT on compact Countdown, evaluated for its card and saved to `out` (default:
    the package's folder). Returns (folder, [evaluation], seconds of SFT)."""
    from . import evaluate
    from .card import sft_card
    from .policy import SHIPPED_NAME, SHIPPED_POLICY, new_tiny_policy
    from .tasks import Countdown

    task, policy = Countdown(num_count=3), new_tiny_policy(seed=seed)
    t0 = time.perf_counter()
    history = sft(policy, task, steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    seconds = time.perf_counter() - t0
    greedy = evaluate(policy, task, n=eval_n, greedy=True, seed=0)
    sampled = evaluate(policy, task, n=eval_n, greedy=False, k=eval_k, temperature=1.0, seed=0)
    meta = {"command": command, "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
            "num_parameters": policy.num_parameters, "seconds": round(seconds, 1), "final_loss": history[-1]["loss"],
            "greedy": greedy, "sampled": sampled}
    out = Path(out or SHIPPED_POLICY)
    policy.name = SHIPPED_NAME
    policy.save(out, sft_card(task_description=COMPACT_TASK, **meta))
    (out / "minirl_card.json").write_text(json.dumps(meta, indent=2) + "\n")  # the card's numbers, for tests
    return out, [{"label": "3 numbers", "greedy": greedy, "sampled": sampled}], seconds


def ship_worked(out, recipe: dict, *, seed: int, eval_n: int, eval_k: int, command: str):
    """tiny-worked: a new tiny Llama, SFT on `recipe` (WORKED_RECIPE with any changes) over worked traces, evaluated
    on 3 and 4 numbers at the task's budget for its card, saved to `out` (default: the package's folder). Returns
    (folder, [evaluation], seconds of SFT)."""
    from . import evaluate
    from .card import worked_card
    from .policy import WORKED_NAME, WORKED_POLICY, new_tiny_policy
    from .tasks import WorkedCountdown, task_budget
    from .tokenizer import WORKED_CHARACTERS

    hidden = recipe["hidden_size"]
    policy = new_tiny_policy(seed=seed, characters=WORKED_CHARACTERS, hidden_size=hidden,
                             intermediate_size=4 * hidden, max_positions=128)
    t0 = time.perf_counter()
    history = sft(policy, worked_mixture(recipe["four_share"], recipe["retry_rate"], recipe["giveup_rate"]),
                  steps=recipe["steps"], batch_size=recipe["batch_size"], lr=recipe["lr"], cosine=recipe["cosine"],
                  seed=seed)
    seconds = time.perf_counter() - t0
    evaluations = [{"label": f"{n} numbers",
                    "greedy": evaluate(policy, WorkedCountdown(num_count=n), n=eval_n, greedy=True, seed=0),
                    "sampled": evaluate(policy, WorkedCountdown(num_count=n), n=eval_n, greedy=False, k=eval_k, seed=0)}
                   for n in (3, 4)]
    config = policy.model.config
    meta = {"command": command, "steps": recipe["steps"], "batch_size": recipe["batch_size"], "lr": recipe["lr"],
            "seed": seed, "num_parameters": policy.num_parameters, "vocab_size": config.vocab_size,
            "architecture": f"hidden {hidden}, {config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
                            f"intermediate {config.intermediate_size}, {config.max_position_embeddings} positions, "
                            "tied embeddings",
            "recipe": f"{1 - recipe['four_share']:.0%} 3-number and {recipe['four_share']:.0%} 4-number problems "
                      f"(numbers 1-12, targets 1-999, + - *), {recipe['retry_rate']:.0%} of traces with a missed "
                      f"attempt and a restart, {recipe['giveup_rate']:.0%} of the others with one or two missed "
                      "attempts and no solution",
            "seconds": round(seconds, 1), "final_loss": history[-1]["loss"], "evaluations": evaluations}
    out = Path(out or WORKED_POLICY)
    policy.name = WORKED_NAME
    policy.save(out, worked_card(**meta), max_new_tokens=task_budget(WorkedCountdown())["max_new_tokens"])
    (out / "minirl_card.json").write_text(json.dumps(meta, indent=2) + "\n")  # the card's numbers, for tests
    return out, evaluations, seconds


"""Supervised warm start: teach a policy the task's answer format from one reference solution per problem.

This is how the shipped tiny policy is made (`python -m minirl sft`): an untrained Llama first learns
to write *some* well-formed Countdown expression, and is stopped early on purpose so that sampled
accuracy is low enough (15-40 %) to leave room for RL to show what it does.
"""

from __future__ import annotations

import sys
import time

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


def sft(policy, task, *, steps: int = 300, batch_size: int = 128, lr: float = 1e-3, warmup_steps: int = 20,
        weight_decay: float = 0.0, seed: int = 0, progress: bool = True) -> list[dict]:
    """Train `policy` in place with cross-entropy on the task's reference solutions (completion tokens only).

    Deterministic given `seed` on a given machine. Returns the per-step history [{step, loss, seconds}].
    """
    for name, value, lo in (("steps", steps, 1), ("batch_size", batch_size, 1), ("warmup_steps", warmup_steps, 0)):
        if not isinstance(value, int) or value < lo:
            raise ValueError(f"sft: {name}={value!r} is not allowed: use an integer >= {lo}")
    if not lr > 0:
        raise ValueError(f"sft: lr={lr!r} is not allowed: use a number > 0")
    torch.manual_seed(seed)
    problems = task.problems("train", steps * batch_size, seed=seed)
    if any(p.solution is None for p in problems[:batch_size]):
        raise ValueError(f"sft: task {task.name!r} gives no reference solutions (Problem.solution is None)")
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup_steps)))
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

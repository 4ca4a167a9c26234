"""Held-out evaluation: accuracy, pass@k, format rate, length and truncation of a policy on a task."""

from __future__ import annotations

import math
import sys

import torch
from tqdm import tqdm

from .rollout import check_sampling_args, sample
from .tasks import task_budget


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (linear interpolation between order statistics, as numpy's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    return ordered[lo] + (pos - lo) * (ordered[min(lo + 1, len(ordered) - 1)] - ordered[lo])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, eq. 1)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@torch.no_grad()
def evaluate(policy, task, n: int = 200, *, greedy: bool = True, k: int = 1, temperature: float = 1.0,
             top_p: float = 1.0, max_new_tokens: int | None = None, batch_size: int = 256,
             split: str = "test", seed: int = 0, progress: bool | None = None, keep: int = 0) -> dict:
    """Evaluate on `n` problems of `split` (the held-out split by default).

    greedy=True decodes argmax (k must be 1); greedy=False samples k completions per problem at
    `temperature`. Returns accuracy (mean over all samples), pass_at_k (unbiased estimator with
    n_samples = k, i.e. "any of the k is correct"), format_rate, mean_length (tokens, EOS included),
    truncation_rate, reward_mean, the mean of every score component as `rate/<name>` (e.g. rate/numbers_ok),
    length_p50/p90/p99/max (the length distribution, which a token budget is chosen from), and the settings used.
    keep > 0 adds "completions": what the policy wrote for the first `keep` problems (the
    first of their k samples), each {prompt, completion, reward, correct, components}; the same (n, seed) gives
    the same problems, so the evaluations of a run can be read side by side.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"evaluate: n={n!r} is not allowed: use an integer >= 1 (number of problems)")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"evaluate: k={k!r} is not allowed: use an integer >= 1 (samples per problem)")
    if greedy and k != 1:
        raise ValueError(f"evaluate: k={k} with greedy=True is not allowed: greedy decoding gives k=1")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"evaluate: batch_size={batch_size!r} is not allowed: use an integer >= 1")
    max_new_tokens = max_new_tokens or task_budget(task)["max_new_tokens"]
    check_sampling_args(max_new_tokens, temperature, top_p)

    problems = task.problems(split, n, seed=seed)
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    jobs = [p for p in problems for _ in range(k)]  # k consecutive samples per problem
    was_training = policy.model.training
    policy.model.eval()
    correct, rewards, lengths, truncated, parts, kept = [], [], [], [], {}, []
    starts = range(0, len(jobs), batch_size)
    show = progress if progress is not None else len(starts) > 4
    for start in tqdm(starts, desc="evaluate", disable=not show, leave=False, file=sys.stdout):
        batch = jobs[start:start + batch_size]
        ids, mask = policy.encode_prompts([p.prompt for p in batch])
        roll = sample(policy, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature,
                      top_p=top_p, greedy=greedy, generator=generator)
        for j, (problem, text) in enumerate(zip(batch, roll.texts), start):
            score = task.score(problem, text)
            if j % k == 0 and j // k < keep:
                kept.append({"prompt": problem.prompt, "completion": text, "reward": score.reward,
                             "correct": score.correct, "components": dict(score.components)})
            correct.append(float(score.correct))
            rewards.append(score.reward)
            for name, value in score.components.items():
                parts.setdefault(name, []).append(float(value))
        lengths += roll.lengths.tolist()
        truncated += roll.truncated.float().tolist()
    policy.model.train(was_training)

    per_problem = [sum(correct[i * k:(i + 1) * k]) for i in range(len(problems))]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "accuracy": mean(correct),
        "pass_at_k": mean([pass_at_k(k, int(c), k) for c in per_problem]),
        "format_rate": mean(parts["format_ok"]) if "format_ok" in parts else float("nan"),
        "reward_mean": mean(rewards),
        "mean_length": mean(lengths),
        **{f"length_p{q}": quantile(lengths, q / 100) for q in (50, 90, 99)}, "length_max": max(lengths),
        "truncation_rate": mean(truncated),
        **{f"rate/{name}": mean(values) for name, values in sorted(parts.items())},  # e.g. rate/numbers_ok
        "n_problems": len(problems),
        "k": k,
        "greedy": greedy,
        "temperature": temperature,
        **({"completions": kept} if keep else {}),
    }

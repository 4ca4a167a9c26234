"""`python -m minirl compare`: PPO, GRPO and DAPO from the same base policy under the same budget.

Each algorithm trains in its own process (so its peak memory is its own), one at a time (two torch
jobs on two cores slow each other ~5x), through the run cache (a finished configuration is answered
at once). Writes a markdown table, a JSON summary and a PNG of the learning curves to --out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .actor_critic import training_state_bytes
from .config import PAPER_ALGOS, RLConfig
from .policy import SHIPPED_NAME, STEPS_NAME
from .runs import Run, RunCache, default_cache_dir, run_key

# The same budget for every algorithm: 600 rollout steps of 64 completions (8 prompts x G 8, or 64 x 1
# for PPO), 16 new tokens. Learning rates were tuned by hand on the tiny policy (a few 600-step runs each):
# DAPO makes 4 updates per rollout, so it needs a smaller step than the single-update GRPO.
BUDGET = dict(steps=600, eval_every=100, eval_n=300, max_new_tokens=16)
LEARNING_RATES = {"ppo": 1e-4, "grpo": 1e-4, "dapo": 5e-5}  # other presets: 1e-4
# The worked-steps task (tasks/steps.py, `--task steps`): 64-token completions cost ~4x the compact task's per step,
# so fewer steps; a quarter of the budget is DAPO's soft overlong zone. Learning rates: twice the compact task's
# (a fifth of its steps), not tuned on this task.
STEPS_BUDGET = dict(steps=120, eval_every=20, eval_n=300, max_new_tokens=64, overlong_cache=16)
STEPS_LEARNING_RATES = {"ppo": 2e-4, "grpo": 2e-4, "dapo": 1e-4}
TASKS = {"compact": (BUDGET, LEARNING_RATES), "steps": (STEPS_BUDGET, STEPS_LEARNING_RATES)}


def task_setup(task: str):
    """(policy name, task object, title) of a compare task: the shipped policy each task's runs start from."""
    from .tasks import Countdown, CountdownSteps

    if task == "steps":
        return STEPS_NAME, CountdownSteps(), "3-number Countdown with worked steps (tiny-steps policy, CPU)"
    return SHIPPED_NAME, Countdown(), "3-number Countdown (tiny policy, CPU)"


def compare_configs(algos=PAPER_ALGOS, task: str = "compact", **overrides) -> dict[str, RLConfig]:
    if task not in TASKS:
        raise ValueError(f"compare: task={task!r} is not allowed: use one of {', '.join(map(repr, TASKS))}")
    budget, rates = TASKS[task]
    return {a: RLConfig.preset(a, **{**budget, "lr": rates.get(a, 1e-4), **overrides}) for a in algos}


def run_one(config: RLConfig, cache: RunCache, threads: int, quiet: bool, task: str = "compact") -> Run:
    """Train one config in a child process (unless cached) and return its Run from the cache."""
    from .tasks import task_identity

    policy_name, task_object, _ = task_setup(task)
    key = run_key(policy_name, task_identity(task_object), config)
    run = cache.get(key)
    if run is not None:
        print(f"{config.algo}: answered from the run cache ({cache.path_for(key)})")
        return run
    cmd = [sys.executable, "-m", "minirl", "train", "--config-json", config.to_json(), "--cache", str(cache.root),
           "--device", "cpu", "--threads", str(threads), "--task", task] + (["--quiet"] if quiet else [])
    subprocess.run(cmd, check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    run = cache.get(key)
    if run is None:
        raise RuntimeError(f"the {config.algo} run finished but is not in the cache at {cache.path_for(key)}")
    return run


def summary_row(run: Run) -> dict:
    first = run.history[0]
    return {
        "algo": run.config.algo,
        "greedy_base": first.get("eval/accuracy_greedy"), "greedy_final": run.final("eval/accuracy_greedy"),
        "sampled_base": first.get("eval/accuracy_sampled"), "sampled_final": run.final("eval/accuracy_sampled"),
        "steps": run.history[-1]["step"], "samples": run.history[-1].get("samples"),
        "seconds": run.meta.get("seconds"), "peak_rss_mb": run.meta.get("peak_mem_mb"),
        "train_state_mb": run.meta.get("state_mb"), "critic_params": run.meta.get("critic_params"),
        "reference_params": run.meta.get("reference_params"),
    }


def markdown_table(rows: list[dict]) -> str:
    base = rows[0]
    lines = ["| | greedy acc. | sampled acc. (T=1) | Δ sampled | steps | seconds | peak RSS MB | train-state MB | critic params |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| base policy | {base['greedy_base']:.1%} | {base['sampled_base']:.1%} | | | | | | |"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['greedy_final']:.1%} | {r['sampled_final']:.1%} | "
                     f"{(r['sampled_final'] - r['sampled_base']) * 100:+.1f} pts | {r['steps']} | {r['seconds']:.0f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['train_state_mb']:.1f} | {r['critic_params']:,} |")
    return "\n".join(lines)


def memory_rows(num_params: int, hidden_size: int, bytes_per_param: int = 4) -> list[dict]:
    """What each setup keeps in memory besides activations (`training_state_bytes`): the trainable policy and
    critic, plus a frozen reference model when a KL term is on."""
    setups = [("ppo (value head, KL)", hidden_size + 1, True), ("ppo (separate critic, KL)",
              num_params + hidden_size + 1, True), ("grpo (KL 0.04)", 0, True), ("grpo / dapo (no KL)", 0, False)]
    rows = []
    for name, critic, reference in setups:
        state = training_state_bytes(num_params + critic, num_params if reference else 0, bytes_per_param)
        rows.append({"setup": name, "critic_params": critic, "reference_params": num_params if reference else 0,
                     "state_mb": state / 2**20})
    return rows


def qwen25_05b_size() -> tuple[int, int]:
    """Parameter count of Qwen2.5-0.5B-Instruct, counted from its published config.json on the meta device
    (no weights are downloaded or allocated)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from .tiny_hf import QWEN25_05B

    config = Qwen2Config(**QWEN25_05B, tie_word_embeddings=True)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    return sum(p.numel() for p in model.parameters()), config.hidden_size


def memory_table(rows: list[dict], title: str) -> str:
    lines = [f"| {title} | critic params | reference params | weights+grads+AdamW+reference MB |", "|---|---|---|---|"]
    lines += [f"| {r['setup']} | {r['critic_params']:,} | {r['reference_params']:,} | {r['state_mb']:,.1f} |"
              for r in rows]
    return "\n".join(lines)


def compare(out: str | Path = "results", algos=PAPER_ALGOS, cache_dir: str | Path | None = None, threads: int = 2,
            quiet: bool = False, task: str = "compact", **overrides) -> list[Run]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cache = RunCache(cache_dir or default_cache_dir())
    t0 = time.perf_counter()
    configs = compare_configs(algos, task, **overrides)
    runs = [run_one(cfg, cache, threads, quiet, task) for cfg in configs.values()]
    rows = [summary_row(r) for r in runs]
    from .policy import load_policy

    policy_name, _, title = task_setup(task)
    tiny = load_policy(policy_name, device="cpu").model
    n_tiny = sum(p.numel() for p in tiny.parameters())
    table = markdown_table(rows) + "\n\nTraining state (fp32), from parameter counts:\n\n" + memory_table(
        memory_rows(n_tiny, tiny.config.hidden_size), f"tiny policy ({n_tiny:,} params)") + "\n\n" + memory_table(
        memory_rows(*qwen25_05b_size()), "Qwen2.5-0.5B-Instruct, same count")
    (out / "compare.md").write_text(table + "\n")
    (out / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    from .plots import plot_runs

    extra = ("reward/attempts",) if task == "steps" else ("clip_frac_high",)  # retries only exist on the steps task
    fig = plot_runs(runs, metrics=("eval/accuracy_sampled", "eval/accuracy_greedy", "reward_mean", "entropy",
                                   "completion_len_mean", *extra), title=f"PPO vs GRPO vs DAPO on {title}")
    fig.set_size_inches(14, 7)
    fig.savefig(out / "compare.png", dpi=110)
    print(table)
    print(f"\nwrote {out / 'compare.md'}, {out / 'compare.json'} and {out / 'compare.png'} "
          f"({time.perf_counter() - t0:.0f} s in all)")
    return runs

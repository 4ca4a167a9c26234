"""`python -m minirl compare`: PPO, GRPO and DAPO from the same base policy under the same budget.

Each algorithm trains in its own process (so its peak memory is its own), `jobs` at a time with `threads` torch
threads each (two one-thread runs side by side use both cores of a laptop; two two-thread runs would slow each other
several times: BENCHMARKS.md section 3), through the run cache (a finished configuration is answered at once).
Writes a markdown table, a JSON summary and a PNG of the learning curves to --out.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from .actor_critic import training_state_bytes
from .checkpoint import CHECKPOINT, POLICY
from .config import PAPER_ALGOS, RLConfig
from .evaluate import evaluate
from .policy import load_policy
from .runs import Run, RunCache, default_cache_dir, run_key
from .tasks import get_task, task_budget, task_identity

# Every algorithm of a compare gets the same budget: the task's number of rollout steps (tasks.registry), 64
# completions per step (8 prompts x G 8, or 64 x 1 for PPO), the task's token budget, and these evaluations; each
# starts at its own learning rate tuned on the task (config.TUNED_LR).
EVAL_N = 300  # held-out problems per evaluation during a run (its curves)
FINAL_K = 4  # after it: the whole held-out split, this many samples of each problem (pass@1 from 4)
FINAL_FILE = "compare_final.json"  # the final evaluation, kept in the run's folder


def compare_configs(algos=PAPER_ALGOS, task: str = "compact", **overrides) -> dict[str, RLConfig]:
    """The config of each algorithm in a compare on `task` (a registry name); `overrides` replace fields of all."""
    entry = get_task(task)
    budget = dict(steps=entry.compare_steps, eval_every=entry.compare_eval_every, eval_n=EVAL_N,
                  **task_budget(entry.make()))
    return {a: RLConfig.preset(a, task=entry.name, **{**budget, **overrides}) for a in algos}


def run_one(config: RLConfig, cache: RunCache, threads: int, quiet: bool, task: str, policy_identity: str) -> Run:
    """Train one config in a child process (unless cached) and return its Run from the cache."""
    key = run_key(policy_identity, task_identity(get_task(task).make()), config)
    run = cache.get(key)
    if run is not None:
        print(f"{config.algo}: answered from the run cache ({cache.path_for(key)})")
        return run
    cmd = [sys.executable, "-m", "minirl", "train", "--config-json", config.to_json(), "--cache", str(cache.root),
           "--device", "cpu", "--threads", str(threads), "--task", task] + (["--quiet"] if quiet else [])
    subprocess.run(cmd, check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    run = cache.get(key)
    if run is not None:
        print(f"{config.algo}: {run.history[-1]['step']} steps in {run.meta.get('seconds', 0):.0f} s", flush=True)
    if run is None:
        raise RuntimeError(f"the {config.algo} run finished but is not in the cache at {cache.path_for(key)}")
    return run


def final_evaluation(policy, task, n: int) -> dict:
    """The whole held-out split (`n` problems): greedy, and FINAL_K samples of each (pass@1 from FINAL_K)."""
    greedy = evaluate(policy, task, n=n, greedy=True, progress=False)
    sampled = evaluate(policy, task, n=n, greedy=False, k=FINAL_K, progress=False)
    return {"n": n, "k": FINAL_K, "greedy": greedy["accuracy"], "pass1": sampled["accuracy"],
            "length": sampled["mean_length"], "truncated": sampled["truncation_rate"],
            "attempts": sampled.get("rate/attempts", math.nan)}


def final_of(run: Run, task, n: int) -> dict:
    """`final_evaluation` of a run's trained policy, kept in its folder (a run from the cache is not evaluated again)."""
    file = run.path / FINAL_FILE
    if file.is_file() and json.loads(file.read_text())["n"] == n:
        return json.loads(file.read_text())
    final = final_evaluation(load_policy(run.path / CHECKPOINT / POLICY, device="cpu"), task, n)
    file.write_text(json.dumps(final, indent=1) + "\n")
    return final


def summary_row(run: Run, base: dict, final: dict) -> dict:
    first = run.history[0]
    return {
        "algo": run.config.algo, "heldout_n": final["n"], "k": final["k"],
        "pass1_base": base["pass1"], "pass1_final": final["pass1"],
        "greedy_base": base["greedy"], "greedy_final": final["greedy"],
        "length_base": base["length"], "length_final": final["length"],
        "truncated_final": final["truncated"], "attempts_base": base["attempts"], "attempts_final": final["attempts"],
        "sampled_300_base": first.get("eval/accuracy_sampled"), "sampled_300_final": run.final("eval/accuracy_sampled"),
        "lr": run.config.lr, "steps": run.history[-1]["step"], "samples": run.history[-1].get("samples"),
        "seconds": run.meta.get("seconds"), "peak_rss_mb": run.meta.get("peak_mem_mb"),
        "train_state_mb": run.meta.get("state_mb"), "critic_params": run.meta.get("critic_params"),
        "reference_params": run.meta.get("reference_params"),
    }


def markdown_table(rows: list[dict]) -> str:
    """Held-out pass@1 (the whole split, FINAL_K samples each) and greedy accuracy, before and after each run."""
    base = rows[0]
    lines = [f"| | lr | held-out pass@1 ({base['heldout_n']} × {base['k']}) | Δ pass@1 | greedy | length | steps | "
             "seconds | peak RSS MB | train-state MB | critic params |", "|---|---|---|---|---|---|---|---|---|---|---|",
             f"| base policy | | {base['pass1_base']:.1%} | | {base['greedy_base']:.1%} | {base['length_base']:.1f} "
             "| | | | | |"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['lr']:.0e} | {r['pass1_final']:.1%} | "
                     f"{(r['pass1_final'] - r['pass1_base']) * 100:+.1f} pts | {r['greedy_final']:.1%} | "
                     f"{r['length_final']:.1f} | {r['steps']} | {r['seconds']:.0f} | {r['peak_rss_mb']:.0f} | "
                     f"{r['train_state_mb']:.1f} | {r['critic_params']:,} |")
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


def compare(out: str | Path = "results", algos=PAPER_ALGOS, cache_dir: str | Path | None = None, threads: int = 1,
            quiet: bool = False, task: str = "compact", jobs: int = 2, **overrides) -> list[Run]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cache = RunCache(cache_dir or default_cache_dir())
    t0 = time.perf_counter()
    entry = get_task(task)
    base = load_policy(entry.policy, device="cpu")
    configs = compare_configs(algos, entry.name, **overrides)
    identity = base.identity()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:  # side by side, the progress bars would interleave
        runs = list(pool.map(lambda cfg: run_one(cfg, cache, threads, quiet or jobs > 1, entry.name, identity),
                             configs.values()))
    import torch

    torch.set_num_threads(jobs * threads)  # the evaluations run here, one after another, on every core
    task_object, n = entry.make(), entry.heldout_n or EVAL_N
    base_final = final_evaluation(base, task_object, n)
    rows = [summary_row(r, base_final, final_of(r, task_object, n)) for r in runs]
    tiny = base.model
    n_tiny = sum(p.numel() for p in tiny.parameters())
    table = markdown_table(rows) + "\n\nTraining state (fp32), from parameter counts:\n\n" + memory_table(
        memory_rows(n_tiny, tiny.config.hidden_size), f"tiny policy ({n_tiny:,} params)") + "\n\n" + memory_table(
        memory_rows(*qwen25_05b_size()), "Qwen2.5-0.5B-Instruct, same count")
    (out / "compare.md").write_text(table + "\n")
    (out / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    from .plots import plot_runs

    extra = ("reward/attempts",) if entry.name == "worked" else ("clip_frac_high",)  # only worked steps can retry
    fig = plot_runs(runs, metrics=("eval/accuracy_sampled", "eval/accuracy_greedy", "reward_mean", "entropy",
                                   "completion_len_mean", *extra), title=f"PPO vs GRPO vs DAPO on {entry.title}")
    fig.set_size_inches(14, 7)
    fig.savefig(out / "compare.png", dpi=110)
    print(table)
    print(f"\nwrote {out / 'compare.md'}, {out / 'compare.json'} and {out / 'compare.png'} "
          f"({time.perf_counter() - t0:.0f} s in all)")
    return runs

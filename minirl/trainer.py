"""`train()`: the run around the RL step — optimiser, resume, run cache, checkpoints, evaluation, callbacks.

    run = train(policy, task, RLConfig.preset("dapo"))     # -> Run: config + one metrics row per step

The algorithm itself is `step.rl_step` (sample -> reward -> filter -> advantages -> updates -> metrics); this
file calls it once per step and keeps the session: it builds the optimiser on `accelerate` (device placement,
mixed precision, DDP over several processes), records every step in a `Run` as soon as it ends, evaluates on
the held-out split, checkpoints, resumes exactly, answers finished configs from the cache, and leaves a
failed or interrupted run with its last good checkpoint and all of its metrics.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from tqdm import tqdm

from .actor_critic import ActorCritic, training_state_bytes
from .card import trained_card
from .checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from .config import RLConfig
from .evaluate import evaluate
from .runs import Run, run_key
from .step import DynamicSamplingExhausted, Learner, TrainingDiverged, rl_step
from .tasks import task_identity

__all__ = ["DynamicSamplingExhausted", "TrainingDiverged", "make_learner", "train"]


def new_accelerator(config: RLConfig, device: torch.device) -> Accelerator:
    """An Accelerator for this run. accelerate keeps one global state per process and refuses a second
    mixed-precision setting ("restart your runtime"), so a bf16 run after an fp32 one in the same notebook
    would fail: forget the previous run's settings first (the distributed part, PartialState, is kept)."""
    state = AcceleratorState._shared_state
    if state and state.get("_mixed_precision") not in (None, config.mixed_precision):
        AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(mixed_precision=config.mixed_precision, cpu=device.type == "cpu")


def make_learner(policy, config: RLConfig, accelerator: Accelerator | None = None,
                 checkpoint: Path | None = None) -> tuple[Learner, int]:
    """The trainable state of a run (policy + critic, AdamW, warm-up schedule, reference model), restored from
    `checkpoint` if given; returns it and the step to continue from."""
    acc = accelerator or new_accelerator(config, policy.device)
    if config.batch_size % acc.num_processes:
        raise ValueError(f"RLConfig.batch_size={config.batch_size} must be divisible by the {acc.num_processes} processes")
    torch.manual_seed(config.seed)  # value-head init; everything else is seeded per step
    reference = copy.deepcopy(policy.model).eval().requires_grad_(False) if config.kl_coef > 0 else None
    actor_critic = ActorCritic(policy.model, config.critic, config.share_prompts).to(policy.device)
    critic_ids = {id(p) for p in actor_critic.critic_parameters()}
    groups = [{"params": [p for p in actor_critic.parameters() if id(p) not in critic_ids], "lr": config.lr}]
    if critic_ids:
        groups.append({"params": actor_critic.critic_parameters(), "lr": config.critic_lr or 10 * config.lr})
    # fused: one kernel for the whole update instead of a dozen small ops per tensor (~4x faster at this size);
    # not under fp16, whose GradScaler must see each skipped step (a fused step folds the inf check in)
    fused = config.fused_adamw and policy.device.type in ("cpu", "cuda") and acc.scaler is None
    optimizer = torch.optim.AdamW(groups, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps,
                                  weight_decay=config.weight_decay, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (config.warmup_steps + 1)))
    start_step = load_checkpoint(checkpoint, actor_critic, optimizer, scheduler, acc.scaler) if checkpoint else 0
    model, optimizer = acc.prepare(actor_critic, optimizer)
    if reference is not None:
        reference.to(acc.device)
    return Learner(acc, model, optimizer, scheduler, reference), start_step


def run_meta(policy, task, learner: Learner, key: str) -> dict:
    """What a run records about itself besides its config: where it started and what its state costs."""
    actor_critic = learner.accelerator.unwrap_model(learner.model)
    n_policy = sum(p.numel() for p in policy.model.parameters())
    n_critic = sum(p.numel() for p in actor_critic.critic_parameters())
    n_reference = n_policy if learner.reference is not None else 0
    bytes_per_param = next(policy.model.parameters()).element_size()
    return {"policy": policy.name, "task": task_identity(task), "key": key,
            "processes": learner.accelerator.num_processes, "policy_params": n_policy, "critic_params": n_critic,
            "reference_params": n_reference,
            "state_mb": training_state_bytes(n_policy + n_critic, n_reference, bytes_per_param) / 2**20}


def peak_memory_mb(device: torch.device) -> float:
    """GPU: peak allocated by torch. CPU: the process's peak resident set (includes Python and libraries);
    nan where the system tells neither."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource  # POSIX only: native Windows has no such module
    except ImportError:
        return windows_peak_rss_mb()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # getrusage(2): bytes on macOS, KiB on Linux


def windows_peak_rss_mb() -> float:
    """The peak working set that Windows keeps per process (psutil, which accelerate already requires);
    nan elsewhere."""
    import psutil

    return getattr(psutil.Process().memory_info(), "peak_wset", float("nan")) / 2**20


def run_evaluation(policy, task, config: RLConfig) -> dict[str, float]:
    """Held-out accuracy, greedy and sampled at the training temperature (step 0 of a run is the base policy)."""
    greedy = evaluate(policy, task, n=config.eval_n, greedy=True, max_new_tokens=config.max_new_tokens,
                      progress=False)
    sampled = evaluate(policy, task, n=config.eval_n, greedy=False, k=config.eval_sampled_k,
                       temperature=config.temperature, max_new_tokens=config.max_new_tokens, progress=False)
    return {"eval/accuracy_greedy": greedy["accuracy"], "eval/accuracy_sampled": sampled["accuracy"],
            "eval/format_rate_sampled": sampled["format_rate"], "eval/mean_length_sampled": sampled["mean_length"]}


def train(policy, task, config: RLConfig, *, callbacks=(), run_dir: str | Path | None = None, resume: bool = False,
          cache=None, progress: bool = True, accelerator: Accelerator | None = None, advantage_fn=None) -> Run:
    """Train `policy` in place on `task` with `config`; return the Run (config + per-step metrics).

    callbacks: callables `cb(run, row)` called after every step on the main process; return False to stop.
    run_dir: where metrics.jsonl, config.json and checkpoints go (needed for resume and checkpoint_every).
    resume: continue from run_dir's last checkpoint; pass the same *base* policy as the first time.
    cache: a RunCache; a finished run with the same (policy, task, config, code) is returned without
      training (the policy is then NOT modified: load the trained one from run.path / "checkpoint" / "policy").
    progress: a text progress bar (steps, elapsed and remaining time, reward, accuracy) on stdout.
    advantage_fn: optional `fn(rewards (N,), group_ids (N,)) -> (N,)` that replaces the group/rloo estimator
      (how the exercises plug a learner's implementation into this trainer); such runs are never cached.
    """
    config = config.validate()
    if advantage_fn is not None:
        if config.advantage == "gae":
            raise ValueError("advantage_fn replaces a group estimator; it cannot be used with advantage='gae' (PPO)")
        cache = None
    key = run_key(policy.name, task_identity(task), config)
    if cache is not None and not resume:
        hit = cache.get(key)
        if hit is not None:
            return hit
        run_dir = run_dir or cache.path_for(key)
    checkpoint, run = None, None
    if resume:
        checkpoint = find_checkpoint(run_dir) if run_dir else None
        if checkpoint is None:
            raise ValueError(f"resume=True but run_dir={str(run_dir)!r} has no checkpoint to resume from")
        run = Run.load(run_dir)
        if run.config != config:
            changed = sorted(k for k, v in config.to_dict().items() if run.config.to_dict()[k] != v)
            raise ValueError(f"resume=True but the config differs from the run in {run_dir} in {changed}; "
                             "resume with the same config (or start a new run_dir)")
    learner, start_step = make_learner(policy, config, accelerator, checkpoint)
    acc = learner.accelerator
    main = acc.is_main_process
    meta = run_meta(policy, task, learner, key)
    if run is None:  # only the main process writes the run folder
        run = Run.start(config, run_dir if main else None, **meta)
    else:  # resumed: forget the rows after the checkpoint, they will be made again
        run.history, run.path = [r for r in run.history if r["step"] <= start_step], run.path if main else None
        if main:
            run.save()
            run.set_status("running")

    def save(step: int) -> None:  # run_dir/checkpoint: policy/ (a Hub-ready folder with its card) + trainer state
        save_checkpoint(run.path, step, policy, acc.unwrap_model(learner.model), learner.optimizer, learner.scheduler,
                        acc.scaler, card=trained_card(run, step), temperature=config.temperature,
                        top_p=config.top_p, max_new_tokens=config.max_new_tokens)

    t_start = time.perf_counter() - (run.history[-1]["wall_time"] if run.history else 0.0)
    samples = run.history[-1].get("samples", 0) if run.history else 0
    bar = tqdm(range(start_step, config.steps), desc=config.algo, unit="step", file=sys.stdout, mininterval=0.5,
               disable=not (progress and main), initial=start_step, total=config.steps)
    try:
        if start_step == 0 and main:  # the base policy's held-out accuracy is step 0 of every curve
            run.append({"step": 0, "samples": 0, "wall_time": 0.0, **run_evaluation(policy, task, config)})
        for step in bar:
            t0 = time.perf_counter()
            row = rl_step(policy, task, config, learner, step, advantage_fn)
            seconds = time.perf_counter() - t0
            samples += row["generated"]  # over every process (metrics.py)
            row.update(step=step + 1, samples=samples, lr=learner.scheduler.get_last_lr()[0],
                       tokens_per_s=row.pop("generated_tokens") / seconds, step_seconds=seconds,
                       peak_mem_mb=peak_memory_mb(acc.device))
            # a step whose every update the fp16 scaler skipped has no loss or gradient norm to check
            all_skipped = row["updates_skipped"] == config.epochs * config.minibatches
            checked = ("reward_mean",) if all_skipped else ("policy_loss", "grad_norm", "reward_mean")
            if not all(math.isfinite(row[k]) for k in checked):
                raise TrainingDiverged(f"non-finite metrics at step {step + 1}: {row}")
            last = step + 1 == config.steps
            if main and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
                row.update(run_evaluation(policy, task, config))
            row["wall_time"] = time.perf_counter() - t_start
            if main:
                run.append(row)
                bar.set_postfix(reward=f"{row['reward_mean']:.2f}", acc=f"{row['accuracy']:.2f}")
                if run.path is not None and (last or (config.checkpoint_every and (step + 1) % config.checkpoint_every == 0)):
                    save(step + 1)
            if main and any(cb(run, row) is False for cb in callbacks):
                if run.path is not None:
                    save(step + 1)
                run.set_status("stopped")
                break
        else:
            run.set_status("finished")
    except BaseException as err:  # keep metrics and the last good checkpoint; say why it ended
        run.set_status("stopped" if isinstance(err, KeyboardInterrupt) else "failed", error=f"{type(err).__name__}: {err}")
        raise
    finally:
        bar.close()
        if run.history and run.history[-1]["step"] > 0:  # the weights changed: never reuse the old cache key
            policy.name = f"{meta['policy']}+{config.algo}:{key[:8]}@{run.history[-1]['step']}"
        run.meta["seconds"] = time.perf_counter() - t_start
        run.meta["peak_mem_mb"] = peak_memory_mb(acc.device)
        if run.path is not None and main:
            run.save()
    return run

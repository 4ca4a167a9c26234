"""`train()`: the run around the RL step — resume, run cache, checkpoints, evaluation, callbacks, trackers.

    run = train(policy, task, RLConfig.preset("dapo"))     # -> Run: config + one metrics row per step

The algorithm itself is `step.rl_step` (sample -> reward -> filter -> advantages -> updates -> metrics). `train`
reads in three parts: `open_run` (the run cache, resuming, the optimiser on `accelerate`, the run folder),
`run_steps` (the loop around `rl_step`: held-out evaluations and what the policy wrote at them, checkpoints,
callbacks, the progress line, experiment trackers) and `close_run` (how the run ended). A failed or interrupted
run keeps its last good checkpoint and every metric it logged.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from tqdm import tqdm

from .actor_critic import ActorCritic, training_state_bytes
from .card import trained_card
from .checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from .config import RLConfig
from .evaluate import evaluate
from .runs import Run, markdown_table, run_key
from .step import DynamicSamplingExhausted, Learner, TrainingDiverged, rl_step
from .tasks import task_identity

__all__ = ["DynamicSamplingExhausted", "TrainingDiverged", "make_learner", "train"]

PRECISIONS = {"no": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # RLConfig.mixed_precision -> autocast dtype
COMPLETIONS_KEPT = 8  # held-out problems whose completions every evaluation records (the same problems each time)


def loss_scaler(config: RLConfig, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 on a GPU needs loss scaling (small gradients underflow its range); bf16 and fp32 do not."""
    return torch.amp.GradScaler(device.type) if config.mixed_precision == "fp16" and device.type != "cpu" else None


def make_learner(policy, config: RLConfig, accelerator: Accelerator | None = None,
                 checkpoint: Path | None = None) -> tuple[Learner, int]:
    """The trainable state of a run (policy + critic, AdamW, warm-up schedule, loss scaler, reference model),
    restored from `checkpoint` if given; returns it and the last step done (0 for a new run).

    accelerate places the model and runs DDP over processes. Mixed precision is the config's (`Learner.autocast`,
    torch's GradScaler), not accelerate's: accelerate fixes its precision once per process, and a notebook or the
    study runs bf16 and fp32 runs one after another."""
    acc = accelerator or Accelerator(cpu=policy.device.type == "cpu")
    if config.batch_size % acc.num_processes:
        raise ValueError(f"RLConfig.batch_size={config.batch_size} must be divisible by the {acc.num_processes} processes")
    torch.manual_seed(config.seed)  # value-head init; everything else is seeded per step
    reference = copy.deepcopy(policy.model).eval().requires_grad_(False) if config.kl_coef > 0 else None
    actor_critic = ActorCritic(policy.model, config.critic, config.share_prompts).to(policy.device)
    critic_ids = {id(p) for p in actor_critic.critic_parameters()}
    groups = [{"params": [p for p in actor_critic.parameters() if id(p) not in critic_ids], "lr": config.lr}]
    if critic_ids:
        groups.append({"params": actor_critic.critic_parameters(), "lr": config.critic_lr or 10 * config.lr})
    scaler = loss_scaler(config, policy.device)
    # fused: one kernel for the whole update instead of a dozen small ops per tensor (BENCHMARKS.md section 6);
    # not under fp16, whose GradScaler must see each skipped step (a fused step folds the inf check in)
    fused = config.fused_adamw and policy.device.type in ("cpu", "cuda") and scaler is None
    optimizer = torch.optim.AdamW(groups, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps,
                                  weight_decay=config.weight_decay, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (config.warmup_steps + 1)))
    done = load_checkpoint(checkpoint, actor_critic, optimizer, scheduler, scaler) if checkpoint else 0
    model, optimizer = acc.prepare(actor_critic, optimizer)
    if reference is not None:
        reference.to(acc.device)
    return Learner(acc, model, optimizer, scheduler, reference, scaler, PRECISIONS[config.mixed_precision]), done


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


def run_evaluation(policy, task, config: RLConfig) -> tuple[dict[str, float], list[dict]]:
    """Accuracy on `config.eval_split` (held-out test, or val when tuning), greedy and sampled at the training
    temperature (step 0 of a run is the base policy), and what the policy wrote for the first COMPLETIONS_KEPT
    problems in each decoding."""
    common = dict(n=config.eval_n, max_new_tokens=config.max_new_tokens, split=config.eval_split, progress=False,
                  keep=COMPLETIONS_KEPT)
    greedy = evaluate(policy, task, greedy=True, **common)
    sampled = evaluate(policy, task, greedy=False, k=config.eval_sampled_k, temperature=config.temperature, **common)
    completions = [{"decoding": name, **row} for name, m in (("greedy", greedy), ("sampled", sampled))
                   for row in m["completions"]]
    return {"eval/accuracy_greedy": greedy["accuracy"], "eval/accuracy_sampled": sampled["accuracy"],
            "eval/format_rate_sampled": sampled["format_rate"], "eval/mean_length_sampled": sampled["mean_length"]}, \
        completions


# ----------------------------------------------------------------------------- the three parts of a run
@dataclass
class Session:
    """An open run: its record, what trains, and where it continues."""

    run: Run  # config, metrics rows, completions; written to run.path on the main process
    learner: Learner
    done: int  # steps already done (0, or the resumed checkpoint's step)
    t_start: float  # time.perf_counter() at the run's wall_time 0 (a resumed run continues its clock)
    own_trackers: bool  # report_to started the trackers, so the run finishes them


def open_run(policy, task, config: RLConfig, key: str, run_dir: Path | None, resume: bool,
             accelerator: Accelerator | None, report_to: str | None, label: str | None = None) -> Session:
    """A new run in `run_dir`, or the run there resumed from its last checkpoint (its rows after it dropped);
    trackers started when `report_to` names them."""
    run = None
    checkpoint = find_checkpoint(run_dir) if resume and run_dir else None
    if resume:
        if checkpoint is None:
            raise ValueError(f"resume=True but run_dir={str(run_dir)!r} has no checkpoint to resume from")
        run = Run.load(run_dir)
        if run.config != config:
            changed = sorted(k for k, v in config.to_dict().items() if run.config.to_dict()[k] != v)
            raise ValueError(f"resume=True but the config differs from the run in {run_dir} in {changed}; "
                             "resume with the same config (or start a new run_dir)")
    if report_to:
        if accelerator is not None or run_dir is None:
            raise ValueError(f"report_to={report_to!r} needs a run folder (run_dir or a cache) and no accelerator "
                             "of your own (give yours log_with= instead)")
        accelerator = Accelerator(cpu=policy.device.type == "cpu", log_with=report_to, project_dir=str(run_dir))
    learner, done = make_learner(policy, config, accelerator, checkpoint)
    main = learner.accelerator.is_main_process
    if run is None:  # only the main process writes the run folder
        run = Run.start(config, run_dir if main else None, **run_meta(policy, task, learner, key),
                        **({"label": label} if label else {}))
    else:
        run.history = [r for r in run.history if r["step"] <= done]
        run.completions = [r for r in run.completions if r["step"] <= done]
        run.path = run.path if main else None
        if main:
            run.save()
            run.set_status("running")
    if report_to:
        learner.accelerator.init_trackers("minirl", config=config.to_dict())
    t_start = time.perf_counter() - (run.history[-1]["wall_time"] if run.history else 0.0)
    return Session(run, learner, done, t_start, own_trackers=bool(report_to))


def run_steps(session: Session, policy, task, config: RLConfig, callbacks=(), progress: bool = True,
              advantage_fn=None) -> str:
    """Steps done+1 .. config.steps of `rl_step`, each row recorded as soon as it ends; returns "finished", or
    "stopped" when a callback returned False."""
    run, learner = session.run, session.learner
    acc = learner.accelerator
    main = acc.is_main_process
    samples = run.history[-1].get("samples", 0) if run.history else 0
    bar = tqdm(range(session.done + 1, config.steps + 1), desc=run.meta.get("label", config.algo), unit="step",
               file=sys.stdout,
               mininterval=0.5, disable=not (progress and main), initial=session.done, total=config.steps)

    def evaluation(row: dict) -> None:  # held-out accuracy into the row, what the policy wrote into the run
        metrics, completions = run_evaluation(policy, task, config)
        row.update(metrics)
        run.add_completions([{"step": row["step"], **c} for c in completions])
        log_completions(acc, completions, row["step"])

    def checkpoint(step: int) -> None:  # run_dir/checkpoint: policy/ (a Hub-ready folder, its card) + trainer state
        save_checkpoint(run.path, step, policy, acc.unwrap_model(learner.model), learner.optimizer, learner.scheduler,
                        learner.scaler, card=trained_card(run, step), temperature=config.temperature,
                        top_p=config.top_p, max_new_tokens=config.max_new_tokens)

    if session.done == 0 and main:  # the base policy's held-out accuracy is step 0 of every curve
        row = {"step": 0, "samples": 0, "wall_time": 0.0}
        evaluation(row)
        run.append(row)
        log_metrics(acc, row)
    with bar:
        for step in bar:
            t0 = time.perf_counter()
            row = rl_step(policy, task, config, learner, step, advantage_fn)
            seconds = time.perf_counter() - t0
            samples += row["generated"]  # over every process (metrics.py)
            row.update(step=step, samples=samples, lr=learner.scheduler.get_last_lr()[0],
                       tokens_per_s=row.pop("generated_tokens") / seconds, step_seconds=seconds,
                       peak_mem_mb=peak_memory_mb(acc.device))
            # a step whose every update the fp16 scaler skipped has no loss or gradient norm to check
            all_skipped = row["updates_skipped"] == config.epochs * config.minibatches
            checked = ("reward_mean",) if all_skipped else ("policy_loss", "grad_norm", "reward_mean")
            if not all(math.isfinite(row[k]) for k in checked):
                raise TrainingDiverged(f"non-finite metrics at step {step}: {row}")
            last = step == config.steps
            if not main:
                continue
            if last or (config.eval_every and step % config.eval_every == 0):
                evaluation(row)
            row["wall_time"] = time.perf_counter() - session.t_start
            run.append(row)
            log_metrics(acc, row)
            bar.set_postfix(reward=f"{row['reward_mean']:.2f}", acc=f"{row['accuracy']:.2f}")
            saved = run.path is not None and (last or (config.checkpoint_every and step % config.checkpoint_every == 0))
            if saved:
                checkpoint(step)
            if any(cb(run, row) is False for cb in callbacks):
                if run.path is not None and not saved:
                    checkpoint(step)
                return "stopped"
    return "finished"


def close_run(session: Session, status: str, error: str | None = None) -> None:
    """Record how the run ended, its seconds and peak memory; finish its trackers."""
    run, acc = session.run, session.learner.accelerator
    run.set_status(status, error=error)
    run.meta["seconds"] = time.perf_counter() - session.t_start
    run.meta["peak_mem_mb"] = peak_memory_mb(acc.device)
    if run.path is not None:
        run.save()
    if session.own_trackers:
        for tracker in acc.trackers:
            tracker.finish()


def log_metrics(acc: Accelerator, row: dict) -> None:
    """A metrics row to the experiment trackers (accelerate's: TensorBoard, trackio, W&B, ...), if any."""
    if acc.trackers:
        acc.log({k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}, step=row["step"])


def log_completions(acc: Accelerator, completions: list[dict], step: int) -> None:
    """What the policy wrote at an evaluation, to the trackers: a table where the tracker keeps tables (W&B,
    ClearML), else a Markdown table as text (TensorBoard's text tab)."""
    columns = ["decoding", "prompt", "completion", "reward", "correct"]
    rows = [[c["decoding"], c["prompt"], c["completion"], float(c["reward"]), bool(c["correct"])] for c in completions]
    for tracker in acc.trackers:
        if hasattr(tracker, "log_table"):
            tracker.log_table("eval/completions", columns=columns, data=rows, step=step)
        else:
            tracker.log({"eval/completions": markdown_table(columns, rows)}, step=step)


def train(policy, task, config: RLConfig, *, callbacks=(), run_dir: str | Path | None = None, resume: bool = False,
          cache=None, progress: bool = True, accelerator: Accelerator | None = None, advantage_fn=None,
          report_to: str | list[str] | None = None, label: str | None = None) -> Run:
    """Train `policy`'s weights in place on `task` with `config`; return the Run (config + per-step metrics).

    callbacks: callables `cb(run, row)` called after every step on the main process; return False to stop.
    run_dir: where metrics.jsonl, completions.jsonl, config.json and checkpoints go (needed to resume).
    resume: continue from run_dir's last checkpoint; pass the same *base* policy as the first time.
    cache: a RunCache; a finished run with the same (policy weights, task, config, code) is returned without
      training (the policy is then NOT modified: load the trained one from run.path / "checkpoint" / "policy").
    progress: a text progress bar (steps, elapsed and remaining time, reward, accuracy) on stdout.
    accelerator: an `accelerate.Accelerator` of your own (a launcher's, trackers you set up); default: a new one.
    advantage_fn: optional `fn(rewards (N,), group_ids (N,)) -> (N,)` that replaces the group/rloo estimator
      (how the exercises plug a learner's implementation into this trainer); such runs are never cached.
    report_to: experiment trackers for the metrics and the completions, as accelerate's `log_with` names them
      ("tensorboard", "trackio", "wandb", ..., or "all"); they write into the run folder.
    label: the run's name in its progress bar, tables and plots (default: the preset's name; `Run.label`).
    """
    config = config.validate()
    if advantage_fn is not None:
        if config.advantage == "gae":
            raise ValueError("advantage_fn replaces a group estimator; it cannot be used with advantage='gae' (PPO)")
        cache = None
    key = run_key(policy.identity(), task_identity(task), config)
    if cache is not None and not resume:
        hit = cache.get(key)
        if hit is not None:
            return hit
        run_dir = run_dir or cache.path_for(key)
    session = open_run(policy, task, config, key, Path(run_dir) if run_dir else None, resume, accelerator, report_to,
                       label)
    try:
        status = run_steps(session, policy, task, config, callbacks, progress, advantage_fn)
    except BaseException as err:  # keep the metrics and the last good checkpoint; say why it ended
        close_run(session, "stopped" if isinstance(err, KeyboardInterrupt) else "failed", f"{type(err).__name__}: {err}")
        raise
    close_run(session, status)
    return session.run

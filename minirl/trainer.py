"""`train()`: the one stateful loop that turns PPO, GRPO and DAPO configs into learning.

Every step:  sample G completions per prompt -> reward -> (DAPO: drop all-equal groups, refill)
             -> advantages -> mu epochs of minibatch updates -> metrics -> (eval, checkpoint).
All the math lives in pure functions (advantages.py, losses.py, dapo.py); this file only wires them.
Built on `accelerate.Accelerator`: device placement, mixed precision, DDP over several processes.
"""

from __future__ import annotations

import copy
import math
import resource
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from tqdm.auto import tqdm

from . import advantages as adv
from . import dapo
from . import losses as L
from .actor_critic import ActorCritic, state_bytes
from .checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from .config import RLConfig
from .evaluate import evaluate
from .rollout import Rollout, completion_logprobs, sample
from .runs import Run, run_key


class TrainingDiverged(RuntimeError):
    """A loss, gradient or reward became NaN/inf. The run keeps its last good checkpoint and metrics."""


class DynamicSamplingExhausted(RuntimeError):
    """DAPO's dynamic sampling found too few groups with mixed rewards within max_gen_batches rounds."""


def describe_task(task) -> str:
    return repr(task)


def _seed(config: RLConfig, step: int, round_: int = 0, rank: int = 0) -> int:
    """Every random choice of a step is seeded from (seed, step): resuming needs no generator state."""
    return (config.seed * 1_000_003 + step * 1009 + round_ * 17 + rank) % (2**63)


# ----------------------------------------------------------------------------- sampling and reward
def generate(policy, task, config: RLConfig, step: int, round_: int, rank: int, world: int):
    """One generation round: this process's share of `batch_size` prompts, G completions each."""
    problems = task.problems("train", config.batch_size, seed=_seed(config, step, round_))[rank::world]
    prompts = [p.prompt for p in problems for _ in range(config.group_size)]
    ids, mask = policy.encode_prompts(prompts)
    gen = torch.Generator(device=policy.device).manual_seed(_seed(config, step, round_, rank))
    roll = sample(policy, ids, mask, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                  top_p=config.top_p, generator=gen)
    scores = [task.score(problems[i // config.group_size], text) for i, text in enumerate(roll.texts)]
    rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)
    names = sorted({k for s in scores for k in s.components})
    parts = torch.tensor([[s.components.get(k, float("nan")) for k in names] for s in scores], dtype=torch.float32)
    group_ids = torch.arange(len(problems)).repeat_interleave(config.group_size) + round_ * config.batch_size
    return roll, rewards, group_ids, names, parts


def collect(policy, task, config: RLConfig, step: int, rank: int, world: int):
    """Sample a training batch. With dynamic sampling (DAPO eq. 11) keep only groups whose rewards differ,
    and sample again until `batch_size` groups are kept or `max_gen_batches` rounds are used up."""
    want = config.batch_size // world  # groups this process needs
    kept, all_rewards, all_parts, all_lengths, all_trunc, first_ids = [], [], [], [], [], None
    for round_ in range(config.max_gen_batches if config.dynamic_sampling else 1):
        roll, rewards, group_ids, names, parts = generate(policy, task, config, step, round_, rank, world)
        first_ids = group_ids if first_ids is None else first_ids
        all_rewards.append(rewards), all_parts.append(parts)
        all_lengths.append(roll.lengths.cpu()), all_trunc.append(roll.truncated.cpu())
        keep = dapo.dynamic_sampling_keep(rewards, group_ids) if config.dynamic_sampling else torch.ones_like(rewards, dtype=torch.bool)
        kept.append((roll.select(keep.to(roll.completion_ids.device)), rewards[keep], group_ids[keep]))
        if sum(len(r) for _, r, _ in kept) >= want * config.group_size:
            break
    else:
        if config.dynamic_sampling:
            got = sum(len(r) for _, r, _ in kept) // config.group_size
            raise DynamicSamplingExhausted(
                f"dynamic sampling kept {got} of {want} groups after max_gen_batches={config.max_gen_batches} "
                "rounds: almost every group has all-equal rewards (the policy is always right or always wrong). "
                "Raise max_gen_batches, lower the learning rate, or use dynamic_sampling=False.")
    n = want * config.group_size  # groups are contiguous, so the first n rows are whole groups
    roll = Rollout.cat([r for r, _, _ in kept], policy.tokenizer.pad_token_id).select(list(range(n)))
    rewards, group_ids = torch.cat([r for _, r, _ in kept])[:n], torch.cat([g for _, _, g in kept])[:n]
    every = torch.cat(all_rewards)
    stats = {"reward_mean": every.mean().item(), "reward_std": every.std().item() if len(every) > 1 else 0.0,
             "frac_reward_zero_std": dapo.frac_reward_zero_std(all_rewards[0], first_ids),
             "kept_group_frac": (n // config.group_size) / (len(every) // config.group_size),
             "gen_batches": len(all_rewards), "generated": len(every),
             "completion_len_mean": torch.cat(all_lengths).float().mean().item(),
             "completion_len_max": torch.cat(all_lengths).max().item(),
             "truncation_rate": torch.cat(all_trunc).float().mean().item(),
             "generated_tokens": torch.cat(all_lengths).sum().item()}
    for j, name in enumerate(names):
        stats[f"reward/{name}"] = torch.cat(all_parts)[:, j].nanmean().item()
    stats["accuracy"] = stats.get("reward/correct", float("nan"))
    return roll, rewards, group_ids, stats


# ----------------------------------------------------------------------------- learning
@torch.no_grad()
def forward_in_chunks(fn, roll: Rollout, rows: int, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Run `fn` (a model forward) over the rollout in chunks of `rows`, without gradients."""
    outs = {k: [] for k in keys}
    for start in range(0, len(roll), rows):
        part = roll.select(list(range(start, min(start + rows, len(roll)))))
        out = fn(part.prompt_ids, part.prompt_mask, part.completion_ids, part.completion_mask)
        for k in keys:
            outs[k].append(out[k].float())
    return {k: torch.cat(v) for k, v in outs.items()}


def compute_advantages(config, rewards, group_ids, mask, old_logprobs, ref_logprobs, old_values, advantage_fn=None):
    """Sequence rewards -> per-token advantages (B, T) and, for PPO, returns (B, T)."""
    if config.advantage == "gae":  # PPO: reward on the last token, KL penalty on every token, then GAE
        token_rewards = torch.zeros_like(mask, dtype=torch.float32)
        last = (mask.sum(-1).long() - 1).clamp(min=0)  # index of each sequence's final (EOS) token
        token_rewards[torch.arange(len(rewards)), last] = rewards.to(mask.device)
        if config.kl_coef > 0 and config.kl_placement == "reward":
            token_rewards -= config.kl_coef * L.kl_penalty(old_logprobs, ref_logprobs, config.kl_estimator) * mask
        advantages, returns = adv.gae(token_rewards, old_values, mask, config.gamma, config.lam)
    else:
        if advantage_fn is not None:  # a learner's own estimator (the exercises plug theirs in here)
            seq = torch.as_tensor(advantage_fn(rewards.clone(), group_ids.clone()), dtype=torch.float32)
            if seq.shape != rewards.shape or not torch.isfinite(seq).all():
                raise ValueError(f"advantage_fn returned shape {tuple(seq.shape)} (finite: {bool(torch.isfinite(seq).all())}); "
                                 f"it must return finite advantages of shape {tuple(rewards.shape)}, one per completion")
        elif config.advantage == "group":
            seq = adv.group_advantages(rewards, group_ids, scale=config.adv_scale, eps=config.adv_eps)
        else:
            seq = adv.rloo_advantages(rewards, group_ids)
        advantages, returns = adv.broadcast_to_tokens(seq.to(mask.device), mask), None
    if config.whiten_advantages:
        advantages = adv.whiten(advantages, mask)
    return advantages, returns


def learn(accelerator, model, optimizer, scheduler, config, roll, advantages, returns, loss_mask,
          old_logprobs, old_values, ref_logprobs, step: int) -> dict[str, float]:
    """mu epochs x minibatches of clipped-surrogate updates. Normalisers are totals over the whole optimiser
    step (and over processes), so micro-batching and data parallelism do not change the gradient."""
    world, N = accelerator.num_processes, len(roll)
    rows_mb = N // config.minibatches
    rows_micro = config.micro_batch_size or rows_mb
    gen = torch.Generator().manual_seed(_seed(config, step, 99))
    # logging sums stay tensors (no .item() per micro-batch: each one would stall a GPU); read once at the end
    sums = {k: torch.zeros((), device=loss_mask.device) for k in ("policy_loss", "value_loss", "entropy", "kl_ref",
                                                                 "clip_frac_low", "clip_frac_high", "approx_kl",
                                                                 "tokens")}
    grad_norms = []
    for _ in range(config.epochs):
        order = torch.randperm(N, generator=gen) if config.minibatches > 1 else torch.arange(N)
        for mb in order.split(rows_mb):
            num_tokens = accelerator.reduce(loss_mask[mb].sum().float(), "sum") if world > 1 else loss_mask[mb].sum()
            totals = dict(num_tokens=num_tokens.clamp(min=1), num_seqs=len(mb) * world, max_len=config.max_new_tokens)
            micros = mb.split(rows_micro)
            for i, idx in enumerate(micros):
                part, m = roll.select(idx), loss_mask[idx]
                sync = nullcontext() if i == len(micros) - 1 or world == 1 else accelerator.no_sync(model)
                with sync, accelerator.autocast():
                    out = model(part.prompt_ids, part.prompt_mask, part.completion_ids, part.completion_mask,
                                config.temperature, entropy_grad=config.entropy_coef > 0)
                    logp = out["logprobs"].float()
                    old = old_logprobs[idx] if old_logprobs is not None else logp.detach()
                    pg, clip = L.clipped_surrogate(logp, old, advantages[idx], config.clip_low, config.clip_high,
                                                   config.dual_clip or None)
                    loss_tokens = pg
                    if ref_logprobs is not None:
                        kl = L.kl_penalty(logp, ref_logprobs[idx], config.kl_estimator)
                        sums["kl_ref"] += L.masked_sum(kl.detach(), m)
                        if config.kl_placement == "loss":
                            loss_tokens = loss_tokens + config.kl_coef * kl
                    if config.entropy_coef > 0:
                        loss_tokens = loss_tokens - config.entropy_coef * out["entropy"]
                    loss = L.aggregate(loss_tokens, m, config.loss_agg, **totals)
                    if "values" in out:
                        v = L.value_loss(out["values"], old_values[idx], returns[idx], config.value_clip or None)
                        vloss = L.aggregate(v, m, "token-mean", num_tokens=totals["num_tokens"])
                        loss = loss + config.vf_coef * vloss
                        sums["value_loss"] += vloss.detach()
                    if not torch.isfinite(loss):
                        raise TrainingDiverged(f"loss is {loss.item()} at step {step}; lower lr (now {config.lr:g})")
                    accelerator.backward(loss * world)  # DDP averages over processes; totals already span them
                sums["policy_loss"] += L.aggregate(pg.detach(), m, config.loss_agg, **totals)
                sums["entropy"] += L.masked_sum(out["entropy"].detach(), m)
                sums["clip_frac_low"] += L.masked_sum(clip.clipped_low, m)
                sums["clip_frac_high"] += L.masked_sum(clip.clipped_high, m)
                sums["approx_kl"] += L.approx_kl(logp.detach(), old, m) * m.sum()
                sums["tokens"] += m.sum()
            norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or float("inf"))
            if not torch.isfinite(torch.as_tensor(norm)):
                raise TrainingDiverged(f"gradient norm is {float(norm)} at step {step}; lower lr (now {config.lr:g})")
            grad_norms.append(float(norm))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    sums = {k: v.item() for k, v in sums.items()}
    n_updates, tokens = config.epochs * config.minibatches, max(sums.pop("tokens"), 1.0)
    stats = {k: sums[k] / tokens for k in ("entropy", "kl_ref", "clip_frac_low", "clip_frac_high", "approx_kl")}
    stats["policy_loss"] = sums["policy_loss"] / n_updates
    if old_values is not None:
        stats["value_loss"] = sums["value_loss"] / n_updates
        stats["explained_variance"] = L.explained_variance(old_values, returns, loss_mask)
    if ref_logprobs is None:
        stats["kl_ref"] = float("nan")
    stats["grad_norm"] = sum(grad_norms) / len(grad_norms)
    return stats


# ----------------------------------------------------------------------------- the loop
def peak_memory_mb(device: torch.device) -> float:
    """GPU: peak allocated by torch. CPU: the process's peak resident set (includes Python and libraries)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_evaluation(policy, task, config: RLConfig) -> dict[str, float]:
    greedy = evaluate(policy, task, n=config.eval_n, greedy=True, max_new_tokens=config.max_new_tokens)
    sampled = evaluate(policy, task, n=config.eval_n, greedy=False, k=config.eval_sampled_k,
                       temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    return {"eval/accuracy_greedy": greedy["accuracy"], "eval/accuracy_sampled": sampled["accuracy"],
            "eval/format_rate_sampled": sampled["format_rate"], "eval/mean_length_sampled": sampled["mean_length"]}


def new_accelerator(config: RLConfig, device: torch.device) -> Accelerator:
    """An Accelerator for this run. accelerate keeps one global state per process and refuses a second
    mixed-precision setting ("restart your runtime"), so a bf16 run after an fp32 one in the same notebook
    would fail: forget the previous run's settings first (the distributed part, PartialState, is kept)."""
    state = AcceleratorState._shared_state
    if state and state.get("_mixed_precision") not in (None, config.mixed_precision):
        AcceleratorState._reset_state(reset_partial_state=False)
    return Accelerator(mixed_precision=config.mixed_precision, cpu=device.type == "cpu")


def train(policy, task, config: RLConfig, *, callbacks=(), run_dir: str | Path | None = None, resume: bool = False,
          cache=None, progress: bool = True, accelerator: Accelerator | None = None, advantage_fn=None) -> Run:
    """Train `policy` in place on `task` with `config`; return the Run (config + per-step metrics).

    callbacks: callables `cb(run, row)` called after every step on the main process; return False to stop.
    run_dir: where metrics.jsonl, config.json and checkpoints go (needed for resume and checkpoint_every).
    resume: continue from run_dir's last checkpoint; pass the same *base* policy as the first time.
    cache: a RunCache; a finished run with the same (policy, task, config, code) is returned without
      training (the policy is then NOT modified: load trained weights from run.path / "checkpoint").
    advantage_fn: optional `fn(rewards (N,), group_ids (N,)) -> (N,)` that replaces the group/rloo estimator
      (how the exercises plug a learner's implementation into this trainer); such runs are never cached.
    """
    config = config.validate()
    if advantage_fn is not None:
        if config.advantage == "gae":
            raise ValueError("advantage_fn replaces a group estimator; it cannot be used with advantage='gae' (PPO)")
        cache = None
    key = run_key(policy.name, describe_task(task), config)
    if cache is not None and not resume:
        hit = cache.get(key)
        if hit is not None:
            return hit
        run_dir = run_dir or cache.path_for(key)
    acc = accelerator or new_accelerator(config, policy.device)
    rank, world = acc.process_index, acc.num_processes
    if config.batch_size % world:
        raise ValueError(f"RLConfig.batch_size={config.batch_size} must be divisible by the {world} processes")
    torch.manual_seed(config.seed)  # value-head init; everything else is seeded per step
    ref_model = copy.deepcopy(policy.model).eval().requires_grad_(False) if config.kl_coef > 0 else None
    actor_critic = ActorCritic(policy.model, config.critic).to(policy.device)
    critic_params = actor_critic.critic_parameters()
    critic_ids = {id(p) for p in critic_params}
    groups = [{"params": [p for p in actor_critic.parameters() if id(p) not in critic_ids], "lr": config.lr}]
    if critic_params:
        groups.append({"params": critic_params, "lr": config.critic_lr or 10 * config.lr})
    optimizer = torch.optim.AdamW(groups, betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps,
                                  weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (config.warmup_steps + 1)))
    start_step, run = 0, None
    if resume:
        ckpt = find_checkpoint(run_dir) if run_dir else None
        if ckpt is None:
            raise ValueError(f"resume=True but run_dir={str(run_dir)!r} has no checkpoint to resume from")
        run = Run.load(run_dir)
        if run.config != config:
            changed = sorted(k for k, v in config.to_dict().items() if run.config.to_dict()[k] != v)
            raise ValueError(f"resume=True but the config differs from the run in {run_dir} in {changed}; "
                             "resume with the same config (or start a new run_dir)")
        start_step = load_checkpoint(ckpt, actor_critic, optimizer, scheduler)
        run.history = [r for r in run.history if r["step"] <= start_step]
        run.save()
    model, optimizer = acc.prepare(actor_critic, optimizer)
    if ref_model is not None:
        ref_model.to(acc.device)
    policy_params = sum(p.numel() for p in policy.model.parameters())
    meta = {"policy": policy.name, "task": describe_task(task), "key": key, "processes": world,
            "policy_params": policy_params, "critic_params": sum(p.numel() for p in critic_params),
            "reference_params": policy_params if ref_model is not None else 0,
            "state_mb": (state_bytes(actor_critic.parameters()) + (state_bytes(ref_model.parameters(), False, False)
                         if ref_model is not None else 0)) / 2**20}
    if run is None:
        run = Run(config=config, history=[], meta=meta, path=Path(run_dir) if run_dir else None)
        if run.path is not None and acc.is_main_process:
            run.save()
    run.set_status("running") if acc.is_main_process and run.path else None
    main = acc.is_main_process
    t_start = time.perf_counter() - (run.history[-1]["wall_time"] if run.history else 0.0)
    samples = run.history[-1].get("samples", 0) if run.history else 0
    bar = tqdm(range(start_step, config.steps), desc=config.algo, disable=not (progress and main), leave=False)
    try:
        if start_step == 0 and main:  # the base policy's held-out accuracy is step 0 of every curve
            run.append({"step": 0, "samples": 0, "wall_time": 0.0, **run_evaluation(policy, task, config)})
        for step in bar:
            t0 = time.perf_counter()
            with acc.autocast():
                roll, rewards, group_ids, row = collect(policy, task, config, step, rank, world)
            if not torch.isfinite(rewards).all():
                raise TrainingDiverged(f"task {task.name!r} returned a non-finite reward at step {step + 1}")
            if config.overlong_punishment:  # DAPO eq. 13, added to the task reward
                rewards = rewards + dapo.soft_overlong_punishment(roll.lengths.cpu(), config.max_new_tokens,
                                                                  config.overlong_cache)
            mask = roll.completion_mask.float()
            loss_mask = mask * dapo.overlong_filter_mask(roll.truncated)[:, None].to(mask) if config.overlong_filter else mask
            rows = config.micro_batch_size or len(roll) // config.minibatches
            need_old = config.epochs * config.minibatches > 1 or config.critic != "none"
            with acc.autocast():
                old = forward_in_chunks(lambda *a: model(*a, config.temperature, with_entropy=False), roll, rows,
                                        ("logprobs",) + (("values",) if config.critic != "none" else ())) if need_old else {}
                ref = forward_in_chunks(lambda *a: completion_logprobs(ref_model, *a, config.temperature), roll, rows,
                                        ("logprobs",))["logprobs"] if ref_model is not None else None
            advantages, returns = compute_advantages(config, rewards, group_ids, mask, old.get("logprobs"), ref,
                                                     old.get("values"), advantage_fn)
            row.update(learn(acc, model, optimizer, scheduler, config, roll, advantages, returns, loss_mask,
                             old.get("logprobs"), old.get("values"), ref, step + 1))
            seconds = time.perf_counter() - t0
            samples += row["generated"] * world
            row.update(step=step + 1, samples=samples, lr=scheduler.get_last_lr()[0],
                       tokens_per_s=row.pop("generated_tokens") * world / seconds, step_seconds=seconds,
                       peak_mem_mb=peak_memory_mb(acc.device))
            if not all(math.isfinite(v) for k, v in row.items() if k in ("policy_loss", "grad_norm", "reward_mean")):
                raise TrainingDiverged(f"non-finite metrics at step {step + 1}: {row}")
            last = step + 1 == config.steps
            if main and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
                row.update(run_evaluation(policy, task, config))
            row["wall_time"] = time.perf_counter() - t_start
            if main:
                run.append(row)
                bar.set_postfix(reward=f"{row['reward_mean']:.2f}", acc=f"{row['accuracy']:.2f}")
                if run.path is not None and (last or (config.checkpoint_every and (step + 1) % config.checkpoint_every == 0)):
                    save_checkpoint(run.path, step + 1, policy, acc.unwrap_model(model), optimizer, scheduler)
            if main and any(cb(run, row) is False for cb in callbacks):
                if run.path is not None:
                    save_checkpoint(run.path, step + 1, policy, acc.unwrap_model(model), optimizer, scheduler)
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

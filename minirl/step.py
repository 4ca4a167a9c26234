"""One RL step of PPO, GRPO and DAPO: sample -> reward -> (filter/refill) -> advantages -> updates -> metrics.

    row = rl_step(policy, task, config, learner, step)      # the whole algorithm, read it top to bottom

The three algorithms are switches of this one function (config.py has the table). All the math lives in pure
tensor functions (advantages.py, losses.py, dapo.py); this file wires them together and keeps the books:
which rows belong to which prompt, which tokens get a loss, and what the normalisers are. `trainer.train()`
calls `rl_step` once per step and manages everything around it (resume, cache, checkpoints, evaluation).
Shapes: N completions per step (batch_size x group_size), padded to T completion tokens. Steps count from 1, as
metrics.jsonl does (its step 0 is the base policy's evaluation).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from accelerate import Accelerator

from . import advantages as adv
from . import dapo
from . import losses as L
from . import metrics
from .config import RLConfig
from .rollout import Rollout, completion_logprobs, sample


class TrainingDiverged(RuntimeError):
    """A loss, gradient or reward became NaN/inf. The run keeps its last good checkpoint and metrics."""


class DynamicSamplingExhausted(RuntimeError):
    """DAPO's dynamic sampling found too few groups with mixed rewards within max_gen_batches rounds."""


MINIBATCH_ORDER = 2692  # step_seed offset of learn's minibatch shuffle (a constant: runs keep drawing as they did)


def step_seed(config: RLConfig, step: int, offset: int) -> int:
    """Every random choice of step `step` is seeded from (config.seed, step, offset), so resuming needs no generator
    state. offset: 17 * round + rank for a generation round's prompts and samples, MINIBATCH_ORDER for learn."""
    return (config.seed * 1_000_003 + (step - 1) * 1009 + offset) % (2**63)


@dataclass
class Learner:
    """What the updates change, made once per run by `trainer.make_learner`."""

    accelerator: Accelerator  # device placement, DDP over processes, metrics gathered from them
    model: torch.nn.Module  # ActorCritic: the policy (+ PPO's critic), as prepared by accelerate
    optimizer: torch.optim.Optimizer  # AdamW over the policy (and critic) parameters
    scheduler: torch.optim.lr_scheduler.LRScheduler  # linear warm-up, then constant
    reference: torch.nn.Module | None  # frozen copy of the starting policy, only when kl_coef > 0
    scaler: torch.amp.GradScaler | None = None  # fp16's loss scaling (on a GPU); bf16 and fp32 need none
    precision: torch.dtype | None = None  # the autocast dtype of mixed precision (bf16, fp16); None: fp32

    def autocast(self):
        """Forward passes in the run's mixed precision (torch.autocast); nothing changes in fp32."""
        return torch.autocast(self.accelerator.device.type, dtype=self.precision, enabled=self.precision is not None)


@dataclass
class Batch:
    """What `learn` learns from: one rollout and, per token, its advantage and the fixed terms of the loss."""

    rollout: Rollout  # N prompts + completions
    advantages: torch.Tensor  # (N, T) A_t (GRPO/DAPO: one value per completion, copied to its tokens)
    loss_mask: torch.Tensor  # (N, T) 1 on tokens that get a loss (DAPO's overlong filter drops truncated rows)
    old_logprobs: torch.Tensor | None  # (N, T) log pi_old; None: one on-policy update, the ratio is exactly 1
    ref_logprobs: torch.Tensor | None  # (N, T) log pi_ref for the KL term; None: no KL
    old_values: torch.Tensor | None  # (N, T) V_old, PPO's critic before the update (value clipping)
    returns: torch.Tensor | None  # (N, T) PPO's value targets

    def __len__(self) -> int:
        return len(self.rollout)

    def select(self, index: torch.Tensor) -> "Batch":
        """The rows in `index` (a micro-batch), every field sliced the same way and cut to the longest of these
        completions: the columns after it are padding in every row (mask 0), so a forward over them is wasted."""
        T = int(self.rollout.lengths[index].max()) if len(index) else 0
        return Batch(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name)[index, :T])
                        for f in fields(self) if f.name != "rollout"}, rollout=self.rollout.select(index).trim(T))


# ----------------------------------------------------------------------------- 1. sample and score
def generate(policy, task, config: RLConfig, step: int, round_: int, rank: int, world: int):
    """One generation round: this process's share of `batch_size` prompts, G completions each."""
    problems = task.problems("train", config.batch_size, seed=step_seed(config, step, 17 * round_))[rank::world]
    prompts = [p.prompt for p in problems for _ in range(config.group_size)]
    ids, mask = policy.encode_prompts(prompts)
    gen = torch.Generator(device=policy.device).manual_seed(step_seed(config, step, 17 * round_ + rank))
    roll = sample(policy, ids, mask, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                  top_p=config.top_p, generator=gen)
    scores = [task.score(problems[i // config.group_size], text) for i, text in enumerate(roll.texts)]
    rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)  # (N,)
    correct = torch.tensor([float(s.correct) for s in scores])  # (N,) 1.0 for a solved problem
    names = sorted({k for s in scores for k in s.components})
    parts = torch.tensor([[s.components.get(k, float("nan")) for k in names] for s in scores], dtype=torch.float32)
    group_ids = torch.arange(len(problems)).repeat_interleave(config.group_size) + round_ * config.batch_size
    return roll, rewards, correct, group_ids, names, parts


def collect(policy, task, config: RLConfig, step: int, rank: int, world: int):
    """Sample this process's share of a training batch. With dynamic sampling (DAPO eq. 11) keep only groups
    with right and wrong answers (or, dynamic_sampling_metric="reward", with two different rewards), and sample
    again until `batch_size` groups are kept or `max_gen_batches` rounds are used up. Returns the kept rows and
    this process's totals over every round (metrics.rollout_totals)."""
    want = config.batch_size // world  # groups this process needs
    kept, all_rewards, all_parts, all_lengths, all_trunc, first_ids = [], [], [], [], [], None
    for round_ in range(config.max_gen_batches if config.dynamic_sampling else 1):
        roll, rewards, correct, group_ids, names, parts = generate(policy, task, config, step, round_, rank, world)
        first_ids = group_ids if first_ids is None else first_ids
        all_rewards.append(rewards), all_parts.append(parts)
        all_lengths.append(roll.lengths.cpu()), all_trunc.append(roll.truncated.cpu())
        # eq. 11 counts correct answers: with a shaped reward (partial credit, the overlong penalty) a group of
        # wrong answers can have different rewards and still teach nothing about solving
        signal = correct if config.dynamic_sampling_metric == "correct" else rewards
        keep = (dapo.dynamic_sampling_keep(signal, group_ids) if config.dynamic_sampling
                else torch.ones_like(rewards, dtype=torch.bool))
        kept.append((roll.select(keep.to(roll.completion_ids.device)), rewards[keep], group_ids[keep]))
        if sum(len(r) for _, r, _ in kept) >= want * config.group_size:
            break
    else:
        if config.dynamic_sampling:
            got = sum(len(r) for _, r, _ in kept) // config.group_size
            raise DynamicSamplingExhausted(
                f"dynamic sampling kept {got} of {want} groups after max_gen_batches={config.max_gen_batches} "
                "rounds: almost every group is all right or all wrong. "
                "Raise max_gen_batches, lower the learning rate, or use dynamic_sampling=False.")
    n = want * config.group_size  # groups are contiguous, so the first n rows are whole groups
    roll = Rollout.cat([r for r, _, _ in kept], policy.tokenizer.pad_token_id).select(list(range(n)))
    rewards, group_ids = torch.cat([r for _, r, _ in kept])[:n], torch.cat([g for _, _, g in kept])[:n]
    totals = metrics.rollout_totals(all_rewards, all_parts, names, all_lengths, all_trunc, first_ids,
                                    kept_groups=n // config.group_size, group_size=config.group_size)
    return roll, rewards, group_ids, totals


# ----------------------------------------------------------------------------- 2. the fixed terms and advantages
@torch.no_grad()
def forward_in_chunks(fn, roll: Rollout, chunk: int, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Run `fn` (a model forward) over the rollout `chunk` rows at a time, without gradients."""
    outs = {k: [] for k in keys}
    for start in range(0, len(roll), chunk):
        part = roll.select(list(range(start, min(start + chunk, len(roll)))))
        out = fn(*part.trim(int(part.lengths.max())).inputs())  # no forward over columns that are all padding
        for k in keys:
            outs[k].append(F.pad(out[k].float(), (0, roll.completion_ids.shape[1] - out[k].shape[1])))
    return {k: torch.cat(v) for k, v in outs.items()}


def compute_advantages(config, rewards, group_ids, mask, old_logprobs, ref_logprobs, old_values, advantage_fn=None,
                       reduce=None):
    """Sequence rewards -> per-token advantages (B, T) and, for PPO, returns (B, T). `reduce` sums a tensor over
    processes (sum_over_processes): whitening and the batch std are statistics of the whole batch."""
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
            seq = adv.group_advantages(rewards, group_ids, scale=config.adv_scale, eps=config.adv_eps, reduce=reduce)
        else:
            seq = adv.rloo_advantages(rewards, group_ids)
        advantages, returns = adv.broadcast_to_tokens(seq.to(mask.device), mask), None
    if config.whiten_advantages:
        advantages = adv.whiten(advantages, mask, reduce=reduce)
    return advantages, returns


def sum_over_processes(acc: Accelerator):
    """A function that sums a tensor over the processes of a data-parallel run (the identity for one process)."""
    if acc.num_processes == 1:
        return None
    return lambda t: acc.reduce(t.float() if not t.is_floating_point() else t, "sum")


# ----------------------------------------------------------------------------- 3. the updates
def length_sorted_passes(index: torch.Tensor, lengths: torch.Tensor, passes: int) -> list[torch.Tensor]:
    """The rows `index` sorted by completion length and cut into `passes` micro-batches, each padded only to its own
    longest completion (Batch.select cuts the rest): less padding, the same gradient, because the loss normalisers
    are the minibatch's. One pass instead when cutting saves under a fifth of the padded tokens: every pass has a
    fixed cost (its prompts run again), which short, even completions (the compact task) do not earn back."""
    lengths = lengths.to(index.device)  # row indices live on the CPU, completions on the model's device
    order = index[lengths[index].argsort(stable=True)]
    micros = list(order.split(-(-len(order) // passes)))
    padded = sum(len(m) * int(lengths[m].max()) for m in micros)
    return [order] if padded > 0.8 * len(order) * int(lengths[order].max()) else micros


def micro_batches(mb: torch.Tensor, lengths: torch.Tensor, config: RLConfig) -> list[torch.Tensor]:
    """The rows of minibatch `mb` as the forward/backward passes that take them: `micro_batch_size` rows at a time,
    sorted by length, or `length_sorted_passes`. The trap: `mb` lives on the CPU and `lengths` on the model's
    device, and a CPU tensor cannot be indexed with a GPU's indices, so the rows are chosen on the CPU."""
    lengths = lengths.cpu()  # (N,)
    if config.micro_batch_size:
        return list(mb[lengths[mb].argsort(stable=True)].split(config.micro_batch_size))
    return length_sorted_passes(mb, lengths, config.length_buckets)


def loss_normalisers(acc: Accelerator, config: RLConfig, batch: Batch, mb: torch.Tensor) -> dict:
    """The totals `losses.aggregate` divides by, over the whole minibatch and every process: with them the
    micro-batches' losses add up to the minibatch's, and 2 processes make 1 process's update."""
    num_tokens = batch.loss_mask[mb].sum()
    num_tokens = acc.reduce(num_tokens.float(), "sum") if acc.num_processes > 1 else num_tokens
    return dict(num_tokens=num_tokens.clamp(min=1), num_seqs=len(mb) * acc.num_processes,
                max_len=config.max_new_tokens)


def minibatch_loss(model, part: Batch, config: RLConfig, normalisers: dict, sums: dict) -> torch.Tensor:
    """One micro-batch's share of the loss: forward, the policy loss `config.policy_loss` chooses
    (losses.policy_loss), the KL term, the entropy bonus, the critic's loss; its logging sums are added to `sums`."""
    m = part.loss_mask  # (n, T)
    out = model(*part.rollout.inputs(), config.temperature, entropy_grad=config.entropy_coef > 0)
    logp = out["logprobs"].float()  # (n, T)
    old_logp = part.old_logprobs if part.old_logprobs is not None else logp.detach()  # on-policy: ratio 1
    pg, clip = L.policy_loss(config.policy_loss, logp, old_logp, part.advantages, m, clip_low=config.clip_low,
                             clip_high=config.clip_high, dual_clip=config.dual_clip or None,
                             ratio_level=config.ratio_level)  # (n, T)
    loss_tokens = pg
    if part.ref_logprobs is not None:
        kl = L.kl_penalty(logp, part.ref_logprobs, config.kl_estimator)  # (n, T)
        sums["kl_ref"] += L.masked_sum(kl.detach(), m)
        if config.kl_placement == "loss":
            loss_tokens = loss_tokens + config.kl_coef * kl
    if config.entropy_coef > 0:
        loss_tokens = loss_tokens - config.entropy_coef * out["entropy"]
    loss = L.aggregate(loss_tokens, m, config.loss_agg, **normalisers)
    if "values" in out:
        v = L.value_loss(out["values"].float(), part.old_values, part.returns, config.value_clip or None)
        vloss = L.aggregate(v, m, "token-mean", num_tokens=normalisers["num_tokens"])
        loss = loss + config.vf_coef * vloss
        sums["value_loss"] += vloss.detach()
    metrics.add_update_sums(sums, L.aggregate(pg.detach(), m, config.loss_agg, **normalisers), out["entropy"],
                            clip, logp, old_logp, m)
    return loss


def optimizer_step(learner: Learner, config: RLConfig, step: int) -> float:
    """Clip the gradient norm, step AdamW (through fp16's scaler when there is one) and zero the gradients;
    return the norm before clipping (inf or nan: the scaler skipped the update)."""
    acc, optimizer, scaler = learner.accelerator, learner.optimizer, learner.scaler
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    norm = float(acc.clip_grad_norm_(learner.model.parameters(), config.max_grad_norm or float("inf")))
    if scaler is None and not math.isfinite(norm):
        raise TrainingDiverged(f"gradient norm is {norm} at step {step}; lower lr (now {config.lr:g})")
    if scaler is None:
        optimizer.step()
    else:  # the scaler skips the step when a gradient is inf/nan, i.e. when their norm is
        scaler.step(optimizer)
        scaler.update()
    if math.isfinite(norm):
        learner.scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def learn(learner: Learner, config: RLConfig, batch: Batch, step: int) -> dict[str, float]:
    """mu epochs x minibatches of policy-loss updates, read like CleanRL's update loop: minibatch -> forward ->
    loss -> backward -> clip -> step. The normalisers are totals over the whole optimiser step (and over
    processes), so micro-batching and data parallelism do not change the gradient.

    fp16 (a GradScaler): an update whose gradients overflow is skipped by the scaler, which lowers its scale; it is
    counted in `updates_skipped`, leaves the learning-rate schedule where it was and adds nothing to the logged
    losses. Without a scaler a non-finite loss or gradient is TrainingDiverged."""
    acc, model, scaler, world = learner.accelerator, learner.model, learner.scaler, learner.accelerator.num_processes
    N = len(batch)
    gen = torch.Generator().manual_seed(step_seed(config, step, MINIBATCH_ORDER))
    sums, grad_norms = metrics.zero_update_sums(batch.loss_mask.device), []  # tensors: no GPU stall per pass
    for _ in range(config.epochs):
        order = torch.randperm(N, generator=gen) if config.minibatches > 1 else torch.arange(N)
        for mb in order.split(N // config.minibatches):
            normalisers = loss_normalisers(acc, config, batch, mb)
            update = metrics.zero_update_sums(batch.loss_mask.device)  # this update's share of the logs
            micros = micro_batches(mb, batch.rollout.lengths, config)
            for i, idx in enumerate(micros):
                sync = nullcontext() if i == len(micros) - 1 or world == 1 else acc.no_sync(model)
                with sync, learner.autocast():
                    loss = minibatch_loss(model, batch.select(idx), config, normalisers, update)
                    if scaler is None and not torch.isfinite(loss):
                        raise TrainingDiverged(f"loss is {loss.item()} at step {step}; lower lr (now {config.lr:g})")
                    loss = loss * world  # DDP averages over processes; the normalisers already span them
                    acc.backward(loss if scaler is None else scaler.scale(loss))
            norm = optimizer_step(learner, config, step)
            if math.isfinite(norm):  # a skipped fp16 update adds nothing to the logs
                grad_norms.append(norm)
                metrics.add_to(sums, update)
    applied = len(grad_norms)
    return metrics.update_metrics(acc, sums, batch, applied, grad_norms, config.epochs * config.minibatches - applied)


# ----------------------------------------------------------------------------- the step
class Stopwatch:
    """`lap()` -> seconds since the previous lap; on a GPU it first waits for the queued work to finish."""

    def __init__(self, device: torch.device):
        self.device, self.last = device, time.perf_counter()

    def lap(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds


def rl_step(policy, task, config: RLConfig, learner: Learner, step: int, advantage_fn=None) -> dict[str, float]:
    """Step `step` (1 for the first) of PPO, GRPO or DAPO: sample, score, update; returns the step's metrics.

    The row holds the rollout's statistics (reward, accuracy, lengths, ...), the update's (losses, entropy,
    KL, clip fractions, gradient norm) and the seconds of each phase: time/generation (sampling and scoring,
    every dynamic-sampling round included), time/reference (forward passes without gradients: old log-probs
    and values, the reference model) and time/learn (advantages and all updates)."""
    acc, model = learner.accelerator, learner.model
    clock = Stopwatch(acc.device)

    # 1. sample G completions for each prompt and score them (DAPO: keep mixed groups only, sample again)
    with learner.autocast():
        roll, rewards, group_ids, totals = collect(policy, task, config, step, acc.process_index, acc.num_processes)
    row = metrics.rollout_metrics(metrics.combine(acc, totals))  # over every process's samples
    if not torch.isfinite(rewards).all():
        raise TrainingDiverged(f"task {task.name!r} returned a non-finite reward at step {step}")
    if config.overlong_punishment:  # DAPO eq. 13, added to the task reward
        rewards = rewards + dapo.soft_overlong_punishment(roll.lengths.cpu(), config.max_new_tokens,
                                                          config.overlong_cache)
    mask = roll.completion_mask.float()  # (N, T)
    loss_mask = mask * dapo.overlong_filter_mask(roll.truncated)[:, None].to(mask) if config.overlong_filter else mask
    row["time/generation"] = clock.lap()

    # 2. what the loss holds fixed: log pi_old (needed once the policy moves within the step: several updates,
    #    or PPO's value clipping), the critic's V_old, and log pi_ref for the KL term
    chunk = config.micro_batch_size or len(roll) // config.minibatches  # rows per forward
    need_old = config.epochs * config.minibatches > 1 or config.critic != "none"
    with learner.autocast():
        old_forward = forward_in_chunks(
            lambda *a: model(*a, config.temperature, with_entropy=False), roll, chunk,
            ("logprobs",) + (("values",) if config.critic != "none" else ())) if need_old else {}
        ref = forward_in_chunks(
            lambda *a: completion_logprobs(learner.reference, *a, config.temperature, share_prompts=config.share_prompts),
            roll, chunk, ("logprobs",))["logprobs"] if learner.reference is not None else None
    row["time/reference"] = clock.lap()

    # 3. advantages: PPO's GAE over per-token rewards, or one group-relative value per completion
    old_logprobs, old_values = old_forward.get("logprobs"), old_forward.get("values")
    advantages, returns = compute_advantages(config, rewards, group_ids, mask, old_logprobs, ref, old_values,
                                             advantage_fn, reduce=sum_over_processes(acc))
    # 4. mu epochs x minibatches of policy-loss updates
    batch = Batch(roll, advantages, loss_mask, old_logprobs, ref, old_values, returns)
    row.update(learn(learner, config, batch, step))
    row["time/learn"] = clock.lap()
    return row

"""One optimiser step on a fixed batch, in 1 process or under `torchrun --nproc_per_node 2` (gloo).

Used by test_distributed.py: the two must give the same parameters, because the loss normalisers are
totals over all processes (token-mean), the advantages' batch statistics (PPO's whitening, the batch std) are
reduced over processes, and DDP averages gradients; and the same logged metrics, because every metric is a total
added over processes before its mean is taken (metrics.py).
"""

import gc
import sys

import torch
from accelerate import Accelerator

from minirl import Countdown, load_policy, metrics
from minirl.actor_critic import ActorCritic
from minirl.config import RLConfig
from minirl.step import Batch, Learner, compute_advantages, generate, learn, sum_over_processes


# what each mode trains: DAPO's two aggregations, PPO with its critic and whitened advantages, GRPO with the batch
# std (the last two need statistics of the whole batch, not of one process's share)
MODES = {
    "token-mean": dict(preset="dapo", loss_agg="token-mean"),
    "seq-mean-token-mean": dict(preset="dapo", loss_agg="seq-mean-token-mean"),
    "ppo": dict(preset="ppo", batch_size=16, group_size=1, epochs=1, minibatches=1, kl_coef=0.0),
    "batch-std": dict(preset="grpo", adv_scale="batch", kl_coef=0.0),
}


def main(out: str, mode: str) -> None:
    torch.set_num_threads(1)
    acc = Accelerator(cpu=True)
    policy = load_policy(device="cpu")
    settings = dict(MODES[mode])
    config = RLConfig.preset(settings.pop("preset"), **{**dict(
        batch_size=4, group_size=4, lr=1e-3, dynamic_sampling=False, max_new_tokens=12, overlong_cache=2,
        minibatches=1, micro_batch_size=2), **settings})
    # the same rollout everywhere (world=1 view), then each process keeps its share of whole groups and computes
    # its advantages from them, as rl_step does
    roll, rewards, _, group_ids, _, _ = generate(policy, Countdown(), config, step=1, round_=0, rank=0, world=1)
    idx = torch.tensor([i for i in range(len(roll)) if group_ids[i].item() % acc.num_processes == acc.process_index])
    torch.manual_seed(0)  # the value head starts the same in every process
    model = ActorCritic(policy.model, config.critic)
    roll = roll.select(idx)
    mask = roll.completion_mask.float()
    old_values = model(*roll.inputs())["values"].detach() if config.critic != "none" else None
    advantages, returns = compute_advantages(config, rewards[idx], group_ids[idx], mask, None, None, old_values,
                                             reduce=sum_over_processes(acc))
    # plain SGD with lr 1: the update *is* the gradient (AdamW's first step, ~lr*sign(g), would magnify
    # float rounding on near-zero gradient entries and hide what we want to compare)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    model, optimizer = acc.prepare(model, optimizer)
    batch = Batch(roll, advantages, mask, old_logprobs=None, ref_logprobs=None, old_values=old_values,
                  returns=returns)
    learner = Learner(acc, model, optimizer, scheduler, reference=None)
    stats = learn(learner, config, batch, step=1)
    # the sampling metrics of this process's rows, added over processes (what rl_step logs)
    totals = metrics.rollout_totals([rewards[idx]], [rewards[idx, None]], ["correct"], [roll.lengths],
                                    [roll.truncated], group_ids[idx], kept_groups=len(idx) // config.group_size,
                                    group_size=config.group_size)
    sampled = metrics.rollout_metrics(metrics.combine(acc, totals))
    if acc.is_main_process:
        torch.save({"processes": acc.num_processes, "stats": stats, "sampled": sampled,
                    "params": [p.detach().clone() for p in acc.unwrap_model(model).parameters()]}, out)
    acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # close the gloo group only once main's locals (the DDP model holds the group) are freed: a group still
    # referenced at interpreter shutdown can abort one rank after all the work is done ("terminate called
    # without an active exception", SIGABRT; CI saw it with the model still a module global)
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()

"""One optimiser step on a fixed batch, in 1 process or under `torchrun --nproc_per_node 2` (gloo).

Used by test_distributed.py: the two must give the same parameters, because the loss normalisers are
totals over all processes (token-mean) and DDP averages gradients; and the same logged metrics, because
every metric is a total added over processes before its mean is taken (metrics.py).
"""

import gc
import sys

import torch
from accelerate import Accelerator

from minirl import Countdown, load_policy, metrics
from minirl.actor_critic import ActorCritic
from minirl.config import RLConfig
from minirl.step import Batch, Learner, compute_advantages, generate, learn


def main(out: str, loss_agg: str) -> None:
    torch.set_num_threads(1)
    acc = Accelerator(cpu=True)
    policy = load_policy(device="cpu")
    config = RLConfig.preset("dapo", batch_size=4, group_size=4, lr=1e-3, loss_agg=loss_agg, dynamic_sampling=False,
                             max_new_tokens=12, overlong_cache=2, minibatches=1, micro_batch_size=2)
    # the same batch everywhere (world=1 view), then each process keeps its share of whole groups
    roll, rewards, group_ids, _, _ = generate(policy, Countdown(), config, step=1, round_=0, rank=0, world=1)
    mask = roll.completion_mask.float()
    advantages, _ = compute_advantages(config, rewards, group_ids, mask, None, None, None)
    rows = [i for i in range(len(roll)) if group_ids[i].item() % acc.num_processes == acc.process_index]
    model = ActorCritic(policy.model)
    # plain SGD with lr 1: the update *is* the gradient (AdamW's first step, ~lr*sign(g), would magnify
    # float rounding on near-zero gradient entries and hide what we want to compare)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    model, optimizer = acc.prepare(model, optimizer)
    batch = Batch(roll, advantages, mask, old_logprobs=None, ref_logprobs=None, old_values=None, returns=None)
    learner = Learner(acc, model, optimizer, scheduler, reference=None)
    stats = learn(learner, config, batch.select(torch.tensor(rows)), step=1)
    # the sampling metrics of this process's rows, added over processes (what rl_step logs)
    idx = torch.tensor(rows)
    totals = metrics.rollout_totals([rewards[idx]], [rewards[idx, None]], ["correct"], [roll.lengths[idx]],
                                    [roll.truncated[idx]], group_ids[idx], kept_groups=len(rows) // config.group_size,
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

"""Checkpoints that survive crashes: written to a temporary folder, then swapped in with renames.

A checkpoint holds everything `train(..., resume=True)` needs to continue exactly: the policy (as a
Hugging Face folder, so it can also be loaded with `load_policy`), the critic, the optimiser and
scheduler state, and the step. Sampling and minibatch order are seeded from (seed, step), so no
random-generator state is needed to make a resumed run match an uninterrupted one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

CHECKPOINT = "checkpoint"
TRAINER_STATE = "trainer_state.pt"


def save_checkpoint(run_dir: str | Path, step: int, policy, actor_critic, optimizer, scheduler) -> Path:
    """Write run_dir/checkpoint atomically; the previous checkpoint stays until the new one is complete."""
    run_dir = Path(run_dir)
    final, tmp, old = run_dir / CHECKPOINT, run_dir / f"{CHECKPOINT}.tmp", run_dir / f"{CHECKPOINT}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.save(tmp)
    critic = {k: v for k, v in actor_critic.state_dict().items() if not k.startswith("policy.")}
    torch.save({"step": step, "critic": critic, "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict()}, tmp / TRAINER_STATE)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def find_checkpoint(run_dir: str | Path) -> Path | None:
    """The last complete checkpoint (also after a crash between the two renames above)."""
    for name in (CHECKPOINT, f"{CHECKPOINT}.old"):
        path = Path(run_dir) / name
        if (path / TRAINER_STATE).exists():
            return path
    return None


def load_checkpoint(path: Path, actor_critic, optimizer, scheduler) -> int:
    """Restore weights and optimiser state in place; return the step the checkpoint was taken after."""
    from safetensors.torch import load_file

    weights = {}
    for file in sorted(path.glob("*.safetensors")):
        weights.update(load_file(file))
    policy = actor_critic.policy
    missing, unexpected = policy.load_state_dict(weights, strict=False)
    # tied embeddings are saved once; anything else missing means the checkpoint is of another model
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the policy: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}; resume with the same base policy")
    state = torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=False)
    actor_critic.load_state_dict({**{f"policy.{k}": v for k, v in policy.state_dict().items()}, **state["critic"]})
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return int(state["step"])

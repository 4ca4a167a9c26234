"""Checkpoints that survive crashes: written to a temporary folder, then swapped in with renames.

    run_dir/checkpoint/
        policy/            a Hugging Face model folder (weights, tokenizer, generation config, model card):
                           `load_policy(...)` or plain `AutoModelForCausalLM.from_pretrained(...)` loads it
        trainer_state.pt   the step, the critic, optimiser, scheduler and fp16 loss-scaler state

The trainer state sits next to the model folder, not inside it, so that uploading or copying `policy/` never
carries a pickle along. It holds only tensors, numbers and strings, so it loads with `weights_only=True` (no
arbitrary code runs when a checkpoint is opened). Sampling and minibatch order are seeded from (seed, step),
so no random-generator state is needed to make a resumed run match an uninterrupted one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

CHECKPOINT = "checkpoint"
POLICY = "policy"
TRAINER_STATE = "trainer_state.pt"


def save_checkpoint(run_dir: str | Path, step: int, policy, actor_critic, optimizer, scheduler, scaler=None,
                    **policy_save) -> Path:
    """Write run_dir/checkpoint atomically; the previous checkpoint stays until the new one is complete.
    `policy_save`: keyword arguments of `Policy.save` (the model card, the decoding defaults)."""
    run_dir = Path(run_dir)
    final, tmp, old = run_dir / CHECKPOINT, run_dir / f"{CHECKPOINT}.tmp", run_dir / f"{CHECKPOINT}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policy.save(tmp / POLICY, **policy_save)
    critic = {k: v for k, v in actor_critic.state_dict().items() if not k.startswith("policy.")}
    torch.save({"step": step, "critic": critic, "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler is not None else None},
               tmp / TRAINER_STATE)
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


def load_checkpoint(path: Path, actor_critic, optimizer, scheduler, scaler=None) -> int:
    """Restore weights and optimiser (and loss-scaler) state in place; return the step it was taken after."""
    from safetensors.torch import load_file

    if not (path / POLICY / "config.json").exists():
        raise ValueError(f"checkpoint {path} has no {POLICY}/ model folder: it was written by an older minirl, which "
                         f"kept the model files beside {TRAINER_STATE}; move them into {path / POLICY} to resume")
    weights = {}
    for file in sorted((path / POLICY).glob("*.safetensors")):
        weights.update(load_file(file))
    policy = actor_critic.policy
    missing, unexpected = policy.load_state_dict(weights, strict=False)
    # tied embeddings are saved once; anything else missing means the checkpoint is of another model
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the policy: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}; resume with the same base policy")
    state = torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=True)
    actor_critic.load_state_dict({**{f"policy.{k}": v for k, v in policy.state_dict().items()}, **state["critic"]})
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and state.get("scaler") is not None:
        scaler.load_state_dict(state["scaler"])
    return int(state["step"])

"""The trainable module: the policy, plus PPO's critic when there is one.

PPO needs a value V(s_t) for every completion token (for GAE). Two standard choices:
- critic="head": a linear value head on the policy's own last hidden state (shared trunk). Cheapest:
  hidden_size + 1 extra parameters; the value loss also shapes the trunk.
- critic="separate": a second copy of the network with its own value head (as in InstructGPT / TRL's
  PPOTrainer). Doubles parameters and optimiser state — the memory GRPO saves by having no critic.

Everything that needs gradients goes through `ActorCritic.forward`, so that accelerate's
DistributedDataParallel wrapper sees one module and all-reduces every gradient.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .rollout import completion_logprobs, position_ids_from_mask


class ValueHead(nn.Module):
    """hidden (B, T, H) -> value (B, T). Zero-initialised, so V = 0 before any learning (no bias toward
    either answer), and kept in fp32 for a stable regression target under mixed precision."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


class ActorCritic(nn.Module):
    """Policy LM + optional critic. forward -> {"logprobs", "entropy", "values"?} on completion tokens."""

    def __init__(self, model: nn.Module, critic: str = "none", share_prompts: bool = True):
        super().__init__()
        if critic not in ("none", "head", "separate"):
            raise ValueError(f"critic={critic!r} is not allowed: use 'none', 'head' or 'separate'")
        self.critic, self.share_prompts = critic, share_prompts
        self.policy = model
        hidden = model.config.hidden_size
        self.value_head = ValueHead(hidden) if critic != "none" else None
        # the separate critic starts from the policy's weights (a common, simple choice)
        self.critic_model = copy.deepcopy(model) if critic == "separate" else None

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature: float = 1.0,
                with_entropy: bool = True, entropy_grad: bool = True) -> dict[str, torch.Tensor]:
        out = completion_logprobs(self.policy, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                  temperature, with_entropy=with_entropy, entropy_grad=entropy_grad,
                                  with_hidden=self.critic == "head", share_prompts=self.share_prompts)
        if self.critic == "head":
            out["values"] = self.value_head(out.pop("hidden"))  # (B, T)
        elif self.critic == "separate":
            P, T = prompt_ids.shape[1], completion_ids.shape[1]
            ids = torch.cat([prompt_ids, completion_ids], 1)
            attn = torch.cat([prompt_mask, completion_mask], 1).long()
            hidden = self.critic_model(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                                       output_hidden_states=True, use_cache=False, logits_to_keep=1).hidden_states[-1]
            out["values"] = self.value_head(hidden[:, P - 1:P + T - 1])  # state before each completion token
        return out

    def critic_parameters(self) -> list[nn.Parameter]:
        """Parameters that exist only because of the critic (what PPO costs over GRPO)."""
        params = list(self.value_head.parameters()) if self.value_head is not None else []
        if self.critic_model is not None:
            params += list(self.critic_model.parameters())
        return params


def training_state_bytes(trainable_params: int, frozen_params: int = 0, bytes_per_param: int = 4) -> int:
    """The analytic part of training memory: every trainable parameter is held 4 times (weight, gradient and
    AdamW's two moments), a frozen one (the KL reference) once. Activations come on top."""
    return (4 * trainable_params + frozen_params) * bytes_per_param

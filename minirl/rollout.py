"""Sampling completions with a KV cache, and the log-probs the losses need.

Two functions hold all the token bookkeeping of RL for LMs:

- `sample(...)` generates completions for a batch of left-padded prompts, one token at a time with a
  KV cache, and records log π(token) at the sampling temperature — the "old" log-probs of PPO.
- `completion_logprobs(...)` recomputes those log-probs (with gradients) in one forward pass over
  prompt + completion. Both divide the logits by the same temperature and use the same position ids,
  so on the first PPO step ratio = exp(new − old) = 1 (a classic bug is forgetting the
  temperature in one of the two places).

Conventions, for a batch of B prompts padded to P tokens and completions padded to T tokens:
  prompt_ids (B, P) left-padded · completion_ids (B, T) right-padded with the pad id ·
  completion_mask (B, T) is 1 on every generated token up to and including the EOS, 0 after.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from .losses import entropy_from_logprobs


@dataclass
class Rollout:
    """A batch of sampled completions and everything the trainer needs to score and learn from them."""

    prompt_ids: torch.Tensor  # (B, P) left-padded prompt tokens
    prompt_mask: torch.Tensor  # (B, P) 1 on real prompt tokens
    completion_ids: torch.Tensor  # (B, T) generated tokens, pad id after EOS
    completion_mask: torch.Tensor  # (B, T) 1 up to and including EOS
    logprobs: torch.Tensor  # (B, T) log π_old(token) at the sampling temperature, 0 on padding
    truncated: torch.Tensor  # (B,) bool: hit max_new_tokens without an EOS
    texts: list[str]  # decoded completions, special tokens removed

    @property
    def lengths(self) -> torch.Tensor:  # (B,) number of completion tokens, EOS included
        return self.completion_mask.sum(-1)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(prompt_ids, prompt_mask, completion_ids, completion_mask): what a forward over the rollout reads."""
        return self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask

    def select(self, index: torch.Tensor | list[int]) -> "Rollout":
        """The rows in `index` (a list of ints or a long/bool tensor)."""
        index = torch.as_tensor(index, device=self.completion_ids.device)
        if index.dtype == torch.bool:
            index = index.nonzero().flatten()
        rows = index.tolist()
        return Rollout(
            **{f.name: getattr(self, f.name)[index] for f in fields(self) if f.name != "texts"},
            texts=[self.texts[i] for i in rows],
        )

    @staticmethod
    def cat(parts: list["Rollout"], pad_id: int) -> "Rollout":
        """Concatenate rollouts whose prompts / completions may have different padded widths."""

        def pad_to(x: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
            extra = width - x.shape[1]
            return F.pad(x, (extra, 0) if left else (0, extra), value=value) if extra else x

        P = max(r.prompt_ids.shape[1] for r in parts)
        T = max(r.completion_ids.shape[1] for r in parts)
        return Rollout(
            prompt_ids=torch.cat([pad_to(r.prompt_ids, P, pad_id, True) for r in parts]),
            prompt_mask=torch.cat([pad_to(r.prompt_mask, P, 0, True) for r in parts]),
            completion_ids=torch.cat([pad_to(r.completion_ids, T, pad_id, False) for r in parts]),
            completion_mask=torch.cat([pad_to(r.completion_mask, T, 0, False) for r in parts]),
            logprobs=torch.cat([pad_to(r.logprobs, T, 0.0, False) for r in parts]),
            truncated=torch.cat([r.truncated for r in parts]),
            texts=[t for r in parts for t in r.texts],
        )


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Positions that ignore left padding: the first real token is position 0. (B, L) -> (B, L)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def _cache_kwarg(model) -> str:
    """transformers 5 renamed the KV-cache argument `past_key_values` -> `cache`; support both."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling (Holtzman et al. 2020): keep the smallest set of tokens with mass >= top_p. (B, V)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = cum - sorted_logits.softmax(-1) >= top_p  # mass *before* this token already reached top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def check_sampling_args(max_new_tokens: int, temperature: float, top_p: float) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is not allowed: use an integer >= 1")
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature={temperature!r} is not allowed: use a number > 0 (greedy=True for argmax)")
    if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p={top_p!r} is not allowed: use a number in (0, 1]")


@torch.no_grad()
def sample(policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
           temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
           eos_token_ids: list[int] | None = None, generator: torch.Generator | None = None) -> Rollout:
    """Sample one completion per prompt row (repeat rows for G samples per prompt).

    The recorded log-probs are those of the temperature-scaled distribution *before* top-p
    truncation, i.e. exactly what `completion_logprobs` recomputes for the loss.
    """
    check_sampling_args(max_new_tokens, temperature, top_p)
    model, pad_id = policy.model, policy.tokenizer.pad_token_id
    eos = torch.tensor(eos_token_ids or policy.eos_token_ids, device=prompt_ids.device)
    B = prompt_ids.shape[0]
    cache = DynamicCache()
    cache_arg = {_cache_kwarg(model): cache, "use_cache": True}
    attn = prompt_mask.long()  # (B, P) grows by one column per step
    next_pos = attn.sum(-1, keepdim=True)  # (B, 1) position of the first completion token
    logits = model(input_ids=prompt_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                   logits_to_keep=1, **cache_arg).logits[:, -1].float()  # (B, V)

    finished = torch.zeros(B, dtype=torch.bool, device=prompt_ids.device)
    tokens, logps, alive = [], [], []
    for step in range(max_new_tokens):
        scaled = logits / temperature
        logp_all = scaled.log_softmax(-1)  # (B, V)
        if greedy:
            token = scaled.argmax(-1)
        else:
            probs = top_p_filter(scaled, top_p).softmax(-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
        logp = logp_all.gather(-1, token[:, None]).squeeze(-1)
        alive.append(~finished)
        tokens.append(torch.where(finished, pad_id, token))
        logps.append(torch.where(finished, 0.0, logp))
        finished = finished | torch.isin(token, eos)
        if finished.all() or step == max_new_tokens - 1:
            break  # stop early once every sequence has produced an EOS
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        logits = model(input_ids=tokens[-1][:, None], attention_mask=attn, position_ids=next_pos + step,
                       **cache_arg).logits[:, -1].float()

    completion_ids = torch.stack(tokens, 1)  # (B, T)
    completion_mask = torch.stack(alive, 1).long()  # (B, T)
    return Rollout(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask.long(), completion_ids=completion_ids,
        completion_mask=completion_mask, logprobs=torch.stack(logps, 1),
        truncated=~finished, texts=policy.decode(completion_ids),
    )


def completion_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                        temperature: float = 1.0, *, with_entropy: bool = False, entropy_grad: bool = True,
                        with_hidden: bool = False) -> dict[str, torch.Tensor]:
    """One forward pass over prompt + completion -> per-token log-probs of the completion (B, T).

    Returns {"logprobs": (B, T)} plus "entropy" (B, T) of the tempered distribution and/or "hidden"
    (B, T, H), the last hidden state at the position that *predicts* each completion token (what a
    value head reads). Gradients flow unless called under torch.no_grad().
    """
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids], 1)  # (B, P+T)
    attn = torch.cat([prompt_mask.long(), completion_mask.long()], 1)
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                output_hidden_states=with_hidden, logits_to_keep=T + 1, use_cache=False)
    logits = out.logits[:, :-1].float() / temperature  # (B, T, V): position P-1+t predicts token t
    logp_all = logits.log_softmax(-1)
    result = {"logprobs": logp_all.gather(-1, completion_ids[..., None]).squeeze(-1) * completion_mask}
    if with_entropy:
        # from the log_softmax above; without entropy_grad it is only logged, so keep no (B, T, V) graph for it
        result["entropy"] = entropy_from_logprobs(logp_all if entropy_grad else logp_all.detach())  # (B, T)
    if with_hidden:
        result["hidden"] = out.hidden_states[-1][:, P - 1:P + T - 1]  # (B, T, H)
    return result

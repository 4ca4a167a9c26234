"""Sampling completions with a KV cache, and the log-probs the losses need.

Two functions hold all the token bookkeeping of RL for LMs:

- `sample(...)` generates completions for a batch of left-padded prompts, one token at a time with a
  KV cache, and records log π(token) at the sampling temperature — the "old" log-probs of PPO.
- `completion_logprobs(...)` recomputes those log-probs (with gradients) in a forward pass over
  prompt + completion (a group's shared prompt run once). Both divide the logits by the same temperature
  and use the same position ids, so on the first PPO step ratio = exp(new − old) = 1 (a classic bug is
  forgetting the temperature in one of the two places).

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

    def trim(self, T: int) -> "Rollout":
        """Only the first T completion columns (T >= every row's length: the rest is padding)."""
        cut = {"completion_ids", "completion_mask", "logprobs"}
        return Rollout(**{f.name: getattr(self, f.name)[:, :T] if f.name in cut else getattr(self, f.name)
                          for f in fields(self)})

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


def additive_decode_mask(model, attn: torch.Tensor) -> torch.Tensor | None:
    """The decode steps' attention mask built once: (B, L) 0/1 -> (B, 1, 1, L), 0 to attend and the dtype's
    minimum to skip, sliced per step. Given a 2-D mask, transformers rebuilds this 4-D one at every step (a few
    percent of a decode step of the tiny policy: BENCHMARKS.md section 6); a 4-D mask it uses as it is. Only for the attention implementations
    that add such a mask to the scores ("sdpa", "eager") and models whose every layer attends to the whole
    sequence; None otherwise (flash / flex attention, sliding windows build their own masks from the 2-D one)."""
    config = model.config
    full_attention = all(t == "full_attention" for t in (getattr(config, "layer_types", None) or ["full_attention"]))
    windowed = getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager") or not full_attention or windowed:
        return None
    dtype = model.get_input_embeddings().weight.dtype
    blocked = torch.zeros(attn.shape, dtype=dtype, device=attn.device).masked_fill(attn == 0, torch.finfo(dtype).min)
    return blocked[:, None, None, :]  # (B, 1, 1, L)


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that repeat a prompt (a group's G copies) -> (first (U,): one row per distinct prompt, copy_of (B,):
    which of those U each row is). prompt_ids[first][copy_of] == prompt_ids."""
    B = len(prompt_ids)
    unique, copy_of = torch.unique(torch.cat([prompt_ids, prompt_mask.long()], 1), dim=0, return_inverse=True)
    first = torch.full((len(unique),), B, device=prompt_ids.device).scatter_reduce(
        0, copy_of, torch.arange(B, device=prompt_ids.device), "amin")
    return first, copy_of


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


def draw(probs: torch.Tensor, rows: torch.Tensor, batch: int, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of `probs` (b, V), the rows `rows` of a batch of `batch` -> (b,).

    torch.multinomial(probs, 1) is argmax(p / q) with q ~ Exp(1) (the Gumbel-max trick, exponentiated). Drawing
    q for all `batch` rows, also those that have stopped, and keeping the live ones gives each row the same
    token as one multinomial over the whole batch would: dropping finished rows does not change the samples.
    """
    noise = torch.empty(batch, probs.shape[-1], dtype=probs.dtype, device=probs.device).exponential_(1, generator=generator)
    return (probs / noise[rows]).argmax(-1)


def sample(policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, max_new_tokens: int,
           temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
           eos_token_ids: list[int] | None = None, generator: torch.Generator | None = None) -> Rollout:
    """Sample one completion per prompt row (repeat rows for G samples per prompt).

    The recorded log-probs are those of the temperature-scaled distribution *before* top-p
    truncation, i.e. exactly what `completion_logprobs` recomputes for the loss.
    Two savings that change no sample: identical prompt rows (a group's G copies) are run through the
    model once and share their KV cache, and rows that have produced EOS leave the batch.
    """
    check_sampling_args(max_new_tokens, temperature, top_p)
    # inference mode: no_grad that also skips autograd's bookkeeping of views and versions (less time per decode
    # step at these sizes: BENCHMARKS.md section 6)
    model, pad_id, device = policy.model, policy.tokenizer.pad_token_id, prompt_ids.device
    B, P = prompt_ids.shape
    with torch.inference_mode():
        eos = torch.tensor(eos_token_ids or policy.eos_token_ids, device=device)
        # results, written in place as rows finish: row b, step t
        tokens = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)  # (B, T)
        logps = torch.zeros(B, max_new_tokens, device=device)  # (B, T)
        lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)  # (B,) EOS included
        ended = torch.zeros(B, dtype=torch.bool, device=device)  # (B,) produced an EOS
        attn = torch.cat([prompt_mask.long(), prompt_mask.new_ones(B, max_new_tokens, dtype=torch.long)], 1)  # (B, P+T)
        next_pos = prompt_mask.long().sum(-1, keepdim=True)  # (B, 1) position of the first completion token

        # prefill: each distinct prompt once, then every row gets a copy of its prompt's cache and last logits
        first, copy_of = distinct_prompts(prompt_ids, prompt_mask)  # (U,), (B,)
        cache = DynamicCache()
        cache_arg = {_cache_kwarg(model): cache, "use_cache": True}
        logits = model(input_ids=prompt_ids[first], attention_mask=attn[first, :P],
                       position_ids=position_ids_from_mask(attn[first, :P]), logits_to_keep=1,
                       **cache_arg).logits[:, -1].float()[copy_of]  # (B, V)
        cache.batch_select_indices(copy_of)

        step_mask = additive_decode_mask(model, attn)  # (B, 1, 1, P+T), or None: pass the 2-D mask
        rows = torch.arange(B, device=device)  # the batch row of each sequence still being decoded
        for step in range(max_new_tokens):
            scaled = logits / temperature  # (b, V), b = rows still decoding
            logp_all = scaled.log_softmax(-1)
            token = scaled.argmax(-1) if greedy else draw(top_p_filter(scaled, top_p).softmax(-1), rows, B, generator)
            tokens[rows, step] = token
            logps[rows, step] = logp_all.gather(-1, token[:, None]).squeeze(-1)
            done = torch.isin(token, eos)  # (b,)
            lengths[rows[done]], ended[rows[done]] = step + 1, True
            if done.all() or step == max_new_tokens - 1:
                break  # stop early once every sequence has produced an EOS
            if done.any():  # drop the finished rows from the batch and from the KV cache
                keep = (~done).nonzero().squeeze(-1)
                rows, token = rows[keep], token[keep]
                cache.batch_select_indices(keep)
            mask = attn[rows, :P + step + 1] if step_mask is None else step_mask[rows, ..., :P + step + 1]
            logits = model(input_ids=token[:, None], attention_mask=mask,
                           position_ids=next_pos[rows] + step, **cache_arg).logits[:, -1].float()

        T = int(lengths.max())  # drop columns where every row has stopped
        completion_mask = (torch.arange(T, device=device) < lengths[:, None]).long()  # (B, T)
        completion_ids, logps = tokens[:, :T], logps[:, :T]
    # the loss reads these with gradients on, which inference-mode tensors cannot join: plain copies
    completion_ids, completion_mask, logps, ended = (t.clone() for t in (completion_ids, completion_mask, logps, ended))
    return Rollout(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask.long(), completion_ids=completion_ids,
        completion_mask=completion_mask, logprobs=logps,
        truncated=~ended, texts=policy.decode(completion_ids),
    )


def completion_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                        temperature: float = 1.0, *, with_entropy: bool = False, entropy_grad: bool = True,
                        with_hidden: bool = False, share_prompts: bool = True) -> dict[str, torch.Tensor]:
    """A forward pass over prompt + completion -> per-token log-probs of the completion (B, T).

    Returns {"logprobs": (B, T)} plus "entropy" (B, T) of the tempered distribution and/or "hidden"
    (B, T, H), the last hidden state at the position that *predicts* each completion token (what a
    value head reads). Gradients flow unless called under torch.no_grad().

    share_prompts: when rows repeat a prompt (GRPO's G completions of one problem), run each distinct prompt
    once, with gradients, and let its rows continue from that prompt's KV cache: the same logits (the prompt
    cannot see the completion), the gradient of the shared prompt is the sum over its rows, as in one pass.
    False, or no prompt repeated: the plain single pass over every row's prompt + completion.
    """
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    first, copy_of = distinct_prompts(prompt_ids, prompt_mask) if share_prompts else (None, None)
    if first is None or len(first) == len(prompt_ids):
        input_ids = torch.cat([prompt_ids, completion_ids], 1)  # (B, P+T)
        attn = torch.cat([prompt_mask.long(), completion_mask.long()], 1)
        out = model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids_from_mask(attn),
                    output_hidden_states=with_hidden, logits_to_keep=T + 1, use_cache=False)
        logits = out.logits[:, :-1]  # (B, T, V): position P-1+t predicts token t
        hidden = out.hidden_states[-1][:, P - 1:P + T - 1] if with_hidden else None  # (B, T, H)
    else:
        cache = DynamicCache()
        cache_arg = {_cache_kwarg(model): cache, "use_cache": True}
        pm = prompt_mask.long()
        head = model(input_ids=prompt_ids[first], attention_mask=pm[first], position_ids=position_ids_from_mask(pm[first]),
                     output_hidden_states=with_hidden, logits_to_keep=1, **cache_arg)  # U prompts: predicts token 0
        # rows copy their prompt's results with index_select: its backward adds the copies' gradients in a fixed
        # order, where plain indexing (x[copy_of], cache.batch_select_indices) adds them in a thread-dependent one
        logits = head.logits.index_select(0, copy_of)  # (B, 1, V)
        hidden = head.hidden_states[-1][:, -1:].index_select(0, copy_of) if with_hidden else None  # (B, 1, H)
        if T > 1:  # tokens 0..T-2 of every row, after its prompt's cache
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.index_select(0, copy_of), layer.values.index_select(0, copy_of)
            attn = torch.cat([pm, completion_mask.long()[:, :T - 1]], 1)  # (B, P+T-1)
            positions = position_ids_from_mask(attn)[:, P:]  # (B, T-1), as the single pass numbers them
            rest = model(input_ids=completion_ids[:, :T - 1], attention_mask=attn, position_ids=positions,
                         output_hidden_states=with_hidden, **cache_arg)
            logits = torch.cat([logits, rest.logits], 1)  # (B, T, V)
            hidden = torch.cat([hidden, rest.hidden_states[-1]], 1) if with_hidden else None  # (B, T, H)
    logp_all = (logits.float() / temperature).log_softmax(-1)
    result = {"logprobs": logp_all.gather(-1, completion_ids[..., None]).squeeze(-1) * completion_mask}
    if with_entropy:
        # from the log_softmax above; without entropy_grad it is only logged, so keep no (B, T, V) graph for it
        result["entropy"] = entropy_from_logprobs(logp_all if entropy_grad else logp_all.detach())  # (B, T)
    if with_hidden:
        result["hidden"] = hidden
    return result

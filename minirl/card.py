"""Model cards and decoding defaults: what a saved policy folder tells the Hub and a plain `generate()`.

Every folder `Policy.save` writes is a Hugging Face model folder, and the Hub reads three things from it
besides the weights:

- README.md opens with a YAML metadata block (license, library_name, pipeline_tag, tags, base_model) that the
  Hub uses to label, filter and link the model; the text below it says how the model was made and how good it
  is (`sft_card` for the shipped policy, `trained_card` for a policy trained by `train`).
- generation_config.json holds the decoding defaults of `model.generate()`. minirl samples at the training
  temperature with no top-k and stops after `max_new_tokens`; without `max_new_tokens` there, a plain
  `generate()` falls back to `max_length=20` and warns.
- nothing else: optimiser state is not part of a model folder (checkpoint.py keeps it next to it).
"""

from __future__ import annotations

import json

from .config import RLConfig

# policies this project made (the worked-steps one also under its first name): MIT like the code
OUR_BASES = ("minirl/tiny-countdown", "minirl/tiny-worked", "minirl/tiny-steps", "tiny-llama-untrained")


def decoding_defaults(eos_token_ids: list[int], pad_token_id: int | None, *, temperature: float = 1.0,
                      top_p: float = 1.0, max_new_tokens: int = RLConfig.max_new_tokens) -> dict:
    """generation_config.json fields for sampling like the course: temperature, nucleus top_p, no top-k and no
    repetition penalty (a Hub model's own defaults, e.g. Qwen's top_k=20, are replaced: this is how it was
    trained and evaluated)."""
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0, "repetition_penalty": 1.0,
            "max_new_tokens": max_new_tokens, "eos_token_id": list(eos_token_ids), "pad_token_id": pad_token_id}


def is_hub_id(name: str) -> bool:
    """'owner/name' that the Hub can link to (not a local path, not a name minirl gave a trained policy)."""
    return (name.count("/") == 1 and not name.startswith((".", "/", "~")) and "+" not in name
            and not name.startswith(OUR_BASES))


def front_matter(base: str | None, tags: tuple[str, ...] = ()) -> str:
    """The Hub's metadata block. License: MIT for this project's own policies; otherwise the base model's."""
    lines = ["---"]
    if base is None or base.startswith(OUR_BASES):
        lines.append("license: mit")
    lines += ["library_name: transformers", "pipeline_tag: text-generation", "tags:"]
    lines += [f"- {tag}" for tag in ("minirl", "reinforcement-learning", "countdown", *tags)]
    if base is not None and is_hub_id(base):
        lines.append(f"base_model: {base}")
    return "\n".join(lines + ["---", ""])


USAGE = """## Use
```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(path)   # path: this folder
model = AutoModelForCausalLM.from_pretrained(path)
ids = tokenizer([prompt], return_tensors="pt")    # the tiny policy's prompts look like "3,5,7:026="
print(tokenizer.batch_decode(model.generate(**ids)[:, ids.input_ids.shape[1]:], skip_special_tokens=True))
```
or `minirl.load_policy(path)`. `generate()` samples with this folder's generation_config.json.
"""


def generic_card(name: str) -> str:
    """The card of a policy saved without a training record."""
    return front_matter(name) + f"# {name}\n\nA causal language model saved by minirl's `Policy.save`.\n\n" + USAGE


def sft_card(*, command: str, steps: int, batch_size: int, lr: float, seed: int, num_parameters: int,
             seconds: float, greedy: dict, sampled: dict, task_description: str, final_loss: float) -> str:
    """The README.md written next to the shipped weights (`python -m minirl sft`): how it was made and how well
    it does."""
    return front_matter(None, ("sft",)) + f"""# minirl tiny Countdown policy

A {num_parameters:,}-parameter Llama (hidden 128, 4 layers, 4 heads, intermediate 512, tied embeddings)
with a 22-symbol character tokenizer, warm-started by supervised fine-tuning on one random reference
solution per problem. It is deliberately under-trained so that reinforcement learning has room to improve it.

## How it was made
```
{command}
```
Task: {task_description}. SFT: {steps} steps, batch {batch_size}, AdamW lr {lr} (linear warm-up),
seed {seed}, final loss {final_loss:.3f}, {seconds:.0f} s on the machine that made it (CPU timings are noisy).

## Held-out accuracy (3-number Countdown, test split, {greedy['n_problems']} problems)
| decoding | accuracy | format rate | mean length |
|---|---|---|---|
| greedy | {greedy['accuracy']:.1%} | {greedy['format_rate']:.1%} | {greedy['mean_length']:.1f} |
| sampled, T=1 (k={sampled['k']} per problem) | {sampled['accuracy']:.1%} | {sampled['format_rate']:.1%} | {sampled['mean_length']:.1f} |

Reproduce the numbers with `python -m minirl evaluate`.

{USAGE}"""


def worked_card(*, command: str, steps: int, batch_size: int, lr: float, seed: int, num_parameters: int,
               architecture: str, vocab_size: int, recipe: str, seconds: float, final_loss: float,
               evaluations: list[dict]) -> str:
    """The README.md of the shipped worked-steps policy (`python -m minirl sft --task worked`). `evaluations`: one
    dict per held-out test (label, greedy and sampled `evaluate` results)."""
    rows = "\n".join(
        f"| {e['label']} | {e['greedy']['accuracy']:.1%} | {e['sampled']['accuracy']:.1%} "
        f"(k={e['sampled']['k']}) | {e['sampled']['format_rate']:.1%} | {e['sampled']['mean_length']:.1f} | "
        f"{e['sampled']['rate/attempts']:.2f} | {e['sampled']['truncation_rate']:.1%} |" for e in evaluations)
    n, three = evaluations[0]["sampled"]["n_problems"], evaluations[0]["sampled"]
    from .tasks import WorkedCountdown, task_budget

    budget = task_budget(WorkedCountdown())
    lengths = (f"Sampled answer lengths, {evaluations[0]['label']}: half within {three['length_p50']:g} tokens, 99 % "
               f"within {three['length_p99']:g}, the longest {three['length_max']}. The task's budget, "
               f"{budget['max_new_tokens']} tokens with DAPO's soft overlong ramp over the last "
               f"{budget['overlong_cache']}, is chosen from these lengths: nothing is cut, and the ramp starts beyond "
               "99 % of the answers.\n\n") if "length_p99" in three else ""
    return front_matter(None, ("sft", "worked-steps")) + f"""# minirl tiny worked-steps Countdown policy

A {num_parameters:,}-parameter Llama ({architecture}) with a {vocab_size}-symbol character tokenizer, warm-started
by supervised fine-tuning on worked traces such as `3,5,7:026=` -> `3*7=21,21+5=26` (one arithmetic step at a
time; '|' restarts from the given numbers). It is deliberately under-trained so that reinforcement learning has
room to improve it, and it already retries sometimes, so RL can make it retry more or less.

## How it was made
```
{command}
```
Data: {recipe}. SFT: {steps} steps, batch {batch_size}, AdamW lr {lr} (linear warm-up, cosine to 10 %), seed {seed},
final loss {final_loss:.3f}, {seconds:.0f} s on the machine that made it (CPU timings are noisy).

## Held-out accuracy (worked-steps Countdown, test split, {n} problems each, {budget['max_new_tokens']} new tokens at most)
| test | greedy | sampled, T=1 | well-formed (sampled) | mean length (tokens) | attempts | truncated |
|---|---|---|---|---|---|---|
{rows}

{lengths}Reproduce the numbers with `python -m minirl evaluate --task worked` (add `--num-count 4` for 4
numbers). The SFT runs that chose this recipe are in `sft_trials.md`, beside this card.

{USAGE}"""


def trained_card(run, step: int) -> str:
    """The card of a policy `train` made: base, task, algorithm, steps, held-out accuracy, the full config."""
    config, meta = run.config, run.meta
    base = meta.get("policy", "policy")
    evals = [r for r in run.history if r["step"] <= step and "eval/accuracy_greedy" in r]
    table = "\n".join(f"| {r['step']} | {r['eval/accuracy_greedy']:.1%} | {r['eval/accuracy_sampled']:.1%} |"
                      for r in (evals[:1] + evals[-1:] if len(evals) > 1 else evals))
    samples = next((r.get("samples", 0) for r in reversed(run.history) if r["step"] <= step), 0)
    return front_matter(base, (config.algo,)) + f"""# {base}, trained with {config.algo.upper()} by minirl

Base policy `{base}`, trained on `{meta.get('task', '?')}` for {step} of {config.steps} steps
({samples:,} sampled completions) with the `{config.algo}` preset of minirl {meta.get('code_version', '?')}.

## Held-out accuracy ({config.eval_n} test problems; step 0 is the base policy)
| step | greedy | sampled, T={config.temperature:g} |
|---|---|---|
{table}

## Training config
```json
{json.dumps(config.to_dict(), indent=1, sort_keys=True)}
```

{USAGE}"""

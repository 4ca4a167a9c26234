"""A tiny random Qwen2-style chat model, saved exactly like a Hugging Face hub model.

Real models cannot be downloaded on the machines that test minirl, so the "real model" path —
`load_policy(folder)` -> AutoTokenizer/AutoModelForCausalLM, chat template, several EOS ids,
natural-language Countdown prompt — is exercised with this stand-in: a byte-level BPE tokenizer
trained in a second on a few sentences, ChatML special tokens, and a 2-layer Qwen2 of random weights.
It learns nothing useful; it only proves the plumbing is the same one a Qwen2.5-Instruct goes through.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from .policy import portable_tokenizer_config

# The ChatML template Qwen2.5 uses, without its tool-calling branches.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's own pre-tokenizer (its tokenizer.json's): transformers 5 rebuilds every model_type "qwen2" tokenizer
# with it, whatever tokenizer.json says, while transformers 4 reads tokenizer.json; the same one in both
# makes both tokenize alike
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
CORPUS = [
    "Using the numbers [3, 5, 7], create an equation that equals 26.",
    "You can use basic arithmetic operations (+, -, *, /) and each number must be used exactly once.",
    "Show your reasoning briefly, then give the final equation inside <answer> </answer> tags.",
    "for example <answer> (1 + 2) * 3 </answer> 0123456789 system user assistant",
]


def build_bpe_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with ChatML specials and a chat template (like Qwen2.5-Instruct's)."""
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE, padding_side="left")


# Qwen2.5-0.5B-Instruct's published config.json, the shapes that matter for speed and memory
QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                  rms_norm_eps=1e-6)


def save_tiny_chat_model(path: str | Path, seed: int = 0, **shape) -> Path:
    """Write a tiny random Qwen2 chat model + tokenizer to `path`; `load_policy(path)` then loads it.
    `shape` overrides the config (`**QWEN25_05B`: random weights at Qwen2.5-0.5B's size, for GPU benchmarks;
    ids beyond the 400-token tokenizer decode to nothing)."""
    path = Path(path)
    tokenizer = build_bpe_tokenizer()
    config = Qwen2Config(**{**dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512), **shape},
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # like Qwen2.5-Instruct: generation stops at <|im_end|> or <|endoftext|>
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    portable_tokenizer_config(path)  # loadable by transformers 4 too
    return path

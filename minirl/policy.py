"""The policy: a Hugging Face causal LM + its tokenizer, and `load_policy` to get one.

`load_policy()` with no argument loads the tiny Countdown policy shipped inside this package
(a ~1 M-parameter Llama with a character tokenizer, warm-started by `python -m minirl sft`).
`load_policy("Qwen/Qwen2.5-0.5B-Instruct")` (or any local folder) loads a real model through the
very same `AutoModelForCausalLM` / `AutoTokenizer` path, so everything downstream is model-agnostic.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from .card import decoding_defaults, generic_card
from .config import RLConfig
from .tokenizer import CHARACTERS, build_char_tokenizer

SHIPPED_POLICY = Path(__file__).parent / "assets" / "tiny-countdown"
SHIPPED_NAME = "minirl/tiny-countdown"  # `Policy.name` of `load_policy()`
WORKED_POLICY = Path(__file__).parent / "assets" / "tiny-worked"  # the worked-steps policy (tasks/worked.py)
WORKED_NAME = "minirl/tiny-worked"
# the first worked-steps policy (SFT without give-up traces: it retries until the budget runs out on problems it
# cannot solve), kept so that the runs and the registered study made with it can be repeated
STEPS_POLICY, STEPS_NAME = Path(__file__).parent / "assets" / "tiny-steps", "minirl/tiny-steps"
# the policies shipped in the package, by the short name `load_policy` takes (and by their Policy.name)
SHIPPED = {"tiny-countdown": (SHIPPED_POLICY, SHIPPED_NAME), "tiny-worked": (WORKED_POLICY, WORKED_NAME),
           "tiny-steps": (STEPS_POLICY, STEPS_NAME)}
SHIPPED.update({name: (path, name) for path, name in list(SHIPPED.values())})
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Policy:
    """A causal LM with its tokenizer, the device it lives on and how prompts are encoded."""

    model: torch.nn.Module  # any `AutoModelForCausalLM`
    tokenizer: object  # its `PreTrainedTokenizerFast`
    name: str = "policy"  # where it came from, for run records and the run cache
    use_chat_template: bool = False  # wrap each prompt as a user message of the tokenizer's chat template
    eos_token_ids: list[int] = field(default_factory=list)  # every id that ends a completion

    def __post_init__(self) -> None:
        if not self.eos_token_ids:
            self.eos_token_ids = eos_ids_of(self.model, self.tokenizer)
        if self.tokenizer.pad_token_id is None:  # many chat models ship without a pad token
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def identity(self) -> str:
        """What a run's cache key calls this policy: its name and a digest of its weights as they are now. Training
        changes the weights and so the identity: a trained policy is never taken for the one it was loaded as."""
        digest = hashlib.sha256()
        for name, tensor in self.model.state_dict().items():
            digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
        return f"{self.name}@{digest.hexdigest()[:12]}"

    def encode_prompts(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenise prompts, left-padded, on the policy's device -> (input_ids (B, P), attention_mask (B, P))."""
        if self.use_chat_template:
            prompts = [
                self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
                )
                for p in prompts
            ]
            # the chat template already contains any BOS token it wants
            enc = self.tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
        else:
            enc = self.tokenizer(prompts, padding=True, return_tensors="pt")
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def decode(self, completion_ids: torch.Tensor) -> list[str]:
        """Completion ids (B, T) -> texts without special tokens (EOS and padding dropped)."""
        return self.tokenizer.batch_decode(completion_ids.tolist(), skip_special_tokens=True)

    def save(self, path: str | Path, card: str | None = None, *, temperature: float = 1.0, top_p: float = 1.0,
             max_new_tokens: int = RLConfig.max_new_tokens) -> None:
        """Save a Hugging Face model folder: weights (safetensors), tokenizer, a generation config that samples
        like the course (card.decoding_defaults) and README.md, the model card (`card`; default: a generic one
        with the Hub's metadata). `load_policy(path)` and plain transformers both get the same policy back."""
        path = Path(path)
        with quiet_progress_bars():
            self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        portable_tokenizer_config(path)
        generation = copy.deepcopy(self.model.generation_config)
        generation.update(**decoding_defaults(self.eos_token_ids, self.tokenizer.pad_token_id, temperature=temperature,
                                              top_p=top_p, max_new_tokens=max_new_tokens))
        generation.save_pretrained(path)
        (path / "README.md").write_text(card if card is not None else generic_card(self.name))


# transformers 5 writes its generic fast tokenizer as "TokenizersBackend", a class transformers 4 does not have
# ("Tokenizer class TokenizersBackend does not exist"); the name PreTrainedTokenizerFast loads in both
PORTABLE_TOKENIZER_CLASS = {"TokenizersBackend": "PreTrainedTokenizerFast"}
# transformers 4's PreTrainedTokenizerFast also returns token_type_ids unless the config names the inputs, and a
# causal LM's generate(**tokenizer(text)) rejects them; transformers 5's generic tokenizer returns only these
CAUSAL_LM_INPUTS = ("input_ids", "attention_mask")


def portable_tokenizer_config(path: Path) -> None:
    """Rewrite tokenizer_config.json's tokenizer_class to a name every supported transformers release knows."""
    file = path / "tokenizer_config.json"
    config = json.loads(file.read_text())
    before = dict(config)
    if config.get("tokenizer_class") in PORTABLE_TOKENIZER_CLASS:
        config["tokenizer_class"] = PORTABLE_TOKENIZER_CLASS[config["tokenizer_class"]]
    if config.get("tokenizer_class") == "PreTrainedTokenizerFast":
        config.setdefault("model_input_names", list(CAUSAL_LM_INPUTS))
    if config != before:
        file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


@contextmanager
def quiet_progress_bars():
    """No "Loading weights" / "Writing model shards" bars for a 4 MB model (restored afterwards)."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def eos_ids_of(model, tokenizer) -> list[int]:
    """All ids that end a completion: the tokenizer's EOS and the generation config's (often a list)."""
    ids = []
    gen = getattr(model, "generation_config", None)
    for source in (tokenizer.eos_token_id, getattr(gen, "eos_token_id", None)):
        for i in source if isinstance(source, (list, tuple)) else [source]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("the tokenizer and generation config define no eos_token_id; pass eos_token_ids=[...]")
    return ids


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """`None`/"auto" -> cuda if available, then mps, then cpu. Anything else must be a valid torch device."""
    if device is None or device == "auto":
        if torch.cuda.is_available():  # under torchrun / accelerate launch: this process's own GPU
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device={device!r} is not a torch device; use 'auto', 'cpu', 'cuda', 'cuda:1' or 'mps'") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available on this machine; use 'auto' or 'cpu'")
    mps = getattr(torch.backends, "mps", None)
    if dev.type == "mps" and not (mps is not None and mps.is_available()):
        raise ValueError(f"device={device!r} but MPS (Apple GPU) is not available on this machine; use 'auto' or 'cpu'")
    return dev


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """`None`/"auto" -> bfloat16 on a GPU that supports it, float32 otherwise."""
    if dtype is None or dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype={dtype!r} is not supported; use 'auto', {', '.join(repr(k) for k in DTYPES)}")


def build_tiny_llama(vocab_size: int, hidden_size: int = 128, intermediate_size: int = 512,
                     num_layers: int = 4, num_heads: int = 4, max_positions: int = 64,
                     seed: int = 0) -> LlamaForCausalLM:
    """The default policy's architecture: a ~1 M-parameter Llama with tied embeddings."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def new_tiny_policy(seed: int = 0, characters: str = CHARACTERS, **arch) -> Policy:
    """A freshly initialised (untrained) tiny Llama with the character tokenizer over `characters`."""
    tokenizer = build_char_tokenizer(characters)
    model = build_tiny_llama(len(tokenizer), seed=seed, **arch)
    return Policy(model=model, tokenizer=tokenizer, name=f"tiny-llama-untrained-seed{seed}")


def load_policy(name_or_path: str | Path | None = None, *, device: str | torch.device | None = None,
                dtype: str | torch.dtype | None = None, use_chat_template: bool | None = None,
                trust_remote_code: bool = False) -> Policy:
    """Load a policy: the shipped tiny Countdown model (no argument), a shipped one by name ("tiny-worked", the
    worked-steps policy; "tiny-countdown"; "tiny-steps", the first worked-steps one), a local folder, or a hub id.

    device: "auto" (default: cuda, then mps, then cpu) or any torch device string.
    dtype: "auto" (bf16 on a GPU that supports it, else fp32), "float32", "bfloat16" or "float16".
    use_chat_template: wrap prompts in the tokenizer's chat template; default: if it has one.
    """
    shipped = SHIPPED.get("tiny-countdown" if name_or_path is None else str(name_or_path))
    path = shipped[0] if shipped else name_or_path
    dev = pick_device(device)
    torch_dtype = pick_dtype(dtype, dev)
    looks_local = isinstance(path, Path) or str(path).startswith((".", "/", "~")) or Path(str(path)).exists()
    if looks_local and not (Path(path).expanduser() / "config.json").exists():
        raise ValueError(f"load_policy: name_or_path={str(path)!r} is not a folder with a saved model "
                         "(no config.json there); pass a folder written by Policy.save / save_pretrained, "
                         "a Hugging Face model id, or nothing for the shipped tiny policy")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(Path(path).expanduser() if looks_local else path),
                                                  trust_remote_code=trust_remote_code)
        kwargs = {dtype_kwarg(): torch_dtype, "trust_remote_code": trust_remote_code}
        with quiet_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(str(Path(path).expanduser() if looks_local else path), **kwargs)
    except OSError as err:
        raise ValueError(f"load_policy: name_or_path={str(path)!r} could not be loaded as a causal LM: "
                         f"it is not a local model folder and could not be fetched as a hub id ({err})") from err
    model.to(dev)
    if use_chat_template is None:
        use_chat_template = getattr(tokenizer, "chat_template", None) is not None
    elif use_chat_template and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"use_chat_template=True but the tokenizer of {str(path)!r} has no chat_template")
    name = shipped[1] if shipped else str(name_or_path)
    return Policy(model=model, tokenizer=tokenizer, name=name, use_chat_template=use_chat_template)


def dtype_kwarg() -> str:
    """transformers >= 4.56 calls it `dtype`; older releases `torch_dtype`."""
    params = inspect.signature(AutoModelForCausalLM.from_pretrained).parameters
    return "dtype" if "dtype" in params or "torch_dtype" not in params else "torch_dtype"

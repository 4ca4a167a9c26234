"""load_policy, the shipped tiny policy and its model card, device/dtype choice, save/load, chat models."""

import json

import pytest
import torch

from minirl import evaluate, load_policy
from minirl.policy import SHIPPED_POLICY, Policy, pick_device, pick_dtype
from minirl.rollout import position_ids_from_mask
from minirl.tasks import Countdown
from minirl.tiny_hf import save_tiny_chat_model

CARD = json.loads((SHIPPED_POLICY / "minirl_card.json").read_text())


pytestmark = pytest.mark.usefixtures("one_thread")


def logits_of(policy: Policy, prompts: list[str]) -> torch.Tensor:
    ids, mask = policy.encode_prompts(prompts)
    with torch.no_grad():
        return policy.model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits


# ----------------------------------------------------------------------------- the shipped policy


def test_shipped_policy_loads_offline(tiny_policy):
    p = tiny_policy
    assert p.device == torch.device("cpu")
    assert all(t.dtype == torch.float32 for t in p.model.parameters())
    assert 1_000_000 <= p.num_parameters <= 1_100_000
    assert p.num_parameters == CARD["num_parameters"] == 1_052_544
    assert p.use_chat_template is False
    assert p.eos_token_ids == [2]
    assert p.tokenizer.padding_side == "left"
    assert p.name == "minirl/tiny-countdown"
    assert not p.model.training  # from_pretrained gives an eval-mode model


def test_shipped_folder_is_small_and_complete():
    files = {f.name: f for f in SHIPPED_POLICY.iterdir() if f.is_file()}
    assert {"README.md", "model.safetensors", "config.json", "minirl_card.json"} <= set(files)
    assert sum(f.stat().st_size for f in files.values()) <= 5 * 1024 * 1024


def test_model_card_readme_agrees_with_card_json():
    readme = (SHIPPED_POLICY / "README.md").read_text()
    assert f"{CARD['num_parameters']:,}" in readme
    assert f"{CARD['greedy']['accuracy']:.1%}" in readme
    assert f"{CARD['sampled']['accuracy']:.1%}" in readme


def test_card_sampled_accuracy_leaves_room_for_rl():
    assert 0.15 <= CARD["sampled"]["accuracy"] <= 0.40
    assert CARD["greedy"]["n_problems"] == CARD["sampled"]["n_problems"]
    assert CARD["greedy"]["greedy"] is True and CARD["sampled"]["greedy"] is False


@pytest.mark.parametrize("which", ["greedy", "sampled"])
def test_model_card_numbers_are_reproduced(tiny_policy, which):
    """`evaluate` with the card's settings gives the card's numbers (CPU fp32 is deterministic), ~4 s each."""
    want = CARD[which]
    got = evaluate(tiny_policy, Countdown(num_count=3), n=want["n_problems"], greedy=want["greedy"],
                   k=want["k"], temperature=want["temperature"], seed=0, progress=False)
    added_after_the_card = {"rate/format_ok", "rate/numbers_ok", "rate/correct", "length_p50", "length_p90",
                            "length_p99", "length_max"}
    assert set(got) - set(want) == added_after_the_card
    assert got["rate/correct"] == pytest.approx(want["accuracy"])
    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, abs=1e-9), key
        else:
            assert got[key] == value, key


# ----------------------------------------------------------------------------- errors


def test_missing_folder_raises_naming_the_path(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ValueError, match="no-such-model"):
        load_policy(missing, device="cpu")
    with pytest.raises(ValueError, match="no-such-model"):
        load_policy(str(missing), device="cpu")


def test_folder_without_config_raises(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="config.json"):
        load_policy(tmp_path, device="cpu")


@pytest.mark.parametrize("device", ["gpu0", "nonsense", "cuda:x"])
def test_bad_device_string_raises(device):
    with pytest.raises(ValueError, match="device="):
        pick_device(device)
    with pytest.raises(ValueError, match="device="):
        load_policy(device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_when_unavailable_raises(device):
    with pytest.raises(ValueError, match="device=.*CUDA is not available"):
        load_policy(device=device)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without MPS")
def test_mps_when_unavailable_raises():
    with pytest.raises(ValueError, match="device="):
        load_policy(device="mps")


@pytest.mark.parametrize("dtype", ["float64", "fp32", "int8", torch.float64])
def test_bad_dtype_raises(dtype):
    with pytest.raises(ValueError, match="dtype="):
        pick_dtype(dtype, torch.device("cpu"))
    with pytest.raises(ValueError, match="dtype="):
        load_policy(device="cpu", dtype=dtype)


def test_auto_device_and_dtype():
    dev = pick_device("auto")
    assert pick_device(None) == dev
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert pick_dtype(None, torch.device("cpu")) == torch.float32
    assert pick_dtype(torch.bfloat16, torch.device("cpu")) == torch.bfloat16


def test_bfloat16_loads_bf16_weights(tiny_policy):
    p = load_policy(device="cpu", dtype="bfloat16")
    assert all(t.dtype == torch.bfloat16 for t in p.model.parameters())
    # same weights, rounded: bf16 logits stay close to the fp32 ones
    a, b = logits_of(tiny_policy, ["3,5,7:026="]), logits_of(p, ["3,5,7:026="]).float()
    assert torch.allclose(a, b, atol=0.5)


# ----------------------------------------------------------------------------- save / load, chat models


def test_save_then_load_round_trip(tiny_policy, tmp_path):
    tiny_policy.save(tmp_path / "copy")
    again = load_policy(tmp_path / "copy", device="cpu")
    assert again.eos_token_ids == tiny_policy.eos_token_ids
    assert again.use_chat_template is False
    assert again.num_parameters == tiny_policy.num_parameters
    prompts = ["3,5,7:026=", "12,4:48=", "1:1="]
    assert torch.equal(again.encode_prompts(prompts)[0], tiny_policy.encode_prompts(prompts)[0])
    assert torch.equal(logits_of(again, prompts), logits_of(tiny_policy, prompts))


def test_saved_folder_is_what_a_hub_user_expects(tiny_policy, tmp_path):
    import warnings

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tiny_policy.save(tmp_path / "copy", temperature=0.7, max_new_tokens=12)
    config = json.loads((tmp_path / "copy" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"  # a name transformers 4 also has
    card = (tmp_path / "copy" / "README.md").read_text()
    assert card.startswith("---\nlicense: mit\nlibrary_name: transformers\npipeline_tag: text-generation\n")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "copy")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "copy")
    ids = tokenizer(["3,5,7:026="], return_tensors="pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "using the default max_length (20)": the folder must say
        out = model.generate(**ids)
    assert out.shape[1] - ids.input_ids.shape[1] <= 12
    generation = model.generation_config
    assert (generation.do_sample, generation.temperature, generation.top_p, generation.top_k) == (True, 0.7, 1.0, 0)
    assert generation.eos_token_id == [2]


def test_shipped_card_is_what_sft_writes():
    from minirl.card import sft_card
    from minirl.sft import COMPACT_TASK

    readme = (SHIPPED_POLICY / "README.md").read_text()
    assert readme == sft_card(task_description=COMPACT_TASK, **CARD)
    assert readme.split("---")[1].count("license: mit") == 1


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    return save_tiny_chat_model(tmp_path_factory.mktemp("tiny-chat"))


def test_tiny_chat_model_loads_like_a_hub_model(chat_folder):
    p = load_policy(chat_folder, device="cpu")
    assert p.use_chat_template is True
    tok = p.tokenizer
    assert p.eos_token_ids == [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    assert len(set(p.eos_token_ids)) == 2
    ids, mask = p.encode_prompts(["hi", "Using the numbers [3, 5, 7], create an equation that equals 26."])
    assert ids.shape == mask.shape and mask[:, -1].all()  # left padding
    assert mask[0, 0] == 0 and mask[1].all()
    for row, m in zip(ids, mask):
        text = tok.decode(row[m.bool()])
        assert text.startswith("<|im_start|>user")
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(ids[0][mask[0].bool()]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_can_be_switched_off(chat_folder):
    p = load_policy(chat_folder, device="cpu", use_chat_template=False)
    ids, mask = p.encode_prompts(["hi"])
    assert "<|im_start|>" not in p.tokenizer.decode(ids[0][mask[0].bool()])


def test_chat_template_on_char_tokenizer_raises():
    with pytest.raises(ValueError, match="use_chat_template=True"):
        load_policy(device="cpu", use_chat_template=True)

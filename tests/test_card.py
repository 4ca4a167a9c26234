"""Model cards: the Hub's metadata block says the right license and base model for every kind of base."""

import pytest

from minirl.card import front_matter, is_hub_id


def metadata(base):
    block = front_matter(base).split("---")[1]
    return dict(line.split(": ", 1) for line in block.strip().splitlines() if ": " in line)


def test_our_own_policies_are_mit_and_name_no_hub_base():
    for base in (None, "minirl/tiny-countdown", "minirl/tiny-countdown+grpo:1a2b3c4d@20", "tiny-llama-untrained-seed0"):
        meta = metadata(base)
        assert meta["license"] == "mit" and "base_model" not in meta, base
        assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"


def test_a_hub_base_is_linked_and_keeps_its_own_license():
    meta = metadata("Qwen/Qwen2.5-0.5B-Instruct")
    assert meta["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert "license" not in meta  # a fine-tune is licensed as its base, which minirl cannot know


@pytest.mark.parametrize("name", ["/tmp/model", "./runs/x/checkpoint/policy", "~/m", "a/b/c", "Qwen/Q+grpo:ab@3"])
def test_local_paths_and_trained_names_are_not_hub_ids(name):
    assert not is_hub_id(name)
    assert "base_model" not in metadata(name)

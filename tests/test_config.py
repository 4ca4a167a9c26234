"""RLConfig: presets, one clear ConfigError per bad field, consistency rules, serialisation, field docs."""

import dataclasses
import json

import pytest

from minirl.config import PRESETS, ConfigError, RLConfig

FIELDS = [f.name for f in dataclasses.fields(RLConfig)]
# fields with no range or choice to check: a free label and on/off switches
UNCHECKED = {"algo", "whiten_advantages", "dynamic_sampling", "overlong_filter", "overlong_punishment", "fused_adamw", "share_prompts"}

# one or more out-of-range values for every field that has a range or a choice
INVALID = {
    "batch_size": [0, -1, 2.0, True], "group_size": [0, -2], "steps": [0, 1.5], "epochs": [0],
    "minibatches": [0, -1], "max_gen_batches": [0], "max_new_tokens": [0, -16, 8.0], "eval_n": [0],
    "eval_sampled_k": [0],
    "micro_batch_size": [-1, 0.5], "length_buckets": [0, -1, 1.5], "warmup_steps": [-1], "eval_every": [-1], "checkpoint_every": [-1],
    "seed": [-1, 1.0],
    "lr": [0, -1e-5, 1.0, 3.0, "3e-5"], "critic_lr": [-1e-4, 1.0],
    "max_grad_norm": [-1.0, "1"], "weight_decay": [-0.1], "entropy_coef": [-0.01], "kl_coef": [-0.04],
    "vf_coef": [-0.5], "value_clip": [-0.2],
    "clip_low": [0, -0.2, 1.01], "clip_high": [0, 1.5], "dual_clip": [0.5, 1.0, -3],
    "adam_beta1": [1.0, -0.1], "adam_beta2": [1.0, 1.5], "adam_eps": [0, -1e-8], "adv_eps": [-1e-4],
    "gamma": [1.01, -0.1], "lam": [1.5, -0.01],
    "temperature": [0, -1.0], "top_p": [0, 1.01, -0.5],
    "loss_agg": ["mean", "", "token_mean"], "kl_estimator": ["k4", "K3"], "kl_placement": ["both", "rewards"],
    "advantage": ["ppo", "grpo"], "adv_scale": ["std"], "critic": ["value", "shared"],
    "mixed_precision": ["fp8", "bfloat16", None], "eval_split": ["train", "heldout"],
    "policy_loss": ["gspo", "ppo", ""], "ratio_level": ["seq", "group"], "dynamic_sampling_metric": ["acc", "std"],
    "overlong_cache": [0, -1, 16, 17],  # must be >= 1 and < max_new_tokens (16)
}


def test_invalid_table_covers_every_checked_field():
    assert set(INVALID) | UNCHECKED == set(FIELDS)
    assert not set(INVALID) & UNCHECKED


def test_defaults_validate():
    cfg = RLConfig().validate()
    assert cfg == RLConfig()
    assert cfg.samples_per_step == cfg.batch_size * cfg.group_size


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_validates(name):
    cfg = RLConfig.preset(name)
    assert cfg.algo == name
    assert cfg.validate() is cfg
    for key, value in PRESETS[name].items():
        assert getattr(cfg, key) == value


def test_preset_switches():
    ppo, grpo, dapo = RLConfig.preset("ppo"), RLConfig.preset("grpo"), RLConfig.preset("dapo")
    assert (ppo.advantage, ppo.critic, ppo.group_size, ppo.kl_placement) == ("gae", "head", 1, "reward")
    assert (grpo.advantage, grpo.kl_estimator, grpo.kl_placement, grpo.kl_coef) == ("group", "k3", "loss", 0.04)
    assert (dapo.clip_low, dapo.clip_high, dapo.dynamic_sampling, dapo.kl_coef) == (0.2, 0.28, True, 0.0)
    assert dapo.loss_agg == "token-mean" and dapo.overlong_punishment


def test_dapo_without_dynamic_sampling():
    cfg = RLConfig.preset("dapo", dynamic_sampling=False)
    assert cfg.dynamic_sampling is False
    assert cfg.clip_high == 0.28 and cfg.clip_low == 0.2
    assert cfg.algo == "dapo"


def test_unknown_preset_raises_naming_it():
    with pytest.raises(ConfigError, match="'reinforce'") as err:
        RLConfig.preset("reinforce")
    for name in PRESETS:
        assert name in str(err.value)
    assert issubclass(ConfigError, ValueError)


def test_unknown_override_raises_naming_it():
    with pytest.raises(ConfigError, match="clip_hi\\b"):
        RLConfig.preset("dapo", clip_hi=0.3)
    with pytest.raises(ConfigError, match="learning_rate"):
        RLConfig.preset("grpo", learning_rate=1e-4, lr=1e-4)


@pytest.mark.parametrize("field, value", [(f, v) for f, values in INVALID.items() for v in values])
def test_every_bad_value_names_its_field(field, value):
    with pytest.raises(ConfigError, match=f"RLConfig\\.{field}="):
        RLConfig(**{field: value}).validate()
    with pytest.raises(ConfigError, match=f"RLConfig\\.{field}="):
        RLConfig.preset("grpo", **{field: value})


def test_error_message_says_what_is_allowed():
    with pytest.raises(ConfigError) as err:
        RLConfig(loss_agg="mean").validate()
    msg = str(err.value)
    assert msg.startswith("RLConfig.loss_agg='mean' is not allowed")
    assert "token-mean" in msg
    with pytest.raises(ConfigError, match=r"RLConfig\.top_p=1\.5 is not allowed: use a number in \(0, 1\]"):
        RLConfig(top_p=1.5).validate()


@pytest.mark.parametrize("field", ["clip_low", "temperature", "gamma"])
def test_wrongly_typed_value_raises_config_error(field):
    with pytest.raises(ConfigError, match=f"RLConfig\\.{field}="):
        RLConfig(**{field: "0.5"}).validate()


# ----------------------------------------------------------------------------- consistency between fields


@pytest.mark.parametrize("preset, overrides, field", [
    ("grpo", dict(group_size=1), "group_size"),
    ("rloo", dict(group_size=1), "group_size"),
    ("ppo", dict(critic="none"), "critic"),
    ("grpo", dict(critic="head"), "critic"),
    ("grpo", dict(critic="separate"), "critic"),
    ("grpo", dict(kl_placement="reward", kl_coef=0.04), "kl_placement"),
    ("ppo", dict(dynamic_sampling=True), "dynamic_sampling"),
    ("grpo", dict(batch_size=8, group_size=8, minibatches=3), "minibatches"),
    ("ppo", dict(batch_size=64, minibatches=128), "minibatches"),
    ("grpo", dict(batch_size=8, group_size=8, minibatches=2, micro_batch_size=5), "micro_batch_size"),
    ("grpo", dict(batch_size=8, group_size=8, minibatches=2, micro_batch_size=64), "micro_batch_size"),
    ("dapo", dict(max_new_tokens=8, overlong_cache=8), "overlong_cache"),
    ("dapo", dict(max_new_tokens=8, overlong_cache=12), "overlong_cache"),
    ("grpo", dict(clip_low=0), "clip_low"),
    ("dapo", dict(clip_high=1.5), "clip_high"),
])
def test_inconsistent_fields_raise(preset, overrides, field):
    with pytest.raises(ConfigError, match=f"RLConfig\\.{field}="):
        RLConfig.preset(preset, **overrides)


@pytest.mark.parametrize("preset, overrides", [
    ("ppo", dict(critic="separate")),
    ("grpo", dict(batch_size=8, group_size=8, minibatches=4, micro_batch_size=8)),  # 16 rows, 8 per micro
    ("grpo", dict(batch_size=8, group_size=8, minibatches=64, micro_batch_size=1)),
    ("dapo", dict(max_new_tokens=8, overlong_cache=7)),
    ("grpo", dict(kl_placement="reward", kl_coef=0.0)),  # no KL at all: where it would go does not matter
    ("grpo", dict(clip_low=1.0, clip_high=1.0, dual_clip=3.0)),
    ("rloo", dict(group_size=2)),
])
def test_consistent_edge_cases_validate(preset, overrides):
    cfg = RLConfig.preset(preset, **overrides)
    for key, value in overrides.items():
        assert getattr(cfg, key) == value


def test_replace_validates():
    cfg = RLConfig.preset("grpo")
    assert cfg.replace(lr=1e-4).lr == 1e-4
    with pytest.raises(ConfigError, match="RLConfig.group_size="):
        cfg.replace(group_size=1)


# ----------------------------------------------------------------------------- serialisation


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_dict_and_json_round_trip(name):
    cfg = RLConfig.preset(name, seed=3, lr=1e-4)
    d = cfg.to_dict()
    assert set(d) == set(FIELDS)
    assert RLConfig.from_dict(d) == cfg
    assert RLConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert RLConfig.from_dict({}) == RLConfig()


def test_from_dict_rejects_unknown_and_invalid():
    with pytest.raises(ConfigError, match="bogus"):
        RLConfig.from_dict({**RLConfig().to_dict(), "bogus": 1})
    with pytest.raises(ConfigError, match="RLConfig.top_p="):
        RLConfig.from_dict({"top_p": 2.0})


# ----------------------------------------------------------------------------- each field's help, in the field


def test_every_field_has_its_whole_help_in_the_field():
    """The help lives in the field (config.knob): --help and the docs table read it, so they cannot disagree."""
    from minirl.config import field_help

    dangling = {"a", "an", "the", "of", "from", "its", "to", "and", "or", "in", "with", "at", "by", "for"}
    for f in dataclasses.fields(RLConfig):
        text = f.metadata.get("help", "")
        assert len(text.split()) >= 2, f"{f.name}: no help"
        assert text.split()[-1].lower() not in dangling, f"{f.name}: its help ends mid-sentence: {text!r}"
        assert text.count("(") == text.count(")") and text == text.strip(), f"{f.name}: {text!r}"
    assert list(field_help()) == [f.name for f in dataclasses.fields(RLConfig)]


def test_the_docs_table_is_the_fields_own_help():
    from pathlib import Path

    from minirl.config import fields_table

    readme = (Path(__file__).parents[1] / "minirl" / "README.md").read_text()
    table = readme.split("<!-- fields-table -->\n")[1].split("\n<!-- /fields-table -->")[0]
    assert table == fields_table(), "minirl/README.md's field table is stale: paste minirl.config.fields_table()"


def test_cispo_bounds_a_weight_and_the_clip_a_trust_region():
    """CISPO's upper bound may be far above 1 (MiniMax-M1 and ScaleRL: a weight of at most 5); the clipped
    surrogate's may not, and CISPO has no loss for dual clip to cap."""
    assert RLConfig(policy_loss="cispo", clip_low=1.0, clip_high=4.0).validate().clip_high == 4.0
    for bad in (0, 10.5, -1):
        with pytest.raises(ConfigError, match=r"RLConfig\.clip_high=.*policy_loss='cispo'"):
            RLConfig(policy_loss="cispo", clip_high=bad).validate()
    with pytest.raises(ConfigError, match=r"RLConfig\.clip_high=4\.0 is not allowed: use a number in \(0, 1\]"):
        RLConfig(clip_high=4.0).validate()
    with pytest.raises(ConfigError, match=r"RLConfig\.dual_clip=3.*policy_loss='cispo'"):
        RLConfig(policy_loss="cispo", dual_clip=3.0).validate()


def test_gspo_and_cispo_presets_are_their_papers():
    gspo, cispo = PRESETS["gspo"], PRESETS["cispo"]
    assert (gspo["ratio_level"], gspo["clip_low"], gspo["clip_high"], gspo["minibatches"], gspo["kl_coef"]) == \
        ("sequence", 3e-4, 4e-4, 4, 0.0)
    assert gspo["loss_agg"] == "seq-mean-token-mean"
    assert (cispo["policy_loss"], cispo["clip_low"], cispo["clip_high"], cispo["loss_agg"], cispo["kl_coef"]) == \
        ("cispo", 1.0, 4.0, "token-mean", 0.0)

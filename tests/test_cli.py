"""The command line: `train` exposes every RLConfig field, `compare` writes its table and figure."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from minirl.config import RLConfig

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg"}


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "minirl", *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def test_train_help_documents_every_config_field():
    out = cli("train", "--help").stdout
    flat = " ".join(out.split())  # argparse wraps lines
    for f in dataclasses.fields(RLConfig):
        if f.name != "algo":
            assert "--" + f.name.replace("_", "-") in out, f.name
            assert " ".join(f.metadata["help"].split()) + " (default: preset)" in flat, f.name  # the whole help


def test_train_rejects_bad_values_with_one_clear_line():
    done = cli("train", "--lr", "3", "--steps", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: RLConfig.lr=3.0 is not allowed: use a number in (0, 1), e.g. 3e-5"]
    done = cli("train", "--algo", "grpo", "--group-size", "1")
    assert done.returncode == 2 and "RLConfig.group_size=1" in done.stderr


def test_train_one_step_and_cache(tmp_path):
    args = ("train", "--algo", "dapo", "--steps", "1", "--batch-size", "2", "--group-size", "4", "--eval-n", "4",
            "--max-new-tokens", "12", "--overlong-cache", "2", "--device", "cpu", "--threads", "1", "--quiet",
            "--cache", str(tmp_path))
    first = cli(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "dapo: 1 steps" in first.stdout
    second = cli(*args)
    assert second.returncode == 0 and "answered from" not in second.stderr
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1  # the second call found the finished run instead of training again


def test_save_policy_writes_a_hub_folder_with_its_training_card(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    out = tmp_path / "export"
    done = cli("train", "--algo", "grpo", "--steps", "1", "--batch-size", "2", "--group-size", "2", "--eval-n", "4",
               "--max-new-tokens", "10", "--temperature", "0.8", "--device", "cpu", "--threads", "1", "--quiet",
               "--no-cache", "--save-policy", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlicense: mit\n") and "trained with GRPO" in card and "for 1 of 1 steps" in card
    assert sorted(p.name for p in out.iterdir() if p.suffix in (".pt", ".bin", ".pkl")) == []
    generation = GenerationConfig.from_pretrained(out)
    assert (generation.temperature, generation.max_new_tokens, generation.top_k) == (0.8, 10, 0)
    AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)


@pytest.mark.slow
def test_compare_writes_table_json_and_png(tmp_path):
    from minirl.compare import compare

    runs = compare(tmp_path / "out", algos=("ppo", "grpo"), cache_dir=tmp_path / "cache", threads=1, quiet=True,
                   steps=2, eval_n=8, eval_every=1, batch_size=4)
    assert [r.config.algo for r in runs] == ["ppo", "grpo"]
    rows = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert rows[0]["critic_params"] > 0 and rows[1]["critic_params"] == 0
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "base policy" in table and "| ppo |" in table and "| grpo |" in table
    assert (tmp_path / "out" / "compare.png").stat().st_size > 10_000


def test_memory_rows_show_what_the_critic_and_reference_cost():
    from minirl.compare import memory_rows, qwen25_05b_size

    rows = {r["setup"]: r for r in memory_rows(1000, 10)}
    assert rows["ppo (separate critic, KL)"]["critic_params"] == 1011
    # 4 copies (weights, grads, 2 AdamW moments) of policy + critic, 1 copy of the reference, fp32
    assert rows["ppo (separate critic, KL)"]["state_mb"] * 2**20 == (4 * 2011 + 1000) * 4
    assert rows["grpo / dapo (no KL)"]["state_mb"] * 2**20 == 4 * 1000 * 4
    assert qwen25_05b_size() == (494_032_768, 896)  # counted on the meta device from the published config

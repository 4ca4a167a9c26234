"""Data parallelism on CPU: 2 gloo processes must make the same update as 1 process on the same data."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("ddp_update.py")
TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))


def run(cmd, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "ppo", "batch-std"])
def test_two_processes_match_one(tmp_path, mode):
    """Modes (tests/ddp_update.py): DAPO with either aggregation; PPO with its critic and whitened advantages and
    GRPO with the batch std, whose statistics must be the whole batch's, not each process's share."""
    run([sys.executable, str(SCRIPT), str(tmp_path / "single.pt"), mode], tmp_path)
    run([TORCHRUN, "--nproc_per_node", "2", "--master_port", "29517", str(SCRIPT), str(tmp_path / "ddp.pt"),
         mode], tmp_path)
    single = torch.load(tmp_path / "single.pt")
    ddp = torch.load(tmp_path / "ddp.pt")
    assert single["processes"] == 1 and ddp["processes"] == 2
    diffs = [(a - b).abs().max().item() for a, b in zip(single["params"], ddp["params"])]
    assert max(diffs) < 1e-6, f"largest parameter difference {max(diffs):.2e}"
    # what is logged is the batch's, not rank 0's share (rank 0 holds only half of the rows)
    for key in ("policy_loss", "entropy", "clip_frac_low", "approx_kl", "grad_norm"):
        assert ddp["stats"][key] == pytest.approx(single["stats"][key], rel=1e-5, abs=1e-7), key
    assert ddp["sampled"] == pytest.approx(single["sampled"], rel=1e-9, nan_ok=True)
    assert ddp["sampled"]["generated"] == 16 and ddp["sampled"]["reward_std"] > 0
    from minirl import load_policy

    base = list(load_policy(device="cpu").model.parameters())
    moved = max((a - b).abs().max().item() for a, b in zip(single["params"], base))
    assert moved > 1e-5, "the update must actually change the policy for this comparison to mean anything"


@pytest.mark.slow
def test_launched_train_command(tmp_path):
    """`torchrun -m minirl train` (what minirl/README.md tells GPU users to run): every process exits 0, the
    main process alone reports and saves, and what it saved loads with plain transformers."""
    from transformers import AutoModelForCausalLM

    done = run([TORCHRUN, "--nproc_per_node", "2", "--master_port", "29518", "-m", "minirl", "train", "--algo", "grpo",
                "--steps", "2", "--batch-size", "2", "--group-size", "2", "--eval-n", "8", "--run-dir", "run",
                "--save-policy", "trained", "--threads", "1", "--quiet"], tmp_path)
    assert done.stdout.count("grpo: 2 steps") == 1, done.stdout
    assert done.stdout.count("trained policy saved to trained") == 1, done.stdout
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3, rows  # step 0 (the base policy's evaluation) and the 2 steps, written once
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "trained").num_parameters() > 0

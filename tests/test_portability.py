"""minirl where its users are: without POSIX `resource` (native Windows), with macOS's units, on plain transformers."""

import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from minirl import trainer

ROOT = Path(__file__).resolve().parents[1]

WITHOUT_RESOURCE = """
import math, sys
import psutil  # (transformers imports it; its Linux backend needs `resource`, its Windows backend does not)
sys.modules["resource"] = None  # what native Windows has: `import resource` raises ImportError
import minirl
from minirl import Countdown, RLConfig, load_policy, train
cfg = RLConfig.preset("grpo", batch_size=2, group_size=2, steps=2, eval_every=0, eval_n=4, max_new_tokens=8)
run = train(load_policy(device="cpu"), Countdown(), cfg, progress=False)
assert run.status == "finished", run.status
assert "resource" not in sys.modules or sys.modules["resource"] is None
print("peak", run.history[-1]["peak_mem_mb"])
"""


def test_import_and_train_without_the_resource_module():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", WITHOUT_RESOURCE], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    peak = float(done.stdout.split("peak")[-1])
    assert math.isnan(peak)  # Linux without `resource` and not Windows: nothing to ask, so nan, not a crash


@pytest.mark.parametrize("platform, raw, mb", [("linux", 2048 * 1024, 2048.0), ("darwin", 2048 * 2**20, 2048.0)])
def test_peak_memory_units_per_platform(monkeypatch, platform, raw, mb):
    """getrusage(2): ru_maxrss is in KiB on Linux and in bytes on macOS."""
    fake = types.SimpleNamespace(RUSAGE_SELF=0, getrusage=lambda who: types.SimpleNamespace(ru_maxrss=raw))
    monkeypatch.setitem(sys.modules, "resource", fake)
    monkeypatch.setattr(sys, "platform", platform)
    assert trainer.peak_memory_mb(torch.device("cpu")) == mb


def test_peak_memory_is_plausible_here():
    mb = trainer.peak_memory_mb(torch.device("cpu"))
    assert 50 < mb < 24 * 1024  # this process holds torch: tens of MB at least, less than the machine


def test_without_resource_the_windows_peak_working_set_is_read(monkeypatch):
    import psutil

    monkeypatch.setitem(sys.modules, "resource", None)
    info = types.SimpleNamespace(rss=1, peak_wset=300 * 2**20)  # psutil's memory_info() on Windows
    monkeypatch.setattr(psutil, "Process", lambda: types.SimpleNamespace(memory_info=lambda: info))
    assert trainer.peak_memory_mb(torch.device("cpu")) == 300.0

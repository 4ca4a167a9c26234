"""Run folders (save / load / crash-safe append), run keys, code versions and the run cache."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from minirl.config import RLConfig
from minirl.runs import Run, RunCache, code_version, default_cache_dir, run_key


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """Row lists equal, with NaN == NaN."""
    def same(x, y):
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            return True
        return x == y
    return len(a) == len(b) and all(r.keys() == s.keys() and all(same(r[k], s[k]) for k in r) for r, s in zip(a, b))


def make_run(path=None, steps: int = 3, status: str | None = None) -> Run:
    run = Run.start(RLConfig.preset("dapo", lr=1e-5, seed=3), path=path, policy="tiny", task="countdown-3")
    for t in range(steps):
        run.append({"step": t, "reward_mean": 0.1 * t, "entropy": math.nan if t == 1 else 1.0 - 0.1 * t,
                    "wall_time": 2.0 * t, **({"eval/accuracy_sampled": 0.5} if t % 2 == 0 else {})})
    if status:
        run.set_status(status)
    return run


def test_save_load_round_trip(tmp_path):
    run = make_run()
    run.append({"step": 3, "reward_mean": np.float32(0.25), "gen_batches": np.int64(2), "kl_ref": torch.tensor(0.5),
                "approx_kl": math.inf, "reward_std": math.nan})
    run.set_status("finished")
    run.save(tmp_path / "r")
    loaded = Run.load(tmp_path / "r")
    assert loaded.config == run.config
    assert same_rows(loaded.history, run.history)
    assert loaded.history[3]["reward_mean"] == 0.25 and loaded.history[3]["gen_batches"] == 2
    assert loaded.history[3]["kl_ref"] == 0.5 and loaded.history[3]["approx_kl"] == math.inf
    assert loaded.meta == run.meta and loaded.meta["status"] == "finished"
    assert loaded.meta["code_version"] == code_version() and loaded.meta["seconds"] == 4.0
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["config.json", "meta.json", "metrics.jsonl"]


def test_append_writes_each_step_and_survives_a_truncated_line(tmp_path):
    run = make_run(tmp_path / "r")  # Run.start saved the folder; each append adds one line
    lines = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["step"] == 2
    with open(tmp_path / "r" / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward_me')  # the process died mid-write
    loaded = Run.load(tmp_path / "r")
    assert same_rows(loaded.history, run.history) and loaded.status == "running"
    loaded.append({"step": 3, "reward_mean": 0.3})  # resuming drops the half line first
    assert [r["step"] for r in Run.load(tmp_path / "r").history] == [0, 1, 2, 3]


def test_append_to_a_new_folder_makes_it_a_run(tmp_path):
    run = Run(RLConfig(), path=tmp_path / "new")
    run.append({"step": 0, "reward_mean": 1.0})
    run.append({"step": 1, "reward_mean": 2.0})
    assert Run.load(tmp_path / "new").series("reward_mean") == ([0, 1], [1.0, 2.0])


def test_load_rejects_a_corrupt_middle_line(tmp_path):
    make_run(tmp_path / "r")
    file = tmp_path / "r" / "metrics.jsonl"
    lines = file.read_text().splitlines()
    file.write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        Run.load(tmp_path / "r")


def test_series_final_label_and_status(tmp_path):
    run = make_run()
    steps, values = run.series("entropy")
    assert steps == [0, 1, 2] and math.isnan(values[1]) and values[2] == pytest.approx(0.8)
    assert run.series("eval/accuracy_sampled") == ([0, 2], [0.5, 0.5])
    assert run.series("reward_mean", x="wall_time")[0] == [0.0, 2.0, 4.0]
    assert run.final("reward_mean") == pytest.approx(0.2)
    run.append({"step": 3, "entropy": math.nan})
    assert run.final("entropy") == pytest.approx(0.8)
    assert math.isnan(run.final("value_loss")) and run.final("value_loss", default=-1.0) == -1.0
    assert run.label == "dapo lr=1e-05 G=8 B=8 clip=0.2/0.28 seed=3"
    assert "kl=0.04" in Run(RLConfig.preset("grpo")).label
    assert "ent=0.01" in Run(RLConfig(entropy_coef=0.01)).label
    with pytest.raises(ValueError, match="status='done'"):
        run.set_status("done")
    with pytest.raises(ValueError, match="path=None"):
        run.save()
    run.save(tmp_path / "r")
    run.set_status("failed", error="CUDA out of memory")
    meta = Run.load(tmp_path / "r").meta
    assert meta["status"] == "failed" and meta["error"] == "CUDA out of memory" and "ended_at" in meta


def test_run_key_changes_with_every_input_and_is_stable_otherwise():
    config = RLConfig.preset("grpo")
    key = run_key("tiny", "countdown-3", config)
    assert len(key) == 16 and key == run_key("tiny", "countdown-3", RLConfig.preset("grpo"))
    keys = {key}
    for f in dataclasses.fields(RLConfig):  # run_key hashes to_dict(), so any change of value must count
        value = getattr(config, f.name)
        new = (not value) if isinstance(value, bool) else value + 1 if isinstance(value, int) \
            else value * 0.5 + 0.01 if isinstance(value, float) else value + "x"
        keys.add(run_key("tiny", "countdown-3", dataclasses.replace(config, **{f.name: new})))
    assert len(keys) == 1 + len(dataclasses.fields(RLConfig))
    assert run_key("other", "countdown-3", config) != key
    assert run_key("tiny", "countdown-4", config) != key
    assert run_key("tiny", "countdown-3", config, extra={"eval": 1}) != key
    with pytest.raises(ValueError, match="config="):
        run_key("tiny", "countdown-3", config.to_dict())


def test_code_version_is_stable():
    import minirl

    v = code_version()
    assert v == code_version() and v.startswith(minirl.__version__ + "+") and len(v.split("+")[1]) == 12


def test_cache_returns_only_finished_runs_and_never_raises(tmp_path, monkeypatch):
    cache = RunCache(tmp_path / "cache")
    assert not cache.root.exists()  # created lazily
    make_run(cache.path_for("done"), status="finished")
    make_run(cache.path_for("live"))
    make_run(cache.path_for("broke"), status="failed")
    (cache.path_for("garbage")).mkdir()
    (cache.path_for("garbage") / "config.json").write_text("{not json")
    (cache.path_for("oldconf")).mkdir()
    (cache.path_for("oldconf") / "config.json").write_text('{"no_such_field": 1}')
    (cache.path_for("meta_only")).mkdir()
    (cache.path_for("meta_only") / "meta.json").write_text('{"status": "finished"}')

    assert cache.get("done").status == "finished" and len(cache.get("done").history) == 3
    for key in ("live", "broke", "garbage", "oldconf", "meta_only", "missing"):
        assert cache.get(key) is None
    with pytest.raises(ValueError, match="key="):
        cache.path_for("../escape")

    monkeypatch.setenv("MINIRL_CACHE", str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env" and RunCache().root == tmp_path / "env"
    monkeypatch.delenv("MINIRL_CACHE")
    assert default_cache_dir().parts[-3:] == (".cache", "minirl", "runs")

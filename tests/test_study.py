"""`python -m minirl study`: claims become runs, runs are resumable, the report's verdicts follow their rules."""

import json
import math

import pytest

from minirl import study
from minirl.study import CLAIMS, SCALES, STUDY_FILE, Point, plan
from minirl.study.stats import clear, diff, stats

pytestmark = pytest.mark.usefixtures("one_thread")


def test_claims_cover_the_issue_and_share_runs():
    assert list(CLAIMS) == [f"H{i}" for i in range(1, 10)]
    cpu = SCALES["cpu"]
    # H1: G 2..16 at a fixed number of prompts; PPO gets the same completions per step with G = 1
    h1 = {p.label: p.config(cpu, 0) for p in CLAIMS["H1"].points}
    assert {c.group_size for c in h1.values()} == {2, 4, 8, 16} and {c.batch_size for c in h1.values()} == {8}
    ppo = Point("ppo", "ppo").config(cpu, 0)
    assert (ppo.batch_size, ppo.group_size) == (64, 1) and ppo.kl_placement == "reward"
    # H2 places the KL where each algorithm puts it; H3's run without DS is twice as long
    assert {p.config(cpu, 0).kl_placement for p in CLAIMS["H2"].points} == {"reward", "loss"}
    ds, nods = (p.config(cpu, 0) for p in CLAIMS["H3"].points)
    assert ds.dynamic_sampling and not nods.dynamic_sampling and nods.steps == 2 * ds.steps
    # H7 spans 1.5 decades; its points are log-slider values 10**(k/10) so the lesson panel can hit them
    lrs = sorted(p.config(cpu, 0).lr for p in CLAIMS["H7"].points if p.preset == "grpo")
    assert lrs[-1] / lrs[0] == pytest.approx(10 ** 1.5)
    assert all(abs(math.log10(lr) * 10 - round(math.log10(lr) * 10)) < 1e-9 for lr in lrs)
    # shared configurations are trained once: 32 distinct runs per seed, not the 43 points listed
    assert sum(len(c.points) for c in CLAIMS.values()) == 43
    assert len(plan(list(CLAIMS), cpu, 3)) == 3 * 32
    # every point has a distinct seed-wise config within its claim
    for claim in CLAIMS.values():
        assert len({p.config(cpu, 0).to_json() for p in claim.points}) == len(claim.points)


def test_study_runs_resumes_and_reports(tmp_path, monkeypatch):
    out = tmp_path / "study"
    assert study.main(["--only", "H8", "--seeds", "2", "--smoke", "--out", str(out), "--device", "cpu"]) == 0
    folders = sorted(p for p in (out / "runs").iterdir())
    assert len(folders) == 4 and all((f / STUDY_FILE).is_file() for f in folders)
    result = json.loads((out / "results" / "H8.json").read_text())
    assert result["claim"] == "H8" and result["seeds_per_point"] == 2
    assert result["verdict"] in ("supported", "not supported", "inconclusive")
    for point in result["points"]:
        assert point["seeds"] == [0, 1] and len(point["per_seed"]["sampled"]) == 2
        assert point["stats"]["sampled"]["n"] == 2
    assert (out / "figures" / "H8.png").stat().st_size > 1000
    md = (out / "STUDY.md").read_text()
    assert "| H8 Clip-higher |" in md and "python -m minirl study --only H8 --seeds 2 --smoke" in md

    # a killed study: one run lost its final evaluation (killed mid-run); a rerun trains exactly that one
    killed = folders[1]
    (killed / STUDY_FILE).unlink()
    trained = []
    from minirl.study import jobs

    original = jobs.train

    def counting_train(*args, **kwargs):
        trained.append(kwargs.get("run_dir"))
        return original(*args, **kwargs)

    monkeypatch.setattr(jobs, "train", counting_train)
    assert study.main(["--only", "H8", "--seeds", "2", "--smoke", "--out", str(out), "--device", "cpu"]) == 0
    assert trained == [killed] and (killed / STUDY_FILE).is_file()
    # nothing left to do: no training at all
    trained.clear()
    assert study.main(["--only", "H8", "--seeds", "2", "--smoke", "--out", str(out), "--device", "cpu"]) == 0
    assert trained == []


def test_gpu_scale_runs_a_chat_model_in_smoke_mode(tmp_path):
    """The GPU config (an instruct model, chat prompts, bf16) end to end, with a tiny Qwen2 saved to disk."""
    from minirl.runs import Run
    from minirl.tiny_hf import save_tiny_chat_model

    model = save_tiny_chat_model(tmp_path / "tiny-qwen")
    out = tmp_path / "gpu-study"
    assert study.main(["--scale", "gpu", "--model", str(model), "--smoke", "--only", "H9", "--seeds", "1",
                       "--out", str(out), "--device", "cpu"]) == 0
    runs = [Run.load(p) for p in (out / "runs").iterdir()]
    assert sorted(r.config.algo for r in runs) == ["grpo", "ppo"]
    assert all(r.config.mixed_precision == "bf16" and r.config.max_new_tokens == 24 for r in runs)
    assert all(str(model) in r.meta["policy"] for r in runs)
    assert json.loads((out / "results" / "H9.json").read_text())["scale"] == "gpu-smoke"


def test_bad_arguments_name_the_value(capsys):
    with pytest.raises(SystemExit):
        study.main(["--only", "H10"])
    assert "--only 'H10' is not allowed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        study.main(["--seeds", "0"])
    assert "--seeds 0 is not allowed" in capsys.readouterr().err


def _point(label, series, x, **per_seed):
    numbers = {k: list(v) for k, v in per_seed.items()}
    return {"label": label, "series": series, "x": x, "runs": [], "numbers": numbers,
            "stats": {k: stats(v) for k, v in numbers.items()}}


@pytest.mark.parametrize("accs, verdict", [
    (([0.30, 0.31, 0.29], [0.20, 0.21, 0.19], [0.20, 0.22, 0.21]), "supported"),  # bonus clearly lowers accuracy
    (([0.20, 0.21, 0.19], [0.30, 0.31, 0.29], [0.30, 0.32, 0.31]), "not supported"),  # bonus clearly raises it
    (([0.20, 0.30, 0.25], [0.22, 0.28, 0.18], [0.26, 0.21, 0.24]), "inconclusive"),  # within noise
])
def test_verdicts_follow_their_rule(accs, verdict):
    entropy = [0.5, 0.5, 0.5]
    points = {f"grpo ent={e:g}": _point(f"grpo ent={e:g}", "grpo", e, sampled=a, entropy_end=entropy)
              for e, a in zip((0.0, 1e-3, 1e-2), accs)}
    got, text, rule = CLAIMS["H6"].verdict(points, {"heldout/sampled": 0.2})
    assert got == verdict and "entropy coef 0.01" in text and rule


def test_clear_difference_needs_twice_the_standard_error():
    a, b = stats([0.30, 0.32, 0.31]), stats([0.20, 0.22, 0.21])
    d, bar = diff(a, b)
    assert d == pytest.approx(0.10) and bar == pytest.approx(2 * math.hypot(a["se"], b["se"]))
    assert clear(d, bar) == 1 and clear(-d, bar) == -1
    assert clear(0.001, bar) == 0 and clear(math.nan, bar) == 0


def test_report_never_erases_results_made_by_another_code_version(tmp_path, monkeypatch):
    out = tmp_path / "study"
    assert study.main(["--only", "H9", "--seeds", "1", "--smoke", "--out", str(out), "--device", "cpu"]) == 0
    before = (out / "STUDY.md").read_text()
    from minirl import runs

    monkeypatch.setattr(runs, "code_version", lambda: "0.1.0+another")  # run keys change with the code version
    with pytest.raises(SystemExit, match="none of this code version"):
        study.main(["--only", "H9", "--seeds", "1", "--smoke", "--out", str(out), "--report-only"])
    assert (out / "STUDY.md").read_text() == before


def test_pilot_on_the_steps_task_pairs_arms_seed_by_seed(tmp_path, monkeypatch):
    from minirl.study import pilot

    monkeypatch.setattr(pilot, "ARMS", pilot.ARMS[:2])  # GRPO and PPO: enough to pair, and quick
    out = tmp_path / "pilot"
    assert study.main(["--pilot", "--scale", "steps", "--smoke", "--seeds", "2", "--out", str(out), "--device", "cpu"]) == 0
    result = json.loads((out / "pilot.json").read_text())
    assert result["scale"] == "steps-smoke" and set(result["runs"]) == {"grpo", "ppo"}
    run = result["runs"]["grpo"][0]
    assert {"heldout/sampled", "transfer4/sampled", "range/sampled"} <= set(run["final"])
    assert run["eval_seconds"] >= 0
    # ppo - grpo is a difference per seed, of the two arms' own held-out numbers
    pair = result["pairs"]["ppo - grpo | heldout/sampled"]
    ppo, grpo = ([r["final"]["heldout/sampled"] for r in result["runs"][a]] for a in ("ppo", "grpo"))
    assert pair["per_seed"] == pytest.approx([p - g for p, g in zip(ppo, grpo)])
    # the steps scale trains the worked-steps policy on its own task
    record = json.loads(next((out / "runs").glob(f"*/{STUDY_FILE}")).read_text())
    assert record["scale"] == "steps-smoke"
    meta = json.loads(next((out / "runs").glob("*/meta.json")).read_text())
    assert meta["policy"] == "minirl/tiny-steps" and "countdown-steps" in meta["task"]

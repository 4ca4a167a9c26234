"""`python -m minirl study`: claims become runs, runs are resumable, the report's verdicts follow their rules."""

import json
import math

import pytest

from minirl import study
from minirl.study import CLAIMS, SCALES, STUDY_FILE, Claim, Point, plan
from minirl.study.claims import count_tests

pytestmark = pytest.mark.usefixtures("one_thread")


def test_claims_are_registered_paired_and_share_runs():
    assert list(CLAIMS) == ["H1", "H2", "H3", "H4", "H5", "H8", "H9", "T"]
    assert count_tests(CLAIMS) == 21  # the Bonferroni divisor of every test in the table
    worked = SCALES["worked"]
    # the whole held-out split, k >= 4 samples per problem; seeds 10.. so no run repeats a pilot run (0, 1)
    assert worked.eval_n == 1158 and worked.eval_k >= 4 and list(worked.seeds(5)) == [10, 11, 12, 13, 14]
    # it keeps the policy and the budget it was registered with, whatever the task ships later
    assert worked.model == "tiny-steps" and worked.budget() == {"max_new_tokens": 64, "overlong_cache": 16}
    from minirl.tasks import WorkedCountdown  # ... and the train problems it drew before tasks had a val split

    registered = Point("grpo", "grpo").task(worked).problems("train", 50, seed=3)
    assert registered == WorkedCountdown(val_fraction=0.0).problems("train", 50, seed=3)
    assert registered != WorkedCountdown().problems("train", 50, seed=3)
    assert len(Point("grpo", "grpo").task(worked).problems("test", worked.eval_n)) == 1158
    # PPO gets the group methods' completions per step as distinct prompts; H5's reward is the hackable one
    ppo = Point("ppo", "ppo").config(worked, 10)
    assert (ppo.batch_size, ppo.group_size) == (64, 1)
    assert {p.task(worked).reward_scheme for p in CLAIMS["H5"].points} == {"per_step"}
    ds, nods = (p.config(worked, 10) for p in CLAIMS["H3"].points)
    assert ds.dynamic_sampling and not nods.dynamic_sampling and nods.steps == ds.steps
    # shared configurations are trained once: 9 distinct runs per seed, not the 19 points listed
    assert sum(len(c.points) for c in CLAIMS.values()) == 19
    assert len(plan(list(CLAIMS), worked, 5)) == 5 * 9
    for claim in CLAIMS.values():
        assert len({p.config(worked, 10).to_json() for p in claim.points}) == len(claim.points)


def test_a_shared_run_must_agree_on_its_evaluation():
    from minirl.study import claims, jobs

    twin = Point("grpo again", "grpo")  # the grpo arm's run, without the shifted evaluations
    claims.CLAIMS["X"] = Claim("X", "twin", "-", (twin,), None, ("reward_mean",))
    try:
        with pytest.raises(ValueError, match="'grpo G=8' and 'grpo again' train the same run but disagree"):
            jobs.plan(["H1", "X"], SCALES["worked"], 1)
    finally:
        del claims.CLAIMS["X"]


def test_range_shift_holds_only_problems_with_an_unseen_number():
    from minirl.study.jobs import SHIFTS, TRAINED_MAX, AboveTraining

    task = AboveTraining(Point("grpo", "grpo").task(SCALES["worked"], **SHIFTS["range"]), TRAINED_MAX)
    problems = task.problems("test", 500, seed=10)
    assert len({p.key for p in problems}) == 500
    assert all(max(p.answer["numbers"]) > 12 for p in problems)
    assert task.score(problems[0], problems[0].solution).reward == 1.0  # scoring is the wrapped task's


def test_study_runs_resumes_and_reports(tmp_path, monkeypatch):
    out = tmp_path / "study"
    assert study.main(["--only", "H8", "--seeds", "2", "--smoke", "--out", str(out), "--device", "cpu"]) == 0
    folders = sorted(p for p in (out / "runs").iterdir())
    assert len(folders) == 4 and all((f / STUDY_FILE).is_file() for f in folders)
    result = json.loads((out / "results" / "H8.json").read_text())
    assert result["claim"] == "H8" and result["seeds"] == [10, 11] and result["count_tests_table"] == 21
    assert result["verdict"] in ("supported", "not supported", "inconclusive")
    (entropy,) = result["tests"]  # 0.28 - 0.2, seed by seed, from the two points' own per-seed values
    sym, high = (p["per_seed"]["entropy_end"] for p in result["points"])
    assert entropy["d"] == pytest.approx([h - s for s, h in zip(sym, high)], abs=1e-4)
    assert sorted((out / "base").iterdir()) == [out / "base" / "seed-10.json", out / "base" / "seed-11.json"]
    for name in ("H8.png", "H8_paired.png"):
        assert (out / "figures" / name).stat().st_size > 1000
    md = (out / "STUDY.md").read_text()
    assert "| H8 Clip-higher |" in md and "python -m minirl study --only H8 --seeds 2 --smoke" in md
    assert "m = 21 paired t-tests" in md

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
    with pytest.raises(SystemExit):
        study.main(["--task", "chess"])
    assert "invalid choice: 'chess'" in capsys.readouterr().err


def _points(claim, seeds=5, **per_label):
    """Synthetic per-seed numbers for a claim's points: every metric 0.5 unless per_label gives it."""
    keys = ("sampled", "greedy", "transfer4", "range", "seconds", "samples", "reward_roughness", "entropy_start",
            "entropy_end", "length_start", "length_end", "length_growth", "attempts_end", "correct_end",
            "extra_steps_end")
    out = {}
    for p in CLAIMS[claim].points:
        numbers = {k: [0.5 + 0.01 * i for i in range(seeds)] for k in keys}
        numbers.update(per_label.get(p.label, {}))
        out[p.label] = {"label": p.label, "series": p.series, "x": p.x, "runs": [], "numbers": numbers}
    return out


BASE = {k: [0.5 + 0.01 * i for i in range(5)] for k in ("heldout/sampled", "transfer4/sampled", "range/sampled")}


@pytest.mark.parametrize("name", list(CLAIMS))
def test_every_rule_makes_the_tests_it_registers(name):
    verdict, text, rule, tests = CLAIMS[name].verdict(_points(name), BASE, 21)
    assert len(tests) == CLAIMS[name].tests and text and rule
    assert all(t["n"] == 5 and t["mean"] == pytest.approx(0.0, abs=1e-12) for t in tests)  # equal arms: no difference
    assert "supported" not in verdict.replace("not supported", "") or name == "H3"  # H3 "no help" holds at 0


# seeds differ a lot from each other (0.20 .. 0.60), the difference between the arms hardly at all: only a
# paired test sees it
SPREAD = [0.20, 0.30, 0.40, 0.50, 0.60]


@pytest.mark.parametrize("shift, verdict", [
    ([0.05, 0.052, 0.049, 0.051, 0.05], "supported"),  # eps_high 0.28 clearly higher entropy
    ([-0.05, -0.052, -0.049, -0.051, -0.05], "not supported"),  # clearly lower
    ([0.05, -0.04, 0.06, -0.05, 0.0], "inconclusive"),  # within noise
])
def test_H8_verdict_follows_its_paired_rule(shift, verdict):
    points = _points("H8", **{"dapo clip_high=0.2": {"entropy_end": SPREAD},
                              "dapo clip_high=0.28": {"entropy_end": [a + d for a, d in zip(SPREAD, shift)]}})
    got, text, rule, (t,) = CLAIMS["H8"].verdict(points, BASE, 21)
    assert got == verdict and "nats/token" in text and rule
    assert t["d"] == pytest.approx(shift)


def test_bonferroni_over_the_table_raises_the_bar():
    from minirl.study.power import compare

    a, b = [0.20, 0.21, 0.19, 0.20, 0.22], [0.22, 0.215, 0.215, 0.21, 0.23]  # +1.4 points, sd 0.8
    one, table = compare(a, b, tests=1), compare(a, b, tests=21)
    assert one["sign"] == 1 and table["sign"] == 0 and table["bar"] > 2 * one["bar"]
    assert table["mde"] > one["mde"] > 0


@pytest.mark.parametrize("ds_minus_nods, verdict", [
    (-0.01, "supported"),  # no help: DS a point worse
    (0.10, "not supported"),  # DS clearly 10 points better
    (0.025, "inconclusive"),  # maybe a help of 2.5 points: the upper bound is past the 3-point margin
])
def test_H3_no_help_is_an_equivalence_rule(ds_minus_nods, verdict):
    noise = [0.0, 0.012, -0.012, 0.006, -0.006]  # sd 0.95 points: the bar is 2.9 points
    points = _points("H3", **{"dapo-noDS": {"sampled": SPREAD},
                              "dapo": {"sampled": [a + ds_minus_nods + e for a, e in zip(SPREAD, noise)]}})
    assert CLAIMS["H3"].verdict(points, BASE, 21)[0] == verdict


def test_report_never_erases_results_made_by_another_code_version(tmp_path, monkeypatch):
    out = tmp_path / "study"
    assert study.main(["--only", "H9", "--seeds", "1", "--smoke", "--out", str(out), "--device", "cpu"]) == 0
    before = (out / "STUDY.md").read_text()
    from minirl import runs

    monkeypatch.setattr(runs, "code_version", lambda: "0.1.0+another")  # run keys change with the code version
    with pytest.raises(SystemExit, match="none of this code version"):
        study.main(["--only", "H9", "--seeds", "1", "--smoke", "--out", str(out), "--report-only"])
    assert (out / "STUDY.md").read_text() == before


def test_report_only_never_erases_a_report_whose_runs_are_not_here(tmp_path):
    # studies/claims-worked commits STUDY.md and results/ but not its 45 run folders
    out = tmp_path / "study"
    (out / "results").mkdir(parents=True)
    (out / "STUDY.md").write_text("the committed report\n")
    (out / "results" / "H9.json").write_text('{"verdict": "inconclusive"}\n')
    with pytest.raises(SystemExit, match="holds no finished run"):
        study.main(["--only", "H9", "--seeds", "1", "--smoke", "--out", str(out), "--report-only"])
    assert (out / "STUDY.md").read_text() == "the committed report\n"
    assert json.loads((out / "results" / "H9.json").read_text()) == {"verdict": "inconclusive"}


def test_pilot_on_the_worked_task_pairs_arms_seed_by_seed(tmp_path, monkeypatch):
    from minirl.study import pilot

    monkeypatch.setattr(pilot, "ARMS", pilot.ARMS[:2])  # GRPO and PPO: enough to pair, and quick
    out = tmp_path / "pilot"
    assert study.main(["--pilot", "--scale", "worked", "--smoke", "--seeds", "2", "--out", str(out), "--device", "cpu"]) == 0
    result = json.loads((out / "pilot.json").read_text())
    assert result["scale"] == "worked-smoke" and set(result["runs"]) == {"grpo", "ppo"}
    assert [r["seed"] for r in result["runs"]["grpo"]] == [0, 1]  # not the registered study's seeds (10..)
    run = result["runs"]["grpo"][0]
    assert {"heldout/sampled", "transfer4/sampled", "range/sampled"} <= set(run["final"])
    assert run["eval_seconds"] >= 0
    # ppo - grpo is a difference per seed, of the two arms' own held-out numbers
    pair = result["pairs"]["ppo - grpo | heldout/sampled"]
    ppo, grpo = ([r["final"]["heldout/sampled"] for r in result["runs"][a]] for a in ("ppo", "grpo"))
    assert pair["per_seed"] == pytest.approx([p - g for p, g in zip(ppo, grpo)])
    # the worked scale trains the worked-steps policy it was registered with on its own task
    record = json.loads(next((out / "runs").glob(f"*/{STUDY_FILE}")).read_text())
    assert record["scale"] == "worked-smoke"
    meta = json.loads(next((out / "runs").glob("*/meta.json")).read_text())
    assert meta["policy"] == "minirl/tiny-steps" and "countdown-worked" in meta["task"]


def test_the_tuned_scale_starts_each_preset_at_its_tuned_learning_rate_on_the_shipped_policy():
    """The scale of the new study (issue 33): tiny-worked, the task's budget and validation split, TUNED_LR."""
    from minirl.config import tuned_lr
    from minirl.tasks import WorkedCountdown

    tuned = SCALES["tuned"]
    assert tuned.model is None and tuned.budget() == {"max_new_tokens": 80, "overlong_cache": 32}
    drawn = Point("grpo", "grpo").task(tuned).problems("train", 20, seed=3)
    assert drawn == WorkedCountdown().problems("train", 20, seed=3)  # the validation split is left out
    assert not set(tuned.seeds(8)) & {0, *range(10, 15), 100, 101, 102}  # compare, the old study, the sweep
    for label, name in (("grpo", "grpo"), ("ppo", "ppo"), ("dapo", "dapo"), ("dapo-noDS", "dapo_nods")):
        assert Point(label, label).config(tuned, 20).lr == tuned_lr(name, "worked")
        assert Point(label, label, {"lr_x": 3.0}).config(tuned, 20).lr == pytest.approx(3 * tuned_lr(name, "worked"))
    assert Point("grpo", "grpo").config(SCALES["worked"], 10).lr == 1e-4  # the registered study keeps its one lr

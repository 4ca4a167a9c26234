"""The tuned study (claims_tuned.py): its registration's points and families, Holm's correction, the band width
of claim L, and the fact that lets claim C leave GRPO out (its clip cannot act)."""

import math

import pytest
import torch

from minirl.study import SCALES, plan
from minirl.study.claims import CLAIMS, count_tests
from minirl.study.claims_tuned import (FAMILIES, GRID, REGISTERED_ORDER, SEEDS, TUNED_CLAIMS, band_width, judge,
                                       steps_to)
from minirl.study.power import compare, holm, p_value, t_quantile

pytestmark = pytest.mark.usefixtures("one_thread")


def test_grpo_makes_one_update_per_rollout_so_its_clip_cannot_act():
    """Claim C runs no GRPO points: with one update per rollout the ratio is exactly 1, so eps 0.1 and 0.3 train
    bit-identical weights (a PPO-style second update would make them differ)."""
    from minirl.config import RLConfig
    from minirl.policy import load_policy
    from minirl.tasks import get_task
    from minirl.trainer import train

    def weights(**overrides):
        policy = load_policy("tiny-worked", device="cpu")
        config = RLConfig.preset("grpo", steps=2, batch_size=2, group_size=4, max_new_tokens=24, eval_every=0,
                                 seed=3, lr=1e-3, **overrides)
        train(policy, get_task("worked").make(), config, progress=False)
        return torch.cat([p.detach().flatten() for p in policy.model.parameters()])

    tight, loose = weights(clip_low=0.1, clip_high=0.1), weights(clip_low=0.3, clip_high=0.3)
    assert torch.equal(tight, loose)
    # the same two settings with two updates per rollout (the ratio leaves 1) do differ: the check can fail
    assert not torch.equal(weights(clip_low=0.1, clip_high=0.1, minibatches=2),
                           weights(clip_low=0.3, clip_high=0.3, minibatches=2))


def test_the_registration_keeps_the_first_study_and_shares_runs_between_claims():
    assert list(CLAIMS) == ["H1", "H2", "H3", "H4", "H5", "H8", "H9", "T"] and count_tests(CLAIMS) == 21
    assert REGISTERED_ORDER == ("L", "B", "C", "R", "H1", "H3", "H9", "T") and SEEDS == 6
    assert {f: sum(TUNED_CLAIMS[c].tests for c in names) for f, names in FAMILIES.items()} == \
        {"primary": 16, "secondary": 10}
    scale = SCALES["tuned"]
    jobs = plan(list(REGISTERED_ORDER), scale, SEEDS, TUNED_CLAIMS)
    assert len(jobs) == 24 * 6  # 15 (L) + 3 (B's small batches) + 4 (C) + DAPO-noDS + GRPO G 2 per seed
    labels = {p.label for p, _ in jobs}
    assert not any(label.startswith("grpo eps") for label in labels)  # C leaves GRPO out (the test above)
    # L's tuned points are R's arms (one run each), and they carry the transfer evaluation R needs
    config = {p.label: p.config(scale, 20) for p, _ in jobs}
    assert config["ppo lr=0.0001"].lr == 1e-4 and config["dapo lr=3e-05"].lr == 3e-5
    assert [p.transfer for p, s in jobs if s == 20 and p.label in ("ppo lr=0.0001", "grpo lr=0.0001",
                                                                     "dapo lr=3e-05", "dapo-noDS")] == [True] * 4
    assert config["ppo batch=4"].batch_size == 32 and config["grpo batch=4"].batch_size == 4
    assert (config["dapo eps=0.1"].clip_low, config["dapo eps=0.1"].clip_high) == (0.1, 0.18)
    assert {s for _, s in jobs} == set(range(20, 26))


def test_holm_is_step_down_and_compare_follows_it():
    # Holm 1979's rule by hand: 0.001 < 0.05/4, 0.02 > 0.05/3 stops; nothing after the first failure is clear
    assert holm({"a": 0.001, "b": 0.02, "c": 0.04, "d": 0.5}) == {"a": 4, "b": 3, "c": 3, "d": 3}
    assert holm({"a": 0.001, "b": 0.013, "c": 0.02}) == {"a": 3, "b": 2, "c": 1}  # all clear, less strict each
    assert holm({"a": math.nan, "b": 0.001}) == {"b": 2, "a": 1}
    a, b = [0.0] * 6, [0.010, 0.012, 0.011, 0.009, 0.013, 0.010]
    t = compare(a, b, 1)
    p = p_value(t["mean"], t["se"], t["n"])
    assert 0 < p < 1e-4 and t["sign"] == 1
    for divisor in (1, 5, 50):  # "clear at divisor d" is exactly p < 0.05 / d
        assert (compare(a, b, divisor)["sign"] == 1) == (p < 0.05 / divisor)


@pytest.mark.parametrize("curve, width", [
    ([0.30, 0.30, 0.30, 0.30, 0.30], 2.0),  # flat: the whole grid
    ([0.20, 0.25, 0.30, 0.25, 0.20], 0.6 * (math.log10(10 / 3) + math.log10(3))),  # 3 of the 5 points' rise
    ([0.10, 0.10, 0.30, 0.10, 0.10], 0.15 * (math.log10(10 / 3) + math.log10(3))),  # a spike: 15 % of each side
    ([0.30, 0.28, 0.0, 0.0, 0.0], math.log10(3) + math.log10(10 / 3) * 0.01 / 0.28),
])
def test_band_width_measures_decades_within_the_margin_of_the_best(curve, width):
    assert band_width(curve) == pytest.approx(width, abs=1e-9)
    assert math.isnan(band_width([0.3, math.nan, 0.3, 0.3, 0.3])) and len(GRID) == 5


def test_steps_to_reads_the_trailing_mean_of_the_train_correct_rate():
    from types import SimpleNamespace

    rates = [0.3] * 20 + [0.5] * 30
    run = SimpleNamespace(history=[{"step": i + 1, "reward/correct": r} for i, r in enumerate(rates)],
                          config=SimpleNamespace(steps=50))
    # the 10-step mean first reaches 0.45 when 8 of its 10 steps are at 0.5: step 28
    assert steps_to(run) == 28.0
    run.history = run.history[:20]
    assert steps_to(run) == 51.0  # never: steps + 1


def test_tuned_study_smoke_runs_resumes_judges_and_reports(tmp_path, monkeypatch):
    """Every claim end to end on two-step runs, two at a time; a rerun trains nothing and rewrites the report."""
    import json

    from minirl import study
    from minirl.study import jobs

    out = tmp_path / "tuned"
    args = ["--registration", "tuned", "--seeds", "2", "--smoke", "--out", str(out), "--device", "cpu"]
    assert study.main(args) == 0
    records = [json.loads(f.read_text()) for f in (out / "runs").glob("*/study.json")]
    planned = plan(list(REGISTERED_ORDER), SCALES["tuned"].smoke(), 2, TUNED_CLAIMS)  # 25 points: smoke's G is 4,
    assert len(records) == len(planned) == 25 * 2  # so H1's G 8 is a run of its own there
    assert all(r["started_at"] <= r["ended_at"] for r in records)
    assert {r["threads"] for r in records} == {1}  # two side by side, one thread each
    md = (out / "STUDY.md").read_text()
    for name in REGISTERED_ORDER:
        result = json.loads((out / "results" / f"{name}.json").read_text())
        assert result["verdict"] != "not run" and len(result["tests"]) == TUNED_CLAIMS[name].tests
        assert f"| {name} {TUNED_CLAIMS[name].title} |" in md and (out / "figures" / f"{name}_paired.png").is_file()
    assert "GRPO: no effect by construction" in json.loads((out / "results" / "C.json").read_text())["verdict"]
    assert "## The article's findings at this scale" in md and "Holm" in md and "## Reading these verdicts" in md
    l_result = json.loads((out / "results" / "L.json").read_text())
    per_seed = {p["label"]: p["per_seed"]["sampled"] for p in l_result["points"]}
    ppo = [band_width([per_seed[f"ppo lr={lr:g}"][i] for lr in GRID]) for i in range(2)]
    dapo = [band_width([per_seed[f"dapo lr={lr:g}"][i] for lr in GRID]) for i in range(2)]
    assert l_result["tests"][0]["d"] == pytest.approx([p - d for p, d in zip(ppo, dapo)], abs=1e-6)

    trained = []
    monkeypatch.setattr(jobs, "train", lambda *a, **k: trained.append(k))
    assert study.main(args + ["--jobs", "1", "--only", "C"]) == 0
    assert trained == [] and (out / "STUDY.md").read_text() == md


def test_judge_applies_holm_within_each_family(monkeypatch):
    """Synthetic points: every arm 7 points above the base (clear under Holm), all arms tied with each other."""
    import minirl.study.claims_tuned as ct

    noise = [0.001, -0.002, 0.0015, -0.001, 0.002, -0.0015]
    flat = lambda v: [v] * len(noise)  # noqa: E731

    def point(label):
        values = [0.33 + e for e in noise]
        numbers = {"sampled": values, "transfer4": values, "range": values, "reward_roughness": flat(0.05),
                   "length_growth": flat(1.0), "failed": flat(0.0), "samples": flat(6400.0),
                   "clip_frac_end": flat(0.0), "length_start": flat(20.0), "length_end": flat(21.0),
                   "seconds": flat(1.0)}
        return {"label": label, "numbers": numbers, "runs": [None] * len(noise)}

    monkeypatch.setattr(ct, "steps_to", lambda run: 40.0)
    points = {name: {p.label: point(p.label) for p in TUNED_CLAIMS[name].points} for name in REGISTERED_ORDER}
    base = {k: [0.26 - e for e in noise] for k in ("heldout/sampled", "transfer4/sampled", "range/sampled")}
    judged = judge(points, base)
    verdict, _, _, tests = judged["R"]
    assert [t["sign"] for t in tests] == [0, 0, 0, 1, 1, 1, 1] and verdict == "inconclusive"
    assert judged["T"][0] == "PPO: supported · GRPO: supported · DAPO: supported"
    assert judged["L"][0] == judged["B"][0] == "inconclusive"  # equal curves: equal bands, equal gains
    # the gains are judged at Holm's divisors 16, 15, ... (the four clearest of the primary family), not at 1
    assert sorted(round(t["bar"] / t["se"], 3) for t in tests[3:]) == \
        sorted(round(t_quantile(1 - 0.05 / (2 * d), 5), 3) for d in (16, 15, 14, 13))

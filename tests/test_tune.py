"""The learning-rate sweep (`python -m minirl tune`): validation split, resumable runs, the choice, and that the
tuned table the presets read is the shipped sweep's choice."""

import json

import pytest

from minirl.config import PRESETS, TUNED_LR, RLConfig, tuned_lr
from minirl.study import tune
from minirl.tasks import Countdown, WorkedCountdown, split_of


def test_the_validation_split_is_cut_from_train_and_leaves_test_alone():
    task = Countdown()
    val = task.problems("val", 150, seed=0)
    assert len({p.key for p in val}) == 150 and all(split_of(p.key, 0.2, 0.1) == "val" for p in val)
    train = {p.key for p in task.problems("train", 3000, seed=0)}
    assert not train & {p.key for p in val}  # training never draws a validation problem
    test = {p.key for p in task.problems("test", 300, seed=0)}
    assert test == {p.key for p in Countdown(val_fraction=0.0).problems("test", 300, seed=0)}  # test is unchanged
    with pytest.raises(ValueError, match="split='val' is not allowed: this task has no validation split"):
        Countdown(val_fraction=0.0).problems("val", 1)
    with pytest.raises(ValueError, match="val_fraction=0.8 is not allowed"):
        WorkedCountdown(val_fraction=0.8)


def test_a_run_scores_itself_on_the_split_its_config_names():
    config = RLConfig.preset("grpo", eval_split="val")
    assert config.eval_split == "val" and RLConfig.preset("grpo").eval_split == "test"
    with pytest.raises(ValueError, match="RLConfig.eval_split='dev' is not allowed"):
        RLConfig.preset("grpo", eval_split="dev")


def test_every_preset_starts_at_its_tuned_learning_rate_and_the_table_is_the_sweeps_choice():
    results = json.loads(tune.RESULTS.read_text())
    chosen = {task: {algo: entry["chosen_lr"] for algo, entry in algos.items()}
              for task, algos in results["summary"].items()}
    assert chosen == TUNED_LR, "config.TUNED_LR must be the shipped sweep's choice: rerun `python -m minirl tune`"
    assert all(set(algos) <= set(PRESETS) for algos in TUNED_LR.values())
    for task, algos in TUNED_LR.items():
        for algo, lr in algos.items():
            assert RLConfig.preset(algo, task=task).lr == lr == tuned_lr(algo, task)
    assert results["seeds"] == list(tune.SEEDS) and not set(tune.SEEDS) & {0, *range(10, 20)}  # unused elsewhere
    assert all(len(p["final"]) == len(tune.SEEDS) for algos in results["summary"].values() for e in algos.values()
               for p in e["points"].values())  # every point has all its seeds
    with pytest.raises(ValueError, match="preset 'rloo' has no tuned learning rate on task 'worked'"):
        tuned_lr("rloo", "worked")


def test_the_choice_is_the_best_mean_and_collapses_are_marked():
    runs = [dict(task="compact", algo="grpo", lr=lr, seed=s, status=status, final=final, final_greedy=0.3, base=0.2)
            for lr, s, status, final in [(1e-5, 1, "finished", 0.21), (1e-5, 2, "finished", 0.23),
                                         (1e-4, 1, "finished", 0.35), (1e-4, 2, "finished", 0.31),
                                         (1e-3, 1, "failed", 0.05), (1e-3, 2, "finished", 0.15)]]
    entry = tune.summarise(runs)["compact"]["grpo"]
    assert entry["chosen_lr"] == 1e-4 and entry["chosen_mean"] == pytest.approx(0.33)
    assert entry["points"]["1e-03"]["collapsed"] == [True, True]  # diverged; ended below the base
    assert entry["points"]["1e-05"]["collapsed"] == [False, False]
    # a run that stopped early scores 0, whatever its last evaluation (the base policy's) said
    assert entry["points"]["1e-03"]["final"] == [0.0, 0.15]
    stopped = [dict(runs[4], lr=3e-4, final=0.9), dict(runs[5], lr=3e-4, final=0.9, status="failed")]
    assert tune.summarise(stopped)["compact"]["grpo"]["chosen_mean"] == 0.0


@pytest.mark.slow
def test_a_killed_sweep_continues_where_it_stopped(tmp_path, capsys):
    out, results = tmp_path / "sweep", tmp_path / "results.json"
    argv = ["--task", "compact", "--smoke", "--out", str(out), "--results", str(results), "--jobs", "2"]
    assert tune.main(argv) == 0
    first = json.loads(results.read_text())
    assert len(first["runs"]) == 8 and {r["status"] for r in first["runs"]} <= {"finished", "failed"}
    assert all(r["final_step"] == 2 for r in first["runs"] if r["status"] == "finished")
    assert (out / "lr_sweep.png").stat().st_size > 10_000 and "| ppo |" in (out / "SWEEP.md").read_text()
    victim = next((out / "runs").glob(f"*/{tune.DONE_FILE}"))
    victim.unlink()  # as if the sweep had been killed while this run trained
    capsys.readouterr()
    assert tune.main(argv) == 0
    assert "tune: 1 runs to train (8 in the sweep)" in capsys.readouterr().out
    assert len(json.loads(results.read_text())["runs"]) == 8


def test_a_preset_still_best_at_the_lowest_point_gets_one_below_it():
    jobs = [tune.Job("worked", algo, lr, seed) for algo in ("ppo", "grpo") for lr in (1e-5, 1e-4) for seed in (1, 2)]
    def record(job, final):
        return dict(task=job.task, algo=job.algo, lr=job.lr, seed=job.seed, status="finished", final=final,
                    final_greedy=0.3, base=0.2)
    finals = {("ppo", 1e-5): 0.40, ("ppo", 1e-4): 0.38, ("grpo", 1e-5): 0.33, ("grpo", 1e-4): 0.40}
    records = [record(j, finals[j.algo, j.lr]) for j in jobs]
    assert tune.extensions(jobs, records) == [tune.Job("worked", "ppo", 3e-6, 1), tune.Job("worked", "ppo", 3e-6, 2)]
    assert tune.extensions(jobs, records[:-1]) == [tune.Job("worked", "ppo", 3e-6, 1), tune.Job("worked", "ppo", 3e-6, 2)]
    assert tune.extensions(jobs, records[1:]) == []  # a seed of ppo is missing: not decided yet
    assert [tune.lower(x) for x in (1e-5, 3e-6, 3e-5, 1e-3)] == [3e-6, 1e-6, 1e-5, 3e-4]


def test_the_wall_clock_counts_busy_time_and_leaves_out_breaks_between_sittings(tmp_path):
    """Two overlapping runs (10:00-10:10, 10:05-10:20), then a day's break, then one run of 5 minutes: 25 minutes."""
    spans = [("2026-12-06T10:00:00", "2026-12-06T10:10:00"), ("2026-12-06T10:05:00", "2026-12-06T10:20:00"),
             ("2026-12-07T09:00:00", "2026-12-07T09:05:00")]
    dirs = []
    for i, (start, end) in enumerate(spans):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "meta.json").write_text(json.dumps({"started_at": start, "ended_at": end}))
        dirs.append(tmp_path / str(i))
    assert tune.wall_clock(dirs) == 25 * 60
    assert tune.wall_clock([tmp_path / "missing"]) is None

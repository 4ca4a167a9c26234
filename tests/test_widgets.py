"""The experiment panel: sliders make configs, Run trains once (or reads the cache), Stop stops, runs pile up."""

import pytest

from minirl.config import RLConfig
from minirl.runs import Run, RunCache
from minirl.course.widgets import ExperimentPanel, experiment_panel

BASE = dict(batch_size=2, group_size=4, steps=2, eval_every=0, eval_n=8, max_new_tokens=8, overlong_cache=2)


@pytest.fixture
def panel(tmp_path, one_thread):
    return experiment_panel("grpo", base_config=BASE, cache=RunCache(tmp_path), background=False)


def test_sliders_make_the_config(panel):
    assert isinstance(panel, ExperimentPanel) and panel.runs == []
    assert panel.batch_size.value == 2 and panel.steps.value == 2  # base_config sets the sliders' start values
    panel.lr.value = 1e-4
    panel.group_size.value = 6
    panel.clip_high.value = 0.28
    panel.kl_on.value = False
    panel.entropy_on.value = True
    panel.entropy_coef.value = 1e-2
    panel.seed.value = 3
    c = panel.config()
    assert c.algo == "grpo" and c.lr == pytest.approx(1e-4) and c.group_size == 6 and c.clip_high == 0.28
    assert c.kl_coef == 0 and c.entropy_coef == pytest.approx(1e-2) and c.seed == 3
    assert c.eval_n == 8 and c.max_new_tokens == 8  # base_config fields stay
    panel.kl_on.value = True
    panel.kl_coef.value = 0.01
    assert panel.config().kl_coef == pytest.approx(0.01)
    panel.algo.value = "dapo"  # the sliders move to the preset
    assert panel.clip_high.value == pytest.approx(0.28) and panel.config().algo == "dapo"
    assert panel.runs == []  # dragging trains nothing
    assert panel.widget is not None and panel.table.value


def test_invalid_config_shows_error_and_starts_nothing(panel):
    panel.algo.value = "dapo"  # 4 minibatches: batch_size * group_size must split into 4
    panel.batch_size.value, panel.group_size.value = 1, 2
    assert panel.config() is None
    assert "minibatches" in panel.status.value
    panel.click_run()
    assert panel.runs == [] and panel.jobs_started == 0 and not panel.busy
    assert "minibatches" in panel.status.value


def test_run_then_cache_hit(panel):
    panel.click_run()
    assert len(panel.runs) == 1 and panel.jobs_started == 1
    run = panel.runs[0]
    assert run.status == "finished" and [r["step"] for r in run.history] == [0, 1, 2]
    assert any(ax.lines for ax in panel.fig.axes)
    assert run.label in panel.table.value and "finished" in panel.status.value
    panel.click_run()  # same config: it is already on the plot, no training
    assert panel.jobs_started == 1 and "already on the plot" in panel.status.value
    assert len(panel.runs) == 1  # already shown: not added twice
    fresh = experiment_panel("grpo", base_config=BASE, cache=panel.cache, background=False)
    fresh.click_run()  # a new panel (a restarted notebook) answers it from the run cache
    assert fresh.jobs_started == 0 and "from the cache" in fresh.status.value and len(fresh.runs) == 1
    panel.seed.value = 1
    panel.click_run()
    assert len(panel.runs) == 2 and panel.jobs_started == 2
    assert len(panel.fig.axes[0].lines) == 2  # earlier runs stay overlaid


def test_background_double_click_and_stop(tmp_path, one_thread):
    p = experiment_panel("grpo", base_config=dict(BASE, steps=50), cache=RunCache(tmp_path))
    p.click_run()
    p.click_run()  # ignored: never a second job
    assert p.jobs_started == 1 and p.busy and "already in progress" in p.status.value
    p.click_stop()
    assert p.wait(60)
    assert not p.busy and len(p.runs) == 1
    run = p.runs[0]
    assert run.status == "stopped" and 0 < run.history[-1]["step"] < 50
    assert "stopped" in p.status.value and not p.run_button.disabled


def test_training_error_is_shown_and_partial_run_kept(tmp_path, one_thread):
    from minirl import FunctionTask

    task = FunctionTask("always-right", lambda rng: (f"{rng.randint(1, 9)}:", None, None), lambda a, c: 1.0)
    p = experiment_panel("dapo", task=task, base_config=dict(BASE, batch_size=4, max_gen_batches=1, eval_n=2),
                         cache=RunCache(tmp_path), background=False)
    p.click_run()  # every group has equal rewards: dynamic sampling gives up
    assert "DynamicSamplingExhausted" in p.status.value
    assert len(p.runs) == 1 and p.runs[0].status == "failed" and not p.busy
    assert [r["step"] for r in p.runs[0].history] == [0]  # the partial run keeps its rows
    assert "DynamicSamplingExhausted" in p.runs[0].meta["error"]


def test_precomputed_runs_show_at_once(tmp_path):
    cfg = RLConfig.preset("grpo", **BASE)
    done = Run(cfg, history=[{"step": 0, "reward_mean": 0.1}, {"step": 1, "reward_mean": 0.3}],
               meta={"status": "finished", "label": "precomputed-grpo"})
    p = experiment_panel("grpo", base_config=BASE, precomputed=[done], policy_factory=lambda: None)
    assert p.runs == [done]
    assert "precomputed-grpo" in p.table.value
    assert any(ax.lines for ax in p.fig.axes)
    # Run on exactly that config is answered from the precomputed run: nothing trains (the factory would fail)
    p.click_run()
    assert p.jobs_started == 0 and not p.busy and "already on the plot" in p.status.value
    # a log-slider value equal up to rounding (10**-4.5 vs 1e-4 * 10**-0.5) still matches
    q = experiment_panel("grpo", base_config={**BASE, "lr": 1e-4 * 10 ** -0.5},
                         precomputed=[Run(RLConfig.preset("grpo", **{**BASE, "lr": 10 ** -4.5}),
                                          history=[{"step": 0}], meta={"status": "finished"})],
                         policy_factory=lambda: None)
    q.click_run()
    assert q.jobs_started == 0 and "already on the plot" in q.status.value


def test_lesson_sweeps_match_panel_configs():
    """Every run of a shipped lesson sweep is a config the lesson's panel can make (so Run answers it at once)."""
    from minirl.study import SCALES, Point
    from minirl.course.sweeps import LESSON_SWEEPS, load_lesson_sweep
    from minirl.course.widgets import same_config

    base = Point("base", "grpo").config(SCALES["cpu"], 0).to_dict()
    study_base = {k: base[k] for k in ("steps", "eval_every", "eval_n", "max_new_tokens")}
    for name in LESSON_SWEEPS:
        runs = load_lesson_sweep(name)
        assert runs and all(r.history for r in runs), name
        for run in runs:
            panel = experiment_panel(run.config.algo if run.config.algo in ("ppo", "grpo", "dapo") else "dapo",
                                     base_config={**study_base, **({"dynamic_sampling": False}
                                                                     if run.config.algo == "dapo-noDS" else {})},
                                     policy_factory=lambda: None)
            panel.lr.value = run.config.lr
            panel.batch_size.value, panel.group_size.value = run.config.batch_size, max(2, run.config.group_size)
            panel.clip_low.value, panel.clip_high.value = run.config.clip_low, run.config.clip_high
            panel.kl_on.value = run.config.kl_coef > 0
            if run.config.kl_coef > 0:
                panel.kl_coef.value = run.config.kl_coef
            made = panel.config().replace(algo=run.config.algo)
            assert same_config(made, run.config), (name, run.label)


def test_panel_trains_on_the_worked_task_with_its_budget_and_plots(tmp_path, one_thread):
    from minirl.plots import WORKED_METRICS

    base = {k: v for k, v in BASE.items() if k not in ("max_new_tokens", "overlong_cache")}
    p = experiment_panel("dapo", task="worked", base_config=dict(base, max_gen_batches=20), metrics=WORKED_METRICS,
                         cache=RunCache(tmp_path), background=False)
    assert p.config().max_new_tokens == 80 and p.config().overlong_cache == 32  # the task's budget, not 16 / 4
    p.click_run()
    run = p.runs[0]
    assert run.status == "finished" and "reward/attempts" in run.history[-1]
    assert "attempts per completion" in [ax.get_title() for ax in p.fig.axes]


def test_each_algorithm_starts_at_its_tuned_lr_and_the_controls_say_what_they_do():
    from minirl.config import tuned_lr

    base = {k: v for k, v in BASE.items() if k != "group_size"}  # as a lesson's: G from the preset
    p = experiment_panel("grpo", base_config=dict(base, lr=1e-3), policy_factory=lambda: None)
    assert p.lr.value == pytest.approx(1e-3)  # the lesson's starting point
    p.algo.value = "dapo"  # a switch goes to the new algorithm's own tuned learning rate
    assert p.lr.value == pytest.approx(tuned_lr("dapo"), rel=0.03)  # (the log slider rounds to 10^(k/10))
    p.algo.value = "ppo"
    assert (p.group_size.value, p.group_size.disabled) == (1, True)  # PPO's G is 1, shown as 1
    assert p.config().group_size == 1
    p.algo.value = "grpo"
    assert p.group_size.value >= 2 and not p.group_size.disabled
    p.kl_on.value = False
    assert p.kl_coef.disabled and p.config().kl_coef == 0
    p.kl_on.value = True
    assert not p.kl_coef.disabled
    assert all(getattr(p, name).tooltip for name in ("algo", "lr", "batch_size", "group_size", "clip_low",
                                                     "clip_high", "kl_coef", "entropy_coef", "steps", "run_button"))


def test_the_status_line_says_how_long_a_run_should_take():
    cfg = RLConfig.preset("grpo", **BASE)
    done = Run(cfg, history=[{"step": 0, "samples": 0}, {"step": cfg.steps, "samples": cfg.steps * 4 * 4}],
               meta={"status": "finished", "seconds": 30.0})
    p = experiment_panel("grpo", base_config=dict(BASE, batch_size=4, group_size=4), precomputed=[done],
                         policy_factory=lambda: None)
    p.batch_size.value = 8  # twice the completions per step: about twice the time
    assert "about 60 s" in p.status.value
    p.algo.value = "dapo"  # no dapo run shown: no estimate
    assert "about" not in p.status.value

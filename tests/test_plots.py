"""plot_runs (panels, lines, seed bands, 'no data', redrawing a figure) and runs_table."""

import math
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from minirl.config import RLConfig  # noqa: E402
from minirl.plots import LIVE_METRICS, NICE_NAMES, plot_runs, runs_table  # noqa: E402
from minirl.runs import Run  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def fake_run(lr: float = 3e-5, seed: int = 0, steps: int = 20, offset: float = 0.0) -> Run:
    run = Run(RLConfig(lr=lr, seed=seed))
    for t in range(steps):
        row = {"step": t, "reward_mean": offset + t / steps, "entropy": 1.0 - t / (2 * steps),
               "samples": 64 * (t + 1), "wall_time": 1.5 * t}
        if t % 5 == 0:
            row["eval/accuracy_sampled"] = offset + t / 100
        run.append(row)
    return run


def panel(fig, metric):
    return next(ax for ax in fig.axes if ax.get_title() == NICE_NAMES.get(metric, metric))


def test_one_panel_per_metric_and_one_line_per_run():
    runs = [fake_run(lr=1e-5), fake_run(lr=3e-5), fake_run(lr=1e-4)]
    metrics = ("reward_mean", "eval/accuracy_sampled", "entropy", "kl_ref")
    fig = plot_runs(runs, metrics, title="lr sweep")
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 4
    for metric in metrics[:3]:
        assert [line.get_label() for line in panel(fig, metric).get_lines()] == [r.label for r in runs]
    assert len(panel(fig, "eval/accuracy_sampled").get_lines()[0].get_xdata()) == 4  # eval every 5 steps
    legend = fig.axes[0].get_legend()  # one legend, first panel: shared words in the title, differences per line
    assert legend is not None and all(ax.get_legend() is None for ax in fig.axes[1:])
    assert [t.get_text() for t in legend.get_texts()] == ["lr=1e-05", "lr=3e-05", "lr=0.0001"]
    assert legend.get_title().get_text() == "grpo G=8 B=8 clip=0.2/0.2 seed=0"
    assert fig._suptitle.get_text() == "lr sweep"
    assert len(plot_runs(runs[0], "entropy").axes) == 1  # a single run and a single metric are fine


def test_missing_metric_says_no_data():
    fig = plot_runs([fake_run()], ("reward_mean", "value_loss"))
    ax = panel(fig, "value_loss")
    assert len(ax.get_lines()) == 0 and [t.get_text() for t in ax.texts] == ["no data"]
    assert len(panel(fig, "reward_mean").texts) == 0


def test_group_by_averages_seeds_into_one_line_and_one_band():
    runs = [fake_run(lr=lr, seed=s, offset=0.1 * s) for lr in (1e-5, 1e-4) for s in range(3)]
    fig = plot_runs(runs, ("reward_mean", "entropy"), group_by="lr")
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == ["lr=1e-05 (n=3)", "lr=0.0001 (n=3)"]
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 2
    mean = fig.axes[0].get_lines()[0].get_ydata()
    np.testing.assert_allclose(mean, [0.1 + t / 20 for t in range(20)])  # mean of offsets 0, 0.1, 0.2
    by_fn = plot_runs(runs, "reward_mean", group_by=lambda r: "small" if r.config.lr < 5e-5 else "big")
    assert [line.get_label() for line in by_fn.axes[0].get_lines()] == ["small (n=3)", "big (n=3)"]


def test_x_axis_and_smoothing():
    run = fake_run()
    fig = plot_runs([run], "reward_mean", x="samples")
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_xdata(), [64 * (t + 1) for t in range(20)])
    raw = plot_runs([run], "reward_mean").axes[0].get_lines()[0].get_ydata()
    smooth = plot_runs([run], "reward_mean", smooth=0.9).axes[0].get_lines()[0].get_ydata()
    assert smooth[0] == raw[0] and smooth[-1] < raw[-1]  # EMA lags a rising curve
    run.append({"step": 20, "reward_mean": math.nan})  # NaN points are left out, not drawn as gaps
    assert len(plot_runs([run], "reward_mean").axes[0].get_lines()[0].get_xdata()) == 20


def test_reusing_a_figure_redraws_it_quickly():
    runs = [fake_run(lr=1e-5 * (i + 1), steps=100) for i in range(5)]
    metrics = ("reward_mean", "eval/accuracy_sampled", "entropy", "kl_ref")
    fig = plot_runs(runs[:2], metrics)
    assert plot_runs(runs, metrics, fig=fig) is fig  # same layout: axes kept, lines replaced
    assert len(fig.axes) == 4 and len(fig.axes[0].get_lines()) == 5 and fig.axes[0].get_legend() is not None
    assert fig.axes[0].get_ylim()[1] >= 0.99  # rescaled to the new data
    start = time.perf_counter()
    for _ in range(5):
        plot_runs(runs, metrics, fig=fig)
    assert (time.perf_counter() - start) / 5 < 0.05
    plot_runs(runs, LIVE_METRICS, fig=fig)  # new layout: cleared and rebuilt
    assert len(fig.axes) == len(LIVE_METRICS) and len(fig.axes[0].get_lines()) == 5
    plot_runs([], ("reward_mean",), fig=fig)
    assert len(fig.axes) == 1 and fig.axes[0].texts[0].get_text() == "no data"


def test_bad_arguments_name_themselves():
    run = fake_run()
    for kwargs, match in [({"x": "tokens"}, "x='tokens'"), ({"smooth": 1.0}, "smooth=1.0"),
                          ({"group_by": "nope"}, "group_by='nope'"), ({"metrics": ()}, "metrics=")]:
        with pytest.raises(ValueError, match=match):
            plot_runs([run], **kwargs)
    with pytest.raises(ValueError, match=r"runs\[1\]"):
        plot_runs([run, "not a run"])


def test_runs_table():
    a, b = fake_run(lr=1e-5), fake_run(lr=1e-4)
    b.meta["status"] = "finished"
    table = runs_table([a, b], columns=("reward_mean", "eval/accuracy_sampled", "value_loss", "status"))
    lines = table.splitlines()
    assert len(lines) == 4 and lines[0].startswith("| run") and set(lines[1]) <= set("|-:")
    assert a.label in lines[2] and "0.95" in lines[2] and "15.0%" in lines[2] and "finished" in lines[3]
    assert lines[2].count(" - ") == 2  # no value_loss, no status


def test_smoothing_is_debiased_and_leaves_evaluations_alone():
    from minirl.plots import _curve

    cfg = RLConfig.preset("grpo")
    rows = [{"step": s, "reward_mean": 0.5, **({"eval/accuracy_sampled": 0.1 * s} if s % 2 == 0 else {})}
            for s in range(1, 7)]
    run = Run(cfg, history=rows)
    flat = [y for _, y in _curve(run, "reward_mean", "step", 0.9).values()]
    assert flat == pytest.approx([0.5] * 6)  # a constant stays constant from the first point on
    evals = _curve(run, "eval/accuracy_sampled", "step", 0.9)
    assert [y for _, y in evals.values()] == pytest.approx([0.2, 0.4, 0.6])  # measured values, unsmoothed

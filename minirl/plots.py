"""Pictures of training runs: one panel per metric, one line per run, or mean ± std over the seeds of a group.

    fig = plot_runs(runs, ("reward_mean", "eval/accuracy_sampled"), group_by="lr", smooth=0.6)
    print(runs_table(runs))

`plot_runs(..., fig=fig)` clears and redraws an existing figure; the live widget does that after every step,
so drawing is kept cheap. In a notebook the figure shows by itself (inline backend); if it is also the cell's
last expression it shows twice, so assign it (`fig = plot_runs(...)`) or end the line with `;`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import AutoLocator, NullLocator, PercentFormatter

from .config import RLConfig
from .runs import Run, markdown_table

# What the live widget shows while a run trains: is it learning, is it still exploring, is it drifting away?
LIVE_METRICS = ("reward_mean", "eval/accuracy_sampled", "entropy", "kl_ref", "clip_frac_high", "completion_len_mean")
# ... and on the worked-steps task (tasks/worked.py), where how long the policy reasons and how often it retries
# can change: the lengths of right and of wrong answers apart, the share cut at the budget (a runaway answer shows
# there, not in a mean length) and attempts per answer take the places of KL and clipping
WORKED_METRICS = ("reward_mean", "eval/accuracy_sampled", "entropy", "completion_len_correct",
                  "completion_len_incorrect", "truncation_rate", "reward/attempts", "retry_rate_after_miss",
                  "reward/arithmetic_ok")

NICE_NAMES = {
    "reward_mean": "mean reward",
    "reward_std": "reward std",
    "reward/format_ok": "well-formed answers",
    "reward/numbers_ok": "answers using the given numbers",
    "reward/correct": "correct answers (train)",
    "reward/arithmetic_ok": "every written step right",
    "reward/attempts": "attempts per completion",
    "reward/steps": "steps per completion",
    "reward/valid_steps": "right steps per completion",
    "accuracy": "train accuracy",
    "frac_reward_zero_std": "groups with all-equal rewards",
    "kept_group_frac": "groups kept (dynamic sampling)",
    "gen_batches": "generation rounds per step",
    "samples": "completions sampled",
    "completion_len_mean": "completion length (tokens)",
    "completion_len_max": "longest completion (tokens)",
    "completion_len_correct": "length of right answers (tokens)",
    "completion_len_incorrect": "length of wrong answers (tokens)",
    "retry_rate_after_miss": "first attempt missed: share retried",
    "truncation_rate": "truncated completions",
    "entropy": "policy entropy (nats / token)",
    "kl_ref": "KL to reference",
    "approx_kl": "KL to old policy (approx.)",
    "clip_frac_low": "tokens clipped below (A < 0)",
    "clip_frac_high": "tokens clipped above (A > 0)",
    "grad_norm": "gradient norm",
    "lr": "learning rate",
    "policy_loss": "policy loss",
    "value_loss": "value loss",
    "explained_variance": "critic explained variance",
    "tokens_per_s": "tokens / second",
    "wall_time": "seconds since start",
    "eval/accuracy_greedy": "held-out accuracy (greedy)",
    "eval/accuracy_sampled": "held-out accuracy (sampled)",
    "eval/format_rate_sampled": "held-out well-formed (sampled)",
    "eval/mean_length_sampled": "held-out completion length",
}
X_AXES = {"step": "rollout step", "samples": "completions sampled", "wall_time": "seconds"}
TABLE_COLUMNS = ("reward_mean", "eval/accuracy_greedy", "eval/accuracy_sampled", "completion_len_mean",
                 "wall_time", "status")
_FRACTION_WORDS = ("accuracy", "rate", "frac", "reward/")  # metrics that are shares of 0..1, shown as percent
COUNTS = ("reward/attempts", "reward/steps", "reward/valid_steps")  # ...except these score components: counts


def nice_name(metric: str) -> str:
    return NICE_NAMES.get(metric, metric)


def is_fraction(metric: str) -> bool:
    return metric not in COUNTS and any(word in metric for word in _FRACTION_WORDS)


# ----------------------------------------------------------------------------- data preparation

def _check_runs(runs: Run | Iterable[Run]) -> list[Run]:
    runs = [runs] if isinstance(runs, Run) else list(runs)
    for i, run in enumerate(runs):
        if not isinstance(run, Run):
            raise ValueError(f"runs[{i}]={run!r} is not allowed: use minirl.runs.Run objects")
    return runs


def _curve(run: Run, metric: str, x: str, smooth: float) -> dict[int, tuple[float, float]]:
    """step -> (x value, metric value) with NaN steps dropped and a debiased EMA of factor `smooth` applied.

    Held-out evaluations ("eval/...") are a few points far apart: they are never smoothed, so the last point
    is the measured final accuracy. The EMA is debiased (divided by 1 - smooth^t, as TensorBoard does), so the
    curve starts at the average of the first values instead of sticking to the first one."""
    steps, values = run.series(metric)
    x_at = dict(zip(*run.series(x))) if x != "step" else None
    smooth = 0.0 if metric.startswith("eval/") else smooth
    curve, ema, t = {}, 0.0, 0
    for step, value in zip(steps, values):
        if math.isnan(value) or (x_at is not None and step not in x_at):
            continue
        t += 1
        ema = smooth * ema + (1 - smooth) * value
        curve[step] = (float(step if x_at is None else x_at[step]), ema / (1 - smooth ** t))
    return curve


def _group_label(run: Run, group_by: str | Callable[[Run], object]) -> str:
    if callable(group_by):
        return str(group_by(run))
    value = getattr(run.config, group_by)
    return f"{group_by}={value:g}" if isinstance(value, float) else f"{group_by}={value}"


def _mean_std(curves: list[dict[int, tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Average curves step by step (a step counts the runs that reached it); x is the mean x of that step."""
    steps = sorted(set().union(*curves))
    xs, means, stds = [], [], []
    for step in steps:
        points = np.array([c[step] for c in curves if step in c])
        xs.append(points[:, 0].mean())
        means.append(points[:, 1].mean())
        stds.append(points[:, 1].std())
    return np.array(xs), np.array(means), np.array(stds)


# ----------------------------------------------------------------------------- plots

def plot_runs(runs: Run | Iterable[Run], metrics: str | Sequence[str] = ("reward_mean", "eval/accuracy_sampled"), *,
              group_by: str | Callable[[Run], object] | None = None, x: str = "step", smooth: float = 0.0,
              fig: Figure | None = None, title: str | None = None) -> Figure:
    """One panel per metric (up to 3 columns), one line per run labelled `run.label`.

    group_by: an RLConfig field name (e.g. "lr") or a function run -> label. Runs with the same group are
        averaged step by step and drawn as their mean with a ± std band: how a seed sweep is read.
    x: "step", "samples" (completions generated so far) or "wall_time" (seconds).
    smooth: exponential moving average factor in [0, 1); 0 = raw values, 0.9 = very smooth.
    fig: an existing figure to clear and redraw (live updating); else a new one is made.
    """
    runs = _check_runs(runs)
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    if not metrics or not all(isinstance(m, str) for m in metrics):
        raise ValueError(f"metrics={metrics!r} is not allowed: use one metric name or a non-empty list of names")
    if x not in X_AXES:
        raise ValueError(f"x={x!r} is not allowed: choose one of {list(X_AXES)}")
    if not (isinstance(smooth, (int, float)) and 0 <= smooth < 1):
        raise ValueError(f"smooth={smooth!r} is not allowed: use an EMA factor in [0, 1), e.g. 0.6 (0 = off)")
    fields = list(RLConfig.__dataclass_fields__)
    if group_by is not None and not callable(group_by) and group_by not in fields:
        raise ValueError(f"group_by={group_by!r} is not allowed: use None, a function run -> label, "
                         f"or an RLConfig field name, one of {fields}")

    # Entries: (legend label, its runs). Without group_by every run is its own line.
    if group_by is None:
        entries = [(run.label, [run]) for run in runs]
    else:
        groups: dict[str, list[Run]] = {}
        for run in runs:
            groups.setdefault(_group_label(run, group_by), []).append(run)
        entries = [(f"{key} (n={len(members)})", members) for key, members in groups.items()]
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])

    fig, axes = _panels(fig, metrics, x, title)
    legend_ax = None
    for ax, metric in zip(axes, metrics):
        drawn = False
        for i, (label, members) in enumerate(entries):
            curves = [c for c in (_curve(run, metric, x, smooth) for run in members) if c]
            if not curves:
                continue
            color = colors[i % len(colors)]  # same color for a run in every panel
            if group_by is None:
                xs, ys = zip(*curves[0].values())
                ax.plot(xs, ys, color=color, label=label, lw=1.5, marker="o" if len(xs) <= 30 else None, ms=3)
            else:
                xs, mean, std = _mean_std(curves)
                ax.plot(xs, mean, color=color, label=label, lw=1.5, marker="o" if len(xs) <= 30 else None, ms=3)
                ax.fill_between(xs, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            drawn = True
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(AutoLocator() if drawn else NullLocator())
        if not drawn:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="gray")
        legend_ax = legend_ax or (ax if drawn else None)
    if legend_ax is not None:  # one legend, on the first panel with data: the colors mean the same everywhere
        handles = legend_ax.get_lines()
        common, short = _split_labels([h.get_label() for h in handles])
        legend_ax.legend(handles, short, title=common or None, fontsize=7 if len(handles) <= 6 else 6,
                         title_fontsize=7, framealpha=0.8)
    return fig


def _split_labels(labels: list[str]) -> tuple[str, list[str]]:
    """("grpo G=8", ["lr=1e-05", "lr=3e-05"]) for ["grpo lr=1e-05 G=8", "grpo lr=3e-05 G=8"]: the legend shows
    what differs between lines and names what they share once, in its title."""
    if len(labels) < 2:
        return "", labels
    words = [label.split(" ") for label in labels]
    shared = [w for w in words[0] if all(w in other for other in words[1:])]
    short = [" ".join(w for w in ws if w not in shared) for ws in words]
    if not all(short):  # some line differs in nothing but its place: keep full labels
        return "", labels
    return " ".join(shared), short


def _panels(fig: Figure | None, metrics: tuple[str, ...], x: str, title: str | None) -> tuple[Figure, list]:
    """Empty panels with titles and axis formats. A figure this function laid out before for the same metrics
    keeps its axes and only loses its lines: redrawing is then cheap, which matters for live plots."""
    layout = (metrics, x, title)
    if fig is not None and getattr(fig, "_minirl_layout", None) == layout and len(fig.axes) == len(metrics):
        for ax in fig.axes:
            for artist in [*ax.lines, *ax.collections, *ax.texts]:
                artist.remove()
            if ax.get_legend() is not None:
                ax.get_legend().remove()
            ax.ignore_existing_data_limits = True  # autoscale to the new lines only
        return fig, fig.axes

    ncols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    if fig is None:
        fig = plt.figure(figsize=(4.3 * ncols, 3.2 * nrows))
    else:
        fig.clear()
    axes = list(fig.subplots(nrows, ncols, squeeze=False).ravel())
    for ax in axes[len(metrics):]:
        ax.remove()
    for ax, metric in zip(axes, metrics):
        ax.set_title(nice_name(metric), fontsize=10)
        ax.set_xlabel(X_AXES[x], fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if is_fraction(metric):
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))  # None: as many as the ticks need
    if title:
        fig.suptitle(title)
    # tight_layout at every draw (not once, now): tick labels widen as data arrive in a live plot
    fig.set_layout_engine("tight")
    fig._minirl_layout = layout
    return fig, axes[:len(metrics)]


# ----------------------------------------------------------------------------- table

def _cell(run: Run, column: str) -> str:
    """Final value of a metric, formatted; else a meta entry (e.g. "status"); else "-"."""
    if any(column in row for row in run.history):
        value = run.final(column)
        if math.isnan(value):
            return "-"
        if is_fraction(column):
            return f"{value:.1%}"
        return f"{value:.0f}" if column in ("samples", "step") else f"{value:.4g}"
    value = run.meta.get(column)
    return "-" if value is None else str(value)


def runs_table(runs: Run | Iterable[Run], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """A markdown table (also readable as plain text): one row per run, its label and final values."""
    runs = _check_runs(runs)
    columns = (columns,) if isinstance(columns, str) else tuple(columns)
    rows = [["run", *columns]] + [[run.label, *(_cell(run, c) for c in columns)] for run in runs]
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]

    def line(cells: list[str]) -> str:
        padded = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(["-" * (widths[0] + 2)] + ["-" * (w + 1) + ":" for w in widths[1:]]) + "|"
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])



def completions_table(run: Run, problems: int = 4, decoding: str = "sampled") -> str:
    """What the policy wrote for the same held-out problems before training (step 0) and at its last evaluation,
    as a markdown table; ✓ marks a correct answer. Empty if the run kept no completions."""
    if decoding not in ("greedy", "sampled"):
        raise ValueError(f"decoding={decoding!r} is not allowed: use 'greedy' or 'sampled'")
    rows = [r for r in run.completions if r.get("decoding") == decoding]
    if not rows:
        return ""
    first, last = min(r["step"] for r in rows), max(r["step"] for r in rows)
    after = {r["prompt"]: r for r in rows if r["step"] == last}
    mark = lambda r: "-" if r is None else ("✓ " if r["correct"] else "✗ ") + (r["completion"] or "(empty)")  # noqa: E731
    return markdown_table(["prompt", f"step {first} ({decoding})", f"step {last} ({decoding})"],
                          [[r["prompt"], mark(r), mark(after.get(r["prompt"]))]
                           for r in rows if r["step"] == first][:problems])

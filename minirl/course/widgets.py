"""The experiment panel: sliders for the knobs of one algorithm, a Run and a Stop button, a live plot and a table.

    from minirl.course.widgets import experiment_panel
    panel = experiment_panel("grpo", base_config=dict(eval_n=50), cache=RunCache())
    panel            # last expression of a cell: shows the panel

Dragging a slider trains nothing; Run trains the current config (or takes it from the cache at once) in a
background thread, so Stop works while it runs. Earlier runs stay on the plot and in the table.
"""

from __future__ import annotations

import base64
import html
import io
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence

import ipywidgets as W
from matplotlib.figure import Figure

from ..config import PRESETS, TUNED_LR, ConfigError, RLConfig
from ..plots import LIVE_METRICS, completions_table, plot_runs, runs_table
from ..runs import Run, RunCache, run_key
from ..policy import load_policy
from ..tasks import get_task, task_budget, task_identity
from ..trainer import train
REDRAW_SECONDS = 0.5  # at most ~2 redraws per second while a run trains
TOOLTIPS = {  # what each control does, shown on hover
    "algo": "the preset: its advantage, loss, clipping and KL (RLConfig.preset); switching resets the sliders",
    "lr": "AdamW learning rate; every algorithm starts at its own tuned value (config.TUNED_LR)",
    "batch_size": "B: prompts per step (PPO: distinct prompts, one completion each)",
    "group_size": "G: completions per prompt, compared with each other (PPO: 1)",
    "clip_low": "epsilon_low: the ratio is clipped below at 1 - clip_low (acts only from a rollout's 2nd update)",
    "clip_high": "epsilon_high: clipped above at 1 + clip_high; DAPO's clip-higher raises it to 0.28",
    "kl_on": "add a KL penalty to a frozen copy of the starting policy",
    "kl_coef": "beta: weight of the KL penalty",
    "entropy_on": "add an entropy bonus: subtract coef x (policy entropy) from the loss, to keep sampling diverse",
    "entropy_coef": "weight of the entropy bonus",
    "steps": "RL steps of the run (each: sample, score, update)",
    "seed": "seeds the prompts and samples of every step; the same seed gives the same run",
    "run_button": "train this config (a config already on the plot or in the cache is answered at once)",
    "stop_button": "stop after the current step; the run keeps its rows",
}


def same_config(a: RLConfig, b: RLConfig) -> bool:
    """Equal configs, floats compared to 1e-9 relative (a log slider's 10**-4.5 vs 1e-4 * 10**-0.5)."""
    da, db = a.to_dict(), b.to_dict()
    return da.keys() == db.keys() and all(
        math.isclose(x, y, rel_tol=1e-9) if isinstance(x, float) and isinstance(y, (int, float)) else x == y
        for x, y in ((da[k], db[k]) for k in da))


class ExperimentPanel:
    """Widgets as attributes (`lr`, `group_size`, `run_button`, ...), `runs` (finished/stopped/failed runs,
    precomputed ones first), `config()`, `wait()`, `busy`, and `widget`, the box to display."""

    def __init__(self, algo: str = "grpo", *, task="compact", policy_factory: Callable | None = None,
                 base_config: dict | None = None, cache: RunCache | None = None,
                 metrics: Sequence[str] = LIVE_METRICS, precomputed: Iterable[Run] = (), background: bool = True):
        if algo not in PRESETS:
            raise ValueError(f"algo={algo!r} is not allowed: choose one of {list(PRESETS)}")
        # a registry name brings its task and shipped policy; a task object trains load_policy()'s unless told
        entry = get_task(task) if isinstance(task, str) else None
        task = entry.make() if entry else task
        self.tuned_on = entry.name if entry and entry.name in TUNED_LR else "compact"  # whose tuned learning rates
        self.task, self.cache, self.background = task, cache, background
        self.policy_factory = policy_factory or (lambda: load_policy(entry and entry.policy, device="cpu"))
        # the task's token budget unless base_config says otherwise (the presets' 16 on compact Countdown)
        budget = task_budget(task) if "max_new_tokens" not in (base_config or {}) else {}
        self.base_config = {**budget, **(base_config or {})}
        self.metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        self.runs: list[Run] = list(precomputed)
        self.current: Run | None = None
        self.jobs_started = 0  # training jobs started by this panel (cache hits do not count)
        self._thread: threading.Thread | None = None
        self._running = False
        self._lock = threading.Lock()  # guards _running
        self._draw_lock = threading.Lock()
        self._stop = threading.Event()
        self._last_draw = 0.0  # when the last redraw ended
        self._draw_cost = 0.0  # how long it took

        style = {"description_width": "90px"}
        layout = W.Layout(width="340px")
        kw = dict(style=style, layout=layout, continuous_update=False)
        self.algo = W.Dropdown(options=list(PRESETS), value=algo, description="algorithm", style=style, layout=layout)
        self.lr = W.FloatLogSlider(value=3e-5, base=10, min=-6, max=-2, step=0.1, description="lr",
                                   readout_format=".1e", **kw)
        self.batch_size = W.IntSlider(value=8, min=1, max=64, description="batch (B)", **kw)
        self.group_size = W.IntSlider(value=8, min=1, max=16, description="group (G)", **kw)
        self.clip_low = W.FloatSlider(value=0.2, min=0.05, max=0.5, step=0.01, description="clip low", **kw)
        self.clip_high = W.FloatSlider(value=0.2, min=0.05, max=0.5, step=0.01, description="clip high", **kw)
        self.kl_on = W.Checkbox(value=False, description="KL to reference", indent=False)
        self.kl_coef = W.FloatLogSlider(value=0.04, base=10, min=-4, max=0, step=0.1, description="KL beta",
                                        readout_format=".1e", **kw)
        self.entropy_on = W.Checkbox(value=False, description="entropy bonus", indent=False)
        self.entropy_coef = W.FloatLogSlider(value=1e-3, base=10, min=-4, max=-1, step=0.1,
                                             description="entropy", readout_format=".1e", **kw)
        self.steps = W.IntSlider(value=60, min=1, max=200, description="steps", **kw)
        self.seed = W.IntText(value=0, description="seed", style=style, layout=W.Layout(width="200px"))
        self.run_button = W.Button(description="Run", button_style="success", icon="play")
        self.stop_button = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.status = W.HTML("")
        self.table = W.HTML("")
        self.completions = W.HTML("")  # before/after: what the latest run wrote for a few held-out problems
        self.output = W.Output()
        self.fig = Figure(figsize=(4.3 * min(3, len(self.metrics)), 3.2 * -(-len(self.metrics) // 3)))

        for name, text in TOOLTIPS.items():
            getattr(self, name).tooltip = text
        self.kl_on.observe(lambda change: setattr(self.kl_coef, "disabled", not change["new"]), names="value")
        self.entropy_on.observe(lambda change: setattr(self.entropy_coef, "disabled", not change["new"]), names="value")
        self._set_from_preset(keep_base_lr=True)
        self.algo.observe(lambda change: self._set_from_preset(), names="value")
        for w in self.knobs:
            w.observe(lambda change: self._show_config(), names="value")
        self.run_button.on_click(lambda _: self.click_run())
        self.stop_button.on_click(lambda _: self.click_stop())
        self.widget = W.VBox([
            W.HBox([W.VBox([self.algo, self.lr, self.batch_size, self.group_size, self.steps, self.seed]),
                    W.VBox([self.clip_low, self.clip_high, self.kl_on, self.kl_coef, self.entropy_on,
                            self.entropy_coef])]),
            W.HBox([self.run_button, self.stop_button, self.status]),
            self.output, self.table, self.completions])
        self._show_config()
        self.redraw()

    # ------------------------------------------------------------------ config
    @property
    def knobs(self) -> list:
        return [self.lr, self.batch_size, self.group_size, self.clip_low, self.clip_high, self.kl_on, self.kl_coef,
                self.entropy_on, self.entropy_coef, self.steps, self.seed]

    def _set_from_preset(self, keep_base_lr: bool = False) -> None:
        """Move the sliders to the chosen algorithm's preset (with base_config on top); a switch of algorithm starts
        at that algorithm's tuned learning rate, not base_config's."""
        algo = self.algo.value
        base = {k: v for k, v in self.base_config.items() if keep_base_lr or k != "lr"}
        try:
            c = RLConfig.preset(algo, task=self.tuned_on, **base)
        except ConfigError:
            c = RLConfig.preset(algo, task=self.tuned_on)
        self.lr.value, self.batch_size.value, self.steps.value, self.seed.value = c.lr, c.batch_size, c.steps, c.seed
        ppo = c.advantage == "gae"  # PPO samples one completion per prompt: G is 1 and not a knob
        self.group_size.min = 1 if ppo else 2
        self.group_size.value, self.group_size.disabled = c.group_size, ppo
        self.clip_low.value, self.clip_high.value = c.clip_low, c.clip_high
        self.kl_on.value = c.kl_coef > 0
        if c.kl_coef > 0:
            self.kl_coef.value = c.kl_coef
        self.entropy_on.value = c.entropy_coef > 0
        if c.entropy_coef > 0:
            self.entropy_coef.value = c.entropy_coef
        self.kl_coef.disabled, self.entropy_coef.disabled = not self.kl_on.value, not self.entropy_on.value

    def slider_values(self) -> dict:
        values = dict(lr=float(self.lr.value), batch_size=int(self.batch_size.value),
                      clip_low=round(float(self.clip_low.value), 4), clip_high=round(float(self.clip_high.value), 4),
                      kl_coef=float(self.kl_coef.value) if self.kl_on.value else 0.0,
                      entropy_coef=float(self.entropy_coef.value) if self.entropy_on.value else 0.0,
                      steps=int(self.steps.value), seed=int(self.seed.value))
        if PRESETS[self.algo.value].get("advantage") != "gae":
            values["group_size"] = int(self.group_size.value)
        return values

    def config(self) -> RLConfig | None:
        """The RLConfig of the current widget values, or None (the ConfigError message is shown in `status`)."""
        try:
            return RLConfig.preset(self.algo.value, task=self.tuned_on, **{**self.base_config, **self.slider_values()})
        except ConfigError as err:
            self._say(f"invalid config: {err}", error=True)
            return None

    def _show_config(self) -> None:
        config = None if self.busy else self.config()
        if config is not None:
            estimate = self.expected_seconds(config)
            self._say("ready: click Run to train this config" + (f" (about {estimate:.0f} s, from the last "
                      f"{config.algo} run shown)" if estimate is not None else ""))

    def expected_seconds(self, config: RLConfig) -> float | None:
        """How long `config` should take, scaled from the last shown run of the same algorithm by completions
        sampled (the work grows with steps x B x G); None if no such run recorded its seconds."""
        for run in reversed(self.runs):
            done = run.history[-1].get("samples") if run.history else None
            if run.config.algo == config.algo and run.meta.get("seconds") and done:
                return run.meta["seconds"] * config.steps * config.samples_per_step / done
        return None

    def _say(self, text: str, error: bool = False) -> None:
        color = "#b00" if error else "#333"
        self.status.value = f'<span style="color:{color}">{html.escape(text)}</span>'

    # ------------------------------------------------------------------ running
    @property
    def busy(self) -> bool:
        return self._running

    def click_run(self) -> None:
        with self._lock:
            if self._running:
                self._say("a run is already in progress: wait for it or click Stop", error=True)
                return
            config = self.config()
            if config is None:
                return
            self._running = True
        shown = next((r for r in self.runs if r.status == "finished" and same_config(r.config, config)), None)
        if shown is not None:  # a precomputed or earlier run of exactly this config is already on the plot
            self._say(f"already on the plot: {shown.label} (no training needed)")
            self._running = False
            return
        try:
            policy = self.policy_factory()
            key = run_key(policy.identity(), task_identity(self.task), config) if self.cache is not None else None
            if key is not None:
                hit = self.cache.get(key)
                if hit is not None:
                    if not any(r.path is not None and r.path == hit.path for r in self.runs):
                        self.runs.append(hit)
                    self._say(f"from the cache: {hit.label} (no training needed)")
                    self.redraw()
                    self._running = False
                    return
        except BaseException:
            self._running = False
            raise
        self._stop.clear()
        self.jobs_started += 1
        self.run_button.disabled, self.stop_button.disabled = True, False
        self._say(f"training {config.algo} for {config.steps} steps ...")
        if self.background:
            self._thread = threading.Thread(target=self._train, args=(policy, config, key), daemon=True,
                                            name="minirl-panel-run")
            self._thread.start()
        else:
            self._train(policy, config, key)

    def click_stop(self) -> None:
        if self.busy:
            self._stop.set()
            self._say("stopping after this step ...")

    def wait(self, timeout: float | None = None) -> bool:
        """Join the training thread; True if no run is in progress afterwards."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.busy

    def _callback(self, run: Run, row: dict):
        self.current = run
        now = time.monotonic()
        # redraw at most every REDRAW_SECONDS, and never spend more than a third of the time drawing
        # (a redraw of 6 panels can take longer than a training step of the tiny model)
        if now - self._last_draw >= max(REDRAW_SECONDS, 2 * self._draw_cost):
            self._say(f"step {row.get('step')} / {run.config.steps} · {row.get('wall_time', 0.0):.0f} s · "
                      f"reward {row.get('reward_mean', float('nan')):.3f}")
            self.redraw()
        return not self._stop.is_set()

    def _train(self, policy, config: RLConfig, key: str | None) -> None:
        run, error = None, None
        try:
            run = train(policy, self.task, config, callbacks=[self._callback], cache=self.cache, progress=False)
        except Exception as err:  # TrainingDiverged, DynamicSamplingExhausted, ...: keep the partial run
            error = f"{type(err).__name__}: {err}"
            run = self.current
            if run is None and key is not None:
                try:
                    run = Run.load(self.cache.path_for(key))
                except Exception:
                    run = None
            if run is None:
                run = Run(config=config, meta={"status": "failed"})
            if run.status == "running":
                run.set_status("failed", error=error)
        finally:
            self.current = None
            if run is not None:
                self.runs.append(run)
            if error is not None:
                self._say(f"run failed ({len(run.history)} rows kept): {error}", error=True)
            elif run is not None:
                steps = run.history[-1].get("step", 0) if run.history else 0
                self._say(f"{run.status} after {steps} steps in {run.meta.get('seconds', 0.0):.0f} s: {run.label}")
            self.redraw()
            self.run_button.disabled, self.stop_button.disabled = False, True
            self._running = False

    # ------------------------------------------------------------------ drawing
    def redraw(self) -> None:
        """Plot every run in `.runs` plus the one in progress; refresh the table and the latest run's completions."""
        runs = list(self.runs) + ([self.current] if self.current is not None else [])
        with self._draw_lock:
            start = time.monotonic()
            plot_runs(runs, self.metrics, fig=self.fig)
            buf = io.BytesIO()
            self.fig.savefig(buf, format="png", dpi=72)
            png = base64.b64encode(buf.getvalue()).decode()
            # set the outputs directly (no `with output:`), which also works from the training thread
            self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                    "data": {"image/png": png, "text/plain": "<experiment plot>"}},)
            self.table.value = (f"<pre style='font-size:11px'>{html.escape(runs_table(runs))}</pre>"
                                if runs else "<i>no runs yet</i>")
            latest = next((r for r in reversed(runs) if r.completions), None)
            self.completions.value = "" if latest is None else (
                f"<b>What {html.escape(latest.label)} wrote</b><pre style='font-size:11px'>"
                f"{html.escape(completions_table(latest))}</pre>")
            self._last_draw = time.monotonic()
            self._draw_cost = self._last_draw - start

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def experiment_panel(algo: str = "grpo", *, task="compact", policy_factory: Callable | None = None,
                     base_config: dict | None = None, cache: RunCache | None = None,
                     metrics: Sequence[str] = LIVE_METRICS, precomputed: Iterable[Run] = (),
                     background: bool = True) -> ExperimentPanel:
    """An ExperimentPanel for `algo`. base_config: RLConfig overrides applied to every run (slider values win);
    cache: a RunCache to reuse finished runs (None: always train); precomputed: runs shown from the start;
    background=False: Run blocks until training ends (tests, notebook checks)."""
    return ExperimentPanel(algo, task=task, policy_factory=policy_factory, base_config=base_config, cache=cache,
                           metrics=metrics, precomputed=precomputed, background=background)

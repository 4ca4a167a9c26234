"""The tasks minirl knows by name, one entry each: how to build it, the shipped policy its runs start from, and
how long a `compare` run on it is. The command line (`--task NAME`), `compare`, the study, the lessons and the
panels all look a task up here, so adding a task is one `register_task(...)` call plus the task's class.

    entry = get_task("worked")                     # a TaskEntry
    task = entry.make(num_count=4)                 # WorkedCountdown(num_count=4)
    policy = load_policy(entry.policy)             # "tiny-worked"
    config = RLConfig.preset("dapo", **task_budget(task))

A task's token budget is its own: `task.max_new_tokens` (L_max, how long an answer may be) and, if it says so,
`task.overlong_cache` (L_cache, DAPO's soft overlong zone; else a quarter of L_max). `task_budget` is the one rule
that turns a task into those two RLConfig fields; nothing else re-derives them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

from .countdown import Countdown
from .worked import WorkedCountdown

DEFAULT_MAX_NEW_TOKENS = 64  # the budget of a task that does not say how long its answers are


@dataclass(frozen=True)
class TaskEntry:
    """A task by name: what `--task name` builds and where its runs start."""

    name: str  # the value of --task
    description: str  # one line for --help
    make: Callable[..., object]  # keyword options -> a task object (Countdown(...), a FunctionTask, ...)
    policy: str  # the shipped policy its runs start from: a name load_policy takes
    title: str  # how plots and tables name the task
    compare_steps: int  # rollout steps per algorithm in `python -m minirl compare --task name`
    compare_eval_every: int  # held-out evaluation every this many steps in that compare
    options: tuple[str, ...] = ()  # the keywords of `make` the command line may set (--num-count -> num_count)
    aliases: tuple[str, ...] = field(default=())  # earlier names, still accepted with a warning
    heldout_n: int | None = None  # problems in its held-out split (default options): compare's final evaluation
    #                               takes them all; None: 300 of them

    @property
    def budget(self) -> dict[str, int]:
        """The token budget of this task with default options (`task_budget`)."""
        return task_budget(self.make())


def task_budget(task) -> dict[str, int]:
    """The RLConfig fields a run on `task` defaults to: its answer budget as L_max (`max_new_tokens`) and DAPO's soft
    overlong zone L_cache (`overlong_cache`): the task's own, else a quarter of L_max."""
    n = int(getattr(task, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
    return {"max_new_tokens": n, "overlong_cache": int(getattr(task, "overlong_cache", max(1, n // 4)))}


TASKS: dict[str, TaskEntry] = {}  # by name; `get_task` also resolves aliases


def register_task(entry: TaskEntry) -> TaskEntry:
    """Add `entry` (or replace the entry of that name); its name and aliases must not name another task."""
    taken = {alias: e.name for e in TASKS.values() for alias in (e.name, *e.aliases) if e.name != entry.name}
    clash = [n for n in (entry.name, *entry.aliases) if n in taken]
    if clash:
        raise ValueError(f"register_task: name {clash[0]!r} is not allowed: it already names task {taken[clash[0]]!r}")
    TASKS[entry.name] = entry
    return entry


def get_task(name: str) -> TaskEntry:
    """The entry named `name`; an alias gives its task with a FutureWarning that says the new name."""
    if name in TASKS:
        return TASKS[name]
    for entry in TASKS.values():
        if name in entry.aliases:
            warnings.warn(f"task {name!r} is now called {entry.name!r}; the old name will go", FutureWarning,
                          stacklevel=2)
            return entry
    raise ValueError(f"task={name!r} is not allowed: choose one of {', '.join(map(repr, TASKS))}")


register_task(TaskEntry(
    "compact", "Countdown, answered with one expression (3*7+5)", Countdown, policy="tiny-countdown",
    title="3-number Countdown (tiny policy, CPU)", compare_steps=300, compare_eval_every=50, heldout_n=396,
    options=("num_count", "operators", "reward_scheme", "prompt_style", "number_range")))
register_task(TaskEntry(
    "worked", "Countdown with worked steps and restarts (3*7=21,21+5=26), tasks/worked.py", WorkedCountdown,
    policy="tiny-worked", title="3-number Countdown with worked steps (tiny-worked policy, CPU)",
    # fewer steps than the compact task: its answers are several times as long
    compare_steps=100, compare_eval_every=25, heldout_n=1158,
    options=("num_count", "operators", "reward_scheme", "number_range"), aliases=("steps",)))

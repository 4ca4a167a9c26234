"""The Task protocol: what an RL trainer needs from a problem source.

A task hands out `Problem`s (a prompt plus whatever is needed to check an
answer) and turns a completion into a `Score`. Everything else in minirl
(policies, samplers, PPO/GRPO/DAPO) only talks to tasks through this file.

Train, validation and test problems are separated by a stable hash of each
problem's `key` (see `split_of`), so the splits can never overlap, whatever
seed is used to draw them. "val" is a slice of the train problems that
training never draws: learning rates and other knobs are tuned on it, so the
held-out "test" split is used only for the final comparison.

To bring your own task in a few lines, use `FunctionTask`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Problem:
    """One problem instance handed to the policy."""

    prompt: str  # text given to the policy (plain text; the policy applies any chat template)
    answer: Any  # task-specific ground truth, e.g. {"numbers": (3, 5, 7), "target": 26}
    solution: str | None  # one reference completion (for a supervised warm start), or None
    key: str  # canonical identity of the problem; decides its train/test split


@dataclass(frozen=True)
class Score:
    """The reward for one completion, plus named parts for logging."""

    reward: float  # the scalar reward the RL algorithm optimises
    components: dict[str, float]  # named parts, e.g. format_ok / numbers_ok / correct as 0.0 or 1.0

    @property
    def correct(self) -> bool:
        """True when the completion solved the problem (component "correct" is 1.0)."""
        return self.components.get("correct", 0.0) >= 1.0


@runtime_checkable
class Task(Protocol):
    """Anything with a name, a source of problems and a scorer is a task."""

    name: str

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """n problems from split "train" or "test"; the same (split, n, seed) gives the same list."""
        ...

    def score(self, problem: Problem, completion: str) -> Score:
        """Score one completion of `problem.prompt`; must never raise on any string."""
        ...


def task_identity(task) -> str:
    """What makes a task this task, as text that is the same in every process: part of a run's cache key.

    A task may define `identity() -> str`. A dataclass task (Countdown, FunctionTask, ...) is its class and its
    fields, with each function named by module, qualified name and a hash of its source code, so the same task
    gets the same key in every Python process. Any other object falls back to `repr`, which is only stable if it
    holds no memory address (an `<object at 0x...>` repr simply never hits the cache).
    """
    if callable(getattr(task, "identity", None)):
        return str(task.identity())
    if dataclasses.is_dataclass(task) and not isinstance(task, type):
        fields = {f.name: _value_identity(getattr(task, f.name)) for f in dataclasses.fields(task)}
        return json.dumps({"task": f"{type(task).__module__}.{type(task).__qualname__}", **fields}, sort_keys=True)
    return repr(task)


def _value_identity(value: Any) -> Any:
    """A JSON-able stand-in for a task field: plain values as they are, functions by name and source hash."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_value_identity(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _value_identity(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    code = getattr(value, "__code__", None)
    if code is not None:  # a function or lambda: its source (bytecode if the source is gone), not its address
        try:
            text = inspect.getsource(value)
        except (OSError, TypeError):
            text = repr((code.co_code, code.co_consts, code.co_names))
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        return f"{value.__module__}.{value.__qualname__}#{digest}"
    return repr(value)


def split_of(key: str, test_fraction: float, val_fraction: float = 0.0) -> str:
    """The split of the problem with this key: sha256 (not Python's `hash()`, which changes between runs) maps the
    key to a number in [0, 1); the lowest `test_fraction` of keys are "test", the next `val_fraction` "val", the
    rest "train". A task's val split is therefore cut out of what would be its train split; its test split does not
    depend on val_fraction."""
    u = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
    if u < test_fraction * 2**64:
        return "test"
    return "val" if u < (test_fraction + val_fraction) * 2**64 else "train"


def in_test_split(key: str, test_fraction: float) -> bool:
    """True if the problem with this key belongs to the test split (`split_of`)."""
    return split_of(key, test_fraction) == "test"


def check_split_request(where: str, split: str, n: int, val_fraction: float = 0.0) -> None:
    """Validate the arguments of `Task.problems` with one clear error each."""
    if split not in SPLITS:
        raise ValueError(f"{where}.problems split={split!r} is not allowed: use 'train', 'val' or 'test'")
    if split == "val" and not val_fraction:
        raise ValueError(f"{where}.problems split='val' is not allowed: this task has no validation split "
                         "(val_fraction=0); give it one, e.g. val_fraction=0.1")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{where}.problems n={n!r} is not allowed: use an integer >= 0")


def check_test_fraction(where: str, test_fraction: float, val_fraction: float = 0.0) -> None:
    """test_fraction in (0, 1); val_fraction >= 0 and leaving some problems to train on."""
    ok = isinstance(test_fraction, (int, float)) and not isinstance(test_fraction, bool)
    if not ok or not 0.0 < test_fraction < 1.0:
        raise ValueError(
            f"{where}.test_fraction={test_fraction!r} is not allowed: use a number strictly between 0 and 1"
        )
    ok = isinstance(val_fraction, (int, float)) and not isinstance(val_fraction, bool)
    if not ok or not 0.0 <= val_fraction < 1.0 - test_fraction:
        raise ValueError(f"{where}.val_fraction={val_fraction!r} is not allowed: use a number >= 0 and below "
                         f"1 - test_fraction = {1 - test_fraction:g}, so that some problems are left to train on")


def sample_split(
    draw: Callable[[random.Random], Problem],
    split: str,
    n: int,
    rng: random.Random,
    test_fraction: float,
    max_tries: int,
    where: str,
    val_fraction: float = 0.0,
) -> list[Problem]:
    """Draw problems until n of them fall in `split` (rejection sampling on the key hash, `split_of`).

    The train split may repeat problems (like sampling a big dataset with
    replacement); the val and test splits return distinct keys so evaluation
    never counts a problem twice. We give up after `max_tries` draws in a row
    that add nothing, which is how a too-small evaluation split is detected.
    """
    check_split_request(where, split, n, val_fraction)
    distinct = split != "train"
    out: list[Problem] = []
    seen: set[str] = set()
    misses = 0
    while len(out) < n:
        problem = draw(rng)
        usable = split_of(problem.key, test_fraction, val_fraction) == split
        if usable and not (distinct and problem.key in seen):
            out.append(problem)
            seen.add(problem.key)
            misses = 0
            continue
        misses += 1
        if misses >= max_tries:
            kind = "distinct problems" if distinct else "problems"
            raise ValueError(
                f"{where}.problems(split={split!r}, n={n}) found only {len(out)} {kind}: "
                f"{max_tries} draws in a row added nothing new. Ask for fewer, or make the "
                f"task larger (e.g. more numbers, wider ranges, a different test_fraction)"
            )
    return out


def to_score(value: float | dict[str, float] | Score, where: str) -> Score:
    """Turn what a reward function returned into a Score.

    - a Score is used as is;
    - a number r becomes Score(r, {"correct": 1.0 if r >= 1 else 0.0});
    - a dict must hold "reward"; its other entries become components, and
      "correct" defaults to the same r >= 1 rule when it is missing.
    """
    if isinstance(value, Score):
        return value
    if isinstance(value, (int, float)):
        reward = float(value)
        return Score(reward, {"correct": float(reward >= 1.0)})
    if isinstance(value, dict):
        if "reward" not in value:
            raise TypeError(f"{where} returned a dict without 'reward': got keys {sorted(value)}")
        reward = float(value["reward"])
        components = {str(k): float(v) for k, v in value.items() if k != "reward"}
        components.setdefault("correct", float(reward >= 1.0))
        return Score(reward, components)
    raise TypeError(f"{where} returned {type(value).__name__}: return a float, a dict with 'reward', or a Score")


@dataclass
class FunctionTask:
    """A task built from two plain functions: the quickest way to bring your own.

    make_problem(rng) returns (prompt, answer, solution_or_None); use only
    `rng` for randomness so problems are reproducible. The prompt doubles as
    the problem's key, so identical prompts always land in the same split.
    reward(answer, completion) returns a float, a dict with "reward" (other
    entries are logged as components), or a Score. A reward >= 1.0 counts as
    correct unless the dict/Score says otherwise.

    problems("train", ...) may repeat prompts; problems("test", ...) returns
    distinct prompts and raises ValueError when `max_tries` draws in a row
    bring no new test prompt (the test split is too small for that n).

    Example: two-digit addition in ten lines.

    >>> import random
    >>> from minirl.tasks import FunctionTask
    >>> def make_problem(rng: random.Random):
    ...     a, b = rng.randint(10, 99), rng.randint(10, 99)
    ...     return f"{a}+{b}=", a + b, str(a + b)
    >>> def reward(answer: int, completion: str) -> float:
    ...     return 1.0 if completion.strip() == str(answer) else 0.0
    >>> task = FunctionTask("addition", make_problem, reward)
    >>> p = task.problems("train", 3, seed=0)[0]
    >>> task.score(p, p.solution).correct, task.score(p, "nope").reward
    (True, 0.0)
    """

    name: str  # short identifier used in logs
    make_problem: Callable[[random.Random], tuple[str, Any, str | None]]  # rng -> (prompt, answer, solution)
    reward: Callable[[Any, str], float | dict[str, float] | Score]  # (answer, completion) -> reward
    test_fraction: float = 0.1  # share of distinct prompts reserved for the test split
    val_fraction: float = 0.0  # share kept out of training as a validation split for tuning (0: none)
    max_tries: int = 10_000  # give up after this many draws in a row that add nothing new

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"FunctionTask.name={self.name!r} is not allowed: use a non-empty string")
        for field in ("make_problem", "reward"):
            if not callable(getattr(self, field)):
                raise ValueError(f"FunctionTask.{field}={getattr(self, field)!r} is not allowed: use a function")
        check_test_fraction("FunctionTask", self.test_fraction, self.val_fraction)
        if isinstance(self.max_tries, bool) or not isinstance(self.max_tries, int) or self.max_tries < 1:
            raise ValueError(f"FunctionTask.max_tries={self.max_tries!r} is not allowed: use an integer >= 1")

    def _draw(self, rng: random.Random) -> Problem:
        made = self.make_problem(rng)
        if not isinstance(made, (tuple, list)) or len(made) != 3:
            raise TypeError(
                f"FunctionTask {self.name!r}: make_problem must return (prompt, answer, solution), got {made!r}"
            )
        prompt, answer, solution = made
        if not isinstance(prompt, str):
            raise TypeError(f"FunctionTask {self.name!r}: prompt must be a str, got {type(prompt).__name__}")
        if solution is not None and not isinstance(solution, str):
            raise TypeError(
                f"FunctionTask {self.name!r}: solution must be a str or None, got {type(solution).__name__}"
            )
        return Problem(prompt=prompt, answer=answer, solution=solution, key=prompt)

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """n problems from "train" (may repeat) or "test" (distinct); deterministic in (split, n, seed)."""
        # A string seed is hashed with sha512 by `random`, so this is stable across runs.
        rng = random.Random(f"{self.name}|{split}|{seed}")
        return sample_split(self._draw, split, n, rng, self.test_fraction, self.max_tries, "FunctionTask",
                            self.val_fraction)

    def score(self, problem: Problem, completion: str) -> Score:
        """Call the user's reward function and normalise its result to a Score."""
        return to_score(self.reward(problem.answer, completion), f"FunctionTask {self.name!r} reward")

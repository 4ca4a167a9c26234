"""Countdown with worked steps: the policy writes its reasoning, one arithmetic step at a time.

    prompt      3,5,7:026=
    completion  3*7=21,21+5=26                      (then EOS)
    or          3+5=8,8*7=56|3*7=21,21+5=26         (a missed attempt, a restart mark '|', a second attempt)

Each step combines two numbers the policy *has* - given ones, or results it wrote earlier in the same
attempt - into a new one, and writes the result. After an attempt that missed the target the policy may
write '|' and start again from the given numbers; only the last attempt counts. This gives a tiny model
something to reason with: completions of 14-60 tokens whose length, number of retries and per-step
arithmetic can all change under RL (the compact task's bare "3*7+5" cannot).

The verifier, `replay`, reads the trace with plain string operations (never eval/exec) and replays it over
a pool of available numbers (a multiset: each value is used once):
  * every operand must be in the pool when it is used; it leaves the pool, the written result enters it;
  * every written result must be exactly right (integers; a division must be exact: b * c == a);
  * the last attempt must consume every given number and end on the target.
It is bounded before any work (characters, attempts, steps, digits per number), so any string, however
hostile, is answered in well under a millisecond; tests/test_worked_task.py fuzzes it.

Reward schemes: binary 0/1, tinyzero 0/0.1/1 (0.1 for a readable trace), dapo -1/+1, and `per_step`, which
adds `step_credit` for every right step in any attempt. `per_step` is *deliberately hackable*: a policy can
earn more by writing many correct but useless steps (restart, redo, restart, ...) than by solving the
problem. It exists for the reward-hacking experiment (token-level vs sequence-level loss); never use it to
train a policy you want.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from minirl.tasks.base import Problem, Score, check_test_fraction, sample_split
from minirl.tasks.countdown import _check_operators, _check_range

MAX_TRACE_CHARS = 2048  # longer completions are rejected unread (a 64-token completion has <= 64 characters)
MAX_ATTEMPTS = 64  # attempts ('|'-separated) per completion
MAX_STEPS = 256  # steps (','-separated) per completion, over all attempts
MAX_DIGITS = 6  # digits per written number: every value stays below 10**6, every product below 10**12
MAX_MISSES = 200_000  # problems(): draws in a row that add nothing new before giving up (see there)
RESTART, SEPARATOR = "|", ","
DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() would accept '٣' or '³'
REWARD_SCHEMES = ("binary", "tinyzero", "dapo", "per_step")


@dataclass(frozen=True)
class Replay:
    """What the verifier found in one completion (every field is also a score component)."""

    format_ok: bool  # the whole completion is a readable trace: attempts of well-formed steps, within the bounds
    arithmetic_ok: bool  # every written result, in every attempt, is right
    numbers_ok: bool  # the last attempt used only numbers it had, and consumed every given number
    correct: bool  # format_ok, and the last attempt is right, uses every number once and ends on the target
    attempts: int  # attempts written (restarts + 1); 0 when the trace is unreadable
    steps: int  # steps written, over all attempts
    valid_steps: int  # steps that are right and use numbers available in their attempt (per_step's currency)
    first_missed: bool = False  # a readable trace whose first attempt is not a solution
    retried: bool = False  # first_missed, and the policy tried again after it (attempts >= 2): the retry after a
    #                        miss that RL may teach; retried / first_missed is the share of misses retried


UNREADABLE = Replay(False, False, False, False, 0, 0, 0)


def parse_number(text: str) -> int | None:
    """A canonical non-negative integer of at most MAX_DIGITS ASCII digits ("0", "26"; not "026", "", "２")."""
    if not 0 < len(text) <= MAX_DIGITS or not set(text) <= DIGITS or (text[0] == "0" and len(text) > 1):
        return None
    return int(text)


def parse_step(text: str, operators: str) -> tuple[int, str, int, int] | None:
    """ "21+5=26" -> (21, "+", 5, 26); None if it is not `number op number = number` with op in `operators`."""
    left, eq, result = text.partition("=")
    if not eq:
        return None
    cut = next((i for i, ch in enumerate(left) if ch not in DIGITS), -1)  # the operator follows the first number
    if cut <= 0 or left[cut] not in operators:
        return None
    a, b, c = parse_number(left[:cut]), parse_number(left[cut + 1:]), parse_number(result)
    if a is None or b is None or c is None:
        return None
    return a, left[cut], b, c


def step_is_right(a: int, op: str, b: int, c: int) -> bool:
    """Exact check of one written step; results are non-negative integers, so 3-7=... is never right."""
    if op == "+":
        return a + b == c
    if op == "-":
        return a - b == c
    if op == "*":
        return a * b == c
    return b != 0 and b * c == a  # a / b == c exactly, without leaving the integers


def replay(numbers: tuple[int, ...], target: int, completion: str, operators: str = "+-*") -> Replay:
    """Read and replay a worked-steps completion over the pool of `numbers`; never raises on a str."""
    if not isinstance(completion, str):
        return UNREADABLE
    if len(completion) > 4 * MAX_TRACE_CHARS:  # cheap bounds first, so all work below is bounded
        return UNREADABLE
    text = completion.strip()
    if not text or len(text) > MAX_TRACE_CHARS or text.count(RESTART) >= MAX_ATTEMPTS:
        return UNREADABLE
    if text.count(SEPARATOR) + text.count(RESTART) >= MAX_STEPS:
        return UNREADABLE
    attempts = [[parse_step(s, operators) for s in attempt.split(SEPARATOR)] for attempt in text.split(RESTART)]
    if any(step is None for attempt in attempts for step in attempt):
        return UNREADABLE
    arithmetic_ok, valid_steps, last, solved = True, 0, None, []
    for attempt in attempts:
        pool = Counter(numbers)  # every attempt starts again from the given numbers
        available = right = True
        for a, op, b, c in attempt:
            have = pool[a] >= 1 and pool[b] >= (2 if a == b else 1)
            if have:
                pool[a] -= 1
                pool[b] -= 1
            ok = step_is_right(a, op, b, c)
            pool[c] += 1  # the written result is what the next step can use (right or not)
            valid_steps += have and ok and available  # a step after a missing operand is not valid either
            available, right = available and have, right and ok
        arithmetic_ok = arithmetic_ok and right
        last = (available, right, +pool, attempt[-1][3])
        solved.append(available and right and sum(last[2].values()) == 1 and last[3] == target)
    available, right, pool, final = last
    numbers_ok = available and sum(pool.values()) == 1  # everything consumed; only the final result is left
    correct = numbers_ok and right and final == target
    return Replay(True, arithmetic_ok, numbers_ok, correct, len(attempts), sum(map(len, attempts)), valid_steps,
                  first_missed=not solved[0], retried=not solved[0] and len(attempts) >= 2)


def render_steps(steps: list[tuple[int, str, int, int]]) -> str:
    """[(3, "*", 7, 21), (21, "+", 5, 26)] -> "3*7=21,21+5=26"."""
    return SEPARATOR.join(f"{a}{op}{b}={c}" for a, op, b, c in steps)


@dataclass
class WorkedCountdown:
    """Countdown where the answer is a chain of written steps; see the module docstring for the format."""

    num_count: int = 3  # how many numbers each problem gives: 2 to 5
    number_range: tuple[int, int] = (1, 12)  # inclusive range of the numbers (1-12: >= 1 000 held-out problems)
    target_range: tuple[int, int] = (1, 999)  # inclusive range of targets, 1 <= lo <= hi <= 99999
    operators: str = "+-*"  # allowed operators: a non-empty subset of "+-*/"
    reward_scheme: str = "binary"  # "binary" 0/1, "tinyzero" 0/0.1/1, "dapo" -1/+1, "per_step" (hackable!)
    step_credit: float = 0.1  # per_step only: reward per right step in any attempt, on top of 1 for correct
    retry_rate: float = 0.0  # share of reference solutions (SFT data) that first miss, restart with '|', then solve
    giveup_rate: float = 0.0  # share of the other reference traces that miss once or twice and then stop, unsolved:
    #                           a policy so trained also ends answers it cannot finish instead of retrying forever
    test_fraction: float = 0.25  # share of problem keys (sorted numbers|target) held out: 1 158 for the defaults
    val_fraction: float = 0.1  # share of problem keys kept out of training for tuning (the "val" split)
    name: str = "countdown-worked"  # identifier used in logs

    def __post_init__(self) -> None:
        if type(self.num_count) is not int or not 2 <= self.num_count <= 5:
            raise ValueError(f"WorkedCountdown.num_count={self.num_count!r} is not allowed: use an integer from 2 to 5")
        self.number_range = _check_range("WorkedCountdown.number_range", self.number_range, 1, 99)
        self.target_range = _check_range("WorkedCountdown.target_range", self.target_range, 1, 99999)
        _check_operators(self.operators, "WorkedCountdown.operators")
        if self.reward_scheme not in REWARD_SCHEMES:
            raise ValueError(f"WorkedCountdown.reward_scheme={self.reward_scheme!r} is not allowed: use one of "
                             f"{', '.join(map(repr, REWARD_SCHEMES))}")
        for field, value in (("step_credit", self.step_credit), ("retry_rate", self.retry_rate),
                             ("giveup_rate", self.giveup_rate)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"WorkedCountdown.{field}={value!r} is not allowed: use a number from 0 to 1")
        check_test_fraction("WorkedCountdown", self.test_fraction, self.val_fraction)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"WorkedCountdown.name={self.name!r} is not allowed: use a non-empty string")

    # -- problems

    # The token budget, chosen from the shipped tiny-worked policy's answer lengths, printed by
    # `python -m minirl evaluate --task worked --split val --n 400 --k 4 --max-new-tokens 112`: see its card.
    @property
    def max_new_tokens(self) -> int:
        """L_max = 80: room for about six 3-number attempts (a solved one takes 12-16 tokens), so RL can make the
        policy retry more; nothing the base policy writes is cut (its longest answers stay under 64 tokens)."""
        return 80

    @property
    def overlong_cache(self) -> int:
        """L_cache = 32: DAPO's soft overlong ramp covers tokens 49-80, beyond 99 % of the base policy's answers, so
        it shapes answers that RL makes longer, not the ones the policy starts from."""
        return 32

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """n problems from "train" (may repeat), "val" or "test" (distinct keys); deterministic in (split, n, seed)."""
        # the seed string keeps the task's first name, so every problem draw is the one earlier runs saw
        rng = random.Random(f"countdown-steps|{self.num_count}|{split}|{seed}")  # str seeds: sha512, stable
        # Asking for the whole test split is a coupon collector over unequal odds: with the defaults the rarest
        # held-out problems come up once in ~15 000 draws (p = 6.6e-5), and for some seeds the last new one takes
        # more than 20 000 draws in a row (tests/test_worked_task.py draws the whole split for two of them).
        # 200 000 misses in a row has odds of about e^-13 per rare problem.
        return sample_split(self._draw, split, n, rng, self.test_fraction, MAX_MISSES, "WorkedCountdown",
                            self.val_fraction)

    def _random_chain(self, rng: random.Random, numbers: list[int]) -> list[tuple[int, str, int, int]] | None:
        """Combine two random numbers of the pool until one is left, every result a non-negative integer
        (a - b with a >= b; a / b only when exact); None if no such step could be found."""
        pool, steps = numbers[:], []
        while len(pool) > 1:
            for _ in range(100):
                i, j = rng.sample(range(len(pool)), 2)
                a, b = pool[i], pool[j]
                op = self.operators[int(rng.random() * len(self.operators))]
                if op == "-" and a < b:
                    a, b = b, a
                if op != "/" or (b and a % b == 0):
                    break
            else:
                return None
            c = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[op]
            steps.append((a, op, b, c))
            pool = [x for k, x in enumerate(pool) if k not in (i, j)] + [c]
        return steps

    def _draw(self, rng: random.Random) -> Problem:
        """One random problem, in either split; the caller filters by key."""
        lo, hi = self.number_range
        tlo, thi = self.target_range
        for _ in range(10_000):
            numbers = [rng.randint(lo, hi) for _ in range(self.num_count)]
            steps = self._random_chain(rng, numbers)
            if steps is None or not tlo <= steps[-1][3] <= thi:
                continue
            target, solution = steps[-1][3], render_steps(steps)
            if self.retry_rate and rng.random() < self.retry_rate:
                miss = self._random_chain(rng, numbers)  # another chain over the same numbers...
                if miss is not None and miss[-1][3] != target:  # ...that missed: a restart, then the solution
                    solution = render_steps(miss) + RESTART + solution
            elif self.giveup_rate and rng.random() < self.giveup_rate:  # one or two misses, then the end
                misses = [self._random_chain(rng, numbers) for _ in range(1 + (rng.random() < 0.5))]
                if all(m is not None and m[-1][3] != target for m in misses):
                    solution = RESTART.join(render_steps(m) for m in misses)
            width = len(str(thi))
            return Problem(
                prompt=",".join(map(str, numbers)) + f":{target:0{width}d}=",
                answer={"numbers": tuple(numbers), "target": target},
                solution=solution,
                key=",".join(map(str, sorted(numbers))) + f"|{target}",
            )
        raise ValueError(f"WorkedCountdown could not make a problem with target_range={self.target_range} from "
                         f"number_range={self.number_range}, operators={self.operators!r}: widen the ranges")

    # -- scoring

    def score(self, problem: Problem, completion: str) -> Score:
        """Replay the completion; reward by the scheme; every Replay field is a component (bools as 0/1)."""
        r = replay(problem.answer["numbers"], problem.answer["target"], completion, self.operators)
        if self.reward_scheme == "binary":
            reward = float(r.correct)
        elif self.reward_scheme == "tinyzero":
            reward = 1.0 if r.correct else (0.1 if r.format_ok else 0.0)
        elif self.reward_scheme == "dapo":
            reward = 1.0 if r.correct else -1.0
        else:  # per_step: hackable on purpose (module docstring)
            reward = float(r.correct) + self.step_credit * r.valid_steps
        components = {name: float(value) for name, value in vars(r).items()}
        return Score(reward=reward, components=components)

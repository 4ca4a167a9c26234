"""The worked-steps Countdown task: its verifier on hand-made and hostile traces, its problems, its rewards."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.tasks import WorkedCountdown, Problem, in_test_split, replay
from minirl.tasks.worked import MAX_ATTEMPTS, MAX_DIGITS, MAX_STEPS, MAX_TRACE_CHARS, UNREADABLE, parse_step

FUZZ = settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
NUMBERS, TARGET = (3, 5, 7), 26


def fields(trace: str, numbers=NUMBERS, target=TARGET, operators="+-*") -> tuple:
    r = replay(numbers, target, trace, operators)
    return r.format_ok, r.arithmetic_ok, r.numbers_ok, r.correct, r.attempts, r.steps, r.valid_steps


# --------------------------------------------------------------------------- hand-made traces
@pytest.mark.parametrize("trace, expected", [
    # (format_ok, arithmetic_ok, numbers_ok, correct, attempts, steps, valid_steps)
    ("3*7=21,21+5=26", (True, True, True, True, 1, 2, 2)),
    ("  3*7=21,5+21=26\n", (True, True, True, True, 1, 2, 2)),  # outer whitespace is ignored; order is free
    # a retry that ends right: the missed first attempt is allowed, only the last one counts
    ("3+5=8,8*7=56|3*7=21,21+5=26", (True, True, True, True, 2, 4, 4)),
    # a retry that ends wrong: right arithmetic, wrong value
    ("3*7=21,21+5=26|3+5=8,8*7=56", (True, True, True, False, 2, 4, 4)),
    # a wrong step inside a chain that ends on the target: 5*3 is not 19
    ("5*3=19,19+7=26", (True, False, True, False, 1, 2, 1)),
    ("3*7=21,21+5=27", (True, False, True, False, 1, 2, 1)),
    # operands not in the pool, reuse, and unused numbers
    ("3*7=21,21+4=25", (True, True, False, False, 1, 2, 1)),  # 4 is not given
    ("3*7=21,21+21=42", (True, True, False, False, 1, 2, 1)),  # 21 used twice
    ("3*3=9,9+5=14", (True, True, False, False, 1, 2, 0)),  # 3 given once; the step after it is not valid either
    ("3*7=21", (True, True, False, False, 1, 1, 1)),  # 5 never used
    ("3+5=8,8+7=15,15+0=15", (True, True, False, False, 1, 3, 2)),
    # negative results cannot be written, so such a step is never right
    ("3-7=4,4*5=20", (True, False, True, False, 1, 2, 1)),
    # unreadable traces: nothing counts
    ("", (False, False, False, False, 0, 0, 0)),
    ("26", (False, False, False, False, 0, 0, 0)),
    ("3*7+5", (False, False, False, False, 0, 0, 0)),
    ("3*7=21,", (False, False, False, False, 0, 0, 0)),  # an empty step
    ("3*7=21|", (False, False, False, False, 0, 0, 0)),  # an empty last attempt
    ("3*7=21,21+5=2", (True, False, True, False, 1, 2, 1)),  # truncated mid-number: readable, wrong
    ("3*7=21,21+5=", (False, False, False, False, 0, 0, 0)),  # truncated before the result
    ("3*07=21,21+5=26", (False, False, False, False, 0, 0, 0)),  # leading zeros are not canonical
    ("3 * 7 = 21", (False, False, False, False, 0, 0, 0)),  # the compact language has no spaces
    ("3*7=21,21+5=26=26", (False, False, False, False, 0, 0, 0)),
])
def test_replay_hand_made_traces(trace: str, expected: tuple) -> None:
    assert fields(trace) == expected


@pytest.mark.parametrize("trace, first_missed, retried", [
    ("3*7=21,21+5=26", False, False),  # solved at once
    ("3+5=8,8*7=56|3*7=21,21+5=26", True, True),  # a miss, then a retry that solves it
    ("3+5=8,8*7=56|3+7=10,10*5=50", True, True),  # a miss and a retry that misses too
    ("3+5=8,8*7=56", True, False),  # a miss, given up
    ("3*7=21,21+5=26|3+5=8,8*7=56", False, False),  # solved first (then a wrong second attempt)
    ("3*7=21", True, False),  # a first attempt that leaves a number unused is a miss
    ("3*7+5", False, False),  # unreadable: no attempt to speak of
])
def test_a_retry_after_a_miss_is_counted(trace: str, first_missed: bool, retried: bool) -> None:
    r = replay((3, 5, 7), 26, trace)
    assert (r.first_missed, r.retried) == (first_missed, retried)


def test_equal_operands_need_two_copies() -> None:
    assert fields("4*4=16,16+2=18", numbers=(4, 4, 2), target=18)[3]
    assert not fields("4*4=16,16+2=18", numbers=(4, 3, 2), target=18)[2]


def test_results_of_earlier_attempts_are_not_available_later() -> None:
    assert fields("3*7=21|21+5=26")[2] is False  # 21 was computed in the first attempt, not in the last


def test_division_is_exact_and_only_when_allowed() -> None:
    assert fields("8/2=4,4*3=12", numbers=(8, 2, 3), target=12, operators="+-*/")[3]
    assert not fields("7/2=3,3*4=12", numbers=(7, 2, 4), target=12, operators="+-*/")[1]  # 7/2 is not 3
    assert not fields("8/0=0,0+3=3", numbers=(8, 0, 3), target=3, operators="+-*/")[1]
    assert not fields("8/2=4,4*3=12", numbers=(8, 2, 3), target=12)[0]  # '/' is not an operator of this task


def test_parse_step() -> None:
    assert parse_step("21+5=26", "+-*") == (21, "+", 5, 26)
    assert parse_step("0*9=0", "+-*") == (0, "*", 9, 0)
    for bad in ("21+5", "+5=26", "21+=26", "21^5=26", "21+5=", "1234567+1=1", "２+2=4", "3+³=6", "-3+5=2"):
        assert parse_step(bad, "+-*") is None, bad


# --------------------------------------------------------------------------- hostile traces
def hostile_traces() -> list[str]:
    step = "3*7=21"
    return [
        ",".join(["3+5=8"] * 10_000),  # 10 000 steps
        "|".join(["3*7=21,21+5=26"] * 5_000),  # a restart flood
        "|" * 100_000,
        "9" * 1_000_000 + "*9=1",  # a huge number
        "999999*999999=999998000001",  # a product beyond MAX_DIGITS
        f"{'9' * MAX_DIGITS}*{'9' * MAX_DIGITS}={'9' * MAX_DIGITS}",
        "٣*٧=٢١,٢١+٥=٢٦",  # Arabic-Indic digits
        "３*７=２１,２１+５=２６",  # full-width digits
        "3*7=21\x00,21+5=26",
        "__import__('os').system('true')",
        "eval('3*7+5')",
        step + "," + "=" * 50_000,
        ("(" * 5_000) + step,
        "3*7=21," * 200 + "21+5=26",
        "-" * 10_000,
        "3" * (MAX_TRACE_CHARS + 1),
    ]


@pytest.mark.parametrize("text", hostile_traces(), ids=lambda t: f"{t[:12]!r}...{len(t)}")
def test_hostile_traces_are_bounded_and_wrong(text: str) -> None:
    best = float("inf")
    for _ in range(3):  # best of 3: a scheduler hiccup on a shared machine is not a failure
        start = time.perf_counter()
        r = replay(NUMBERS, TARGET, text)
        best = min(best, time.perf_counter() - start)
    assert not r.correct
    assert best < 0.010, f"replay took {best * 1000:.2f} ms on a {len(text)}-character input"


def test_bounds_reject_before_reading() -> None:
    assert replay(NUMBERS, TARGET, "3+5=8|" * MAX_ATTEMPTS + "3*7=21,21+5=26") == UNREADABLE
    assert replay(NUMBERS, TARGET, "3+5=8," * MAX_STEPS + "3*7=21,21+5=26") == UNREADABLE
    assert replay(NUMBERS, TARGET, " " * MAX_TRACE_CHARS + "3*7=21,21+5=26") == fields_to_replay("3*7=21,21+5=26")


def fields_to_replay(trace: str):
    return replay(NUMBERS, TARGET, trace)


@FUZZ
@given(st.text())
def test_replay_never_raises_on_any_text(text: str) -> None:
    r = replay(NUMBERS, TARGET, text)
    assert r.correct <= r.numbers_ok and r.correct <= r.format_ok and r.valid_steps <= r.steps


@FUZZ
@given(st.text(alphabet="0123456789+-*=,|", max_size=120), st.tuples(*[st.integers(0, 20)] * 3), st.integers(0, 500))
def test_replay_grammar_alphabet_fuzz(text: str, numbers: tuple, target: int) -> None:
    r = replay(numbers, target, text)
    assert r.correct <= r.numbers_ok and r.correct <= r.format_ok
    if r.correct:  # an independent check of what "correct" means, on the last attempt
        steps = [parse_step(s, "+-*") for s in text.strip().split("|")[-1].split(",")]
        assert steps[-1][3] == target and len(steps) == len(numbers) - 1


@FUZZ
@given(st.data())
def test_every_generated_chain_replays_correct(data) -> None:
    task = WorkedCountdown(num_count=data.draw(st.integers(2, 5)), operators=data.draw(st.sampled_from(["+-*", "+-*/", "+", "*-"])),
                          retry_rate=data.draw(st.sampled_from([0.0, 0.5, 1.0])), target_range=(1, 99999))
    problem = task.problems("train", 1, seed=data.draw(st.integers(0, 10**6)))[0]
    score = task.score(problem, problem.solution)
    assert score.correct and score.components["arithmetic_ok"] == 1.0


# --------------------------------------------------------------------------- problems
def test_held_out_split_has_over_a_thousand_distinct_problems() -> None:
    test = WorkedCountdown().problems("test", 1000, seed=0)
    assert len({p.key for p in test}) == 1000
    assert all(in_test_split(p.key, 0.25) for p in test)


def _held_out_keys_by_enumeration() -> set[str]:
    """Every test key of the default task, found by trying all 2-step chains over all 3-number multisets."""
    def results(a: int, b: int) -> set[int]:
        return {a + b, abs(a - b), a * b}
    keys = set()
    for numbers in itertools.combinations_with_replacement(range(1, 13), 3):
        targets = set()
        for i, j, k in ((0, 1, 2), (0, 2, 1), (1, 2, 0)):
            for c in results(numbers[i], numbers[j]):
                targets |= results(c, numbers[k])
        keys |= {f"{numbers[0]},{numbers[1]},{numbers[2]}|{t}" for t in targets if 1 <= t <= 999}
    return {key for key in keys if in_test_split(key, 0.25)}


@pytest.mark.parametrize("seed", [3, 13])  # seeds whose last new problem took > 20 000 draws in a row
def test_the_whole_held_out_split_can_be_drawn_and_no_more(seed: int) -> None:
    split = _held_out_keys_by_enumeration()
    assert len(split) == 1158  # the size the study evaluates on (SCALES["worked"].eval_n)
    assert {p.key for p in WorkedCountdown().problems("test", len(split), seed=seed)} == split
    if seed == 3:
        with pytest.raises(ValueError, match=r"n=1159\) found only 1158 distinct problems"):
            WorkedCountdown().problems("test", len(split) + 1, seed=seed)


@pytest.mark.parametrize("num_count", [3, 4])
def test_train_and_test_never_overlap_and_are_deterministic(num_count: int) -> None:
    task = WorkedCountdown(num_count=num_count)
    train = task.problems("train", 2000, seed=1)
    test = task.problems("test", 300, seed=1)
    assert not {p.key for p in train} & {p.key for p in test}
    assert [p.prompt for p in task.problems("train", 50, seed=1)] == [p.prompt for p in train[:50]]


def test_prompt_format_and_retry_solutions() -> None:
    problem = WorkedCountdown(num_count=4).problems("train", 1, seed=0)[0]
    numbers, target = problem.answer["numbers"], problem.answer["target"]
    assert problem.prompt == ",".join(map(str, numbers)) + f":{target:03d}="
    solutions = [p.solution for p in WorkedCountdown(retry_rate=0.5).problems("train", 400, seed=0)]
    with_retry = sum("|" in s for s in solutions) / len(solutions)
    assert 0.3 < with_retry < 0.55  # about half, less the draws whose "miss" happened to hit the target


# --------------------------------------------------------------------------- rewards
PROBLEM = Problem(prompt="3,5,7:026=", answer={"numbers": NUMBERS, "target": TARGET}, solution=None, key="3,5,7|26")


@pytest.mark.parametrize("scheme, right, readable_wrong, garbage", [
    ("binary", 1.0, 0.0, 0.0), ("tinyzero", 1.0, 0.1, 0.0), ("dapo", 1.0, -1.0, -1.0),
    ("per_step", 1.2, 0.2, 0.0),
])
def test_reward_schemes(scheme: str, right: float, readable_wrong: float, garbage: float) -> None:
    task = WorkedCountdown(reward_scheme=scheme)
    assert task.score(PROBLEM, "3*7=21,21+5=26").reward == pytest.approx(right)
    assert task.score(PROBLEM, "3+5=8,8*7=56").reward == pytest.approx(readable_wrong)
    assert task.score(PROBLEM, "hello").reward == pytest.approx(garbage)


def test_per_step_reward_is_hackable_by_design() -> None:
    """Useless but correct steps, restart after restart, out-earn the solution: the reward-hacking experiment."""
    task = WorkedCountdown(reward_scheme="per_step")
    solution = task.score(PROBLEM, "3*7=21,21+5=26")
    padding = task.score(PROBLEM, "|".join(["3+5=8,8+7=15"] * 8))
    assert not padding.correct and padding.reward > solution.reward


def test_score_components() -> None:
    score = WorkedCountdown().score(PROBLEM, "3+5=8,8*7=56|3*7=21,21+5=26")
    assert score.components == {"format_ok": 1.0, "arithmetic_ok": 1.0, "numbers_ok": 1.0, "correct": 1.0,
                                "attempts": 2.0, "steps": 4.0, "valid_steps": 4.0, "first_missed": 1.0,
                                "retried": 1.0}
    assert WorkedCountdown().score(PROBLEM, None).components["format_ok"] == 0.0  # not even a string


@pytest.mark.parametrize("kwargs, field", [
    ({"num_count": 6}, "num_count"), ({"num_count": 3.0}, "num_count"), ({"number_range": (0, 9)}, "number_range"),
    ({"target_range": (5, 1)}, "target_range"), ({"operators": "+^"}, "operators"),
    ({"reward_scheme": "partial"}, "reward_scheme"), ({"step_credit": 2}, "step_credit"),
    ({"retry_rate": -0.1}, "retry_rate"), ({"test_fraction": 1.0}, "test_fraction"), ({"name": ""}, "name"),
])
def test_validation_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"WorkedCountdown.{field}="):
        WorkedCountdown(**kwargs)

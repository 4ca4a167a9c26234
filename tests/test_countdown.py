"""Tests for the Countdown task and its safe arithmetic checker."""

from __future__ import annotations

import random
import re
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirl.tasks import Countdown, Problem, in_test_split, safe_eval
from minirl.tasks.countdown import MAX_COMPLETION_CHARS, MAX_EXPR_CHARS, _render, used_numbers

FUZZ = settings(max_examples=200, deadline=500, suppress_health_check=[HealthCheck.too_slow])
SCHEMES = ("binary", "tinyzero", "dapo")


# --------------------------------------------------------------------------- safe_eval: values
@pytest.mark.parametrize(
    "expr, value",
    [
        ("7/2", Fraction(7, 2)),
        ("3*7+5", Fraction(26)),
        ("(1+2)*3", Fraction(9)),
        ("8-(3-1)", Fraction(6)),
        ("8-3-1", Fraction(4)),
        ("8/4/2", Fraction(1)),
        ("8/(4/2)", Fraction(4)),
        ("1-5", Fraction(-4)),  # negative results are fine, negative literals are not
        ("  6 / 4  ", Fraction(3, 2)),
        ("9999", Fraction(9999)),
        ("((((2))))", Fraction(2)),
    ],
)
def test_safe_eval_values(expr: str, value: Fraction) -> None:
    result = safe_eval(expr)
    assert isinstance(result, Fraction) and result == value


def test_used_numbers_in_order() -> None:
    assert used_numbers("3*7+5") == [3, 7, 5]
    assert used_numbers("(10-2)/4") == [10, 2, 4]
    with pytest.raises(ValueError):
        used_numbers("3+x")


# --------------------------------------------------------------------------- safe_eval: rejections
@pytest.mark.parametrize(
    "expr, reason",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("1+" * 200 + "1", "too long"),
        ("x+1", "character 'x'"),
        ("٣+٤", "character '٣'"),  # Arabic-Indic digits pass str.isdigit but not our whitelist
        ("１+２", "character '１'"),  # full-width digits
        ("1.5+2", "decimal"),
        ("1e3", "character 'e'"),
        ("2**3", "power"),
        ("8//2", "floor division"),
        ("-3+5", "unary"),
        ("--3", "unary"),
        ("3--3", "unary"),
        ("+3", "unary"),
        ("12345", "too large"),
        ("(" * 40 + "1" + ")" * 40, "nested too deeply"),
        ("(1+2", "unbalanced"),
        ("1+2)", "unbalanced"),
        ("1/0", "division by zero"),
        ("1/(2-2)", "division by zero"),
        ("1+", "syntax error"),
        ("1 2", "syntax error"),
        ("07", "syntax error"),
        ("()", "unsupported syntax"),
        ("2(3)", "unsupported syntax"),
        ("__import__('os')", "character '_'"),
        ("1\n+2", "character '\\\\n'"),
        ("*".join(["9999"] * 40), "too large"),  # intermediate magnitude bound
    ],
)
def test_safe_eval_rejects(expr: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        safe_eval(expr)


def test_safe_eval_operator_whitelist() -> None:
    assert safe_eval("6/3", operators="/") == 2
    with pytest.raises(ValueError, match="operator '/' is not allowed here: use one of \\+-\\*"):
        safe_eval("6/3", operators="+-*")
    with pytest.raises(ValueError, match="safe_eval operators='\\^'"):
        safe_eval("1", operators="^")


def test_safe_eval_huge_and_deep_inputs() -> None:
    with pytest.raises(ValueError, match="too long"):
        safe_eval("1" * 10_000)
    with pytest.raises(ValueError, match="too long"):
        safe_eval("(" * 5000 + "1" + ")" * 5000)
    deep_but_short = "(" * 100 + "1" + ")" * 100  # fits the length bound, hits the depth bound
    with pytest.raises(ValueError, match="nested too deeply"):
        safe_eval(deep_but_short)


# --------------------------------------------------------------------------- safe_eval: fuzzing
@FUZZ
@given(st.text())
def test_safe_eval_any_text_returns_fraction_or_value_error(text: str) -> None:
    try:
        assert isinstance(safe_eval(text), Fraction)
    except ValueError:
        pass


@FUZZ
@given(st.text(alphabet="0123456789+-*/() ", max_size=80))
def test_safe_eval_grammar_alphabet_fuzz(text: str) -> None:
    try:
        assert isinstance(safe_eval(text), Fraction)
    except ValueError:
        pass


def _trees(leaf: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(leaf, lambda kids: st.tuples(st.sampled_from("+-*/"), kids, kids), max_leaves=6)


def _reference_value(tree) -> Fraction | None:
    """Independent exact evaluation; None on division by zero."""
    if isinstance(tree, int):
        return Fraction(tree)
    op, left, right = tree
    a, b = _reference_value(left), _reference_value(right)
    if a is None or b is None or (op == "/" and b == 0):
        return None
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]


def _full_parens(tree, spaces: bool) -> str:
    if isinstance(tree, int):
        return str(tree)
    op, left, right = tree
    sep = " " if spaces else ""
    return f"({_full_parens(left, spaces)}{sep}{op}{sep}{_full_parens(right, spaces)})"


@FUZZ
@given(_trees(st.integers(0, 9999)), st.booleans())
def test_safe_eval_matches_fraction_arithmetic(tree, spaces: bool) -> None:
    expected = _reference_value(tree)
    text = _full_parens(tree, spaces)
    if expected is None:
        with pytest.raises(ValueError, match="division by zero"):
            safe_eval(text)
    else:
        assert safe_eval(text) == expected


@FUZZ
@given(_trees(st.integers(1, 99)))
def test_minimal_parentheses_rendering_keeps_value(tree) -> None:
    expected = _reference_value(tree)
    text, _ = _render(tree)
    if expected is None:
        with pytest.raises(ValueError, match="division by zero"):
            safe_eval(text)
    else:
        assert safe_eval(text) == expected
        assert len(text) <= len(_full_parens(tree, spaces=False))


def _adversarial_inputs() -> list[str]:
    rng = random.Random(0)
    alphabet = "0123456789+-*/() "
    inputs = [
        "1" * 10_000,
        "(" * 5000 + "1" + ")" * 5000,
        "(" * 32 + "1" + ")" * 32,
        "(" * 33 + "1" + ")" * 33,
        "+".join(["1"] * 128),
        "*".join(["9999"] * 51),
        "/".join(["9999"] * 51),
        "1" + "/1" * 127,
        "9999" + "-9999*9999" * 25,
        "٣+٤" * 3000,
        "-" * 255 + "1",
        "(" * 128 + ")" * 128,
        " " * 100_000,
    ]
    inputs += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 256))) for _ in range(200)]
    inputs += ["(" * 30 + "*".join(str(rng.randint(1, 9999)) for _ in range(40)) + ")" * 30 for _ in range(50)]
    return inputs


def test_safe_eval_is_fast_on_adversarial_inputs() -> None:
    worst = 0.0
    for text in _adversarial_inputs():
        best = float("inf")
        for _ in range(3):  # best of 3 so a scheduler hiccup on a shared machine is not a failure
            start = time.perf_counter()
            try:
                safe_eval(text)
            except ValueError:
                pass
            best = min(best, time.perf_counter() - start)
        worst = max(worst, best)
    assert worst < 0.010, f"slowest safe_eval call took {worst * 1000:.2f} ms"


# --------------------------------------------------------------------------- Countdown problems
def test_problems_are_deterministic() -> None:
    task = Countdown()
    assert task.problems("train", 100, seed=7) == task.problems("train", 100, seed=7)
    assert task.problems("train", 100, seed=7) != task.problems("train", 100, seed=8)
    assert task.problems("test", 50, seed=7) == task.problems("test", 50, seed=7)
    assert Countdown().problems("train", 20) == Countdown().problems("train", 20)


@pytest.mark.parametrize("num_count", [3, 4])
def test_train_and_test_never_overlap(num_count: int) -> None:
    task = Countdown(num_count=num_count)
    train = {p.key for seed in range(3) for p in task.problems("train", 2000, seed=seed)}
    test_problems = [p for seed in range(3) for p in task.problems("test", 150, seed=seed)]
    assert not train & {p.key for p in test_problems}
    assert all(in_test_split(p.key, task.test_fraction) for p in test_problems)
    assert not any(in_test_split(k, task.test_fraction) for k in train)


def test_test_split_is_distinct_and_too_large_requests_raise() -> None:
    task = Countdown()
    keys = [p.key for p in task.problems("test", 150)]
    assert len(keys) == len(set(keys))
    with pytest.raises(ValueError, match=r"split='test', n=1000\) found only \d+ distinct problems"):
        task.problems("test", 1000)


def test_key_is_sorted_numbers_and_target() -> None:
    for p in Countdown(num_count=4).problems("train", 200):
        numbers, target = p.answer["numbers"], p.answer["target"]
        assert p.key == ",".join(map(str, sorted(numbers))) + f"|{target}"


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"num_count": 4},
        {"operators": "+-*/"},
        {"operators": "/", "num_count": 4},
        {"operators": "-"},
        {"number_range": (10, 99), "target_range": (100, 9999), "num_count": 4},
        {"prompt_style": "chat", "operators": "+-*/"},
    ],
)
def test_generated_problems_are_valid_and_solutions_score_one(config: dict) -> None:
    for scheme in SCHEMES:
        task = Countdown(**config, reward_scheme=scheme)
        lo, hi = task.number_range
        for p in task.problems("train", 300, seed=1) + task.problems("test", 20, seed=1):
            numbers, target = p.answer["numbers"], p.answer["target"]
            assert len(numbers) == task.num_count and all(lo <= x <= hi for x in numbers)
            assert task.target_range[0] <= target <= task.target_range[1]
            score = task.score(p, p.solution)
            assert score.reward == 1.0 and score.correct, (p, score)
            assert score.components == {"format_ok": 1.0, "numbers_ok": 1.0, "correct": 1.0}


def test_ten_thousand_train_problems_are_fast() -> None:
    start = time.perf_counter()
    Countdown().problems("train", 10_000)
    assert time.perf_counter() - start < 1.5  # spec is < 1 s; slack for a busy shared machine


def test_compact_prompt_format() -> None:
    for p in Countdown().problems("train", 500):
        assert re.fullmatch(r"\d,\d,\d:\d{3}=", p.prompt) and len(p.prompt) == 10
        assert p.prompt.startswith(",".join(map(str, p.answer["numbers"])) + ":")
        assert p.prompt.endswith(f"{p.answer['target']:03d}=")
        assert "<" not in p.solution
    p = Countdown(num_count=4, target_range=(1, 9999)).problems("train", 1)[0]
    assert re.fullmatch(r"\d,\d,\d,\d:\d{4}=", p.prompt)


def test_chat_prompt_mentions_numbers_target_and_operators() -> None:
    task = Countdown(prompt_style="chat", operators="+-")
    for p in task.problems("train", 50):
        assert str(list(p.answer["numbers"])) in p.prompt
        assert f"equals {p.answer['target']}." in p.prompt
        assert "(+, -)" in p.prompt and "<answer>" in p.prompt
        assert p.solution.startswith("<answer> ") and p.solution.endswith(" </answer>")


# --------------------------------------------------------------------------- Countdown scoring
PROBLEM = Problem(prompt="3,5,7:026=", answer={"numbers": (3, 5, 7), "target": 26}, solution="3*7+5", key="3,5,7|26")


@pytest.mark.parametrize(
    "scheme, correct, wrong_but_well_formed, garbage",
    [("binary", 1.0, 0.0, 0.0), ("tinyzero", 1.0, 0.1, 0.0), ("dapo", 1.0, -1.0, -1.0)],
)
def test_reward_schemes(scheme: str, correct: float, wrong_but_well_formed: float, garbage: float) -> None:
    task = Countdown(reward_scheme=scheme)
    assert task.score(PROBLEM, "7*3+5").reward == correct
    assert task.score(PROBLEM, " (5+7*3)\n").reward == correct
    assert task.score(PROBLEM, "3+5+7").reward == wrong_but_well_formed  # right numbers, wrong value
    assert task.score(PROBLEM, "26").reward == wrong_but_well_formed  # right value, wrong numbers
    assert task.score(PROBLEM, "hello").reward == garbage
    assert task.score(PROBLEM, "").reward == garbage


def test_score_components() -> None:
    task = Countdown(operators="+-*/")
    assert task.score(PROBLEM, "3+5+7").components == {"format_ok": 1.0, "numbers_ok": 1.0, "correct": 0.0}
    assert task.score(PROBLEM, "3*7+5+0").components == {"format_ok": 1.0, "numbers_ok": 0.0, "correct": 0.0}
    assert task.score(PROBLEM, "3*7*5/(5-5)").components["correct"] == 0.0  # wrong numbers anyway
    div0 = Problem("p", {"numbers": (3, 5, 5), "target": 1}, None, "k")
    assert task.score(div0, "3/(5-5)").components == {"format_ok": 1.0, "numbers_ok": 1.0, "correct": 0.0}
    assert task.score(PROBLEM, "-3+5*7").components["format_ok"] == 0.0
    # an operator the task does not allow makes the answer ill-formed
    assert Countdown(operators="+-*").score(PROBLEM, "3/7").components["format_ok"] == 0.0


def test_chat_scoring_uses_last_answer_tag() -> None:
    task = Countdown(prompt_style="chat", reward_scheme="tinyzero")
    assert task.score(PROBLEM, "think... <answer> 3*7+5 </answer>").correct
    assert task.score(PROBLEM, "<answer>3+5+7</answer> no wait <answer>\n3 * 7 + 5\n</answer>").correct
    assert not task.score(PROBLEM, "<answer> 3*7+5 </answer> hmm <answer>3+5+7</answer>").correct
    assert task.score(PROBLEM, "3*7+5").components["format_ok"] == 0.0  # no tags
    assert task.score(PROBLEM, "<answer> 3*7+5").reward == 0.0  # unclosed
    assert task.score(PROBLEM, "</answer> 3*7+5 <answer>").reward == 0.0  # wrong order
    # only the last MAX_COMPLETION_CHARS characters are looked at
    far = "<answer> 3*7+5 </answer>" + "x" * MAX_COMPLETION_CHARS
    assert task.score(PROBLEM, far).reward == 0.0
    near = "x" * 10 * MAX_COMPLETION_CHARS + "<answer> 3*7+5 </answer>"
    assert task.score(PROBLEM, near).correct


@FUZZ
@given(st.text(), st.sampled_from(["compact", "chat"]), st.sampled_from(SCHEMES))
def test_score_never_raises(text: str, style: str, scheme: str) -> None:
    task = Countdown(prompt_style=style, reward_scheme=scheme)
    for completion in (text, f"<answer>{text}</answer>", text * 50):
        score = task.score(PROBLEM, completion)
        assert score.reward in (-1.0, 0.0, 0.1, 1.0)


def test_score_is_fast_on_huge_completions() -> None:
    chat = Countdown(prompt_style="chat")
    compact = Countdown()
    inputs = ["<answer>" * 200_000, "<answer> 1 </answer>" * 50_000, "9" * 1_000_000, "(" * MAX_EXPR_CHARS]
    for text in inputs:
        for task in (chat, compact):
            start = time.perf_counter()
            task.score(PROBLEM, text)
            assert time.perf_counter() - start < 0.05


# --------------------------------------------------------------------------- Countdown validation
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_count": 5}, "num_count"),
        ({"num_count": "3"}, "num_count"),
        ({"number_range": (0, 9)}, "number_range"),
        ({"number_range": (5, 4)}, "number_range"),
        ({"number_range": (1, 100)}, "number_range"),
        ({"number_range": (1, 2, 3)}, "number_range"),
        ({"target_range": (0, 10)}, "target_range"),
        ({"target_range": (1, 10_000)}, "target_range"),
        ({"target_range": (1.0, 9)}, "target_range"),
        ({"operators": ""}, "operators"),
        ({"operators": "++"}, "operators"),
        ({"operators": "+^"}, "operators"),
        ({"prompt_style": "fancy"}, "prompt_style"),
        ({"reward_scheme": "dense"}, "reward_scheme"),
        ({"test_fraction": 0.0}, "test_fraction"),
        ({"test_fraction": 1}, "test_fraction"),
        ({"name": ""}, "name"),
    ],
)
def test_validation_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"Countdown\.{field}=.* is not allowed"):
        Countdown(**kwargs)


def test_list_ranges_are_normalised_to_tuples() -> None:
    task = Countdown(number_range=[2, 8], target_range=[5, 50])
    assert task.number_range == (2, 8) and task.target_range == (5, 50)


def test_impossible_configuration_raises_clearly() -> None:
    task = Countdown(number_range=(1, 1), operators="+", target_range=(500, 999))
    with pytest.raises(ValueError, match="could not make a problem"):
        task.problems("train", 1)


def test_bad_split_argument() -> None:
    with pytest.raises(ValueError, match="split='dev' is not allowed"):
        Countdown().problems("dev", 1)

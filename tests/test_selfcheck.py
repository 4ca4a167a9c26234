"""minirl.course.selfcheck: the exercise notebooks' self-checks report in words and never raise for the learner's code."""

import math

import pytest
import torch

from minirl.course.selfcheck import Case, check, compare, implemented, run_if_implemented


def double(x):
    return 2 * x


def not_written(x):
    raise NotImplementedError()


def crashes(x):
    return x.nonexistent_method()


def test_all_cases_pass(capsys):
    ok = check("double", double, [
        Case("a tensor", (torch.tensor([1.0, 2.0]),), expected=torch.tensor([2.0, 4.0])),
        ((3.0,), {}, 6.0),
        ("an int", (2,), None, 4),
    ])
    assert ok is True
    assert "✅ double: all 3 cases pass" in capsys.readouterr().out


def test_first_failing_case_is_named_with_expected_and_got(capsys):
    ok = check("double", double, [
        Case("fine", (1.0,), expected=2.0),
        Case("wrong on purpose", (torch.tensor([1.0, 2.0]),), expected=torch.tensor([2.0, 5.0])),
        Case("never reached", (1.0,), expected=99.0),
    ])
    out = capsys.readouterr().out
    assert ok is False
    assert "case 2/3 'wrong on purpose' failed" in out
    assert "first at index (1,): expected 5, got 4" in out
    assert "expected: [2.0, 5.0]" in out and "got:      [2.0, 4.0]" in out
    assert "never reached" not in out


def test_not_implemented_is_reported_not_raised(capsys):
    assert check("mine", not_written, [Case("x", (1,), expected=1)]) is False
    assert capsys.readouterr().out.strip() == "⏳ mine: not implemented yet"


def test_other_exceptions_are_reported_in_words(capsys):
    assert check("crashes", crashes, [Case("a float", (1.0,), expected=1.0)]) is False
    out = capsys.readouterr().out
    assert "case 1/1 'a float' raised AttributeError" in out and "nonexistent_method" in out


def test_shape_and_dtype_mismatches_are_explained(capsys):
    assert not check("double", double, [Case("shape", (torch.ones(2, 1),), expected=torch.full((2,), 2.0))])
    assert "the shape is wrong: expected (2,), got (2, 1)" in capsys.readouterr().out
    assert compare(torch.tensor([True]), torch.tensor([1])).startswith("expected a bool tensor")
    assert compare(torch.tensor([1.0]), [1.0]) == "expected a tensor, got a list"


def test_tolerances_and_nan():
    assert compare(1.0, 1.0 + 1e-7) is None
    assert compare(1.0, 1.01) is not None
    assert compare(1.0, 1.01, atol=0.1) is None
    assert compare(torch.tensor([math.nan, 1.0]), torch.tensor([math.nan, 1.0])) is None
    assert compare(torch.tensor(0.5), torch.tensor(0.5, dtype=torch.float64)) is None  # dtype-agnostic values
    assert compare(0.5, torch.tensor(0.5)) is None  # a 0-dim tensor stands for a number
    assert compare((1.0, torch.zeros(2)), (1.0, torch.ones(2))).startswith("item 1:")
    # a per-case tolerance overrides the call's
    assert check("double", double, [Case("loose", (1.0,), expected=2.05, atol=0.1)], quiet=True)


def test_callable_cases(capsys):
    def gives_even(fn):
        """doubling gives an even number"""
        assert fn(3) % 2 == 0, f"fn(3) = {fn(3)} is odd"

    def says_why(fn):
        return "a reason in words"

    assert check("double", double, [gives_even]) is True
    assert check("double", lambda x: 2 * x + 1, [gives_even]) is False
    assert "'doubling gives an even number' failed: fn(3) = 7 is odd" in capsys.readouterr().out
    assert check("double", double, [says_why]) is False
    assert "failed: a reason in words" in capsys.readouterr().out
    assert check("mine", not_written, [lambda fn: fn(1)]) is False
    assert "not implemented yet" in capsys.readouterr().out


def test_inputs_are_copied_between_cases():
    def in_place(x):
        return x.mul_(2)

    x = torch.tensor([1.0])
    assert check("in_place", in_place, [Case("first", (x,), expected=torch.tensor([2.0])),
                                        Case("second", (x,), expected=torch.tensor([2.0]))], quiet=True)
    assert x.item() == 1.0


def test_bad_case_is_a_clear_error():
    with pytest.raises(ValueError, match="use Case"):
        check("double", double, [(1, 2)])


def test_implemented_and_run_if_implemented(capsys):
    assert implemented(double, 1.0) and not implemented(not_written, 1.0)
    assert implemented(crashes, 1.0)  # written, just wrong: the next cell will show the error
    assert implemented(double) and not implemented(not_written)  # by source, without probe arguments
    assert run_if_implemented(double, lambda: "ran", 1.0) == "ran"
    assert run_if_implemented(not_written, lambda: "ran", 1.0, task="task 1") is None
    out = capsys.readouterr().out
    assert "not_written: not implemented yet — finish task 1 first" in out
    assert run_if_implemented([double, not_written], lambda: "ran", task="tasks 1 and 2") is None

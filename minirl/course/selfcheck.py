"""Self-checks for the exercise notebooks: call the learner's function, say in plain words what is wrong.

    from minirl.course.selfcheck import Case, check
    check("clipped_surrogate", my_fn, [
        Case("A=+1, r=1.5: clipped at 1.28", args=(lp, old, adv), expected=torch.tensor([[-1.28]])),
        lambda fn: ...,          # a callable case: raise AssertionError("what went wrong") to fail
    ])

`check` never raises. It prints one line for success, a short report for the first failing case (which
case, what was expected, what came back), or "not implemented yet" while the function still raises
NotImplementedError, and returns True / False. Graded cells can then `assert ok` in their hidden part.
`run_if_implemented` lets a later cell (a plot, a training run) wait politely for an unfinished task.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

ATOL, RTOL = 1e-5, 1e-4


@dataclass
class Case:
    """One call of the learner's function: fn(*args, **kwargs) should give `expected`."""

    description: str  # a short name the learner recognises, e.g. "A=+1, r=1.5 (clipped)"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None
    atol: float | None = None  # None = the `check` call's tolerance
    rtol: float | None = None


def _as_case(case, index: int):
    """Accept Case, (args, kwargs, expected), (description, args, kwargs, expected) or a callable."""
    if isinstance(case, Case) or callable(case):
        return case
    if isinstance(case, tuple) and len(case) == 3:
        return Case(f"case {index + 1}", tuple(case[0]), dict(case[1] or {}), case[2])
    if isinstance(case, tuple) and len(case) == 4:
        return Case(str(case[0]), tuple(case[1]), dict(case[2] or {}), case[3])
    raise ValueError(f"case {index + 1} is {case!r}: use Case(...), (args, kwargs, expected), "
                     "(description, args, kwargs, expected) or a callable fn -> None")


def _fmt(x: Any) -> str:
    """A short, readable rendering of a value (tensors with shape and dtype)."""
    if isinstance(x, torch.Tensor):
        values = x.detach().cpu()
        text = str(values.tolist() if values.numel() <= 24 else values)
        if values.is_floating_point() and values.numel() <= 24:
            text = str(torch.round(values.double(), decimals=5).tolist())
        return f"{text}  (tensor, shape {tuple(x.shape)}, {str(x.dtype).replace('torch.', '')})"
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x)


def compare(expected: Any, got: Any, atol: float = ATOL, rtol: float = RTOL) -> str | None:
    """None if `got` matches `expected`, else a plain-words reason. Tensors: shape, then allclose (NaN == NaN)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got a {type(got).__name__}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"the shape is wrong: expected {tuple(expected.shape)}, got {tuple(got.shape)}"
        if expected.dtype == torch.bool:
            if got.dtype != torch.bool:
                return f"expected a bool tensor (True/False per entry), got dtype {got.dtype}"
            return None if torch.equal(got.cpu(), expected.cpu()) else "some entries differ"
        e, g = expected.detach().cpu().double(), got.detach().cpu().double()
        if not torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
            bad = ~torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
            where = tuple(bad.nonzero()[0].tolist())
            return f"values differ, first at index {where}: expected {e[where].item():.6g}, got {g[where].item():.6g}"
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected a {type(expected).__name__} of {len(expected)} items, got {_fmt(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            reason = compare(e, g, atol, rtol)
            if reason:
                return f"item {i}: {reason}"
        return None
    if isinstance(expected, float):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)):
            return f"expected a number, got a {type(got).__name__}"
        same = math.isclose(got, expected, abs_tol=atol, rel_tol=rtol) or (math.isnan(got) and math.isnan(expected))
        return None if same else f"expected {expected:.6g}, got {got:.6g}"
    return None if got == expected else "the values differ"


def _copy_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Fresh copies, so a function that edits its inputs in place cannot spoil the next case."""
    return copy.deepcopy(args), copy.deepcopy(kwargs)


def check(name: str, fn: Callable, cases: list, *, atol: float = ATOL, rtol: float = RTOL, quiet: bool = False) -> bool:
    """Run `fn` on every case; print what happened; True if all cases pass. Never raises for fn's sake."""
    cases = [_as_case(c, i) for i, c in enumerate(cases)]
    for i, case in enumerate(cases):
        where = f"case {i + 1}/{len(cases)} '{_describe(case, i)}'"
        try:
            if isinstance(case, Case):
                args, kwargs = _copy_args(case.args, case.kwargs)
                got = fn(*args, **kwargs)
                reason = compare(case.expected, got, atol if case.atol is None else case.atol,
                                 rtol if case.rtol is None else case.rtol)
            else:
                try:
                    result = case(fn)
                except AssertionError as err:  # a callable case says what went wrong by failing an assert
                    result = str(err) or "an assertion failed"
                reason = result if isinstance(result, str) else (None if result is None or result is True else "it failed")
        except NotImplementedError:
            print(f"⏳ {name}: not implemented yet")
            return False
        except Exception as err:  # the learner's code crashed: say so in words, do not raise
            print(f"❌ {name}: {where} raised {type(err).__name__}: {err}")
            return False
        if reason:
            print(f"❌ {name}: {where} failed: {reason}")
            if isinstance(case, Case):
                print(f"   expected: {_fmt(case.expected)}\n   got:      {_fmt(got)}")
            return False
    if not quiet:
        print(f"✅ {name}: all {len(cases)} cases pass")
    return True


def _describe(case, index: int) -> str:
    if isinstance(case, Case):
        return case.description
    doc = inspect.getdoc(case)
    name = getattr(case, "__name__", "")
    return doc.splitlines()[0] if doc else (name if name and name != "<lambda>" else f"case {index + 1}")


def implemented(fn: Callable, *probe_args, **probe_kwargs) -> bool:
    """Has the learner written `fn` yet? With probe arguments: call it and see whether it raises
    NotImplementedError (any other outcome counts as written). Without: look for that raise in its source."""
    if probe_args or probe_kwargs:
        try:
            fn(*probe_args, **probe_kwargs)
        except NotImplementedError:
            return False
        except Exception:
            return True
        return True
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return True
    return "raise NotImplementedError" not in source


def run_if_implemented(fn: Callable | list[Callable], callback: Callable[[], Any], *probe_args,
                       task: str | None = None, **probe_kwargs) -> Any:
    """callback() if every function in `fn` is written, else a friendly line instead of a traceback."""
    fns = fn if isinstance(fn, (list, tuple)) else [fn]
    missing = [f for f in fns if not implemented(f, *probe_args, **probe_kwargs)]
    if missing:
        names = ", ".join(getattr(f, "__name__", "your function") for f in missing)
        print(f"⏳ {names}: not implemented yet — finish {task or 'that task'} first, then run this cell again.")
        return None
    return callback()

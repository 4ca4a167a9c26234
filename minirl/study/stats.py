"""The arithmetic of a verdict: mean and standard error over seeds, and when a difference is clear.

A verdict compares means over seeds with their standard errors (se = std / sqrt(n)). A difference counts as
clear when it exceeds twice the combined standard error, sqrt(se_a² + se_b²) — about a 95 % interval for
normal noise, and a rough one with n = 3.
"""

from __future__ import annotations

import math
import statistics


def stats(values: list[float]) -> dict:
    """{"mean", "std", "n", "se"} of the finite values (NaN where there are too few)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    n = len(vals)
    mean = statistics.fmean(vals) if vals else math.nan
    std = statistics.stdev(vals) if n > 1 else math.nan
    return {"mean": mean, "std": std, "n": n, "se": std / math.sqrt(n) if n > 1 else math.nan}


def diff(a: dict, b: dict) -> tuple[float, float]:
    """(mean a - mean b, 2 x combined standard error)."""
    return a["mean"] - b["mean"], 2 * math.hypot(a["se"], b["se"])


def clear(d: float, bar: float) -> int:
    """+1 / -1 if the difference is clearly positive / negative, 0 if it is within noise (or unknown)."""
    if not (math.isfinite(d) and math.isfinite(bar)):
        return 0
    return 1 if d > bar else -1 if d < -bar else 0


def verdict(sign: int) -> str:
    """supported (a clear difference in the expected direction), not supported (a clear one against it) or
    inconclusive (no clear difference at this scale)."""
    return {1: "supported", -1: "not supported", 0: "inconclusive"}[sign]


def combine(signs: list[int], any_supports: bool = False) -> str:
    """One verdict from several tests: any clear contradiction wins, then all (or any) in favour."""
    if any(s < 0 for s in signs):
        return "not supported"
    if all(s > 0 for s in signs) or (any_supports and any(s > 0 for s in signs)):
        return "supported"
    return "inconclusive"


def pct(s: dict) -> str:
    return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f} %" if s["n"] > 1 else f"{100 * s['mean']:.1f} %"


def num(s: dict, digits: int = 3) -> str:
    return f"{s['mean']:.{digits}g} ± {s['std']:.2g}" if s["n"] > 1 else f"{s['mean']:.{digits}g}"

"""Paired differences and the power to see them: how many seeds a claim needs before it can decide.

Every arm of a claim runs the same seed list, and a seed fixes the prompts of every step and the evaluation's
draws, so arm B - arm A is a difference per seed, d_1 .. d_n. Its mean over seeds has the standard error
se = sd(d) / sqrt(n), and a paired t-test calls the difference clear when |mean| > t(1 - alpha / 2, n - 1) * se.

The minimum detectable effect (MDE) is the true difference such a test finds with probability `power`:

    MDE = (t(1 - alpha / 2, n - 1) + t(power, n - 1)) * se          (the usual normal-approximation form)

With m tests in one table, alpha is split between them (Bonferroni: alpha / m), which raises both the bar
for "clear" and the MDE. A pilot of a few seeds gives sd(d); `seeds_for` then says how many seeds bring
the MDE down to a target.
"""

from __future__ import annotations

import math
import statistics


def _t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with `df` degrees of freedom (Simpson's rule on the density; 1e-9 accurate)."""
    if x < 0:
        return 1.0 - _t_cdf(-x, df)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    n = 2000  # even number of intervals over [0, x]
    h = x / n
    f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
    area = h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))
    return 0.5 + area


def t_quantile(p: float, df: int) -> float:
    """x with P(T <= x) = p, by bisection (0 < p < 1, df >= 1)."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"t_quantile: p={p!r}, df={df!r} is not allowed: use 0 < p < 1 and an integer df >= 1")
    lo, hi = -1e3, 1e3
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def paired(a: list[float], b: list[float]) -> dict:
    """Per-seed differences b - a (seed i of each list is the same seed): {"d", "mean", "sd", "n", "se"}."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} and {len(b)} values: each arm needs one value per seed of the same list")
    d = [y - x for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    n = len(d)
    sd = statistics.stdev(d) if n > 1 else math.nan
    return {"d": d, "mean": statistics.fmean(d) if d else math.nan, "sd": sd, "n": n,
            "se": sd / math.sqrt(n) if n > 1 else math.nan}


def bar(se: float, n: int, alpha: float = 0.05, tests: int = 1) -> float:
    """The paired t-test's threshold: a mean difference beyond +-bar is clear at level alpha / tests."""
    return t_quantile(1 - alpha / tests / 2, n - 1) * se if n > 1 else math.nan


def mde(sd: float, n: int, alpha: float = 0.05, power: float = 0.8, tests: int = 1) -> float:
    """Minimum detectable effect of a paired t-test over n seeds whose differences have standard deviation sd."""
    if n < 2:
        return math.nan
    return (t_quantile(1 - alpha / tests / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def seeds_for(target: float, sd: float, alpha: float = 0.05, power: float = 0.8, tests: int = 1,
              at_least: int = 5, at_most: int = 64) -> int:
    """The fewest seeds (>= at_least) whose MDE is <= target, or at_most if none up to it is enough."""
    for n in range(max(2, at_least), at_most + 1):
        if mde(sd, n, alpha, power, tests) <= target:
            return n
    return at_most


def compare(a: list[float], b: list[float], tests: int, alpha: float = 0.05, power: float = 0.8) -> dict:
    """The paired test of a verdict: b - a seed by seed, clear at level alpha / tests (Bonferroni over the `tests`
    of the whole table). {"d", "mean", "sd", "n", "se", "bar", "mde", "sign"}: sign +1 / -1 when the mean is
    beyond +-bar, 0 when it is within it (or there are fewer than two seeds); mde from the seeds' own sd."""
    out = paired(a, b)
    out["bar"] = bar(out["se"], out["n"], alpha, tests)
    out["mde"] = mde(out["sd"], out["n"], alpha, power, tests)
    ok = math.isfinite(out["mean"]) and math.isfinite(out["bar"])
    out["sign"] = 0 if not ok else 1 if out["mean"] > out["bar"] else -1 if out["mean"] < -out["bar"] else 0
    return out


def p_value(mean: float, se: float, n: int) -> float:
    """Two-sided p of a paired t-test: P(|T| >= |mean| / se) with n - 1 degrees of freedom (NaN below 2 seeds)."""
    if n < 2 or not (math.isfinite(mean) and math.isfinite(se)):
        return math.nan
    if se == 0:
        return 0.0 if mean != 0 else 1.0
    return 2 * (1 - _t_cdf(abs(mean) / se, n - 1))


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, int]:
    """Holm's step-down correction (Holm 1979) over one family of tests, as a Bonferroni divisor per test.

    Sort the m p-values; the k-th smallest (k = 1..m) is clear when it and every smaller one pass
    p_(j) < alpha / (m - j + 1). The divisor m - min(k, k0) + 1, with k0 the first rank that fails, reproduces
    that: a test ranked after the first failure is judged at the failed rank's level, which its larger p cannot
    pass. compare(a, b, tests=divisor) then gives the same sign as the step-down procedure. NaN p-values sort last.
    """
    m = len(p_values)
    order = sorted(p_values, key=lambda k: (not math.isfinite(p_values[k]), p_values[k]))
    first_fail = next((k for k, name in enumerate(order, 1)
                       if not p_values[name] < alpha / (m - k + 1)), m + 1)
    return {name: m - min(k, first_fail) + 1 for k, name in enumerate(order, 1)}

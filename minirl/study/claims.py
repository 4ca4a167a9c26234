"""The paper's claims as registered tests: each claim's points, its paired tests, its verdict rule and its figure.

Lian 2025 (arXiv 2512.07611) trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. Each finding
is a `@claim(...)` here: the points it trains, how many paired tests its rule makes, the metrics its figure
shows, and the decorated rule, which turns the finished runs into (verdict, what we measured, the rule in words,
the tests). These rules were committed before any run of the study they judge (STUDY.md names the commit).

A test compares two arms seed by seed (power.compare): arm B - arm A for seed s uses the same training prompts
where the batch shapes agree, and the same evaluation problems and draws, so its spread over seeds is the noise
of a *difference*. "Clear" is a paired t-test at 5 % with Bonferroni over every test of the table (TESTS below):
|mean| > t(1 - 0.05 / (2 m), n - 1) x se. A rule says *supported* when its tests are clear in the paper's
direction, *not supported* when one is clear against it, else *inconclusive* (no difference the study could see).

`points` passed to a rule: {label: {"series", "x", "runs", "numbers" (metric -> one value per seed, NaN where
that seed has no run)}}; `base`: the base policy's numbers per seed (report.base_numbers), same shape.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from .points import Claim, Point
from .power import compare

CLAIMS: dict[str, Claim] = {}


def claim(name: str, title: str, expectation: str, points, tests: int, figure: tuple[str, ...], x: str = "step",
          registry: dict | None = None):
    """Register the decorated verdict rule as claim `name` of `registry` (default CLAIMS, the registered worked
    study's): its points, the number of tests it makes, its figure."""
    def register(rule):
        (CLAIMS if registry is None else registry)[name] = Claim(name, title, expectation, tuple(points), rule,
                                                                  figure, x, tests)
        return rule
    return register


def count_tests(claims) -> int:
    """m, the number of paired tests a table of these claims makes: the Bonferroni divisor of every test in it."""
    return sum(CLAIMS[c].tests for c in claims)


def test(name: str, metric: str, a: list[float], b: list[float], m, scale: float = 100.0,
         unit: str = "points") -> dict:
    """One paired test b - a, labelled for the table; `scale` turns the metric into `unit` (100: points).
    m: the Bonferroni divisor of every test, or a function of "name: metric" giving this test's divisor (Holm's
    step-down correction, claims_tuned.py)."""
    tests = m(f"{name}: {metric}") if callable(m) else m
    return {"name": name, "metric": metric, "scale": scale, "unit": unit, **compare(a, b, tests)}


def show(t: dict) -> str:
    """'+3.1 ± 0.4 points (clear at ± 2.8)' for a test."""
    s = t["scale"]
    return (f"{s * t['mean']:+.2f} ± {s * t['se']:.2f} {t['unit']} (bar ± {s * t['bar']:.2f}, "
            f"{'clear' if t['sign'] else 'not clear'})")


def mean(values) -> str:
    vals = [v for v in values if math.isfinite(v)]
    return f"{statistics.fmean(vals):.3g}" if vals else "nan"


def pct(values) -> str:
    vals = [v for v in values if math.isfinite(v)]
    return f"{100 * statistics.fmean(vals):.1f} %" if vals else "nan"


def verdict(sign: int) -> str:
    """supported (clear in the paper's direction), not supported (clear against it), inconclusive (neither)."""
    return {1: "supported", -1: "not supported", 0: "inconclusive"}[sign]


def rule_verdict(expected: list[dict], guards: list[dict] = ()) -> str:
    """supported: every expected test clear in the paper's direction and no guard clearly against it;
    not supported: any of them clearly against it; else inconclusive."""
    if any(t["sign"] < 0 for t in [*expected, *guards]):
        return verdict(-1)
    return verdict(1 if all(t["sign"] > 0 for t in expected) else 0)


# The four algorithms at their preset defaults. Shared by several claims (one run each per seed); `transfer`:
# their final evaluation also covers the shifted tasks.
ARMS = {a: Point(a, a, {}, "algorithm", a, transfer=True) for a in ("ppo", "grpo", "dapo", "dapo-noDS")}
ACC = "held-out pass@1"  # the sampled accuracy, T = 1, k samples per problem on the whole held-out split


def _as(point: Point, label: str, series: str, x) -> Point:
    return dataclasses.replace(point, label=label, series=series, x=x)


@claim("H1", "Group size", "a larger group (G 8 vs G 2, 8 prompts per step) gives higher final accuracy and a "
       "smoother reward curve (GRPO)",
       # G 8 is the grpo arm (named, so that smoke runs, whose default G is 2, keep the two apart)
       [Point("grpo G=2", "grpo", {"group_size": 2}, "grpo", 2),
        Point("grpo G=8", "grpo", {"group_size": 8}, "grpo", 8, transfer=True)],
       tests=2, figure=("reward_mean", "reward/correct", "completion_len_mean"))
def verdict_H1(P, base, m):
    small, large = P["grpo G=2"]["numbers"], P["grpo G=8"]["numbers"]
    tests = [test("G 8 - G 2", ACC, small["sampled"], large["sampled"], m),
             test("G 2 - G 8", "step-to-step reward jitter", large["reward_roughness"], small["reward_roughness"], m,
                  1.0, "reward")]
    text = (f"accuracy G 2 {pct(small['sampled'])}, G 8 {pct(large['sampled'])}: {show(tests[0])}; reward jitter "
            f"{mean(small['reward_roughness'])} vs {mean(large['reward_roughness'])}; {mean(small['seconds'])} vs "
            f"{mean(large['seconds'])} s per run")
    return rule_verdict(tests), text, "G 8 clearly more accurate and clearly less jittery than G 2", tests


@claim("H2", "KL coefficient", "some beta > 0 beats no KL (GRPO: its default k3 KL in the loss, beta 0.04, vs "
       "beta 0; the large-beta end of the paper's non-monotonic curve is not run)",
       [Point("grpo beta=0", "grpo", {"kl_coef": 0.0}, "grpo", 0.0), _as(ARMS["grpo"], "grpo beta=0.04", "grpo", 0.04)],
       tests=1, figure=("reward/correct", "kl_ref", "entropy"))
def verdict_H2(P, base, m):
    off, on = P["grpo beta=0"]["numbers"], P["grpo beta=0.04"]["numbers"]
    tests = [test("beta 0.04 - beta 0", ACC, off["sampled"], on["sampled"], m)]
    text = f"accuracy beta 0 {pct(off['sampled'])}, beta 0.04 {pct(on['sampled'])}: {show(tests[0])}"
    return rule_verdict(tests), text, "beta 0.04 clearly more accurate than beta 0", tests


MARGIN = 0.03  # H3: "does not help" = any help of dynamic sampling is below 3 points (the study's target MDE)


@claim("H3", "Dynamic sampling", "DAPO's dynamic sampling does not help: at equal steps (so with fewer generated "
       "completions) DAPO without it is within 3 points of DAPO with it, or better",
       [ARMS["dapo"], ARMS["dapo-noDS"]], tests=1, figure=("reward/correct", "kept_group_frac", "samples"))
def verdict_H3(P, base, m):
    ds, nods = P["dapo"]["numbers"], P["dapo-noDS"]["numbers"]
    t = test("DS - no DS", ACC, nods["sampled"], ds["sampled"], m)
    ratio = statistics.fmean(ds["samples"]) / statistics.fmean(nods["samples"])
    upper = t["mean"] + t["bar"]
    sign = -1 if t["sign"] > 0 else 1 if math.isfinite(upper) and upper < MARGIN else 0
    text = (f"with DS {pct(ds['sampled'])}, without {pct(nods['sampled'])}: DS - no DS {show(t)}, upper bound "
            f"{100 * upper:+.2f} points; DS generated {ratio:.2f}x as many completions in the same steps")
    return verdict(sign), text, ("supported if DS - no DS + bar < 3 points; not supported if DS is clearly better"), [t]


@claim("H4", "Algorithm ranking", "DAPO without dynamic sampling is the best of the four, and every algorithm "
       "beats the base policy",
       list(ARMS.values()), tests=7, figure=("reward/correct", "completion_len_mean", "entropy"))
def verdict_H4(P, base, m):
    nods = P["dapo-noDS"]["numbers"]["sampled"]
    ranking = [test(f"dapo-noDS - {a}", ACC, P[a]["numbers"]["sampled"], nods, m) for a in ("ppo", "grpo", "dapo")]
    gains = [test(f"{a} - base", ACC, base["heldout/sampled"], P[a]["numbers"]["sampled"], m) for a in ARMS]
    order = sorted(ARMS, key=lambda a: -statistics.fmean(P[a]["numbers"]["sampled"]))
    text = (" > ".join(f"{a} {pct(P[a]['numbers']['sampled'])}" for a in order)
            + f"; base {pct(base['heldout/sampled'])}; " + "; ".join(f"{t['name']}: {show(t)}" for t in ranking + gains))
    return rule_verdict(ranking + gains), text, "dapo-noDS clearly above each other algorithm, and each clearly " \
        "above the base", ranking + gains


HACK_FIGURE = ("reward/valid_steps", "completion_len_mean", "reward/attempts", "reward/correct")


@claim("H5", "Token-level loss and reward hacking", "under the hackable per-step reward (0.1 per right step, in any "
       "attempt), a token-level loss curbs reward hacking (fewer right steps beyond the 2 a solution needs) and "
       "does not shorten completions, compared with the per-sequence mean (GRPO)",
       [Point(f"grpo {agg}", "grpo", {"loss_agg": agg}, "grpo", agg, "tinyzero")
        for agg in ("seq-mean-token-mean", "token-mean")], tests=2, figure=HACK_FIGURE)
def verdict_H5(P, base, m):
    seq, tok = P["grpo seq-mean-token-mean"]["numbers"], P["grpo token-mean"]["numbers"]
    hack = test("seq - token", "farmed steps per completion (end)", tok["extra_steps_end"], seq["extra_steps_end"],
                m, 1.0, "steps")
    length = test("token - seq", "completion length (end)", seq["length_end"], tok["length_end"], m, 1.0, "tokens")
    text = (f"right steps beyond a solution's 2, per completion, last 10 % of steps: per-sequence "
            f"{mean(seq['extra_steps_end'])}, token-level {mean(tok['extra_steps_end'])} ({show(hack)}); attempts "
            f"{mean(seq['attempts_end'])} vs {mean(tok['attempts_end'])}; length {mean(seq['length_end'])} vs "
            f"{mean(tok['length_end'])} tokens ({show(length)}); train correct rate {pct(seq['correct_end'])} vs "
            f"{pct(tok['correct_end'])}; held-out {pct(seq['sampled'])} vs {pct(tok['sampled'])}")
    return rule_verdict([hack], [length]), text, "token-level clearly fewer farmed steps, and not clearly shorter", \
        [hack, length]


@claim("H8", "Clip-higher", "DAPO's clip-higher (eps_high 0.28 instead of 0.2) slows the decline of the policy's "
       "entropy",
       [Point("dapo clip_high=0.2", "dapo", {"clip_high": 0.2}, "dapo", 0.2), _as(ARMS["dapo"], "dapo clip_high=0.28",
                                                                                "dapo", 0.28)],
       tests=1, figure=("entropy", "clip_frac_high", "completion_len_mean", "reward/attempts", "reward/correct"))
def verdict_H8(P, base, m):
    sym, high = P["dapo clip_high=0.2"]["numbers"], P["dapo clip_high=0.28"]["numbers"]
    t = test("0.28 - 0.2", "entropy (end)", sym["entropy_end"], high["entropy_end"], m, 1.0, "nats/token")
    text = (f"entropy first → last 10 % of steps: 0.2 {mean(sym['entropy_start'])} → {mean(sym['entropy_end'])}, 0.28 "
            f"{mean(high['entropy_start'])} → {mean(high['entropy_end'])} nats/token ({show(t)}); length "
            f"{mean(sym['length_end'])} vs {mean(high['length_end'])} tokens; held-out {pct(sym['sampled'])} vs "
            f"{pct(high['sampled'])}")
    return rule_verdict([t]), text, "clearly higher final entropy with eps_high 0.28", [t]


@claim("H9", "Completion length", "GRPO's completions grow longer over training than PPO's (per-sequence "
       "normalisation favours long wrong answers)",
       [ARMS["ppo"], ARMS["grpo"]], tests=1, figure=("completion_len_mean", "reward/attempts", "reward/correct"))
def verdict_H9(P, base, m):
    ppo, grpo = P["ppo"]["numbers"], P["grpo"]["numbers"]
    t = test("GRPO - PPO", "length growth", ppo["length_growth"], grpo["length_growth"], m, 1.0, "tokens")
    text = (f"completion length first → last 10 % of steps: PPO {mean(ppo['length_start'])} → "
            f"{mean(ppo['length_end'])}, GRPO {mean(grpo['length_start'])} → {mean(grpo['length_end'])} tokens; "
            f"growth GRPO - PPO {show(t)}")
    return rule_verdict([t]), text, "GRPO's length grows clearly more than PPO's", [t]


SHIFT_NAMES = {"transfer4": "4-number pass@1", "range": "numbers 1-20 pass@1"}  # run_numbers keys


@claim("T", "Transfer", "RL on 3-number problems (numbers 1-12) also raises accuracy on problems it never trained "
       "on: 4-number problems, and numbers from 1-20 with at least one above 12 (PPO, GRPO, DAPO vs the base)",
       [ARMS[a] for a in ("ppo", "grpo", "dapo")], tests=6, figure=("reward/correct", "completion_len_mean"))
def verdict_T(P, base, m):
    verdicts, parts, tests = [], [], []
    for a in ("ppo", "grpo", "dapo"):
        mine = [test(f"{a} - base", name, base[f"{k}/sampled"], P[a]["numbers"][k], m) for k, name in SHIFT_NAMES.items()]
        tests += mine
        verdicts.append(f"{a.upper()}: {rule_verdict(mine)}")
        parts.append(f"{a.upper()}: " + ", ".join(f"{t['metric']} {show(t)}" for t in mine))
    text = (f"base 4-number {pct(base['transfer4/sampled'])}, numbers 1-20 {pct(base['range/sampled'])}; "
            + "; ".join(parts))
    return " · ".join(verdicts), text, "per algorithm: clearly above the base on both shifts", tests

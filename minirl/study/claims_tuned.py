"""The second registered study (studies/claims-tuned): the seed article's tuning findings, each algorithm at its
tuned learning rate.

The first study (claims.py, studies/claims-worked) ran every algorithm at one learning rate and tested the
paper's abstract. The article this project grew from also reports how to *tune* the three algorithms; here each
of those findings is a claim with registered points, paired tests and a verdict rule, on the worked-steps task at
the `tuned` scale (points.SCALES["tuned"]: each preset at its tuned learning rate, config.TUNED_LR):

- L, learning-rate sensitivity: the width of each algorithm's stable band, ordered PPO > DAPO > GRPO;
- B, batch size: the gain from 4 to 8 prompts per step is larger for GRPO than for PPO and for DAPO;
- C, clipping: eps 0.1 against 0.3 trades stability for speed (PPO and DAPO; GRPO's clip cannot act);
- R, ranking at tuned learning rates (the old H4's rule), and H1, H3, H9, T again with the old rules.

Tests come in two families, each corrected with Holm's step-down procedure (power.holm) at 5 %: PRIMARY (L, B,
C, R) and SECONDARY (H1, H3, H9, T). A rule gets `m`, a function from "name: metric" to the test's Bonferroni
divisor under Holm (report_tuned.py computes it from every test's p-value in the family), so the old rules
(claims.py) run unchanged. The registration in words, with the predicted MDEs: studies/claims-tuned/REGISTRATION.md.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from ..config import tuned_lr
from .claims import ARMS, CLAIMS, claim, mean, pct, rule_verdict, show, test
from .points import TUNED_NAMES, Claim, Point

TUNED_CLAIMS: dict[str, Claim] = {}
SEEDS = 6  # every point: seeds 20-25 (the pilot's sds size it: REGISTRATION.md)
GRID = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)  # L: the tuning sweep's grid (tune.GRID), with the study's seeds
BAND_MARGIN = 0.03  # L: a learning rate is in the stable band when it is within 3 points of the seed's best
SPEED_AT = 0.45  # C: "speed" is the first step whose trailing 10-step mean train correct rate reaches 45 %
SPEED_WINDOW = 10
TASK = "worked"


def _tuned(preset: str) -> float:
    return tuned_lr(TUNED_NAMES.get(preset, preset), TASK)


def _at(point: Point, label: str, series: str, x) -> Point:
    return dataclasses.replace(point, label=label, series=series, x=x)


# ----------------------------------------------------------------------------- L: learning-rate sensitivity

def _lr_point(preset: str, lr: float) -> Point:
    """`preset` at `lr`; at its tuned learning rate this is the shared arm (the same run as R's)."""
    if math.isclose(lr, _tuned(preset)):
        return _at(ARMS[preset], f"{preset} lr={lr:g}", preset, lr)
    return Point(f"{preset} lr={lr:g}", preset, {"lr": lr}, preset, lr)


def band_width(accuracies: list[float], lrs=GRID, margin: float = BAND_MARGIN) -> float:
    """Decades of learning rate in which one seed's accuracy curve stays within `margin` of its best point.

    The curve is the held-out accuracy at each grid point, joined by straight lines in log10(lr); the band is
    where that line is >= best - margin. Its width lies in [0, log10(lrs[-1] / lrs[0])] (2 decades on GRID): a
    band that reaches the grid's end is cut there (censored), which the report says where it happens."""
    if len(accuracies) != len(lrs) or any(not math.isfinite(a) for a in accuracies):
        return math.nan
    floor = max(accuracies) - margin
    xs = [math.log10(lr) for lr in lrs]
    width = 0.0
    for (x0, y0), (x1, y1) in zip(zip(xs, accuracies), zip(xs[1:], accuracies[1:])):
        if min(y0, y1) >= floor:
            width += x1 - x0
        elif max(y0, y1) > floor:  # the line crosses the floor inside this segment
            width += (x1 - x0) * (max(y0, y1) - floor) / abs(y1 - y0)
    return width


def collapse_point(points: dict, preset: str, base_accuracy: float) -> str:
    """The smallest grid learning rate at which at least half the seeds collapsed (stopped with an error, or
    ended below the base policy's held-out accuracy), or 'none on the grid'."""
    for lr in GRID:
        n = points[f"{preset} lr={lr:g}"]["numbers"]
        collapsed = [f > 0 or s < base_accuracy for f, s in zip(n["failed"], n["sampled"]) if math.isfinite(s)]
        if collapsed and sum(collapsed) >= len(collapsed) / 2:
            return f"{lr:g} ({sum(collapsed)} of {len(collapsed)} seeds)"
    return "none on the grid"


def widths(P: dict, preset: str) -> list[float]:
    """One band width per seed of the seed list (NaN where a seed lacks a grid point)."""
    curves = zip(*(P[f"{preset} lr={lr:g}"]["numbers"]["sampled"] for lr in GRID))
    return [band_width(list(c)) for c in curves]


L_ORDER = ("ppo", "dapo", "grpo")  # the article: PPO tolerates the widest range, GRPO the narrowest


@claim("L", "Learning-rate sensitivity", "each algorithm's stable band (learning rates within 3 points of its "
       "best held-out pass@1) is widest for PPO, then DAPO, then GRPO; the collapse points are reported",
       [_lr_point(a, lr) for a in L_ORDER for lr in GRID], tests=3, figure=("reward/correct", "entropy", "approx_kl"),
       x="step", registry=TUNED_CLAIMS)
def verdict_L(P, base, m):
    w = {a: widths(P, a) for a in L_ORDER}
    pairs = [("ppo", "dapo"), ("dapo", "grpo"), ("ppo", "grpo")]
    tests = [test(f"{a.upper()} - {b.upper()}", "band width", w[b], w[a], m, 1.0, "decades") for a, b in pairs]
    base_acc = statistics.fmean(base["heldout/sampled"])
    text = "; ".join(f"{a.upper()}: band {mean(w[a])} decades (per seed {', '.join(f'{v:.2f}' for v in w[a])}), "
                     f"accuracy by lr {', '.join(pct(P[f'{a} lr={lr:g}']['numbers']['sampled']) for lr in GRID)}, "
                     f"collapses from {collapse_point(P, a, base_acc)}" for a in L_ORDER)
    text += "; " + "; ".join(f"{t['name']} {show(t)}" for t in tests)
    return rule_verdict(tests), text, "PPO's band clearly wider than DAPO's, DAPO's clearly wider than GRPO's, " \
        "and PPO's clearly wider than GRPO's", tests


# ----------------------------------------------------------------------------- B: batch size

B_SMALL = 4  # prompts per step at the small end (the large end is the scale's 8: the shared arms)


def _small_batch(preset: str) -> Point:
    # PPO samples one completion per prompt: its small batch has as many completions as the group methods' (32)
    size = B_SMALL * 8 if preset == "ppo" else B_SMALL
    return Point(f"{preset} batch={B_SMALL}", preset, {"batch_size": size}, preset, B_SMALL * 8)


def gains(P: dict, preset: str) -> list[float]:
    """Per seed: held-out pass@1 at 8 prompts per step minus at 4 (equal steps)."""
    small, large = P[f"{preset} batch={B_SMALL}"]["numbers"]["sampled"], P[f"{preset} batch=8"]["numbers"]["sampled"]
    return [b - a for a, b in zip(small, large)]


@claim("B", "Batch size", "at equal steps, going from 4 to 8 prompts per step (32 to 64 completions) raises GRPO's "
       "held-out pass@1 more than PPO's and more than DAPO's",
       [p for a in ("grpo", "ppo", "dapo") for p in (_small_batch(a), _at(ARMS[a], f"{a} batch=8", a, 64))],
       tests=2, figure=("reward/correct", "completion_len_mean", "entropy"), registry=TUNED_CLAIMS)
def verdict_B(P, base, m):
    g = {a: gains(P, a) for a in ("grpo", "ppo", "dapo")}
    tests = [test(f"GRPO gain - {a.upper()} gain", "held-out pass@1 gain, 4 -> 8 prompts", g[a], g["grpo"], m)
             for a in ("ppo", "dapo")]
    text = "; ".join(f"{a.upper()}: {pct(P[f'{a} batch={B_SMALL}']['numbers']['sampled'])} -> "
                     f"{pct(P[f'{a} batch=8']['numbers']['sampled'])} (gain {100 * statistics.fmean(g[a]):+.2f} ± "
                     f"{100 * statistics.stdev(g[a]) / math.sqrt(len(g[a])):.2f} points)" for a in g)
    text += "; " + "; ".join(f"{t['name']} {show(t)}" for t in tests)
    return rule_verdict(tests), text, "GRPO's gain clearly larger than PPO's and than DAPO's", tests


# ----------------------------------------------------------------------------- C: clipping

def _clip(preset: str, eps: float) -> Point:
    # DAPO keeps its clip-higher offset (eps_high = eps_low + 0.08, as 0.2 / 0.28)
    high = round(eps + 0.08, 2) if preset == "dapo" else eps
    return Point(f"{preset} eps={eps:g}", preset, {"clip_low": eps, "clip_high": high}, preset, eps)


def steps_to(run, threshold: float = SPEED_AT, window: int = SPEED_WINDOW) -> float:
    """The first step whose trailing `window`-step mean of the train correct rate reaches `threshold`; steps + 1
    when the run never gets there."""
    rows = [r for r in run.history if r.get("step", 0) > 0 and "reward/correct" in r]
    rates = [r["reward/correct"] for r in rows]
    for i in range(window - 1, len(rates)):
        if statistics.fmean(rates[i - window + 1:i + 1]) >= threshold:
            return float(rows[i]["step"])
    return float(run.config.steps + 1)


C_PRESETS = ("ppo", "dapo")  # GRPO makes one update per rollout: its ratio is 1, so no clip can act on it


@claim("C", "Clipping", "tighter clipping (eps 0.1) is more stable but slower than looser clipping (eps 0.3): "
       "less step-to-step reward jitter, and more steps to a 45 % train correct rate (PPO and DAPO at their tuned "
       "learning rates; GRPO's clip cannot act, so it is not run)",
       [p for a in C_PRESETS for p in (_clip(a, 0.1), _at(ARMS[a], f"{a} eps=0.2", a, 0.2), _clip(a, 0.3))],
       tests=4, figure=("reward_mean", "reward/correct", "clip_frac_low", "clip_frac_high", "entropy"),
       registry=TUNED_CLAIMS)
def verdict_C(P, base, m):
    verdicts, parts, tests = [], [], []
    for a in C_PRESETS:
        tight, loose = P[f"{a} eps=0.1"], P[f"{a} eps=0.3"]
        speed = {k: [steps_to(r) for r in P[f"{a} eps={k}"]["runs"]] for k in ("0.1", "0.3")}
        mine = [test(f"{a.upper()} eps 0.3 - 0.1", "reward jitter", tight["numbers"]["reward_roughness"],
                     loose["numbers"]["reward_roughness"], m, 1.0, "reward"),
                test(f"{a.upper()} eps 0.1 - 0.3", "steps to 45 % train correct", speed["0.3"], speed["0.1"], m,
                     1.0, "steps")]
        tests += mine
        failed = {k: int(sum(P[f"{a} eps={k}"]["numbers"]["failed"])) for k in ("0.1", "0.2", "0.3")}
        verdicts.append(f"{a.upper()}: {rule_verdict(mine)}")
        parts.append(f"{a.upper()}: jitter {mean(tight['numbers']['reward_roughness'])} (0.1) vs "
                     f"{mean(loose['numbers']['reward_roughness'])} (0.3), {show(mine[0])}; steps to 45 % "
                     f"{statistics.fmean(speed['0.1']):.1f} vs {statistics.fmean(speed['0.3']):.1f}, {show(mine[1])}; "
                     f"clipped tokens (end) {mean(tight['numbers']['clip_frac_end'])} vs "
                     f"{mean(loose['numbers']['clip_frac_end'])}; collapsed runs 0.1/0.2/0.3: "
                     f"{failed['0.1']}/{failed['0.2']}/{failed['0.3']}; held-out "
                     + " / ".join(pct(P[f"{a} eps={k}"]["numbers"]["sampled"]) for k in ("0.1", "0.2", "0.3")))
    verdicts.append("GRPO: no effect by construction")
    return " · ".join(verdicts), "; ".join(parts), "per algorithm: eps 0.3 clearly more jittery and eps 0.1 " \
        "clearly slower (both, in the article's directions)", tests


# ----------------------------------------------------------------------------- R and the old claims, re-run here

# R is the old H4 (DAPO-noDS first, every algorithm above the base) at tuned learning rates; H1, H3, H9 and T keep
# their old points and rules (claims.py), which the tuned scale runs at the tuned learning rates.
TUNED_CLAIMS["R"] = dataclasses.replace(CLAIMS["H4"], name="R", title="Ranking at tuned learning rates")
for _name in ("H1", "H3", "H9", "T"):
    TUNED_CLAIMS[_name] = CLAIMS[_name]

FAMILIES = {"primary": ("L", "B", "C", "R"), "secondary": ("H1", "H3", "H9", "T")}
REGISTERED_ORDER = tuple(c for f in FAMILIES.values() for c in f)


def judge(points: dict[str, dict], base: dict, alpha: float = 0.05) -> dict[str, tuple]:
    """Every registered claim's (verdict, what we measured, rule in words, tests), Holm-corrected per family.

    `points`: {claim: its collected points (report.collect)}, for every claim of REGISTERED_ORDER. Pass 1 runs each
    rule with divisor 1 to get every test's p-value (power.p_value); Holm (power.holm) over each family turns the
    p-values into per-test divisors; pass 2 runs the rules again with those divisors, so "clear" and each rule's
    verdict follow the step-down procedure."""
    from .power import holm, p_value

    divisors = {}
    for family in FAMILIES.values():
        raw = {}
        for name in family:
            for t in TUNED_CLAIMS[name].verdict(points[name], base, lambda key: 1)[3]:
                raw[(name, f"{t['name']}: {t['metric']}")] = p_value(t["mean"], t["se"], t["n"])
        divisors |= holm(raw, alpha)
    return {name: TUNED_CLAIMS[name].verdict(points[name], base, lambda key, c=name: divisors[(c, key)])
            for name in REGISTERED_ORDER}

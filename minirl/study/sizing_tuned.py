"""The predicted minimum detectable effects of the tuned study (claims_tuned.py), from its pilots.

    python -m minirl.study.sizing_tuned      # prints the table and writes studies/claims-tuned/sizing.json

Each registered test gets the standard deviation of its per-seed differences from the closest pilot:

- R, H3, H9, T: the tuned-scale pilot (studies/claims-tuned/pilot: 4 seeds x GRPO, PPO, DAPO, DAPO-noDS, the
  same arms the study runs), paired differences straight from its runs;
- L: the tuning sweep (studies/lr-sweep, worked task: the same grid, 3 seeds, validation split 200 x 4), band
  widths per seed and their paired differences;
- B and C: no pilot ran their extra points, so a difference of two differences (B) or of two arms (C) is taken
  as sqrt(2) x the pilot's sd of the matching single difference (arms assumed as noisy as the pilot's);
- H1: the registered worked study's G 8 - G 2 differences (5 seeds, lr 1e-4, tiny-steps: another scale).

A pilot sd with few degrees of freedom is itself noisy (the first study's 2-seed pilot was 5x too small), so the
table also gives its one-sided 80 % upper confidence bound, sd * sqrt(df / chi2_0.2(df)) (Wilson-Hilferty's chi2
quantile), and the MDE at 6 seeds from both. Holm's divisor for a test lies between 1 (the family's clearest test)
and the family's size (Bonferroni), so each MDE is given at both ends.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ..runs import Run, _write_atomic
from .claims_tuned import FAMILIES, SEEDS, SPEED_AT, TUNED_CLAIMS, band_width, steps_to
from .power import mde

ROOT = Path(__file__).resolve().parents[2] / "studies"
PILOT, SWEEP, OLD = ROOT / "claims-tuned" / "pilot", ROOT / "lr-sweep", ROOT / "claims-worked"


def sd_upper(sd: float, df: int, level: float = 0.8) -> float:
    """One-sided `level` upper confidence bound of a standard deviation estimated with `df` degrees of freedom."""
    z = statistics.NormalDist().inv_cdf(1 - level)
    chi2 = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3  # Wilson-Hilferty
    return sd * math.sqrt(df / chi2)


def _pilot_runs() -> dict[str, list[dict]]:
    """{arm: [per-seed numbers]} from the pilot's run folders (metrics.jsonl and study.json)."""
    from .report import run_numbers

    arms: dict[str, list] = {}
    for folder in sorted((PILOT / "runs").iterdir()):
        record = json.loads((folder / "study.json").read_text())
        run = Run.load(folder)
        numbers = run_numbers(run, record) | {"steps_to": steps_to(run)}
        arms.setdefault(record["point"], []).append((record["seed"], numbers))
    return {a: [n for _, n in sorted(v, key=lambda x: x[0])] for a, v in arms.items()}


def _sd(values) -> tuple[float, int]:
    values = list(values)
    return statistics.stdev(values), len(values) - 1


def _sweep_widths() -> dict[str, list[float]]:
    summary = json.loads((ROOT.parent / "minirl" / "assets" / "sweeps" / "lr_tuning.json").read_text())
    worked = summary["summary"]["worked"]
    out = {}
    for algo in ("ppo", "dapo", "grpo"):
        points = sorted(worked[algo]["points"].values(), key=lambda p: p["lr"])
        out[algo] = [band_width([p["final"][i] for p in points], [p["lr"] for p in points]) for i in range(3)]
    return out


def predicted() -> list[dict]:
    """One row per registered test: the claim, the test, where its sd comes from, sd, df and the MDEs at 6 seeds."""
    runs, pairs = _pilot_runs(), json.loads((PILOT / "pilot.json").read_text())["pairs"]
    col = lambda arm, key: [r[key] for r in runs[arm]]  # noqa: E731
    diff = lambda a, b, key: [y - x for x, y in zip(col(a, key), col(b, key))]  # noqa: E731
    rows = []

    def add(claim, name, unit, scale, sd, df, source, effect=math.nan):
        size = len(next(f for f in FAMILIES.values() if claim in f))
        family = sum(TUNED_CLAIMS[c].tests for c in next(f for f in FAMILIES.values() if claim in f))
        up = sd_upper(sd, df)
        rows.append({"claim": claim, "test": name, "unit": unit, "source": source, "sd": scale * sd, "df": df,
                     "sd_upper80": scale * up, "pilot_effect": scale * effect, "family_tests": family,
                     "claims_in_family": size,
                     **{f"mde_{k}": scale * mde(s, SEEDS, tests=t) for k, s, t in
                        (("best", sd, 1), ("holm_worst", sd, family), ("upper_best", up, 1),
                         ("upper_holm_worst", up, family))}})

    w = _sweep_widths()
    for a, b in (("ppo", "dapo"), ("dapo", "grpo"), ("ppo", "grpo")):
        d = [x - y for x, y in zip(w[a], w[b])]
        add("L", f"{a.upper()} - {b.upper()} band width", "decades", 1.0, *_sd(d), "tuning sweep, 3 seeds",
            statistics.fmean(d))
    for a in ("ppo", "dapo"):
        p = pairs[f"{'ppo - grpo' if a == 'ppo' else 'dapo - grpo'} | heldout/sampled"]
        add("B", f"GRPO gain - {a.upper()} gain", "points", 100.0, math.sqrt(2) * p["sd"], 3,
            f"sqrt(2) x pilot sd of {a} - grpo")
    for a in ("ppo", "dapo"):
        add("C", f"{a.upper()} eps 0.3 - 0.1 reward jitter", "reward", 1.0,
            math.sqrt(2) * _sd(col(a, "reward_roughness"))[0], 3, f"sqrt(2) x pilot sd of {a}'s jitter")
        add("C", f"{a.upper()} eps 0.1 - 0.3 steps to {SPEED_AT:.0%}", "steps", 1.0,
            math.sqrt(2) * _sd(col(a, "steps_to"))[0], 3, f"sqrt(2) x pilot sd of {a}'s steps")
    for a in ("ppo", "grpo", "dapo"):
        add("R", f"dapo-noDS - {a}", "points", 100.0, *_sd(diff(a, "dapo-noDS", "sampled")), "pilot",
            statistics.fmean(diff(a, "dapo-noDS", "sampled")))
    for a in ("ppo", "grpo", "dapo", "dapo-noDS"):
        p = pairs[f"{a} - base | heldout/sampled"]
        add("R", f"{a} - base", "points", 100.0, p["sd"], 3, "pilot", statistics.fmean(p["per_seed"]))
    old = json.loads((OLD / "results" / "H1.json").read_text())["tests"]
    for t in old:
        add("H1", f"{t['name']} {t['metric']}", t["unit"], t["scale"], t["sd"], t["n"] - 1,
            "registered worked study (another scale)", t["mean"])
    add("H3", "DS - no DS", "points", 100.0, *_sd(diff("dapo-noDS", "dapo", "sampled")), "pilot",
        statistics.fmean(diff("dapo-noDS", "dapo", "sampled")))
    add("H9", "GRPO - PPO length growth", "tokens", 1.0, *_sd(diff("ppo", "grpo", "length_growth")), "pilot",
        statistics.fmean(diff("ppo", "grpo", "length_growth")))
    for a in ("ppo", "grpo", "dapo"):
        for key, name in (("transfer4", "4-number"), ("range", "numbers 1-20")):
            p = pairs[f"{a} - base | {key}/sampled"]
            add("T", f"{a} - base {name}", "points", 100.0, p["sd"], 3, "pilot", statistics.fmean(p["per_seed"]))
    return rows


def main() -> None:
    rows = predicted()
    print(f"{'claim':5s} {'test':40s} {'pilot effect':>12s} {'sd':>7s} {'df':>3s} {'sd up80':>8s} "
          f"{'MDE best':>9s} {'MDE Holm-worst':>15s} {'(sd up80)':>10s}  source")
    for r in rows:
        print(f"{r['claim']:5s} {r['test']:40s} {r['pilot_effect']:12.2f} {r['sd']:7.3f} {r['df']:3d} "
              f"{r['sd_upper80']:8.3f} {r['mde_best']:9.2f} {r['mde_holm_worst']:15.2f} "
              f"{r['mde_upper_holm_worst']:10.2f}  {r['unit']}; {r['source']}")
    file = ROOT / "claims-tuned" / "sizing.json"
    _write_atomic(file, json.dumps({"seeds": SEEDS, "rows": rows}, indent=1, allow_nan=True) + "\n")
    print(f"wrote {file}")


if __name__ == "__main__":
    main()

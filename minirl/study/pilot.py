"""`python -m minirl study --pilot`: a few seeds of four arms, to size a study before its rules are registered.

    python -m minirl study --pilot --scale tuned --seeds 4 --out studies/claims-tuned/pilot

Trains GRPO, PPO, DAPO and DAPO without dynamic sampling at the scale's defaults for seeds 0, 1, ... (resumable, like
the study), then prints per run its training and evaluation seconds and its held-out pass@1; per pair of arms the
paired differences over seeds and their standard deviation; and from that sd (power.py) the minimum detectable effect
at 5 seeds and the seeds a 3-point MDE would need, for one test and with the alpha split over 10 tests. Writes
<out>/pilot.json. Two seeds give the sd one degree of freedom and underestimated the spread five-fold in the
registered study's pilot: use at least four.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import statistics
import time
from pathlib import Path

from ..runs import _write_atomic
from .jobs import STUDY_FILE, run_folder, run_point
from .points import Point, Scale
from .power import mde, paired, seeds_for
from .report import base_numbers

# DAPO without dynamic sampling joined after the registered study's pilot (studies/claims-worked/pilot has three arms)
ARMS = tuple(Point(a, a, {}, "algorithm", a, transfer=True) for a in ("grpo", "ppo", "dapo", "dapo-noDS"))
METRICS = ("heldout/sampled", "transfer4/sampled", "range/sampled")  # pass@1 estimates, k = scale.eval_k


def run_pilot(scale: Scale, seeds: int, out: Path, device: str | None = None, target: float = 0.03) -> dict:
    out = Path(out)
    scale = dataclasses.replace(scale, seed0=0)  # seeds 0, 1, ...: the registered study starts at scale.seed0
    t0 = time.perf_counter()
    for seed, arm in itertools.product(scale.seeds(seeds), ARMS):
        run_point(arm, scale, seed, out / "runs", device)
    base = base_numbers(out, scale, seeds)  # one evaluation per seed, with that seed's draws
    records = {arm.label: [json.loads((run_folder(arm, scale, s, out / "runs") / STUDY_FILE).read_text())
                           for s in scale.seeds(seeds)] for arm in ARMS}
    print(f"\npilot: {seeds} seeds x {len(ARMS)} arms at scale {scale.name}, {time.perf_counter() - t0:.0f} s "
          f"(base held-out sampled {100 * statistics.fmean(base['heldout/sampled']):.1f} %)")
    print(f"{'arm':9s} {'seed':>4s} {'train s':>8s} {'eval s':>7s}  " + "  ".join(f"{m:>18s}" for m in METRICS))
    for label, recs in records.items():
        for r in recs:
            f = r["final"]
            print(f"{label:9s} {r['seed']:4d} {r['train_seconds']:8.1f} {r.get('eval_seconds', math.nan):7.1f}  "
                  + "  ".join(f"{100 * f.get(m, math.nan):17.1f}%" for m in METRICS))
    pairs = {}
    # against the base policy, evaluated with each seed's draws: paired like two arms
    rows = [(f"{a.label} - base", [r["final"][m] for r in records[a.label]], base[m], m) for a in ARMS for m in METRICS]
    rows += [(f"{b.label} - {a.label}", [r["final"][m] for r in records[b.label]],
              [r["final"][m] for r in records[a.label]], m) for a, b in itertools.combinations(ARMS, 2) for m in METRICS]
    print(f"\n{'difference':20s} {'metric':18s} {'per seed (points)':>24s} {'sd':>6s} {'MDE n=5':>8s} "
          f"{'MDE n=5, 10 tests':>18s} {'seeds for MDE ' + format(100 * target, 'g'):>16s}")
    for name, b_vals, a_vals, metric in rows:
        d = paired(a_vals, b_vals)
        sd = d["sd"]
        row = {"per_seed": d["d"], "sd": sd, "mde_5": mde(sd, 5), "mde_5_10_tests": mde(sd, 5, tests=10),
               "seeds_for_target": seeds_for(target, sd) if math.isfinite(sd) and sd > 0 else None}
        pairs[f"{name} | {metric}"] = row
        print(f"{name:20s} {metric:18s} {', '.join(f'{100 * x:+.1f}' for x in d['d']):>24s} {100 * sd:6.2f} "
              f"{100 * row['mde_5']:8.2f} {100 * row['mde_5_10_tests']:18.2f} {row['seeds_for_target']!s:>16s}")
    result = {"scale": scale.name, "seeds": seeds, "target_mde": target, "base": base, "pairs": pairs,
              "runs": {k: [{"seed": r["seed"], "train_seconds": r["train_seconds"],
                            "eval_seconds": r.get("eval_seconds"), "final": r["final"]} for r in v]
                       for k, v in records.items()}}
    _write_atomic(out / "pilot.json", json.dumps(result, indent=1, allow_nan=True) + "\n")
    print(f"wrote {out / 'pilot.json'}")
    return result

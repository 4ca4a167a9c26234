"""The tuned study's report: results/<claim>.json, figures and STUDY.md, from the run folders.

    python -m minirl study --registration tuned --report-only

Verdicts come from claims_tuned.judge (each claim's registered rule, Holm over its family); the predicted MDEs
from sizing.json (written before the runs by sizing_tuned.py); per-run numbers, point tables and training-curve
figures from report.py, shared with the first study's report.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from pathlib import Path

from ..runs import _write_atomic
from .claims_tuned import (BAND_MARGIN, FAMILIES, GRID, L_ORDER, REGISTERED_ORDER, SEEDS, TUNED_CLAIMS, judge,
                           widths)
from .points import Scale
from .report import (base_numbers, caveats, claim_section, collect, draw, draw_differences, points_json,
                     recorded, refuse_to_erase, round_json, test_json)
from .tune import busy_seconds

# The commit that registered the claims, points, metrics, families and rules before any of the study's runs.
REGISTERED = "commit 5c275e7 (studies/claims-tuned/REGISTRATION.md)"
DEVIATIONS = ("the claims, points, metrics, seeds, families and verdict rules are as registered. One edit to "
              "claims_tuned.py after registration, during the runs: claim L's list of training curves named a "
              "metric that does not exist (kl_old, now approx_kl); L's figure is the accuracy-by-learning-rate plot, "
              "so no number or verdict depends on it")
OLD_H4 = Path(__file__).resolve().parents[2] / "studies" / "claims-worked" / "results" / "H4.json"

# The article's findings and how the registered verdicts decide them (REGISTRATION.md's last table).
FINDINGS = (
    ("(1) learning-rate sensitivity differs: PPO tolerates the widest range, GRPO the narrowest, DAPO between", "L"),
    ("(2) GRPO gains most from a larger batch; PPO and DAPO are more consistent", "B"),
    ("(3) tighter clipping is more stable but slower, looser clipping faster but riskier", "C"),
    ("DAPO without dynamic sampling ranks first", "R"),
)


def _predicted(out: Path) -> dict[str, list[dict]]:
    """sizing.json's rows per claim, in the order of each rule's tests."""
    file = Path(out) / "sizing.json"
    rows = json.loads(file.read_text())["rows"] if file.is_file() else []
    per_claim: dict[str, list] = {}
    for row in rows:
        per_claim.setdefault(row["claim"], []).append(row)
    return per_claim


def _spans(records: list[dict]) -> list[tuple]:
    return [(datetime.datetime.fromisoformat(r["started_at"]), datetime.datetime.fromisoformat(r["ended_at"]))
            for r in records if r.get("started_at") and r.get("ended_at")]


def _row(claim, t, predicted: dict | None, verdict: str, first: bool) -> str:
    k = t["scale"]
    pred = "" if predicted is None else f"{predicted['mde_best']:.2f}–{predicted['mde_holm_worst']:.2f}"
    cells = [f"{t['name']}: {t['metric']}", f"{k * t['mean']:+.2f} ± {k * t['se']:.2f}", f"± {k * t['bar']:.2f}",
             pred, f"{k * t['mde']:.2f} {t['unit']}", "yes" if t["sign"] else "no"]
    return (f"| {claim.name + ' ' + claim.title if first else ''} | " + " | ".join(cells)
            + f" | {'**' + verdict + '**' if first else ''} |")


def draw_lr(points: dict, base: dict, file: Path) -> None:
    """Claim L: held-out pass@1 against the learning rate, one panel per algorithm, a thin line per seed (the seed
    band) and the mean; the base policy dashed."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(L_ORDER), figsize=(4.2 * len(L_ORDER), 3.4), sharey=True)
    base_acc = 100 * statistics.fmean(base["heldout/sampled"])
    for ax, algo in zip(axes, L_ORDER):
        curves = list(zip(*(points[f"{algo} lr={lr:g}"]["numbers"]["sampled"] for lr in GRID)))
        for curve in curves:
            ax.plot(GRID, [100 * v for v in curve], color="C0", alpha=0.3, lw=1)
        mean = [100 * statistics.fmean(v for v in col if math.isfinite(v)) for col in zip(*curves)]
        ax.plot(GRID, mean, "o-", color="C0", lw=2, label="mean of seeds")
        ax.axhline(base_acc, color="0.4", ls="--", lw=1, label="base policy")
        ax.set_xscale("log")
        ax.set_title(f"{algo.upper()}: band {statistics.fmean(widths(points, algo)):.2f} decades", fontsize=10)
        ax.set_xlabel("learning rate")
    axes[0].set_ylabel("held-out pass@1 (%)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"L · held-out pass@1 by learning rate (thin: one seed each; band: within "
                 f"{100 * BAND_MARGIN:g} points of the seed's best)", fontsize=10)
    fig.tight_layout()
    file.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(file, dpi=80, bbox_inches="tight")
    plt.close(fig)


def _findings(judged: dict) -> list[str]:
    lines = ["## The article's findings at this scale", "",
             "As registered: a finding *holds* where its claim is supported, is *contradicted* where it is not "
             "supported, and stays *undecided* where the study could not see a difference (C is judged per "
             "algorithm).", ""]
    for finding, name in FINDINGS:
        verdict = judged[name][0] if name in judged else "not run"
        words = {"supported": "holds", "not supported": "contradicted", "inconclusive": "undecided"}
        parts = [f"{p.split(': ')[0]} {words.get(p.split(': ')[-1], p.split(': ')[-1])}" for p in verdict.split(" · ")] \
            if ":" in verdict else [words.get(verdict, verdict)]
        lines.append(f"- **{finding}** ({name}): {', '.join(parts)}.")
    if OLD_H4.is_file() and "R" in judged:
        old = json.loads(OLD_H4.read_text())
        lines += ["", f"**The first study's H4** (every algorithm at lr 1e-4, 5 seeds): *{old['verdict']}*. At tuned "
                  f"learning rates (R, the same rule): *{judged['R'][0]}*. {judged['R'][1]}."]
    return lines + ["", *LEFT_OPEN, ""]


# what this study's comparisons leave open, whatever the numbers (report.caveats adds the scale, the seeds, the
# cost and the runs that stopped early, as in the first study's report)
LEFT_OPEN = [
    "**What the comparisons leave open.**",
    "- The first study's H4 and R differ in two things: the learning rates (one for all, against each algorithm's "
    "tuned one) and the policy (`tiny-steps` with 64-token answers, against `tiny-worked` with 80). R cannot say "
    "which of the two changed the order.",
    "- C compares clips at the tuned learning rates, where the ratio rarely leaves [1 - eps, 1 + eps] (C's clipped-token "
    "fractions below). It says what clipping does where one would train, not what it does at the high learning rates "
    "where the article saw collapse.",
    "- L's band is measured in learning rate. GRPO makes one optimizer step per rollout, PPO and DAPO four, so the "
    "same learning rate is a different amount of change per rollout; a band ordering is a statement about the "
    "preset as shipped, not about the loss alone.",
]


def write_tuned_report(out: Path, claims: list[str], scale: Scale, seeds: int = SEEDS) -> str:
    """results/<claim>.json, figures/ and STUDY.md for every registered claim (`claims`: those just run, named in
    the commands; the report always covers the whole registration, since Holm needs whole families)."""
    out = Path(out)
    collected = {name: collect(TUNED_CLAIMS[name], scale, seeds, out / "runs") for name in REGISTERED_ORDER}
    records = list({run.path: record for pts in collected.values() for p in pts.values()
                    for run, record in zip(p["runs"], p["records"])}.values())
    if not records:
        refuse_to_erase(out)
    base = base_numbers(out, scale, seeds)
    done = {name: min(len(p["runs"]) for p in pts.values()) for name, pts in collected.items()}
    families_done = [f for f, names in FAMILIES.items() if all(done[n] == seeds for n in names)]
    judged = {}
    if len(families_done) == len(FAMILIES):
        judged = judge(collected, base)
    predicted = _predicted(out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    rows, sections = [], []
    for name in REGISTERED_ORDER:
        claim, points = TUNED_CLAIMS[name], collected[name]
        verdict, measured, rule, tests = judged.get(name, (
            "not run", f"{done[name]} of {seeds} seeds finished for every point (verdicts wait for every claim of "
            "both families: Holm's correction needs all their tests)", "-", []))
        command = f"python -m minirl study --registration tuned --only {name}" + (" --smoke" if "smoke" in scale.name
                                                                                   else "")
        mine = predicted.get(name, [])
        result = {"claim": name, "title": claim.title, "expectation": claim.expectation, "verdict": verdict,
                  "rule": rule, "measured": measured, "seeds": list(scale.seeds(seeds)), "scale": scale.name,
                  "family": next(f for f, names in FAMILIES.items() if name in names), "command": command,
                  "tests": [test_json(t) | {"predicted_mde": [round_json(mine[i]["mde_best"]),
                                                              round_json(mine[i]["mde_holm_worst"])]
                                            if i < len(mine) else None} for i, t in enumerate(tests)],
                  "base": {k: [round_json(v) for v in vs] for k, vs in base.items() if isinstance(vs[0], float)},
                  "points": points_json(points, list(scale.seeds(seeds)))}
        _write_atomic(out / "results" / f"{name}.json", json.dumps(result, indent=1, allow_nan=False) + "\n")
        if tests:
            if name == "L":
                draw_lr(points, base, out / "figures" / "L.png")
            else:
                draw(claim, points, out / "figures" / f"{name}.png")
            draw_differences(claim, tests, out / "figures" / f"{name}_paired.png")
        for i, t in enumerate(tests):
            rows.append(_row(claim, t, mine[i] if i < len(mine) else None, verdict, i == 0))
        if not tests:
            rows.append(f"| {name} {claim.title} | | | | | | | {verdict} |")
        section = claim_section(claim, points, verdict, rule, measured, command, bool(tests))
        sections.append(section.replace("**Expectation (the paper):**", "**Expectation (the article):**"))
    md = "\n".join(_intro(base, scale, seeds, records) + rows + [""] + (_findings(judged) if judged else [])
                   + sections) + caveats(records, scale, seeds)
    _write_atomic(out / "STUDY.md", md)
    print(f"wrote {out / 'STUDY.md'}, results/ and figures/")
    return md


def _intro(base: dict, scale: Scale, seeds: int, records: list[dict]) -> list[str]:
    run_minutes = sum(float(r["train_seconds"]) + float(r.get("eval_seconds", 0)) for r in records) / 60
    busy = busy_seconds(_spans(records))
    seed_list = list(scale.seeds(seeds))
    base_acc = 100 * statistics.fmean(v for v in base["heldout/sampled"] if math.isfinite(v))
    return [
        "# The article's tuning findings at tuned learning rates: a registered, paired study", "",
        "The article this project grew from reports how to tune PPO, GRPO and DAPO on Countdown: how sensitive "
        "each is to the learning rate (L), which gains from a larger batch (B), what clipping trades (C), and "
        "which ranks first (R). This study re-tests them with minirl's tiny worked-steps policy, each algorithm "
        f"at its tuned learning rate (scale {scale.name}: {scale.steps} steps per run, {scale.batch_size} prompts × "
        f"G {scale.group_size} per step, PPO {scale.batch_size * scale.group_size} × 1; answers up to "
        f"{scale.budget()['max_new_tokens']} tokens; seeds {seed_list[0]}..{seed_list[-1]} for every point), and "
        "re-runs the first study's H1, H3, H9 and T there. Every number below comes from the runs of "
        "`python -m minirl study --registration tuned`; one claim: `--only L` (and so on).", "",
        f"- **Registered.** The claims, points, metrics, families and rules were committed before any run: "
        f"{REGISTERED}. **After registration:** {DEVIATIONS}.",
        f"- **Metric.** Held-out pass@1: the sampled (T = 1) accuracy over {scale.eval_k} samples of each of "
        f"{scale.eval_n} held-out problems, unless a test names another metric. Base policy: {base_acc:.1f} %.",
        "- **Paired.** Every arm of seed s trains on the same prompts per step where the batch shapes agree and is "
        "evaluated with the same problems and sampling seed as the others and the base policy of seed s. A test is "
        "the mean of the per-seed differences ± its standard error sd / √n.",
        f"- **Multiple comparisons.** Holm's step-down correction at 5 % within each family: primary "
        f"({', '.join(FAMILIES['primary'])}), secondary ({', '.join(FAMILIES['secondary'])}). *Clear beyond* is "
        "the test's bar under Holm; *MDE* the true difference it would find with 80 % probability at that bar, from "
        "the seeds' own sd; *predicted* the MDE registered from the pilots (REGISTRATION.md), from Holm's last rank "
        "to its first.",
        f"- **Duration.** {len(records)} distinct runs; {run_minutes:.1f} minutes of training and final evaluation "
        "summed over runs, "
        + (f"{busy / 60:.1f} minutes of wall clock in which at least one run was going (two side by side, one "
           "torch thread each; summed over sittings, breaks left out)" if busy else "wall clock not recorded")
        + f"; machine {recorded(records, 'machine')}, torch {recorded(records, 'torch')}, "
        f"{recorded(records, 'threads')} torch thread(s), minirl {recorded(records, 'code_version')}. Timings "
        "are single measurements and noisy.", "",
        "| claim | test: metric | paired difference ± SE | clear beyond | predicted MDE | MDE | clear | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]

"""The study's report: per-claim results JSON, figures (mean ± std over seeds) and STUDY.md with a verdict table.

    python -m minirl study --report-only --out benchmarks/study

The numbers of each run come from its metrics and its study.json; each claim's verdict rule is in claims.py.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ..runs import Run, _write_atomic, code_version
from .claims import CLAIMS
from .jobs import STUDY_FILE, final_evaluation, load_base_policy, run_folder
from .points import Claim, Point, Scale
from .stats import num, pct, stats

# ----------------------------------------------------------------------------- numbers per run and per point

def _tail(values: list[float], frac: float = 0.1) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan
    k = max(1, round(len(values) * frac))
    return statistics.fmean(values[-k:])


def _head(values: list[float], frac: float = 0.1) -> float:
    return _tail(list(reversed([v for v in values if v is not None])), frac)


def run_numbers(run: Run, record: dict, base: dict) -> dict:
    """The numbers a verdict may use, for one (point, seed)."""
    rows = [r for r in run.history if r.get("step", 0) > 0 and "reward_mean" in r]
    col = lambda name: [r.get(name, math.nan) for r in rows]  # noqa: E731
    rewards = col("reward_mean")
    diffs = [b - a for a, b in zip(rewards, rewards[1:])]
    f = record["final"]
    seconds = float(record["train_seconds"])
    fmt, correct = col("reward/format_ok"), col("reward/correct")
    return {
        "sampled": f["heldout/sampled"], "greedy": f["heldout/greedy"],
        "transfer_sampled": f["transfer4/sampled"], "transfer_greedy": f["transfer4/greedy"],
        "transfer_numbers_ok": f["transfer4/sampled_numbers_ok"],
        "failed": 1.0 if record.get("error") else 0.0,
        "seconds": seconds, "samples": float(run.history[-1].get("samples", 0)) if run.history else 0.0,
        "gain_per_minute": (f["heldout/sampled"] - base["heldout/sampled"]) / (seconds / 60) if seconds else math.nan,
        "reward_roughness": statistics.pstdev(diffs) if len(diffs) > 1 else math.nan,
        "entropy_start": _head(col("entropy")), "entropy_end": _tail(col("entropy")),
        "length_start": _head(col("completion_len_mean")), "length_end": _tail(col("completion_len_mean")),
        "format_only_end": _tail([a - b for a, b in zip(fmt, correct)]) if rows and "reward/format_ok" in rows[0] else math.nan,
        "clip_frac_end": _tail([r.get("clip_frac_low", 0.0) + r.get("clip_frac_high", 0.0) for r in rows]),
    }


# ----------------------------------------------------------------------------- collecting, drawing, writing

def base_numbers(out: Path, scale: Scale) -> dict:
    """The base policy's final-evaluation numbers (cached in <out>/base.json)."""
    file = out / "base.json"
    if file.is_file():
        return json.loads(file.read_text(encoding="utf-8"))
    point = Point("base", "grpo")
    numbers = final_evaluation(load_base_policy(scale, "cpu" if scale.model is None else None), point,
                               scale, point.config(scale, 0))
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(file, json.dumps(numbers, indent=1) + "\n")
    return numbers


def collect(claim: Claim, scale: Scale, seeds: int, runs_root: Path, base: dict) -> dict:
    """{label: {"series", "x", "runs", "records" (their study.json), "numbers" (metric -> per-seed list), "stats"}}
    of the finished runs."""
    points = {}
    for point in claim.points:
        runs, records, numbers = [], [], {}
        for seed in range(seeds):
            path = run_folder(point, scale, seed, runs_root)
            if not (path / STUDY_FILE).is_file():
                continue
            run, record = Run.load(path), json.loads((path / STUDY_FILE).read_text(encoding="utf-8"))
            runs.append(run)
            records.append(record)
            for k, v in run_numbers(run, record, base).items():
                numbers.setdefault(k, []).append(v)
        points[point.label] = {"label": point.label, "series": point.series, "x": point.x, "runs": runs,
                               "records": records, "numbers": numbers, "stats": {k: stats(v) for k, v in numbers.items()}}
    return points


def draw(claim: Claim, points: dict, file: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from ..plots import plot_runs

    runs = [r for p in points.values() for r in p["runs"]]
    label = {id(r): p["label"] for p in points.values() for r in p["runs"]}
    fig = plot_runs(runs, claim.figure, group_by=lambda r: label[id(r)], smooth=0.6, x=claim.x,
                    title=f"{claim.name} · {claim.title} (mean ± std over seeds)")
    fig.set_size_inches(11, 4)
    file.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(file, dpi=90, bbox_inches="tight")


def _jsonable(points: dict) -> list[dict]:
    keep = ("mean", "std", "n")
    return [{"label": p["label"], "series": p["series"], "x": p["x"],
             "seeds": [r.config.seed for r in p["runs"]],
             "per_seed": {k: [None if not math.isfinite(v) else round(v, 5) for v in vs] for k, vs in p["numbers"].items()},
             "stats": {k: {kk: (None if not math.isfinite(s[kk]) else round(s[kk], 5)) for kk in keep}
                       for k, s in p["stats"].items()}} for p in points.values()]


def write_report(out: Path, claims: list[str], scale: Scale, seeds: int) -> str:
    """results/<claim>.json, figures/<claim>.png and STUDY.md (the table covers `claims`). Returns the markdown.

    Everything in it comes from the run folders, so the same runs give the same report on any machine."""
    out = Path(out)
    base = base_numbers(out, scale)
    collected = {name: collect(CLAIMS[name], scale, seeds, out / "runs", base) for name in claims}
    records = {run.path: record for points in collected.values() for p in points.values()
               for run, record in zip(p["runs"], p["records"])}
    if not records:
        _refuse_to_erase(out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    rows, sections = [], []
    for name, points in collected.items():
        claim = CLAIMS[name]
        complete = all(p["runs"] for p in points.values())
        if complete:
            verdict, measured, rule = claim.verdict(points, base)
        else:
            verdict, measured, rule = "not run", "some points have no finished run yet", "-"
        n = min(len(p["runs"]) for p in points.values())
        command = f"python -m minirl study --only {name} --seeds {seeds}" + (" --smoke" if "smoke" in scale.name else "")
        result = {"claim": name, "title": claim.title, "expectation": claim.expectation, "verdict": verdict,
                  "rule": rule, "measured": measured, "seeds_per_point": n, "scale": scale.name,
                  "command": command, "base": base, "points": _jsonable(points)}
        _write_atomic(out / "results" / f"{name}.json", json.dumps(result, indent=1, allow_nan=False) + "\n")
        if complete:
            draw(claim, points, out / "figures" / f"{name}.png")
        rows.append(f"| {name} {claim.title} | {claim.expectation} | {measured} | **{verdict}** (n = {n}) |")
        sections.append(_section(claim, points, verdict, rule, measured, command, complete))
    records = list(records.values())
    md = "\n".join(_intro(base, scale, seeds, records) + rows + [""] + sections) + _caveats(records, scale, seeds)
    _write_atomic(out / "STUDY.md", md)
    print(f"wrote {out / 'STUDY.md'}, results/ and figures/ for {', '.join(claims)}")
    return md


def _refuse_to_erase(out: Path) -> None:
    """No run of this code version exists: do not overwrite a report made from runs of another version."""
    versions = sorted({json.loads(f.read_text(encoding="utf-8")).get("code_version", "?")
                       for f in (out / "runs").glob(f"*/{STUDY_FILE}")})
    if versions:
        raise SystemExit(f"error: {out / 'runs'} holds finished runs of minirl {', '.join(versions)} but none of this "
                         f"code version ({code_version()}): run folders are named by run_key, which includes the code "
                         "version. Run the study again (without --report-only), or use that version of minirl.")


def _section(claim, points, verdict, rule, measured, command, complete) -> str:
    lines = [f"## {claim.name} · {claim.title}", "", f"**Expectation (the paper):** {claim.expectation}.", "",
             f"**Verdict: {verdict}.** Rule: {rule}. `{command}`", ""]
    if complete:
        lines += [f"![{claim.name}](figures/{claim.name}.png)", ""]
    lines += ["| point | seeds | held-out sampled | held-out greedy | 4-number sampled | entropy (end) | "
              "length (end) | train s |", "|---|---|---|---|---|---|---|---|"]
    for p in points.values():
        s = p["stats"]
        if not p["runs"]:
            lines.append(f"| {p['label']} | 0 | | | | | | |")
            continue
        per_seed = ", ".join(f"{100 * v:.1f}" for v in p["numbers"]["sampled"])
        lines.append(f"| {p['label']} | {len(p['runs'])} | {pct(s['sampled'])} ({per_seed}) | {pct(s['greedy'])} | "
                     f"{pct(s['transfer_sampled'])} | {num(s['entropy_end'])} | {num(s['length_end'])} | "
                     f"{num(s['seconds'])} |")
    return "\n".join(lines + ["", measured, ""])


def _recorded(records: list[dict], key: str) -> str:
    """The distinct values the runs recorded for `key` (machine, torch, threads, code_version), with counts."""
    values = [str(r.get(key, "?")) for r in records]
    return ", ".join(f"{v} ({values.count(v)} runs)" if len(set(values)) > 1 else v for v in sorted(set(values)))


def _intro(base: dict, scale: Scale, seeds: int, records: list[dict]) -> list[str]:
    smoke = " --smoke" if "smoke" in scale.name else ""
    minutes = sum(float(r["train_seconds"]) for r in records) / 60
    return [
        "# The paper's claims at small scale", "",
        "Lian 2025 (arXiv 2512.07611) trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. This "
        f"study re-tests its claims with minirl's tiny policy ({scale.name} scale: {scale.steps} steps per run, "
        f"{scale.batch_size} prompts × G {scale.group_size} completions per step, or {scale.batch_size * scale.group_size} "
        f"prompts × 1 for PPO; base lr {scale.lr:g}; {seeds} seeds per point; held-out evaluation on {scale.eval_n} "
        "problems). Every number below comes from the runs of `python -m minirl study "
        f"--seeds {seeds}{smoke}`; each claim alone: `python -m minirl study --only H1` (and so on).", "",
        f"- Runs: {len(records)} distinct runs (claims share runs: H4's GRPO is H1's G 8, ...), {minutes:.1f} minutes "
        f"of training in all; machine {_recorded(records, 'machine')}, torch {_recorded(records, 'torch')}, "
        f"{_recorded(records, 'threads')} torch thread(s), minirl {_recorded(records, 'code_version')}. "
        "Timings are single measurements and noisy.",
        f"- Base policy: held-out sampled accuracy {100 * base['heldout/sampled']:.1f} %, greedy "
        f"{100 * base['heldout/greedy']:.1f} %; 4-number Countdown (never trained on) sampled "
        f"{100 * base['transfer4/sampled']:.1f} %, greedy {100 * base['transfer4/greedy']:.1f} %.",
        "- Verdicts compare means over seeds: a difference is *clear* when it exceeds twice the combined standard "
        "error (≈ 95 %, rough with n = 3). Accuracy is the final held-out accuracy (T = 1 samples) unless a row "
        "says otherwise; ± is the std over seeds.", "",
        "| claim | expectation (paper) | what we measured | verdict at this scale |", "|---|---|---|---|",
    ]


def _caveats(records: list[dict], scale: Scale, seeds: int) -> str:
    """What limits every verdict above, with the numbers that show it."""
    if not records:
        return ""
    best4 = max(r["final"]["transfer4/sampled"] for r in records)
    uses4 = max((r["final"].get("transfer4/sampled_numbers_ok") or 0.0) for r in records)
    failed = sorted({r["point"] for r in records if r.get("error")})
    lines = ["## Reading these verdicts", "",
             f"- **Transfer.** The best 4-number Countdown accuracy of any run was {100 * best4:.1f} %, and the largest "
             f"share of 4-number answers that used all four numbers was {100 * uses4:.1f} %: the tiny policy was "
             "warm-started on 3-number problems only and (almost) never writes a 4-number expression, so this scale "
             "cannot test the paper's transfer claim. The GPU configuration (`--scale gpu`) can.",
             f"- **Scale.** Each run is {scale.steps} steps of a 1 M-parameter model on {scale.max_new_tokens}-token "
             "answers. Effects that need long reasoning (length growth, reward hacking through long outputs) have no "
             "room to appear here.",
             f"- **Noise.** With {seeds} seeds a clear difference must be large (about 3-5 "
             "accuracy points here); *inconclusive* means no difference that large, not that the paper is wrong.",
             "- **Runs that stopped early** (dynamic sampling exhausted or a diverged loss) are results, evaluated "
             f"where they stopped: {', '.join(failed) if failed else 'none'}."]
    return "\n".join(lines) + "\n"

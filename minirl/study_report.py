"""The study's report: per-claim results JSON, figures (mean ± std over seeds) and STUDY.md with a verdict table.

    python -m minirl study --report-only --out benchmarks/study

A verdict compares means over seeds with their standard errors (se = std / sqrt(n)). A difference counts as
clear when it exceeds twice the combined standard error, sqrt(se_a² + se_b²) — about a 95 % interval for
normal noise, and a rough one with n = 3. Each claim's rule is written next to its verdict:
supported (a clear difference in the expected direction), not supported (a clear one against it) or
inconclusive (no clear difference at this scale).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from pathlib import Path

import torch

from .runs import Run, _write_atomic, run_key
from .study import (CLAIMS, STUDY_FILE, Claim, Point, Scale, final_evaluation, finished_runs, identity, load_base_policy,
                    point_config)

PCT = {"sampled", "greedy", "transfer_sampled", "transfer_greedy", "transfer_numbers_ok", "format_only_end"}


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


def stats(values: list[float]) -> dict:
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


def pct(s: dict) -> str:
    return f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f} %" if s["n"] > 1 else f"{100 * s['mean']:.1f} %"


def num(s: dict, digits: int = 3) -> str:
    return f"{s['mean']:.{digits}g} ± {s['std']:.2g}" if s["n"] > 1 else f"{s['mean']:.{digits}g}"


# ----------------------------------------------------------------------------- the verdicts, one per claim

def _by(points: dict, series: str | None = None) -> list[dict]:
    return [p for p in points.values() if series is None or p["series"] == series]


def verdict_H1(P, base):
    parts, signs = [], []
    for algo in ("grpo", "dapo"):
        pts = sorted(_by(P, algo), key=lambda p: p["x"])
        small, large = pts[0], pts[-1]
        d, bar = diff(large["stats"]["sampled"], small["stats"]["sampled"])
        r, rbar = diff(small["stats"]["reward_roughness"], large["stats"]["reward_roughness"])
        signs.append(clear(d, bar) if clear(r, rbar) >= 0 else -1)
        best = max(pts, key=lambda p: p["stats"]["gain_per_minute"]["mean"])
        parts.append(f"{algo.upper()}: G {small['x']} → {large['x']}: sampled accuracy "
                     f"{pct(small['stats']['sampled'])} → {pct(large['stats']['sampled'])} (Δ {100 * d:+.1f} ± "
                     f"{100 * bar:.1f}); step-to-step reward jitter {num(small['stats']['reward_roughness'])} → "
                     f"{num(large['stats']['reward_roughness'])}; most gain per minute at G {best['x']}")
    return _combine(signs), "; ".join(parts), "larger G clearly higher accuracy and less jitter, for both"


def verdict_H2(P, base):
    parts, signs = [], []
    for algo in ("ppo", "grpo"):
        pts = sorted(_by(P, algo), key=lambda p: p["x"])
        means = [p["stats"]["sampled"] for p in pts]
        inner = max(means[1:-1], key=lambda s: s["mean"])
        ends = max((means[0], means[-1]), key=lambda s: s["mean"])
        d, bar = diff(inner, ends)
        signs.append(clear(d, bar))
        parts.append(f"{algo.upper()}: " + ", ".join(f"β {p['x']:g}: {pct(p['stats']['sampled'])}" for p in pts))
    return _combine(signs, any_supports=True), "; ".join(parts), \
        "the best interior β beats the better end (β 0 or 0.1) clearly"


def _at_samples(run_rows: list[dict], samples: float) -> float:
    """Held-out sampled accuracy of a run at `samples` completions, interpolated between evaluations."""
    pts = [(r["samples"], r["eval/accuracy_sampled"]) for r in run_rows if "eval/accuracy_sampled" in r]
    for (s0, a0), (s1, a1) in zip(pts, pts[1:]):
        if s0 <= samples <= s1:
            return a0 + (a1 - a0) * (samples - s0) / max(1e-9, s1 - s0)
    return pts[-1][1] if pts else math.nan


def verdict_H3(P, base):
    ds, nods = P["dapo"], P["dapo-noDS 2x steps"]
    steps = ds["runs"][0].config.steps
    at_steps = stats([next((r["eval/accuracy_sampled"] for r in run.history if r["step"] == steps
                            and "eval/accuracy_sampled" in r), math.nan) for run in nods["runs"]])
    at_samples = stats([_at_samples(run.history, s) for run, s in zip(nods["runs"], ds["numbers"]["samples"])])
    d_steps, bar_steps = diff(ds["stats"]["sampled"], at_steps)
    d_samp, bar_samp = diff(ds["stats"]["sampled"], at_samples)
    sign = 1 if d_samp <= 0 else -1 if clear(d_samp, bar_samp) > 0 else 0
    nods_at_steps = statistics.fmean(next(r.get("samples", math.nan) for r in run.history if r["step"] == steps)
                                      for run in nods["runs"])
    nods_max = statistics.fmean(run.history[-1].get("samples", math.nan) for run in nods["runs"])
    short = ds["stats"]["samples"]["mean"] > nods_max
    text = (f"at {steps} steps: with DS {pct(ds['stats']['sampled'])} vs without {pct(at_steps)} "
            f"(Δ {100 * d_steps:+.1f} ± {100 * bar_steps:.1f}); DS generated {ds['stats']['samples']['mean']:.0f} "
            f"completions, {ds['stats']['samples']['mean'] / nods_at_steps:.2f}× as many as without DS in the same steps; "
            + ("the run without DS (twice the steps) ended before that many, so it is compared at its end, "
               f"after {nods_max:.0f} completions: " if short else "at equal completions: ")
            + f"without DS {pct(at_samples)} (Δ {100 * d_samp:+.1f} ± {100 * bar_samp:.1f})")
    return _verdict(sign), text, "without DS at least as good at equal completions; not supported if DS is clearly better"


def verdict_H4(P, base):
    pts = sorted(_by(P), key=lambda p: -p["stats"]["sampled"]["mean"])
    ranking = " > ".join(f"{p['label']} {pct(p['stats']['sampled'])}" for p in pts)
    nods = P["dapo-noDS"]
    others = [p for p in pts if p is not nods]
    signs = [clear(*diff(nods["stats"]["sampled"], p["stats"]["sampled"])) for p in others]
    sign = 1 if all(s > 0 for s in signs) else -1 if any(s < 0 for s in signs) else 0
    beat = [p["label"] for p in pts if clear(*diff(p["stats"]["sampled"], {"mean": base["heldout/sampled"], "se": 0})) > 0]
    text = (f"{ranking}; base {100 * base['heldout/sampled']:.1f} %; clearly above the base: "
            f"{', '.join(beat) or 'none'}; 4-number transfer (sampled): "
            + ", ".join(f"{p['label']} {pct(p['stats']['transfer_sampled'])}" for p in pts)
            + f" (base {100 * base['transfer4/sampled']:.1f} %)")
    return _verdict(sign), text, "DAPO-noDS clearly above each of the others"


def verdict_H5(P, base):
    seq, tok = P["grpo seq-mean-token-mean"], P["grpo token-mean"]
    d_fmt, bar_fmt = diff(seq["stats"]["format_only_end"], tok["stats"]["format_only_end"])
    d_len, bar_len = diff(tok["stats"]["length_end"], seq["stats"]["length_end"])
    s_fmt, s_len = clear(d_fmt, bar_fmt), clear(d_len, bar_len)
    sign = 1 if s_fmt > 0 and s_len >= 0 else -1 if s_fmt < 0 or s_len < 0 else 0
    text = (f"well-formed but wrong answers at the end of training: per-sequence {pct(seq['stats']['format_only_end'])}, "
            f"token-level {pct(tok['stats']['format_only_end'])}; completion length {num(seq['stats']['length_end'])} vs "
            f"{num(tok['stats']['length_end'])} tokens; accuracy {pct(seq['stats']['sampled'])} vs {pct(tok['stats']['sampled'])}")
    return _verdict(sign), text, "token-level clearly fewer well-formed-wrong answers, and not shorter"


def verdict_H6(P, base):
    pts = sorted(_by(P), key=lambda p: p["x"])
    off = pts[0]
    signs = [clear(*diff(off["stats"]["sampled"], p["stats"]["sampled"])) for p in pts[1:]]
    sign = 1 if any(s > 0 for s in signs) else -1 if any(s < 0 for s in signs) else 0
    text = ", ".join(f"entropy coef {p['x']:g}: accuracy {pct(p['stats']['sampled'])}, entropy "
                     f"{num(p['stats']['entropy_end'])}" for p in pts)
    return _verdict(sign), text, "some bonus clearly lowers accuracy (not supported: one clearly raises it)"


def verdict_H7(P, base):
    parts, collapsed, by_algo = [], {}, {}
    for algo in ("ppo", "grpo", "dapo"):
        pts = sorted(_by(P, algo), key=lambda p: p["x"])
        by_algo[algo] = {p["x"]: p["stats"]["sampled"] for p in pts}
        best = max(pts, key=lambda p: p["stats"]["sampled"]["mean"])["x"]
        collapsed[algo] = {p["x"] for p in pts if p["stats"]["sampled"]["mean"] < base["heldout/sampled"] - 0.05}
        lr0 = pts[0]["runs"][0].config.lr / pts[0]["x"]
        first = min(collapsed[algo], default=None)
        parts.append(f"{algo.upper()}: " + ", ".join(f"{lr0 * p['x']:.1e}: {pct(p['stats']['sampled'])}" for p in pts)
                     + f" (best {lr0 * best:.1e}; collapsed from " + (f"{lr0 * first:.1e})" if first else "none in range)"))
    # clearly different sensitivity: at some lr one algorithm has collapsed and another is clearly above it
    witnesses = [f"{b.upper()} vs {a.upper()} at {m:.3g}x" for m in by_algo["ppo"] for a in by_algo for b in by_algo
                 if m in collapsed[a] and m not in collapsed[b] and clear(*diff(by_algo[b][m], by_algo[a][m])) > 0]
    if witnesses:
        parts.append("clearly different at " + ", ".join(witnesses))
    return ("supported" if witnesses else "inconclusive"), "; ".join(parts), \
        "at some lr one algorithm has collapsed (mean > 5 points below the base) while another is clearly above it"


def verdict_H8(P, base):
    sym, high = P["dapo clip_high=0.2"], P["dapo clip_high=0.28"]
    d, bar = diff(high["stats"]["entropy_end"], sym["stats"]["entropy_end"])
    text = (f"entropy start → end: 0.2: {num(sym['stats']['entropy_start'])} → {num(sym['stats']['entropy_end'])}, "
            f"0.28: {num(high['stats']['entropy_start'])} → {num(high['stats']['entropy_end'])} nats/token "
            f"(Δ end {d:+.3f} ± {bar:.3f}); clipped tokens at the end {pct(sym['stats']['clip_frac_end'])} vs "
            f"{pct(high['stats']['clip_frac_end'])}; accuracy {pct(sym['stats']['sampled'])} vs {pct(high['stats']['sampled'])}")
    return _verdict(clear(d, bar)), text, "clearly higher final entropy with ε_high 0.28"


def verdict_H9(P, base):
    ppo, grpo = P["ppo"], P["grpo"]
    growth = {k: stats([e - s for s, e in zip(p["numbers"]["length_start"], p["numbers"]["length_end"])])
              for k, p in (("ppo", ppo), ("grpo", grpo))}
    d, bar = diff(growth["grpo"], growth["ppo"])
    text = (f"completion length first → last 10 % of steps: PPO {num(ppo['stats']['length_start'])} → "
            f"{num(ppo['stats']['length_end'])}, GRPO {num(grpo['stats']['length_start'])} → "
            f"{num(grpo['stats']['length_end'])} tokens (growth difference {d:+.2f} ± {bar:.2f})")
    return _verdict(clear(d, bar)), text, "GRPO's length grows clearly more than PPO's"


def _verdict(sign: int) -> str:
    return {1: "supported", -1: "not supported", 0: "inconclusive"}[sign]


def _combine(signs: list[int], any_supports: bool = False) -> str:
    if any(s < 0 for s in signs):
        return "not supported"
    if all(s > 0 for s in signs) or (any_supports and any(s > 0 for s in signs)):
        return "supported"
    return "inconclusive"


VERDICTS = {name: globals()[f"verdict_{name}"] for name in CLAIMS}
FIGURE_METRICS = {"H1": ("eval/accuracy_sampled", "reward_mean"), "H2": ("eval/accuracy_sampled", "kl_ref"),
                  "H3": ("eval/accuracy_sampled", "kept_group_frac"), "H4": ("eval/accuracy_sampled", "reward_mean"),
                  "H5": ("reward/format_ok", "completion_len_mean"), "H6": ("eval/accuracy_sampled", "entropy"),
                  "H7": ("eval/accuracy_sampled", "reward_mean"), "H8": ("entropy", "clip_frac_high"),
                  "H9": ("completion_len_mean", "eval/accuracy_sampled")}


# ----------------------------------------------------------------------------- collecting, drawing, writing

def base_numbers(out: Path, scale: Scale) -> dict:
    """The base policy's final-evaluation numbers (cached in <out>/base.json)."""
    file = out / "base.json"
    if file.is_file():
        return json.loads(file.read_text(encoding="utf-8"))
    point = Point("base", "grpo")
    numbers = final_evaluation(load_base_policy(scale, "cpu" if scale.name.startswith("cpu") else None), point,
                               scale, point_config(point, scale, 0))
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(file, json.dumps(numbers, indent=1) + "\n")
    return numbers


def collect(claim: Claim, scale: Scale, seeds: int, runs_root: Path, policy_name: str, base: dict) -> dict:
    """{label: {"series", "x", "runs", "numbers" (metric -> per-seed list), "stats"}} of the finished runs."""
    from .trainer import describe_task

    done = finished_runs(runs_root)
    points = {}
    for point in claim.points:
        runs, numbers = [], {}
        for seed in range(seeds):
            task, config = describe_task(point.task(scale)), point_config(point, scale, seed)
            path = runs_root / run_key(policy_name, task, config)
            if not (path / STUDY_FILE).is_file():
                path = done.get(identity(policy_name, task, config), path)
            if not (path / STUDY_FILE).is_file():
                continue
            run, record = Run.load(path), json.loads((path / STUDY_FILE).read_text(encoding="utf-8"))
            runs.append(run)
            for k, v in run_numbers(run, record, base).items():
                numbers.setdefault(k, []).append(v)
        points[point.label] = {"label": point.label, "series": point.series, "x": point.x, "runs": runs,
                               "numbers": numbers, "stats": {k: stats(v) for k, v in numbers.items()}}
    return points


def draw(claim: Claim, points: dict, file: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from .plots import plot_runs

    runs = [r for p in points.values() for r in p["runs"]]
    label = {id(r): p["label"] for p in points.values() for r in p["runs"]}
    fig = plot_runs(runs, FIGURE_METRICS[claim.name], group_by=lambda r: label[id(r)], smooth=0.6,
                    x="samples" if claim.name == "H3" else "step",
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


def write_report(out: Path, claims: list[str], scale: Scale, seeds: int, session_seconds: float | None = None,
                 threads: int | None = None) -> str:
    """results/<claim>.json, figures/<claim>.png and STUDY.md (the table covers `claims`). Returns the markdown."""
    out = Path(out)
    policy_name = "minirl/tiny-countdown" if scale.model is None else scale.model
    base = base_numbers(out, scale)
    (out / "results").mkdir(parents=True, exist_ok=True)
    rows, sections, total_seconds, total_runs = [], [], 0.0, set()
    for name in claims:
        claim = CLAIMS[name]
        points = collect(claim, scale, seeds, out / "runs", policy_name, base)
        complete = all(p["runs"] for p in points.values())
        for p in points.values():
            for r in p["runs"]:
                if r.path not in total_runs:
                    total_runs.add(r.path)
                    total_seconds += float(json.loads((r.path / STUDY_FILE).read_text())["train_seconds"])
        if complete:
            verdict, measured, rule = VERDICTS[name](points, base)
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
    md = _markdown(rows, sections, base, scale, seeds, total_seconds, len(total_runs), session_seconds, threads)
    _write_atomic(out / "STUDY.md", md)
    print(f"wrote {out / 'STUDY.md'}, results/ and figures/ for {', '.join(claims)}")
    return md


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


def _markdown(rows, sections, base, scale, seeds, total_seconds, total_runs, session_seconds, threads) -> str:
    smoke = " --smoke" if "smoke" in scale.name else ""
    head = [
        "# The paper's claims at small scale", "",
        "Lian 2025 (arXiv 2512.07611) trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. This "
        f"study re-tests its claims with minirl's tiny policy ({scale.name} scale: {scale.steps} steps per run, "
        f"{scale.batch_size} prompts × G {scale.group_size} completions per step, or {scale.batch_size * scale.group_size} "
        f"prompts × 1 for PPO; base lr {scale.lr:g}; {seeds} seeds per point; held-out evaluation on {scale.eval_n} "
        "problems). Every number below comes from the runs of `python -m minirl study "
        f"--seeds {seeds}{smoke}`; each claim alone: `python -m minirl study --only H1` (and so on).", "",
        f"- Machine: {platform.machine()} ({os.cpu_count()} cores), torch {torch.__version__}"
        + (f", {threads} torch thread(s)" if threads else "") + ". Timings are single measurements and noisy.",
        f"- Compute: {total_runs} distinct runs (claims share runs: H4's GRPO is H1's G 8, ...), "
        f"{total_seconds / 60:.1f} minutes of training and evaluation in all"
        + (f"; this invocation took {session_seconds / 60:.1f} minutes" if session_seconds else "") + ".",
        f"- Base policy: held-out sampled accuracy {100 * base['heldout/sampled']:.1f} %, greedy "
        f"{100 * base['heldout/greedy']:.1f} %; 4-number Countdown (never trained on) sampled "
        f"{100 * base['transfer4/sampled']:.1f} %, greedy {100 * base['transfer4/greedy']:.1f} %.",
        "- Verdicts compare means over seeds: a difference is *clear* when it exceeds twice the combined standard "
        "error (≈ 95 %, rough with n = 3). Accuracy is the final held-out accuracy (T = 1 samples) unless a row "
        "says otherwise; ± is the std over seeds.", "",
        "| claim | expectation (paper) | what we measured | verdict at this scale |", "|---|---|---|---|",
    ]
    return "\n".join(head + rows + [""] + sections)

"""The study's report: per-claim results JSON (per-seed values and paired tests), figures and STUDY.md.

    python -m minirl study --report-only --out my_study    # from the run folders in my_study/runs

The numbers of each run come from its metrics and its study.json; each claim's tests and verdict rule are in
claims.py, the paired t-test and the MDE in power.py.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ..runs import Run, _write_atomic, code_version
from .claims import CLAIMS, count_tests
from .jobs import STUDY_FILE, final_evaluation, load_base_policy, run_folder
from .points import Claim, Point, Scale
from .power import t_quantile

# The commit that registered the claims, points, metric and rules below before any of the study's runs.
REGISTERED = "commit d5a58a9 (REGISTRATION.md, then in benchmarks/study)"

# Every change after registration, said where the results are read. Rules, points, metric and seeds: none.
DEVIATIONS = (
    "the code changed once: drawing the whole held-out split crashed in seed 13's final "
    "evaluation (CountdownSteps gave up after 20 000 draws in a row that found no new problem, and the rarest of "
    "the 1158 test problems has p = 6.6e-5 per draw), so commit 861c879 raised the limit to 200 000. That change "
    "altered the code version, so all 45 runs were redone under the one version named below; seeds 10-12, done "
    "before the change, came out the same to the printed digit (e.g. G 2, seed 10: 17.5 %). The claims, points, "
    "metric, seeds and verdict rules are as registered"
)

# ----------------------------------------------------------------------------- numbers per run and per point

def _tail(values: list[float], frac: float = 0.1) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan
    k = max(1, round(len(values) * frac))
    return statistics.fmean(values[-k:])


def _head(values: list[float], frac: float = 0.1) -> float:
    return _tail(list(reversed([v for v in values if v is not None])), frac)


def run_numbers(run: Run, record: dict) -> dict:
    """The numbers a rule may use, for one (point, seed); start / end = mean over the first / last 10 % of steps."""
    rows = [r for r in run.history if r.get("step", 0) > 0 and "reward_mean" in r]
    col = lambda name: [r.get(name, math.nan) for r in rows]  # noqa: E731
    rewards = col("reward_mean")
    diffs = [b - a for a, b in zip(rewards, rewards[1:])]
    f = record["final"]
    length_start, length_end = _head(col("completion_len_mean")), _tail(col("completion_len_mean"))
    # per_step's currency: right steps beyond the 2 that solving a 3-number problem takes ("farmed" steps)
    extra = [v - 2 * c for v, c in zip(col("reward/valid_steps"), col("reward/correct"))]
    return {
        "sampled": f["heldout/sampled"], "greedy": f["heldout/greedy"],
        "transfer4": f.get("transfer4/sampled", math.nan), "range": f.get("range/sampled", math.nan),
        "failed": 1.0 if record.get("error") else 0.0,
        "seconds": float(record["train_seconds"]), "eval_seconds": float(record.get("eval_seconds", math.nan)),
        "samples": float(run.history[-1].get("samples", 0)) if run.history else 0.0,
        "reward_roughness": statistics.pstdev(diffs) if len(diffs) > 1 else math.nan,
        "entropy_start": _head(col("entropy")), "entropy_end": _tail(col("entropy")),
        "length_start": length_start, "length_end": length_end, "length_growth": length_end - length_start,
        "attempts_end": _tail(col("reward/attempts")), "correct_end": _tail(col("reward/correct")),
        "extra_steps_end": _tail(extra),
        "clip_frac_end": _tail([r.get("clip_frac_low", 0.0) + r.get("clip_frac_high", 0.0) for r in rows]),
    }


# ----------------------------------------------------------------------------- collecting, drawing, writing

def base_numbers(out: Path, scale: Scale, seeds: int) -> dict:
    """The base policy's final evaluation for each seed's evaluation draws: {key: [value per seed]} (each seed
    cached in <out>/base/seed-<s>.json)."""
    point, per_seed = Point("base", "grpo", transfer=True), []
    for seed in scale.seeds(seeds):
        file = Path(out) / "base" / f"seed-{seed}.json"
        if not file.is_file():
            numbers = final_evaluation(load_base_policy(scale, "cpu" if scale.model is None else None), point,
                                       scale, point.config(scale, seed))
            file.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(file, json.dumps(numbers, indent=1) + "\n")
        per_seed.append(json.loads(file.read_text(encoding="utf-8")))
    return {k: [s.get(k, math.nan) for s in per_seed] for k in per_seed[0]}


def collect(claim: Claim, scale: Scale, seeds: int, runs_root: Path) -> dict:
    """{label: {"series", "x", "runs", "records" (their study.json), "numbers" (metric -> one value per seed of the
    seed list, NaN where that seed has no finished run)}}."""
    points = {}
    for point in claim.points:
        runs, records, numbers = [], [], {}
        for i, seed in enumerate(scale.seeds(seeds)):
            path = run_folder(point, scale, seed, runs_root)
            if not (path / STUDY_FILE).is_file():
                continue
            run, record = Run.load(path), json.loads((path / STUDY_FILE).read_text(encoding="utf-8"))
            runs.append(run)
            records.append(record)
            for k, v in run_numbers(run, record).items():
                numbers.setdefault(k, [math.nan] * seeds)[i] = v
        points[point.label] = {"label": point.label, "series": point.series, "x": point.x, "runs": runs,
                               "records": records, "numbers": numbers}
    return points


def draw(claim: Claim, points: dict, file: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from ..plots import plot_runs

    runs = [r for p in points.values() for r in p["runs"]]
    label = {id(r): p["label"] for p in points.values() for r in p["runs"]}
    fig = plot_runs(runs, claim.figure, group_by=lambda r: label[id(r)], smooth=0.6, x=claim.x,
                    title=f"{claim.name} · {claim.title} (training curves, mean ± std over seeds)")
    fig.set_size_inches(13, 3.6 * math.ceil(len(claim.figure) / 3))
    file.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(file, dpi=80, bbox_inches="tight")


def draw_differences(claim: Claim, tests: list[dict], file: Path) -> None:
    """One row per test: each seed's paired difference (dots), their mean and the bar a clear one must pass."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    cols = min(4, len(tests))
    rows = math.ceil(len(tests) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols + 1, 2.6 * rows), squeeze=False)
    for ax in axes.flat[len(tests):]:
        ax.set_visible(False)
    for ax, t in zip(axes.flat, tests):
        s, d = t["scale"], [t["scale"] * v for v in t["d"]]
        ax.axhline(0, color="0.6", lw=1)
        ax.scatter([0] * len(d), d, color="C0", zorder=3, label="seeds")
        if math.isfinite(t["bar"]):
            ax.errorbar([0.3], [s * t["mean"]], yerr=[s * t["bar"]], fmt="D", color="C3" if t["sign"] else "0.3",
                        capsize=6, label="mean ± bar")
        ax.set_xlim(-0.5, 0.8)
        ax.set_xticks([])
        ax.set_title(f"{t['name']}\n{t['metric']}", fontsize=9)
        ax.set_ylabel(t["unit"])
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle(f"{claim.name} · paired differences per seed (red: clear)", fontsize=10)
    fig.tight_layout()
    fig.savefig(file, dpi=80, bbox_inches="tight")
    plt.close(fig)


def round_json(v):
    # 8 digits: README and lesson 08 print from these files, STUDY.md from the unrounded values; both must agree
    return None if v is None or not math.isfinite(v) else round(v, 8)


def test_json(test: dict) -> dict:
    """A paired test with its floats rounded (the per-seed differences `d` too)."""
    return {k: [round_json(x) for x in v] if k == "d" else round_json(v) if isinstance(v, float) else v
            for k, v in test.items()}


def points_json(points: dict, seeds: list[int]) -> list[dict]:
    return [{"label": p["label"], "series": p["series"], "x": p["x"], "seeds": seeds,
             "per_seed": {k: [round_json(v) for v in vs] for k, vs in p["numbers"].items()}} for p in points.values()]


def write_report(out: Path, claims: list[str], scale: Scale, seeds: int) -> str:
    """results/<claim>.json, figures/<claim>.png (+ <claim>_paired.png) and STUDY.md. Returns the markdown.

    Everything in it comes from the run folders, so the same runs give the same report on any machine."""
    out = Path(out)
    m = count_tests(CLAIMS)  # the registered family: every claim's tests, also when --only runs a few of them
    collected = {name: collect(CLAIMS[name], scale, seeds, out / "runs") for name in claims}
    records = {run.path: record for points in collected.values() for p in points.values()
               for run, record in zip(p["runs"], p["records"])}
    if not records:
        refuse_to_erase(out)
    base = base_numbers(out, scale, seeds)
    (out / "results").mkdir(parents=True, exist_ok=True)
    rows, sections = [], []
    for name, points in collected.items():
        claim = CLAIMS[name]
        n = min(len(p["runs"]) for p in points.values())
        complete = n == seeds
        verdict, measured, rule, tests = claim.verdict(points, base, m) if complete else \
            ("not run", f"{n} of {seeds} seeds finished for every point", "-", [])
        command = f"python -m minirl study --only {name} --seeds {seeds}" + _flags(scale)
        result = {"claim": name, "title": claim.title, "expectation": claim.expectation, "verdict": verdict,
                  "rule": rule, "measured": measured, "seeds": list(scale.seeds(seeds)), "scale": scale.name,
                  "count_tests_table": m, "command": command,
                  "tests": [test_json(t) for t in tests],
                  "base": {k: [round_json(v) for v in vs] for k, vs in base.items() if isinstance(vs[0], float)},
                  "points": points_json(points, list(scale.seeds(seeds)))}
        _write_atomic(out / "results" / f"{name}.json", json.dumps(result, indent=1, allow_nan=False) + "\n")
        if complete:
            draw(claim, points, out / "figures" / f"{name}.png")
            draw_differences(claim, tests, out / "figures" / f"{name}_paired.png")
        for i, t in enumerate(tests or [None]):
            head = f"{name} {claim.title}" if i == 0 else ""
            cells = ["", "", "", "", ""] if t is None else [
                f"{t['name']}: {t['metric']}", f"{t['scale'] * t['mean']:+.2f} ± {t['scale'] * t['se']:.2f}",
                f"± {t['scale'] * t['bar']:.2f}", f"{t['scale'] * t['mde']:.2f} {t['unit']}",
                "yes" if t["sign"] else "no"]
            rows.append(f"| {head} | {rule if i == 0 else ''} | " + " | ".join(cells)
                        + f" | {'**' + verdict + '**' if i == 0 else ''} |")
        sections.append(claim_section(claim, points, verdict, rule, measured, command, complete))
    records = list(records.values())
    md = "\n".join(_intro(base, scale, seeds, records, m) + rows + [""] + sections) + caveats(records, scale, seeds)
    _write_atomic(out / "STUDY.md", md)
    print(f"wrote {out / 'STUDY.md'}, results/ and figures/ for {', '.join(claims)}")
    return md


def summary_table(results: list[dict]) -> str:
    """README's table: one row per claim of the results/<claim>.json dicts, every test as difference ± se (MDE).
    tests/test_docs.py checks that README.md holds exactly this table for the committed results."""
    rows = ["| claim | registered rule | paired difference ± SE (MDE); clear ones in bold | verdict |", "|---|---|---|---|"]
    for r in results:
        cells = []
        for t in r["tests"]:
            k = t["scale"]
            text = f"{t['name']}, {t['metric']}: {k * t['mean']:+.2f} ± {k * t['se']:.2f} ({k * t['mde']:.2f} {t['unit']})"
            cells.append(f"**{text}**" if t["sign"] else text)
        rows.append(f"| {r['claim']} {r['title']} | {r['rule']} | {'<br>'.join(cells)} | {r['verdict']} |")
    return "\n".join(rows) + "\n"


def _flags(scale: Scale) -> str:
    task = "" if scale.name.startswith("worked") else " --task compact" if scale.name.startswith("cpu") else \
        f" --scale {scale.name.removesuffix('-smoke')}"
    return task + (" --smoke" if "smoke" in scale.name else "")


def refuse_to_erase(out: Path) -> None:
    """No run of this code version exists: do not overwrite a report made from other runs (another code version's,
    or runs that are not in this checkout) with an empty one."""
    versions = sorted({json.loads(f.read_text(encoding="utf-8")).get("code_version", "?")
                       for f in (out / "runs").glob(f"*/{STUDY_FILE}")})
    if versions:
        raise SystemExit(f"error: {out / 'runs'} holds finished runs of minirl {', '.join(versions)} but none of this "
                         f"code version ({code_version()}): run folders are named by run_key, which includes the code "
                         "version. Run the study again (without --report-only), or use that version of minirl.")
    if (out / "STUDY.md").is_file() or any((out / "results").glob("*.json")):
        raise SystemExit(f"error: {out / 'runs'} holds no finished run, but {out} has a report: it was made from runs "
                         "that are not in this folder (a registered study may commit its results without its run "
                         "folders), and rewriting it now would replace every verdict with 'not run'. Run the study "
                         "(without --report-only) to make the runs, or point --out at a folder that has them.")


def _cell(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return ""
    sd = f" ± {scale * statistics.stdev(vals):.{digits}f}" if len(vals) > 1 else ""
    return f"{scale * statistics.fmean(vals):.{digits}f}{sd}"


def claim_section(claim, points, verdict, rule, measured, command, complete) -> str:
    lines = [f"## {claim.name} · {claim.title}", "", f"**Expectation (the paper):** {claim.expectation}.", "",
             f"**Verdict: {verdict}.** Registered rule: {rule}. `{command}`{_cost(points)}", ""]
    if complete:
        lines += [f"![{claim.name}](figures/{claim.name}.png)", "", f"![{claim.name} paired](figures/{claim.name}_paired.png)", ""]
    lines += ["| point | seeds | held-out pass@1 % (per seed) | greedy % | 4-number % | numbers 1-20 % | entropy (end) "
              "| length (end) | train s | eval s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in points.values():
        s = p["numbers"]
        if not p["runs"]:
            lines.append(f"| {p['label']} | 0 | | | | | | | | |")
            continue
        per_seed = ", ".join(f"{100 * v:.1f}" for v in s["sampled"] if math.isfinite(v))
        lines.append(f"| {p['label']} | {len(p['runs'])} | {_cell(s['sampled'])} ({per_seed}) | {_cell(s['greedy'])} | "
                     f"{_cell(s['transfer4'])} | {_cell(s['range'])} | {_cell(s['entropy_end'], 1, 3)} | "
                     f"{_cell(s['length_end'], 1)} | {_cell(s['seconds'], 1, 0)} | {_cell(s['eval_seconds'], 1, 0)} |")
    return "\n".join(lines + ["", measured, ""])


def _cost(points: dict) -> str:
    """' (from scratch: 12.3 min)': what `--only` costs when none of the claim's runs exist yet (train + eval)."""
    seconds = [v for p in points.values() for k in ("seconds", "eval_seconds") for v in p["numbers"].get(k, [])
               if math.isfinite(v)]
    return f" (from scratch: {sum(seconds) / 60:.1f} min of training and evaluation)" if seconds else ""


def recorded(records: list[dict], key: str) -> str:
    """The distinct values the runs recorded for `key` (machine, torch, threads, code_version), with counts."""
    values = [str(r.get(key, "?")) for r in records]
    return ", ".join(f"{v} ({values.count(v)} runs)" if len(set(values)) > 1 else v for v in sorted(set(values)))


def _intro(base: dict, scale: Scale, seeds: int, records: list[dict], m: int) -> list[str]:
    minutes = sum(float(r["train_seconds"]) + float(r.get("eval_seconds", 0)) for r in records) / 60
    seed_list = list(scale.seeds(seeds))
    t = t_quantile(1 - 0.05 / (2 * m), seeds - 1) if seeds > 1 else math.nan
    mean = lambda key: 100 * statistics.fmean(v for v in base.get(key, [math.nan]) if math.isfinite(v))  # noqa: E731
    return [
        "# The paper's claims at small scale: a registered, paired study", "",
        "Lian 2025 (arXiv 2512.07611) trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. This "
        f"study re-tests its claims with minirl's tiny policy ({scale.name} scale, task {scale.task}: {scale.steps} steps "
        f"per run, {scale.batch_size} prompts × G {scale.group_size} completions per step, or "
        f"{scale.batch_size * scale.group_size} prompts × 1 for PPO; answers up to {scale.budget()['max_new_tokens']} tokens; base "
        f"lr {scale.lr:g}; seeds {seed_list[0]}..{seed_list[-1]} for every point). Every number below comes from the "
        f"runs of `python -m minirl study --seeds {seeds}{_flags(scale)}`; one claim: `--only H1` (and so on).", "",
        f"- **Registered.** The claims, points, metrics and verdict rules were committed before any run: {REGISTERED}.",
        f"- **After registration**, {DEVIATIONS}.",
        f"- **Metric.** Held-out pass@1: the sampled (T = 1) accuracy over {scale.eval_k} samples of each of "
        f"{scale.eval_n} held-out problems, unless a test names another metric.",
        "- **Paired.** Every arm of seed s trains on the same prompts per step where the batch shapes agree (PPO "
        f"draws {scale.batch_size * scale.group_size} prompts per step where the group methods draw {scale.batch_size}) "
        "and is evaluated on the same problems with the "
        "same sampling seed as the others and the base policy of seed s. A test is the mean of the per-seed "
        "differences ± its standard error sd / √n.",
        f"- **Multiple comparisons.** The registered table makes m = {m} paired t-tests. A difference is *clear* at 5 % with "
        f"Bonferroni over all of them: |mean| > t(1 - 0.05 / {2 * m}, {seeds - 1}) × se = {t:.2f} × se (one test "
        f"alone would need {t_quantile(0.975, max(1, seeds - 1)):.2f} × se). The MDE is the true difference such "
        "a test finds with 80 % probability, from the seeds' own sd: (t_bar + t_0.8) × se.",
        f"- Runs: {len(records)} distinct runs (claims share runs), {minutes:.1f} minutes of training and final "
        f"evaluation in all; machine {recorded(records, 'machine')}, torch {recorded(records, 'torch')}, "
        f"{recorded(records, 'threads')} torch thread(s), minirl {recorded(records, 'code_version')}. Timings are "
        "single measurements and noisy.",
        f"- Base policy (mean over the seeds' evaluation draws): held-out pass@1 {mean('heldout/sampled'):.1f} %, "
        f"greedy {mean('heldout/greedy'):.1f} %; 4-number {mean('transfer4/sampled'):.1f} %"
        + (f"; numbers 1-20 (at least one above 12) {mean('range/sampled'):.1f} %." if "range/sampled" in base else "."),
        "",
        "| claim | registered rule | test: metric | paired difference ± SE | clear beyond | MDE | clear | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]


def caveats(records: list[dict], scale: Scale, seeds: int) -> str:
    """What limits every verdict above, with the numbers that show it."""
    if not records:
        return ""
    failed = sorted({r["point"] for r in records if r.get("error")})
    lines = ["", "## Reading these verdicts", "",
             f"- **Scale.** Each run is {scale.steps} steps of a ~1 M-parameter model on answers of up to "
             f"{scale.budget()['max_new_tokens']} tokens. *Inconclusive* means no difference larger than the MDE in its row, "
             "not that the paper is wrong; a verdict here says what this small setting shows.",
             f"- **Seeds.** {seeds} seeds per point: the standard errors have {seeds - 1} degrees of freedom.",
             "- **Cost of one claim.** `--only` runs only what is not cached: after the whole study, it rewrites the "
             "report in seconds; from scratch it costs the minutes given under each claim (claims share runs, so "
             "the sum over claims is more than the whole study's).",
             "- **Runs that stopped early** (dynamic sampling exhausted or a diverged loss) are results, evaluated "
             f"where they stopped: {', '.join(failed) if failed else 'none'}."]
    return "\n".join(lines) + "\n"

"""The paper's claims, each with the points that test it, its verdict rule and its figure: one block per claim.

Lian 2025 (arXiv 2512.07611) trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. Each finding
is a `@claim(...)` here: its sweep of `Point`s, the two metrics its figure shows, and the decorated function,
which turns the finished runs into (verdict, what we measured, the rule in words). Adding a claim is adding
one block. `points` passed to a rule: {label: {"series", "x", "runs", "numbers" (metric -> per-seed values),
"stats" (metric -> stats.stats)}}; `base`: the base policy's final evaluation (report.base_numbers).
"""

from __future__ import annotations

import math
import statistics

from .points import Claim, Point
from .stats import clear, combine, diff, num, pct, stats, verdict

CLAIMS: dict[str, Claim] = {}


def claim(name: str, title: str, expectation: str, points, figure: tuple[str, str], x: str = "step"):
    """Register the decorated verdict rule as claim `name`, with its points and figure metrics."""
    def register(rule):
        CLAIMS[name] = Claim(name, title, expectation, tuple(points), rule, figure, x)
        return rule
    return register


def _by(points: dict, series: str | None = None) -> list[dict]:
    return [p for p in points.values() if series is None or p["series"] == series]


# 1.5 decades around the base lr in half-decade steps (3.2e-5 .. 1e-3 at the cpu scale): the points of the
# lessons' log-scale lr slider (10^(k/10)), so the panel can answer them from the recorded runs.
LR_MULTIPLIERS = (10 ** -0.5, 1.0, 10 ** 0.5, 10.0)
KL_VALUES = (0.0, 1e-3, 1e-2, 1e-1)


@claim("H1", "Group size", "larger G (at a fixed number of prompts per step) gives a smoother reward curve "
       "and higher final accuracy, for GRPO and DAPO; it also costs more compute per step",
       [Point(f"{a} G={g}", a, {"group_size": g}, a, g) for a in ("grpo", "dapo") for g in (2, 4, 8, 16)],
       figure=("eval/accuracy_sampled", "reward_mean"))
def verdict_H1(P, base):
    parts, verdicts = [], []
    for algo in ("grpo", "dapo"):
        pts = sorted(_by(P, algo), key=lambda p: p["x"])
        small, large = pts[0], pts[-1]
        d, bar = diff(large["stats"]["sampled"], small["stats"]["sampled"])
        r, rbar = diff(small["stats"]["reward_roughness"], large["stats"]["reward_roughness"])
        acc, smooth = clear(d, bar), clear(r, rbar)
        sign = -1 if min(acc, smooth) < 0 else 1 if acc > 0 and smooth > 0 else 0
        verdicts.append(f"{algo.upper()}: {verdict(sign)}")
        best = max(pts, key=lambda p: p["stats"]["gain_per_minute"]["mean"])
        parts.append(f"{algo.upper()}: G {small['x']} → {large['x']}: sampled accuracy "
                     f"{pct(small['stats']['sampled'])} → {pct(large['stats']['sampled'])} (Δ {100 * d:+.1f} ± "
                     f"{100 * bar:.1f}); step-to-step reward jitter {num(small['stats']['reward_roughness'])} → "
                     f"{num(large['stats']['reward_roughness'])}; {num(small['stats']['seconds'])} → "
                     f"{num(large['stats']['seconds'])} s per run; most accuracy gained per minute at G {best['x']}")
    return " · ".join(verdicts), "; ".join(parts), \
        "per algorithm: G 16 vs G 2 clearly higher accuracy and clearly less jitter (not supported: either clearly worse)"


@claim("H2", "KL coefficient", "the effect of beta is non-monotonic: some beta > 0 beats both no KL and a large "
       "KL (PPO: per-token KL in the reward; GRPO: k3 KL in the loss)",
       [Point(f"{a} kl={k:g}", a, {"kl_coef": k}, a, k) for a in ("ppo", "grpo") for k in KL_VALUES],
       figure=("eval/accuracy_sampled", "kl_ref"))
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
    return combine(signs, any_supports=True), "; ".join(parts), \
        "the best interior β beats the better end (β 0 or 0.1) clearly"


def _at_samples(run_rows: list[dict], samples: float) -> float:
    """Held-out sampled accuracy of a run at `samples` completions, interpolated between evaluations."""
    pts = [(r["samples"], r["eval/accuracy_sampled"]) for r in run_rows if "eval/accuracy_sampled" in r]
    for (s0, a0), (s1, a1) in zip(pts, pts[1:]):
        if s0 <= samples <= s1:
            return a0 + (a1 - a0) * (samples - s0) / max(1e-9, s1 - s0)
    return pts[-1][1] if pts else math.nan


@claim("H3", "Dynamic sampling", "DAPO's dynamic sampling does not help: DAPO without it is as good or better, "
       "compared at equal steps and at equal numbers of generated completions",
       [Point("dapo", "dapo", {}, "dapo", "with DS"),
        Point("dapo-noDS 2x steps", "dapo-noDS", {"steps_x": 2}, "dapo-noDS", "without DS")],
       figure=("eval/accuracy_sampled", "kept_group_frac"), x="samples")


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
    return verdict(sign), text, "without DS at least as good at equal completions; not supported if DS is clearly better"


@claim("H4", "Algorithm ranking", "after tuning, DAPO without dynamic sampling is best overall, and every "
       "algorithm beats the base policy",
       [Point(a, a, {}, "algorithm", a) for a in ("ppo", "grpo", "dapo", "dapo-noDS")],
       figure=("eval/accuracy_sampled", "reward_mean"))
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
    return verdict(sign), text, "DAPO-noDS clearly above each of the others"


@claim("H5", "Token-level loss and reward hacking", "under the 0 / 0.1 / 1 reward (0.1 for a well-formed "
       "wrong answer), a token-level loss curbs reward hacking (fewer well-formed-but-wrong answers) and allows "
       "longer completions than the per-sequence mean (GRPO)",
       [Point(f"grpo {agg}", "grpo", {"loss_agg": agg}, "grpo", agg, "tinyzero")
        for agg in ("seq-mean-token-mean", "token-mean")],
       figure=("reward/format_ok", "completion_len_mean"))
def verdict_H5(P, base):
    seq, tok = P["grpo seq-mean-token-mean"], P["grpo token-mean"]
    d_fmt, bar_fmt = diff(seq["stats"]["format_only_end"], tok["stats"]["format_only_end"])
    d_len, bar_len = diff(tok["stats"]["length_end"], seq["stats"]["length_end"])
    s_fmt, s_len = clear(d_fmt, bar_fmt), clear(d_len, bar_len)
    sign = 1 if s_fmt > 0 and s_len >= 0 else -1 if s_fmt < 0 or s_len < 0 else 0
    text = (f"well-formed but wrong answers at the end of training: per-sequence {pct(seq['stats']['format_only_end'])}, "
            f"token-level {pct(tok['stats']['format_only_end'])}; completion length {num(seq['stats']['length_end'])} vs "
            f"{num(tok['stats']['length_end'])} tokens; accuracy {pct(seq['stats']['sampled'])} vs {pct(tok['stats']['sampled'])}")
    return verdict(sign), text, "token-level clearly fewer well-formed-wrong answers, and not shorter"


@claim("H6", "Entropy bonus", "an entropy bonus can lower accuracy (GRPO)",
       [Point(f"grpo ent={e:g}", "grpo", {"entropy_coef": e}, "grpo", e) for e in (0.0, 1e-3, 1e-2)],
       figure=("eval/accuracy_sampled", "entropy"))
def verdict_H6(P, base):
    pts = sorted(_by(P), key=lambda p: p["x"])
    off = pts[0]
    signs = [clear(*diff(off["stats"]["sampled"], p["stats"]["sampled"])) for p in pts[1:]]
    sign = 1 if any(s > 0 for s in signs) else -1 if any(s < 0 for s in signs) else 0
    text = ", ".join(f"entropy coef {p['x']:g}: accuracy {pct(p['stats']['sampled'])}, entropy "
                     f"{num(p['stats']['entropy_end'])}" for p in pts)
    return verdict(sign), text, "some bonus clearly lowers accuracy (not supported: one clearly raises it)"


@claim("H7", "Learning rate", "sensitivity to the learning rate differs between algorithms: each has its "
       "own best value and its own point of collapse",
       [Point(f"{a} lr x{m:.3g}", a, {"lr_x": m}, a, m) for a in ("ppo", "grpo", "dapo") for m in LR_MULTIPLIERS],
       figure=("eval/accuracy_sampled", "reward_mean"))
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
    # Not part of the rule (noticed after the runs): how far each algorithm falls at the lr below collapse
    m = sorted(by_algo["ppo"])[-2]
    worst = min(by_algo, key=lambda a: by_algo[a][m]["mean"])
    others = [a for a in by_algo if a != worst]
    gaps = [f"{a.upper()} {pct(by_algo[a][m])}" for a in others]
    clear_gap = all(clear(*diff(by_algo[a][m], by_algo[worst][m])) > 0 for a in others)
    parts.append(f"observed, not part of the rule: at {m:.3g}x the base lr {worst.upper()} has fallen to "
                 f"{pct(by_algo[worst][m])} against {', '.join(gaps)}" + (" (clearly lower)" if clear_gap else ""))
    return ("supported" if witnesses else "inconclusive"), "; ".join(parts), \
        "at some lr one algorithm has collapsed (mean > 5 points below the base) while another is clearly above it"


@claim("H8", "Clip-higher", "DAPO's clip-higher (eps_high 0.28 instead of 0.2) slows the decline of the "
       "policy's entropy",
       [Point(f"dapo clip_high={h:g}", "dapo", {"clip_high": h}, "dapo", h) for h in (0.2, 0.28)],
       figure=("entropy", "clip_frac_high"))
def verdict_H8(P, base):
    sym, high = P["dapo clip_high=0.2"], P["dapo clip_high=0.28"]
    d, bar = diff(high["stats"]["entropy_end"], sym["stats"]["entropy_end"])
    text = (f"entropy start → end: 0.2: {num(sym['stats']['entropy_start'])} → {num(sym['stats']['entropy_end'])}, "
            f"0.28: {num(high['stats']['entropy_start'])} → {num(high['stats']['entropy_end'])} nats/token "
            f"(Δ end {d:+.3f} ± {bar:.3f}); clipped tokens at the end {pct(sym['stats']['clip_frac_end'])} vs "
            f"{pct(high['stats']['clip_frac_end'])}; accuracy {pct(sym['stats']['sampled'])} vs {pct(high['stats']['sampled'])}")
    return verdict(clear(d, bar)), text, "clearly higher final entropy with ε_high 0.28"


@claim("H9", "Completion length", "GRPO's completions grow longer over training than PPO's (per-sequence "
       "normalisation favours long wrong answers)",
       [Point(a, a, {}, "algorithm", a) for a in ("ppo", "grpo")],
       figure=("completion_len_mean", "eval/accuracy_sampled"))
def verdict_H9(P, base):
    ppo, grpo = P["ppo"], P["grpo"]
    growth = {k: stats([e - s for s, e in zip(p["numbers"]["length_start"], p["numbers"]["length_end"])])
              for k, p in (("ppo", ppo), ("grpo", grpo))}
    d, bar = diff(growth["grpo"], growth["ppo"])
    text = (f"completion length first → last 10 % of steps: PPO {num(ppo['stats']['length_start'])} → "
            f"{num(ppo['stats']['length_end'])}, GRPO {num(grpo['stats']['length_start'])} → "
            f"{num(grpo['stats']['length_end'])} tokens (growth difference {d:+.2f} ± {bar:.2f})")
    return verdict(clear(d, bar)), text, "GRPO's length grows clearly more than PPO's"

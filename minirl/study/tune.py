"""`python -m minirl tune`: the learning-rate sweep that chooses each preset's learning rate (config.TUNED_LR).

    python -m minirl tune                            # both tasks, every preset it tunes, 2 runs at a time
    python -m minirl tune --task compact --jobs 1    # one task, one run at a time
    python -m minirl tune --report-only              # rewrite the table, the figure and the results file

Each (task, preset, learning rate, seed) is one run from the task's shipped policy with the task's `compare`
budget (its steps and token budget), scored on the task's validation split: train problems that training never
draws, so the held-out test split stays for the final comparisons. The seeds (SEEDS) are ones no final comparison
uses. The grid reaches from "collapses" down to "too slow" for every preset: where a preset is still best at the
lowest point, the sweep adds the next one below (`extensions`). A preset's chosen learning rate is the point with
the best mean final validation accuracy over the
seeds. A run counts as collapsed when it diverged or gave up (dynamic sampling) or ended below the base policy's
validation accuracy. config.TUNED_LR holds the chosen values; a test keeps it equal to this sweep's results.

Runs go to <out>/runs/<task>-<algo>-<lr>-s<seed>-<hash> (`folder`), each trained in a child process (`python -m
minirl train`), JOBS at a time with one torch thread each: on 2 cores two one-thread runs side by side finish sooner
than the same two runs one after another with two threads each (BENCHMARKS.md section 3). A run folder with a
tune.json is done, so a killed sweep continues where it stopped; git keeps each run's tune.json and meta.json
(.gitignore), so it also continues in another checkout, and `--report-only` rebuilds the report from them. The
numbers go to RESULTS (shipped: lesson 05 draws them), the report to <out>/SWEEP.md and <out>/lr_sweep.png.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from ..config import RLConfig
from ..policy import load_policy
from ..runs import Run, _write_atomic, code_version
from ..tasks import get_task, task_budget, task_identity

GRID = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)  # a log grid up to "collapses" for every preset; `extensions` adds points
#                                        below it for a preset that is still best at 1e-5
SEEDS = (100, 101, 102)  # no final comparison uses these (compare: 0, the studies: 10 and up)
ALGOS = {"compact": ("ppo", "grpo", "dapo", "dapo_nods", "dr_grpo", "rloo", "gspo", "cispo"),
         "worked": ("ppo", "grpo", "dapo", "dapo_nods")}
EVAL_N, EVAL_K = 200, 4  # validation problems per evaluation, and samples of each (pass@1 from 4)
RESULTS = Path(__file__).resolve().parents[1] / "assets" / "sweeps" / "lr_tuning.json"
DONE_FILE = "tune.json"


@dataclass(frozen=True)
class Job:
    """One run of the sweep."""

    task: str  # a registry task name
    algo: str  # a preset
    lr: float
    seed: int

    def config(self, smoke: bool = False) -> RLConfig:
        entry = get_task(self.task)
        budget = dict(steps=2, eval_every=0, eval_n=8, batch_size=2, group_size=4) if smoke else \
            dict(steps=entry.compare_steps, eval_every=entry.compare_steps // 2, eval_n=EVAL_N)
        return RLConfig.preset(self.algo, task=self.task, **task_budget(entry.make()), **budget, lr=self.lr,
                               seed=self.seed, eval_split="val", eval_sampled_k=EVAL_K)


def plan(tasks: list[str], smoke: bool = False) -> list[Job]:
    """Every job of the grid, seed by seed, so that an early stop still covers every point (smoke: 2 presets x 2
    learning rates x 2 seeds per task). `all_jobs` adds the points below the grid that its results call for."""
    grid, seeds = (GRID[::4], SEEDS[:2]) if smoke else (GRID, SEEDS)
    return [Job(t, a, lr, s) for s in seeds for t in tasks for a in ALGOS[t][:2 if smoke else None] for lr in grid]


def lower(lr: float) -> float:
    """The next point below `lr` on the grid's 1-3-10 log scale: 1e-5 -> 3e-6 -> 1e-6."""
    mantissa, exponent = f"{lr:.0e}".split("e")
    return float(f"3e{int(exponent) - 1}") if mantissa == "1" else float(f"1e{int(exponent)}")


def extensions(jobs: list[Job], records: list[dict]) -> list[Job]:
    """The grid must reach "too slow" for every preset: when a preset's best mean is at its lowest learning rate
    (and every seed of every one of its points has run), one point below it, with every seed. The top of the grid
    needs no such rule: 1e-3 collapses every preset."""
    done = {(r["task"], r["algo"], r["lr"], r["seed"]) for r in records}
    new = []
    for task, algo in dict.fromkeys((j.task, j.algo) for j in jobs):
        own = [j for j in jobs if (j.task, j.algo) == (task, algo)]
        if not all((j.task, j.algo, j.lr, j.seed) in done for j in own):
            continue
        best = summarise([r for r in records if (r["task"], r["algo"]) == (task, algo)])[task][algo]["chosen_lr"]
        lowest = min(j.lr for j in own)
        if best == lowest:
            new += [Job(task, algo, lower(lowest), seed) for seed in dict.fromkeys(j.seed for j in own)]
    return new


def all_jobs(tasks: list[str], out: Path, smoke: bool = False) -> tuple[list[tuple[Job, Path]], list[dict]]:
    """The sweep's jobs with their folders, the grid's extensions (`extensions`, not in smoke runs) included, and
    the records of the finished ones."""
    identities = {t: load_policy(get_task(t).policy, device="cpu").identity() for t in tasks}
    jobs = plan(tasks, smoke)
    while True:
        paths = [(job, folder(job, out, identities[job.task], smoke)) for job in jobs]
        records = [json.loads((p / DONE_FILE).read_text()) for _, p in paths if (p / DONE_FILE).is_file()]
        new = [] if smoke else [j for j in extensions(jobs, records) if j not in jobs]
        if not new:
            return paths, records
        jobs += new


def folder(job: Job, root: Path, identity: str, smoke: bool = False) -> Path:
    """<root>/runs/<task>-<algo>-<lr>-s<seed>-<hash of the policy's weights, the task and the config's non-default
    fields>: a changed policy, task or config trains afresh, a new RLConfig field left at its default does not. The
    code version is not in the name (a 2-hour sweep must survive edits that change no number); each run records it,
    and SWEEP.md names every version its runs came from."""
    config = job.config(smoke)
    changed = {f.name: getattr(config, f.name) for f in fields(config) if getattr(config, f.name) != f.default}
    digest = hashlib.sha256(json.dumps([identity, task_identity(get_task(job.task).make()), changed],
                                       sort_keys=True).encode()).hexdigest()[:10]
    return Path(root) / "runs" / f"{job.task}-{job.algo}-{job.lr:.0e}-s{job.seed}-{digest}"


def train_job(job: Job, path: Path, smoke: bool) -> dict:
    """Train `job` in a child process into `path` (one torch thread) and record how it ended in tune.json."""
    if path.exists():  # killed before it was recorded: train it again
        shutil.rmtree(path)
    cmd = [sys.executable, "-m", "minirl", "train", "--config-json", job.config(smoke).to_json(), "--task", job.task,
           "--run-dir", str(path), "--threads", "1", "--device", "cpu", "--quiet"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if not (path / "config.json").exists():  # it failed before training: a bug, not a result
        raise RuntimeError(f"{job} did not start: {done.stderr[-2000:]}")
    run = Run.load(path)
    evals = [r for r in run.history if "eval/accuracy_sampled" in r]
    record = {"task": job.task, "algo": job.algo, "lr": job.lr, "seed": job.seed, "status": run.status,
              "code_version": run.meta.get("code_version"),
              "error": run.meta.get("error"), "steps": run.history[-1]["step"],
              "seconds": round(time.perf_counter() - t0, 1),
              "base": evals[0]["eval/accuracy_sampled"], "final": evals[-1]["eval/accuracy_sampled"],
              "final_greedy": evals[-1]["eval/accuracy_greedy"], "final_step": evals[-1]["step"]}
    _write_atomic(path / DONE_FILE, json.dumps(record, indent=1) + "\n")
    return record


def run_sweep(tasks: list[str], out: Path, jobs: int = 2, smoke: bool = False) -> float:
    """Train every job without a tune.json, `jobs` at a time, then any extensions their results call for; return
    the seconds spent."""
    t0 = time.perf_counter()
    while True:
        paths, _ = all_jobs(tasks, out, smoke)
        todo = [(job, path) for job, path in paths if not (path / DONE_FILE).is_file()]
        if not todo:
            return time.perf_counter() - t0
        print(f"tune: {len(todo)} runs to train ({len(paths)} in the sweep), {jobs} at a time", flush=True)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = {pool.submit(train_job, job, path, smoke): job for job, path in todo}
            for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
                r = future.result()
                print(f"[{i}/{len(todo)} {time.perf_counter() - t0:6.0f} s] {r['task']:8s} {r['algo']:9s} "
                      f"lr {r['lr']:.0e} seed {r['seed']}: val {r['base']:.3f} -> {r['final']:.3f} ({r['status']}, "
                      f"{r['seconds']:.0f} s)", flush=True)


# ----------------------------------------------------------------------------- the results
def collapsed(record: dict) -> bool:
    """Diverged, gave up, or ended below the base policy's validation accuracy."""
    return record["status"] != "finished" or record["final"] < record["base"]


def score(record: dict) -> float:
    """A run's final validation accuracy; 0 for a run that stopped early (it diverged, or dynamic sampling gave up
    because almost every group was all wrong): its last evaluation is the base policy's, which it no longer is."""
    return record["final"] if record["status"] == "finished" else 0.0


def summarise(records: list[dict]) -> dict:
    """Per task and preset: every grid point's per-seed scores (`score`) and collapses, and the chosen learning
    rate."""
    summary: dict = {}
    for r in records:
        point = summary.setdefault(r["task"], {}).setdefault(r["algo"], {"points": {}})["points"] \
            .setdefault(f"{r['lr']:.0e}", {"lr": r["lr"], "final": [], "greedy": [], "collapsed": [], "seeds": []})
        point["final"].append(score(r)), point["greedy"].append(r["final_greedy"] if r["status"] == "finished" else 0.0)
        point["collapsed"].append(collapsed(r)), point["seeds"].append(r["seed"])
    for task, algos in summary.items():
        for algo, entry in algos.items():
            for point in entry["points"].values():
                point["mean"] = statistics.fmean(point["final"])
                point["sd"] = statistics.stdev(point["final"]) if len(point["final"]) > 1 else math.nan
            best = max(entry["points"].values(), key=lambda p: (p["mean"], -p["lr"]))
            entry["chosen_lr"], entry["chosen_mean"] = best["lr"], best["mean"]
            entry["base"] = statistics.fmean(r["base"] for r in records if r["task"] == task and r["algo"] == algo)
    return summary


def collect(tasks: list[str], out: Path, smoke: bool = False) -> list[dict]:
    """The records of the sweep's finished runs (tune.json)."""
    return all_jobs(tasks, out, smoke)[1]


def figure(summary: dict):
    """Final validation accuracy against learning rate: one panel per task, one line per preset with its seeds'
    range as a band, collapse points (most seeds collapsed) crossed out, the chosen learning rate starred. Lesson 05
    draws it from the shipped results: `figure(json.loads(RESULTS.read_text())["summary"])`."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(6.2 * len(summary), 4.2), squeeze=False)
    for ax, (task, algos) in zip(axes[0], summary.items()):
        for i, (algo, entry) in enumerate(algos.items()):
            points = sorted(entry["points"].values(), key=lambda p: p["lr"])
            lrs, means = [p["lr"] for p in points], [100 * p["mean"] for p in points]
            color = f"C{i}"
            ax.plot(lrs, means, marker="o", ms=4, color=color, label=algo)
            ax.fill_between(lrs, [100 * min(p["final"]) for p in points], [100 * max(p["final"]) for p in points],
                            color=color, alpha=0.12)
            for p in points:
                if sum(p["collapsed"]) * 2 > len(p["collapsed"]):
                    ax.plot(p["lr"], 100 * p["mean"], marker="x", ms=11, mew=2.2, color=color)
            ax.plot(entry["chosen_lr"], 100 * entry["chosen_mean"], marker="*", ms=16, color=color, mec="black")
        ax.axhline(100 * statistics.fmean(e["base"] for e in algos.values()), color="grey", ls="--", lw=1,
                   label="base policy")
        ax.set(xscale="log", xlabel="learning rate", ylabel="final validation accuracy, sampled (%)",
               title=f"{task}: mean of {len(SEEDS)} seeds, band = their range; x collapsed, * chosen")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def draw(summary: dict, path: Path) -> None:
    """The figure, saved to `path` (SWEEP.md shows it)."""
    import matplotlib.pyplot as plt

    fig = figure(summary)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def busy_seconds(spans: list[tuple]) -> float | None:
    """Seconds covered by at least one of the (start, end) datetime intervals: their union's length, so breaks
    between sittings are left out and runs side by side count once."""
    if not spans:
        return None
    total, (start, end) = 0.0, sorted(spans)[0]
    for s, e in sorted(spans)[1:]:
        if s > end:  # a gap: close the busy interval so far
            total, start = total + (end - start).total_seconds(), s
        end = max(end, e)
    return total + (end - start).total_seconds()


def wall_clock(run_dirs: list[Path]) -> float | None:
    """Seconds in which at least one run was training (the union of the runs' start-end intervals from meta.json):
    the sweep's wall clock, summed over sittings, without the breaks between them."""
    import datetime

    spans = []
    for run_dir in run_dirs:
        meta = run_dir / "meta.json"
        if meta.is_file():
            m = json.loads(meta.read_text())
            if m.get("started_at") and m.get("ended_at"):
                spans.append((datetime.datetime.fromisoformat(m["started_at"]),
                              datetime.datetime.fromisoformat(m["ended_at"])))
    return busy_seconds(spans)


def write_report(tasks: list[str], out: Path, seconds: float | None = None, smoke: bool = False,
                 results: Path = RESULTS) -> dict:
    """results.json (RESULTS), lr_sweep.png and SWEEP.md from the finished runs of `tasks`."""
    out = Path(out)
    paths, records = all_jobs(tasks, out, smoke)
    if not records:
        raise ValueError(f"tune: no finished runs under {out / 'runs'}: run `python -m minirl tune` first")
    summary = summarise(records)
    total = sum(r["seconds"] for r in records)
    if seconds is None:  # --report-only: the span of the runs' own start and end times
        seconds = wall_clock([p for _, p in paths if (p / DONE_FILE).is_file()])
    record = {"what": "learning-rate sweep of the presets from each task's shipped policy, scored on the val split",
              "command": "python -m minirl tune " + " ".join(a for a in sys.argv[2:] if a != "--report-only"), "code_version": code_version(),
              "run_code_versions": sorted({r.get("code_version") or "?" for r in records}),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "grid": list(GRID), "seeds": list(SEEDS),
              "eval": {"split": "val", "n": EVAL_N, "k": EVAL_K}, "train_seconds": round(total),
              "wall_seconds": None if seconds is None else round(seconds), "summary": summary, "runs": records}
    results.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(results, json.dumps(record, indent=1) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    draw(summary, out / "lr_sweep.png")
    lines = ["# The learning-rate sweep", "",
             f"`{record['command'].strip()}` trained every preset at {len(GRID)} learning rates × {len(SEEDS)} seeds "
             f"({', '.join(map(str, SEEDS))}) from each task's shipped policy"
             + (f" (and at {sorted({r['lr'] for r in records if r['lr'] not in GRID})} for the presets still best at "
                "the grid's lowest point)" if any(r["lr"] not in GRID for r in records) else
                " (no preset was best at the grid's lowest point, so none needed a point below it)") + ","
             f" with the task's `compare` budget, and "
             f"scored each run on the task's validation split ({EVAL_N} problems × {EVAL_K} samples; train problems "
             "that training never draws). The chosen learning rate, **bold**, has the best mean; ✗ marks a point "
             "where most seeds collapsed (diverged, gave up, or ended below the base policy); a run that stopped early "
             "counts as 0. `config.TUNED_LR` holds "
             f"the chosen values. {len(records)} runs, {total / 60:.0f} minutes of training summed over runs"
             + ("" if seconds is None else f", {seconds / 60:.0f} minutes of wall clock in which at least one run was "
                "training (summed over sittings, breaks between them left out)") + f" ({record['machine']}; "
             f"timings are noisy). The runs came from code version(s) {', '.join(record['run_code_versions'])}.", "",
             "![sweep](lr_sweep.png)", ""]
    for task, algos in summary.items():
        lrs = sorted({p["lr"] for e in algos.values() for p in e["points"].values()})
        lines += [f"## {task}", "", f"Final validation accuracy, sampled, mean ± sd of the seeds (base policy "
                  f"{100 * statistics.fmean(e['base'] for e in algos.values()):.1f} %):", "",
                  "| preset | " + " | ".join(f"lr {lr:.0e}" for lr in lrs) + " | chosen |",
                  "|---|" + "---|" * (len(lrs) + 1)]
        for algo, entry in algos.items():
            cells = []
            for lr in lrs:
                p = entry["points"].get(f"{lr:.0e}")
                text = "" if p is None else f"{100 * p['mean']:.1f} ± {100 * p['sd']:.1f}" + \
                    (" ✗" if sum(p["collapsed"]) * 2 > len(p["collapsed"]) else "")
                cells.append(f"**{text}**" if p is not None and lr == entry["chosen_lr"] else text)
            lines.append(f"| {algo} | " + " | ".join(cells) + f" | {entry['chosen_lr']:.0e} |")
        lines.append("")
    _write_atomic(out / "SWEEP.md", "\n".join(lines))
    print(f"tune: wrote {results}, {out / 'lr_sweep.png'} and {out / 'SWEEP.md'}")
    return summary


def main(argv: list[str] | None = None) -> int:
    import argparse

    import torch

    parser = argparse.ArgumentParser(prog="python -m minirl tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="compact,worked", help="comma-separated tasks (default: compact,worked)")
    parser.add_argument("--out", type=Path, default=Path("studies/lr-sweep"), help="folder for runs/ and the report")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one torch thread each (default 2)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file (default: the shipped one)")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs")
    parser.add_argument("--smoke", action="store_true", help="2-step runs of 2 presets x 2 learning rates x 2 seeds")
    args = parser.parse_args(argv)
    tasks = [t.strip() for t in args.task.split(",") if t.strip()]
    bad = [t for t in tasks if t not in ALGOS]
    if bad or not tasks:
        parser.error(f"--task {args.task!r} is not allowed: choose from {list(ALGOS)}")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} is not allowed: use an integer >= 1")
    torch.set_num_threads(1)
    if not args.report_only:
        run_sweep(tasks, args.out, args.jobs, args.smoke)
    write_report(tasks, args.out, None, args.smoke, args.results)  # its wall clock: the runs' own start and end
    return 0

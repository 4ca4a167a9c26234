"""`python -m minirl study`: train the claims' runs that are not finished yet, then write the report."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

import torch

from ..tasks import get_task
from . import __doc__ as OVERVIEW
from .claims import CLAIMS
from .claims_tuned import REGISTERED_ORDER, SEEDS as TUNED_SEEDS, TUNED_CLAIMS
from .jobs import run_study
from .pilot import run_pilot
from .points import SCALES

from .report import write_report

TASK_SCALES = {"worked": "worked", "compact": "cpu"}  # --task -> the scale its study runs at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minirl study", description=OVERVIEW,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registration", default="worked", choices=("worked", "tuned"), help="worked: the first "
                        "registered study (claims.py); tuned: the tuning findings at tuned learning rates "
                        "(claims_tuned.py; its defaults: --scale tuned, --seeds 6, --jobs 2, --out studies/claims-tuned)")
    parser.add_argument("--only", default=None, help=f"comma-separated claims to run, from {list(CLAIMS)} "
                        f"(--registration tuned: {list(TUNED_CLAIMS)})")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per point (the registered studies: 5 and 6)")
    parser.add_argument("--jobs", type=int, default=None, help="runs side by side, one torch thread each "
                        "(default 1; --registration tuned: 2)")
    parser.add_argument("--out", type=Path, default=None, help="folder for runs/, results/, figures/, STUDY.md "
                        "(default study/; --registration tuned: studies/claims-tuned)")
    parser.add_argument("--task", default="worked", choices=[a for t in TASK_SCALES for a in (t, *get_task(t).aliases)],
                        help="worked: worked steps and their shipped "
                        "policy (the registered study); compact: an expression answer, the tiny policy (the older study)")
    parser.add_argument("--scale", default=None, choices=sorted(SCALES), help="a scale by name, instead of --task's "
                        "(gpu: an instruct model on one GPU)")
    parser.add_argument("--model", default=None, help="a folder or hub id replacing the scale's model")
    parser.add_argument("--smoke", action="store_true", help="two-step runs on a few problems (tests)")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: the best available)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from finished runs")
    parser.add_argument("--pilot", action="store_true", help="size the study: GRPO, PPO, DAPO, DAPO-noDS x --seeds, paired "
                        "differences and minimum detectable effects (pilot.py); no report")
    args = parser.parse_args(argv)
    tuned = args.registration == "tuned"
    registry = TUNED_CLAIMS if tuned else CLAIMS
    args.seeds = args.seeds if args.seeds is not None else TUNED_SEEDS if tuned else 5
    args.out = args.out or Path("studies/claims-tuned" if tuned else "study")
    args.scale = args.scale or ("tuned" if tuned else None)
    jobs = args.jobs if args.jobs is not None else 2 if tuned else 1
    claims = list(REGISTERED_ORDER if tuned else CLAIMS) if args.only is None else \
        [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in claims if c not in registry]
    if unknown or not claims:
        parser.error(f"--only {args.only!r} is not allowed: choose from {list(registry)}")
    if jobs < 1:
        parser.error(f"--jobs {jobs} is not allowed: use an integer >= 1")
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds} is not allowed: use an integer >= 1 (2 or more for verdicts)")
    scale = SCALES[args.scale or TASK_SCALES[get_task(args.task).name]]  # an earlier task name works, with a warning
    if args.model:
        scale = dataclasses.replace(scale, model=args.model)
    if args.smoke:
        scale = scale.smoke()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.pilot:
        run_pilot(scale, args.seeds, args.out, args.device)
        return 0
    if not args.report_only:
        run_study(claims, scale, args.seeds, args.out, args.device, registry, jobs)
    if tuned:
        from .report_tuned import write_tuned_report

        write_tuned_report(args.out, claims, scale, args.seeds)
    else:
        write_report(args.out, claims, scale, args.seeds)
    return 0

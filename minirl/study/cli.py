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
from .jobs import run_study
from .pilot import run_pilot
from .points import SCALES

from .report import write_report

TASK_SCALES = {"worked": "worked", "compact": "cpu"}  # --task -> the scale its study runs at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minirl study", description=OVERVIEW,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=None, help=f"comma-separated claims to run, from {list(CLAIMS)}")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per point (the registered study: 5)")
    parser.add_argument("--out", type=Path, default=Path("study"), help="folder for runs/, results/, figures/, STUDY.md")
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
    claims = list(CLAIMS) if args.only is None else [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in claims if c not in CLAIMS]
    if unknown or not claims:
        parser.error(f"--only {args.only!r} is not allowed: choose from {list(CLAIMS)}")
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
        run_study(claims, scale, args.seeds, args.out, args.device)
    write_report(args.out, claims, scale, args.seeds)
    return 0

"""`python -m minirl study`: re-test the findings of Lian 2025 (arXiv 2512.07611) at small scale.

The paper trained Qwen2.5-1.5B-Instruct on Countdown with PPO, GRPO and DAPO. Here every claim (H1..T) is a
few points (a preset plus overrides) with registered paired tests, each point trained from the same base
policy with the same seed list, one run at a time:

    python -m minirl study                         # every claim, 5 seeds, the worked-steps task on this CPU
    python -m minirl study --only H8               # one claim
    python -m minirl study --task compact          # the same claims on the compact task (the older study)
    python -m minirl study --pilot --seeds 2       # size a study: paired sds and minimum detectable effects
    python -m minirl study --scale gpu --model Qwen/Qwen2.5-0.5B-Instruct --device cuda   # a real model
    python -m minirl study --registration tuned    # the second study: the tuning findings at tuned lrs (L, B, C, R)

Every (point, seed) is a run folder `<out>/runs/<run_key>` with its final evaluation in `study.json`; a killed
study continues with the first run that has none. The report: results/<claim>.json, figures/<claim>.png (training
curves) and <claim>_paired.png (per-seed differences), STUDY.md. The files, in import order: points.py (Scale,
Point, Claim), power.py (paired t-tests, MDE, Holm), claims.py (each claim with its points, tests and rule), jobs.py
(the runs), report.py, pilot.py, cli.py; the second registration: claims_tuned.py, report_tuned.py and
sizing_tuned.py (its predicted MDEs).
"""

from .claims import CLAIMS, claim
from .jobs import STUDY_FILE, final_evaluation, plan, run_folder, run_point, run_study
from .points import SCALES, Claim, Point, Scale
from .report import collect, write_report
from .cli import main  # noqa: E402  (last: it reads this package's docstring)

__all__ = ["CLAIMS", "SCALES", "STUDY_FILE", "Claim", "Point", "Scale", "claim", "collect", "final_evaluation",
           "main", "plan", "run_folder", "run_point", "run_study", "write_report"]

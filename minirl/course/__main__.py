"""`python -m minirl.course {build,grade}`: see `python -m minirl.course --help`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __doc__ as OVERVIEW
from .build import CourseError, build, check
from .grade import TIMEOUT, format_table, grade


def default_folder(name: str) -> str:
    """`name` of the current folder, else of the checkout this minirl is installed from (`pip install -e .`): the
    course commands work from any folder of a checkout."""
    here, checkout = Path(name), Path(__file__).resolve().parents[2] / name
    return str(checkout if not here.is_dir() and checkout.is_dir() else here)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minirl.course", description=OVERVIEW,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write exercises/ from solutions/ (or --check that it is up to date)")
    b.add_argument("--solutions", default=default_folder("solutions"),
                   help="folder of solution notebooks (default: solutions/ here, else the checkout's)")
    b.add_argument("--out", default=default_folder("exercises"),
                   help="folder of exercise notebooks (default: exercises/ here, else the checkout's)")
    b.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if --out differs from a fresh build or shows solution text")
    g = sub.add_parser("grade", help="autograde student notebooks against the solutions")
    g.add_argument("path", metavar="PATH",
                   help="a student notebook, or a folder searched recursively (student = sub-folder name)")
    g.add_argument("--solutions", default=default_folder("solutions"),
                   help="folder of solution notebooks (default: solutions/ here, else the checkout's)")
    g.add_argument("--timeout", type=float, default=TIMEOUT,
                   help=f"seconds per cell (default: {TIMEOUT}); a notebook gets 3x this in all")
    g.add_argument("--out", default="grades", help="where grades.csv and grades.json go (default: grades)")
    e = sub.add_parser("execute", help="run notebooks top to bottom and save them with their outputs, progress "
                       "bars as a terminal shows them (how the lessons are committed)")
    e.add_argument("notebooks", nargs="+", metavar="NOTEBOOK")
    e.add_argument("--timeout", type=int, default=3600, help="seconds per cell (default 3600)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "build" and args.check:
            problems = check(args.solutions, args.out)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print(f"{args.out}/ is stale or leaks solutions: run `python -m minirl.course build`",
                      file=sys.stderr)
                return 1
            print(f"{args.out}/ is up to date with {args.solutions}/")
        elif args.command == "build":
            for path in build(args.solutions, args.out):
                print(f"wrote {path}")
        elif args.command == "execute":
            from .execute import execute

            for notebook in args.notebooks:
                print(f"{notebook}: {execute(notebook, args.timeout):.0f} s", flush=True)
        else:
            rows = grade(args.path, args.solutions, args.timeout, args.out,
                         log=lambda line: print(line, file=sys.stderr, flush=True))
            print(format_table(rows))
            print(f"wrote {args.out}/grades.csv and {args.out}/grades.json")
    except CourseError as err:  # bad input: one clear line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

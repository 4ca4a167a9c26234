"""`python -m minirl.course {build,grade}`: see `python -m minirl.course --help`."""

from __future__ import annotations

import argparse
import sys

from . import __doc__ as OVERVIEW
from .build import CourseError, build, check
from .grade import TIMEOUT, format_table, grade


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minirl.course", description=OVERVIEW,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write exercises/ from solutions/ (or --check that it is up to date)")
    b.add_argument("--solutions", default="solutions", help="folder of solution notebooks (default: solutions)")
    b.add_argument("--out", default="exercises", help="folder of exercise notebooks (default: exercises)")
    b.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if --out differs from a fresh build or shows solution text")
    g = sub.add_parser("grade", help="autograde student notebooks against the solutions")
    g.add_argument("path", metavar="PATH",
                   help="a student notebook, or a folder searched recursively (student = sub-folder name)")
    g.add_argument("--solutions", default="solutions", help="folder of solution notebooks (default: solutions)")
    g.add_argument("--timeout", type=float, default=TIMEOUT,
                   help=f"seconds per cell (default: {TIMEOUT}); a notebook gets 3x this in all")
    g.add_argument("--out", default="grades", help="where grades.csv and grades.json go (default: grades)")
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

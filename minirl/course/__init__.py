"""The course tooling: build student exercises from solution notebooks, check they are fresh, grade.

    python -m minirl.course build [--solutions solutions] [--out exercises] [--check]
    python -m minirl.course grade PATH [--solutions solutions] [--timeout 120] [--out grades]

build.py turns `solutions/*.ipynb` (nbgrader markers and metadata) into `exercises/*.ipynb`;
grade.py runs student notebooks with the solution's test cells put back and scores them.
"""

from .build import CourseError, build, build_notebook, check
from .grade import grade, grade_notebook

__all__ = ["CourseError", "build", "build_notebook", "check", "grade", "grade_notebook"]

"""Autograde student notebooks against the solution notebooks, the way nbgrader's autograde does.

For one student notebook:
1. find the solution notebook with the same file name;
2. take the student's cells, but replace every graded test cell (matched by its nbgrader grade_id) with
   the solution's version, so hidden tests come back and edited tests do not count;
3. run it with nbclient in a fresh python3 kernel (MINIRL_SMOKE=1, in a temporary folder), letting
   errors pass so that one failing test does not hide the next ones. A cell that runs longer than
   `timeout` seconds is interrupted and fails; after `budget` seconds in all (3 x timeout by default)
   the kernel is killed and the notebook scores 0;
4. a test cell scores its points if it ran without an error.

Cells that nbgrader grades by hand (grade=true with solution=true, such as a written answer, or task=true)
are not autograded: each row lists them (`manual`, with a status) and counts their points apart, in
`manual_points`; `points` / `max_points` are the autograded points only. A manual cell whose text is still
the exercise's stub is "not answered" (0 points, as nbgrader's autograde scores it); otherwise it "needs
manual grading".

Anything wrong with one notebook (bad JSON, no solution, dead kernel, time out) becomes a row with 0
points and a reason, never an exception: one broken submission must not stop a class's batch.
"""

from __future__ import annotations

import copy
import csv
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from time import monotonic

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from .build import CourseError, build_notebook, check_metadata, is_manual_cell, is_test_cell, nbgrader

TIMEOUT = 120  # seconds per cell
BUDGET_FACTOR = 3  # a notebook may run for BUDGET_FACTOR x timeout seconds in all
MAX_MESSAGE = 200
COLUMNS = ("student", "exercise", "points", "max_points", "manual_points", "first_failure")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ARROW = re.compile(r"^\s*---->\s*\d*\s*")  # IPython's '----> 3 ' before the failing line
QUIET = logging.getLogger("minirl.course.grade")  # nbclient logs every timeout as an error; we report it
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at `path`; CourseError with a one-line reason if it is not one."""
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CourseError(f"not a valid JSON notebook: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise CourseError("not a notebook: the JSON has no list of 'cells'")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
        nbformat.validate(nb)  # so that every cell below has a type, a source and metadata
        return nb
    except Exception as err:  # nbformat raises many kinds; all mean "not a notebook we can run"
        raise CourseError(f"not a notebook: {type(err).__name__}: {str(err).splitlines()[0]}") from None


def merge(student, solution) -> tuple[nbformat.NotebookNode, list[tuple[str, float, int | None]]]:
    """The notebook to run, and its tests as (grade_id, points, cell index or None if the student
    deleted the cell). Only the first student cell with a given grade_id is graded."""
    tests = {nbgrader(c)["grade_id"]: c for c in solution.cells if is_test_cell(c)}
    merged, where = copy.deepcopy(student), {}
    for index, cell in enumerate(merged.cells):
        grade_id = nbgrader(cell).get("grade_id")
        if grade_id in tests and grade_id not in where:
            merged.cells[index] = copy.deepcopy(tests[grade_id])
            where[grade_id] = index
        elif nbgrader(cell).get("grade"):  # a copied or invented test cell runs, but scores nothing
            cell.metadata["nbgrader"] = {**nbgrader(cell), "grade": False}
    for cell in merged.cells:  # execution_count / outputs from the student do not matter
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    merged.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return merged, [(gid, nbgrader(c)["points"], where.get(gid)) for gid, c in tests.items()]


def mark_unanswered(manual: list[dict], student, solution, name: str) -> None:
    """Set the status of each manual cell the student deleted or left as the exercise's stub."""
    if not manual:
        return
    stubs = {nbgrader(c).get("grade_id"): c.source for c in build_notebook(solution, name).cells if is_manual_cell(c)}
    answers = {}
    for cell in student.cells:
        answers.setdefault(nbgrader(cell).get("grade_id"), cell.source)
    for m in manual:
        if m["grade_id"] not in answers:
            m["status"] = "missing: 0 points (the cell was deleted from the notebook)"
        elif answers[m["grade_id"]].strip() == stubs.get(m["grade_id"], "").strip():
            m["status"] = "not answered: 0 points (still the exercise's text)"


def execute(nb, workdir: Path, timeout: float, budget: float) -> tuple[dict[int, dict], str]:
    """Run `nb` in place; returns the execute_reply content of every cell that ran, by cell index, and
    why the run stopped early ("" if it did not)."""
    replies: dict[int, dict] = {}
    deadline = [float("inf")]
    client = NotebookClient(
        nb, kernel_name="python3", allow_errors=True, log=QUIET, shutdown_kernel="immediate",
        extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no start-up warnings per student
        resources={"metadata": {"path": str(workdir)}},
        # a slow cell is interrupted and fails; the kernel goes on with the next cell
        timeout_func=lambda cell: max(1.0, min(timeout, deadline[0] - monotonic())), interrupt_on_timeout=True,
        error_on_timeout={"ename": "TimeoutError", "evalue": f"cell ran longer than {timeout:g} s and was interrupted",
                          "traceback": []},
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(
            cell_index, (execute_reply or {}).get("content", {})),
    )
    with client.setup_kernel(env={**os.environ, "MINIRL_SMOKE": "1"}):  # kernel killed on the way out
        deadline[0] = monotonic() + budget
        for index, cell in enumerate(nb.cells):
            if monotonic() >= deadline[0] - 0.5:
                return replies, f"timed out: the notebook ran longer than {budget:g} s in all; kernel killed"
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                return replies, f"kernel died while running cells[{index}]"
    if monotonic() >= deadline[0] - 0.5:
        return replies, f"timed out: the notebook ran longer than {budget:g} s in all; kernel killed"
    return replies, ""


def error_message(reply: dict) -> str:
    """'ename: evalue' (its first line); for a bare `assert`, 'AssertionError in `the failing line`'."""
    name, value = reply.get("ename", "Error"), (reply.get("evalue") or "").strip()
    message = f"{name}: {value.splitlines()[0]}" if value else name
    if not value and name == "AssertionError":  # IPython marks the failing line with '---->'
        arrows = [ANSI.sub("", line) for frame in reply.get("traceback", []) for line in frame.split("\n")
                  if "---->" in ANSI.sub("", line)]
        if arrows:
            message += f" in `{ARROW.sub('', arrows[-1]).strip()}`"
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def grade_notebook(path, solution_path, timeout: float = TIMEOUT, *, student: str | None = None,
                   budget: float | None = None) -> dict:
    """Grade one student notebook. Returns a row: student, exercise, notebook, points, max_points,
    first_failure ("" when everything passed, else "grade_id: error" or why nothing ran) and tests
    (one dict per autograded cell: grade_id, points, max_points, error), manual_points (the points of the
    cells to grade by hand, not in max_points) and manual (one dict per such cell: grade_id, max_points,
    status)."""
    path = Path(path)
    row = {"student": student or path.stem, "exercise": path.stem, "notebook": str(path), "points": 0,
           "max_points": 0, "manual_points": 0, "first_failure": "", "tests": [], "manual": []}
    try:
        if not Path(solution_path).is_file():
            raise CourseError(f"no solution notebook {str(solution_path)!r} for this exercise")
        solution = read_notebook(solution_path)
        check_metadata(solution, str(solution_path))
        row["max_points"] = sum(nbgrader(c)["points"] for c in solution.cells if is_test_cell(c))
        row["manual"] = [{"grade_id": nbgrader(c)["grade_id"], "max_points": nbgrader(c)["points"],
                          "status": "needs manual grading"} for c in solution.cells if is_manual_cell(c)]
        row["manual_points"] = sum(m["max_points"] for m in row["manual"])
        student_nb = read_notebook(path)
        mark_unanswered(row["manual"], student_nb, solution, str(solution_path))
        merged, tests = merge(student_nb, solution)
    except CourseError as err:
        row["first_failure"] = str(err)
        for m in row["manual"]:  # the student's notebook could not be read: no answer to grade
            m["status"] = "unreadable: 0 points (the notebook could not be read)"
        return row
    with tempfile.TemporaryDirectory(prefix="minirl-grade-") as workdir:
        nbformat.write(merged, Path(workdir) / path.name)  # the kernel's working dir holds a copy
        try:
            replies, stopped = execute(merged, Path(workdir), timeout, budget or BUDGET_FACTOR * timeout)
        except Exception as err:  # e.g. the kernel cannot start: still a row, never a crashed batch
            replies, stopped = {}, f"could not run the notebook: {type(err).__name__}: {err}"
    for grade_id, points, index in tests:
        reply = replies.get(index, {}) if index is not None else {}
        if index is None:
            error = "test cell missing (it was deleted from the notebook)"
        elif stopped and index not in replies:
            error = f"not run: {stopped}"
        elif reply.get("status", "ok") != "ok":
            error = error_message(reply)
        else:
            error = ""
        row["tests"].append({"grade_id": grade_id, "points": 0 if error else points, "max_points": points,
                             "error": error})
    failures = [f"{t['grade_id']}: {t['error']}" for t in row["tests"] if t["error"]]
    row["first_failure"] = stopped or (failures[0] if failures else "")
    row["points"] = 0 if stopped else sum(t["points"] for t in row["tests"])
    return row


def find_notebooks(path: Path) -> list[tuple[str, Path]]:
    """(student, notebook) pairs under `path`: the student is the notebook's folder relative to `path`
    (the folder's own name for notebooks directly in it), or the file stem if `path` is a notebook.
    Hidden folders such as .ipynb_checkpoints are skipped."""
    path = Path(path)
    if path.is_file():
        return [(path.stem, path)]
    found = []
    for notebook in sorted(path.rglob("*.ipynb")):
        relative = notebook.relative_to(path)
        if any(part.startswith(".") for part in relative.parts):
            continue
        folder = relative.parent.as_posix()
        found.append((path.resolve().name if folder == "." else folder, notebook))
    return found


def grade(path, solutions_dir, timeout: float = TIMEOUT, out="grades", *, log=None) -> list[dict]:
    """Grade every student notebook under `path` (a notebook or a folder, searched recursively) and
    write the rows to <out>/grades.csv and <out>/grades.json. `log(str)` hears about progress."""
    path, solutions_dir = Path(path), Path(solutions_dir)
    if not path.exists():
        raise CourseError(f"PATH {str(path)!r} does not exist (allowed: a notebook or a folder of submissions)")
    if not solutions_dir.is_dir():
        raise CourseError(f"--solutions {str(solutions_dir)!r} is not a folder (allowed: the folder of solution "
                          "notebooks, solutions/ of a minirl checkout; the installed package does not carry them)")
    if not timeout > 0:
        raise CourseError(f"--timeout {timeout!r} is not allowed: use a number of seconds > 0")
    notebooks = find_notebooks(path)
    if not notebooks:
        raise CourseError(f"PATH {str(path)!r} holds no *.ipynb (allowed: a notebook or a folder of submissions)")
    rows = []
    for student, notebook in notebooks:
        if log:
            log(f"grading {student} / {notebook.name} ...")
        rows.append(grade_notebook(notebook, solutions_dir / notebook.name, timeout, student=student))
    write_rows(rows, Path(out))
    return rows


def write_rows(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (out / "grades.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def format_table(rows: list[dict], width: int = 70) -> str:
    """The rows as a fixed-width text table (first failures shortened to `width` characters): points and
    max are the autograded points, "by hand" the points of cells that need manual grading; then a summary."""
    names = [("student", 12), ("exercise", 16)]
    sizes = [max([size] + [len(str(r[key])) for r in rows]) for key, size in names]
    lines = [f"{'student':<{sizes[0]}}  {'exercise':<{sizes[1]}}  {'points':>6}  {'max':>5}  {'by hand':>7}  "
             "first failure"]
    for r in rows:
        failure = r["first_failure"] if len(r["first_failure"]) <= width else r["first_failure"][: width - 3] + "..."
        manual = f"{r['manual_points']:g}" if r["manual_points"] else "-"
        lines.append(f"{r['student']:<{sizes[0]}}  {r['exercise']:<{sizes[1]}}  {r['points']:>6g}  "
                     f"{r['max_points']:>5g}  {manual:>7}  {failure or '-'}")
    return "\n".join(lines + [summary(rows)])


def summary(rows: list[dict]) -> str:
    """'autograded points X of Y', plus what is left to grade by hand (points, cells and notebooks)."""
    points, most = sum(r["points"] for r in rows), sum(r["max_points"] for r in rows)
    line = f"autograded points {points:g} of {most:g}"
    pending = [(r, m) for r in rows for m in r.get("manual", []) if m["status"] == "needs manual grading"]
    skipped = sum(m["max_points"] for r in rows for m in r.get("manual", []) if m["status"] != "needs manual grading")
    if pending:
        ids = ", ".join(sorted({m["grade_id"] for _, m in pending}))
        cells = "1 cell needs" if len(pending) == 1 else f"{len(pending)} cells need"
        line += (f", plus {sum(m['max_points'] for _, m in pending):g} points to grade by hand: "
                 f"{cells} manual grading ({ids}; see 'manual' in grades.json)")
    else:
        line += ", nothing to grade by hand"
    if skipped:
        line += f"; {skipped:g} manual points scored 0 (not answered or deleted)"
    return line

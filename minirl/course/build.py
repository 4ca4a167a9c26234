"""Solution notebooks -> student exercise notebooks, and the CI check that exercises/ is fresh.

`solutions/*.ipynb` are the single source of the course exercises. They use nbgrader's conventions and its
cell metadata format (schema version 3), so real nbgrader (0.6 to 0.9) takes them as its source notebooks,
and its `generate_assignment` releases the same cells as this build (tests/test_nbgrader.py runs it):

- in a code cell, the lines between `### BEGIN SOLUTION` and `### END SOLUTION` are what the student
  writes; the exercise gets `# YOUR CODE HERE` + `raise NotImplementedError()` instead, indented like
  the BEGIN line. In a markdown cell the same markers give "YOUR ANSWER HERE".
- the lines between `### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS` are grading tests: the exercise
  does not show them, the grader (grade.py) puts them back.
- every cell with nbgrader metadata carries `metadata.nbgrader` valid in nbgrader's schema v3
  (`schema_problem` lists the rules): a solution cell `{"grade": false, "grade_id": ..., "locked": false,
  "schema_version": 3, "solution": true}`; a graded test cell `{"grade": true, "grade_id": ..., "locked": true,
  "points": ..., "schema_version": 3, "solution": false}`; a written answer graded by hand is a markdown cell
  with grade and solution true and its points. grade_ids are unique within a notebook.

`check_metadata` refuses anything else with one line naming the file, cell, field, value and what is
allowed; `build` and `build --check` run it on every solution notebook. Each marker must be alone on its line
(any indentation). The output is deterministic: the same solution notebook always gives byte-identical
exercise notebooks, so `--check` can compare bytes.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import nbformat

SOLUTION, HIDDEN = "solution", "hidden tests"
MARKERS = {  # marker line -> (region kind, opens?)
    "### BEGIN SOLUTION": (SOLUTION, True),
    "### END SOLUTION": (SOLUTION, False),
    "### BEGIN HIDDEN TESTS": (HIDDEN, True),
    "### END HIDDEN TESTS": (HIDDEN, False),
}
MARKER_WORDS = re.compile(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)\b")
CODE_STUB = ["# YOUR CODE HERE", "raise NotImplementedError()"]
ANSWER_STUB = ["YOUR ANSWER HERE"]
GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]*$")  # nbgrader's v3 pattern (applied with re.search, as jsonschema does)
SCHEMA_VERSION = 3  # nbgrader's cell metadata format since 0.6 (nbgrader.nbgraderformat.SCHEMA_VERSION)
NBGRADER_FIELDS = ("schema_version", "grade", "locked", "solution", "task", "grade_id", "points", "checksum",
                   "cell_type")  # every field schema v3 allows
REQUIRED_FIELDS = ("schema_version", "grade", "locked", "solution")
CELL_TYPES = ("code", "markdown", "raw")
DROP_CELL_METADATA = ("execution", "ExecuteTime")  # run timings: they would make builds differ
MIN_LEAK_CHARS = 12


class CourseError(ValueError):
    """A malformed solution notebook or a bad argument; the message names the file, cell and line."""


def nbgrader(cell) -> dict:
    """The cell's nbgrader metadata ({} for a plain cell)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_test_cell(cell) -> bool:
    """A graded, autograded test cell: nbgrader grade=True and solution=False, a code cell."""
    meta = nbgrader(cell)
    return cell.get("cell_type") == "code" and meta.get("grade") is True and not meta.get("solution")


def is_manual_cell(cell) -> bool:
    """A cell nbgrader grades by hand: grade=True on a solution cell (a written answer, or code that is read
    rather than run), or a task cell (task=True) with points."""
    meta = nbgrader(cell)
    return (meta.get("grade") is True and not is_test_cell(cell)) or (meta.get("task") is True and "points" in meta)


def split_regions(source: str, where: str) -> list[tuple[str | None, str, list[str]]]:
    """Split a cell's source into runs (kind, indent, lines): kind None outside the markers, else
    SOLUTION or HIDDEN with the indentation of its BEGIN line. Marker lines are not in any run."""
    runs: list[tuple[str | None, str, list[str]]] = [(None, "", [])]
    open_kind, open_at = None, 0
    for number, line in enumerate(source.split("\n"), start=1):
        marker = MARKERS.get(line.strip())
        if marker is None:
            if MARKER_WORDS.search(line) and "###" in line:
                raise CourseError(f"{where} line {number}: {line.strip()!r} looks like a marker but is not alone "
                                  f"on its line (allowed: {', '.join(MARKERS)} as the whole line)")
            runs[-1][2].append(line)
            continue
        kind, opens = marker
        if opens and open_kind is not None:
            raise CourseError(f"{where} line {number}: {line.strip()!r} inside the {open_kind} region opened on "
                              f"line {open_at} (regions cannot be nested: close it with '### END "
                              f"{open_kind.upper()}' first)")
        if not opens and open_kind != kind:
            raise CourseError(f"{where} line {number}: {line.strip()!r} has no matching '### BEGIN "
                              f"{kind.upper()}' before it")
        if opens:
            open_kind, open_at = kind, number
            runs.append((kind, line[: len(line) - len(line.lstrip())], []))
        else:
            open_kind = None
            runs.append((None, "", []))
    if open_kind is not None:
        raise CourseError(f"{where} line {open_at}: '### BEGIN {open_kind.upper()}' is never closed "
                          f"(add '### END {open_kind.upper()}' after the region)")
    return runs


def where(name: str, index: int, cell) -> str:
    grade_id = nbgrader(cell).get("grade_id")
    return f"{name} cells[{index}]" + (f" (grade_id {grade_id!r})" if grade_id else "")


def schema_problem(cell, seen: dict[str, int], index: int) -> str | None:
    """Why the cell's nbgrader metadata is not valid nbgrader schema v3 (None if it is, or if the cell has
    none). These are the rules of nbgrader's own `nbgrader.nbgraderformat.MetadataValidator` (0.6 to 0.9:
    the JSON schema v3.json plus the checks in v3.py), written out here so that neither the build nor the
    grader needs nbgrader; tests/test_nbgrader.py holds them against nbgrader's validator. One case is
    stricter than nbgrader: points must be finite. `seen` maps the grade_ids of earlier cells to their index and is updated."""
    if "nbgrader" not in cell.get("metadata", {}):
        return None
    meta = cell["metadata"]["nbgrader"]
    if not isinstance(meta, dict):
        return f"metadata.nbgrader={meta!r} is not allowed: use a JSON object of nbgrader fields"
    version = meta.get("schema_version")
    if "schema_version" not in meta:
        return ("nbgrader metadata has no schema_version, so nbgrader refuses the notebook as 'an old version of "
                f"the nbgrader metadata format' (allowed: \"schema_version\": {SCHEMA_VERSION})")
    if type(version) is not int or version != SCHEMA_VERSION:
        return (f"nbgrader schema_version={version!r} is not allowed: nbgrader 0.6 and later read only "
                f"schema_version {SCHEMA_VERSION} (the integer)")
    extra = sorted(set(meta) - set(NBGRADER_FIELDS))
    if extra:
        return (f"nbgrader field {extra[0]!r} (value {meta[extra[0]]!r}) is not allowed in schema v3 "
                f"(allowed fields: {', '.join(NBGRADER_FIELDS)})")
    for field in REQUIRED_FIELDS:
        if field not in meta:
            return (f"nbgrader metadata has no {field!r}: schema v3 requires {', '.join(REQUIRED_FIELDS)} "
                    f"(allowed: \"{field}\": true or false)")
    for field in ("grade", "locked", "solution", "task"):
        if field in meta and not isinstance(meta[field], bool):
            return f"nbgrader {field}={meta[field]!r} is not allowed: use true or false"
    grade, solution, locked, task = meta["grade"], meta["solution"], meta["locked"], meta.get("task", False)
    grade_id = meta.get("grade_id")
    if "grade_id" in meta and (not isinstance(grade_id, str) or not GRADE_ID.search(grade_id)):
        return f"nbgrader grade_id={grade_id!r} is not allowed: use a string of letters, digits, '_' and '-'"
    if (grade or solution or locked) and not grade_id:
        return (f"nbgrader grade_id={grade_id!r} is not allowed: a cell with grade, solution or locked true needs "
                "a non-empty grade_id of letters, digits, '_' and '-'")
    points = meta.get("points")
    if "points" in meta and (isinstance(points, bool) or not isinstance(points, (int, float))
                             or not math.isfinite(points) or points < 0):
        return f"nbgrader points={points!r} is not allowed: use a number >= 0"
    if grade and "points" not in meta:
        return "nbgrader grade=true but no points: a graded cell needs \"points\": a number >= 0"
    checksum = meta.get("checksum")
    if "checksum" in meta and not (isinstance(checksum, str) and len(checksum) == 32):
        return f"nbgrader checksum={checksum!r} is not allowed: use a string of 32 characters (nbgrader writes it)"
    if "cell_type" in meta and meta["cell_type"] not in CELL_TYPES:
        return f"nbgrader cell_type={meta['cell_type']!r} is not allowed (allowed: {', '.join(CELL_TYPES)})"
    kind = cell.get("cell_type")
    if task and kind != "markdown":
        return f"nbgrader task=true on a {kind} cell is not allowed: task cells must be markdown"
    if not task and kind == "markdown" and grade != solution:
        return (f"nbgrader grade={str(grade).lower()}, solution={str(solution).lower()} on a markdown cell is not "
                "allowed: a written answer has both true (or it is a task=true cell)")
    if grade or solution or locked:
        if grade_id in seen:
            return (f"grade_id {grade_id!r} is already used by cells[{seen[grade_id]}] "
                    "(grade_ids must be unique within a notebook)")
        seen[grade_id] = index
    return None


def check_metadata(nb, name: str) -> None:
    """Raise CourseError unless every cell's nbgrader metadata is valid nbgrader schema v3 (see
    `schema_problem`) and solution / hidden-test regions sit where nbgrader and our grader treat them
    the same way."""
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        meta, at = nbgrader(cell), where(name, index, cell)
        problem = schema_problem(cell, seen, index)
        if problem:
            raise CourseError(f"{at}: {problem}")
        if cell.cell_type not in ("code", "markdown"):
            continue
        kinds = {kind for kind, _, _ in split_regions(cell.source, at)}
        if HIDDEN in kinds and not is_test_cell(cell):
            raise CourseError(f"{at}: has a HIDDEN TESTS region but is not a graded test cell, so the grader "
                              "would never run those tests (allowed: hidden tests only in code cells with "
                              "nbgrader grade=true, solution=false)")
        if meta.get("solution") and SOLUTION not in kinds and cell.cell_type == "code":
            raise CourseError(f"{at}: nbgrader solution=true but no '### BEGIN SOLUTION' region (nbgrader would "
                              "blank the whole cell; mark what the student writes)")
        if is_test_cell(cell) and SOLUTION in kinds:
            raise CourseError(f"{at}: a graded test cell (solution=false) cannot hold a SOLUTION region")


def build_notebook(nb, name: str = "notebook") -> nbformat.NotebookNode:
    """The student version of solution notebook `nb` (not modified); `name` is used in error messages."""
    check_metadata(nb, name)
    out = copy.deepcopy(nb)
    out.metadata.pop("widgets", None)  # saved widget state: large, and it can show solution values
    out.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    for index, cell in enumerate(out.cells):
        if out.nbformat_minor >= 5 and not cell.get("id"):  # else nbformat would invent a random id
            cell["id"] = f"cell-{index}"
        for key in DROP_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if cell.cell_type in ("code", "markdown"):
            stub = CODE_STUB if cell.cell_type == "code" else ANSWER_STUB
            lines = []
            for kind, indent, run in split_regions(cell.source, where(name, index, cell)):
                if kind is None:
                    lines += run
                elif kind == SOLUTION:
                    lines += [indent + s for s in stub]
            cell.source = "\n".join(lines)
    nbformat.validate(out)
    return out


def render(nb) -> str:
    """The exact text written for a notebook: nbformat's JSON (1-space indent, sorted keys) + newline."""
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def read_solution(path: Path) -> nbformat.NotebookNode:
    try:
        return nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    except Exception as err:  # bad JSON, not a notebook, unreadable: one line naming the file
        raise CourseError(f"{path}: cannot read this solution notebook: {type(err).__name__}: {err}") from None


def solution_paths(solutions_dir: Path) -> list[Path]:
    solutions_dir = Path(solutions_dir)
    if not solutions_dir.is_dir():
        raise CourseError(f"solutions folder {str(solutions_dir)!r} does not exist (allowed: a folder of *.ipynb)")
    return sorted(solutions_dir.glob("*.ipynb"))


def build(solutions_dir, out_dir) -> list[Path]:
    """Write out_dir/<name>.ipynb for every solutions_dir/*.ipynb; returns the written paths.
    Everything is built before anything is written, so a malformed notebook leaves out_dir untouched."""
    built = {path.name: render(build_notebook(read_solution(path), str(path)))
             for path in solution_paths(solutions_dir)}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for file_name, text in built.items():
        (out_dir / file_name).write_bytes(text.encode("utf-8"))
    return [out_dir / file_name for file_name in built]


def region_lines(nb, name: str) -> set[str]:
    """Stripped lines (>= MIN_LEAK_CHARS, not comments) that only appear inside solution / hidden-test
    regions. Lines that the notebook also shows outside any region are public and cannot leak."""
    inside, outside = set(), set()
    for index, cell in enumerate(nb.cells):
        if cell.cell_type not in ("code", "markdown"):
            continue
        for kind, _, run in split_regions(cell.source, where(name, index, cell)):
            (outside if kind is None else inside).update(line.strip() for line in run)
    return {line for line in inside - outside if len(line) >= MIN_LEAK_CHARS and not line.startswith("#")}


def check(solutions_dir, exercises_dir) -> list[str]:
    """Problems that make exercises_dir differ from a fresh build of solutions_dir ([] when up to date):
    differing, missing and extra notebooks, and solution / hidden-test lines leaked into an exercise."""
    solutions_dir, exercises_dir = Path(solutions_dir), Path(exercises_dir)
    problems, names = [], set()
    for path in solution_paths(solutions_dir):
        names.add(path.name)
        solution = read_solution(path)
        expected = render(build_notebook(solution, str(path)))
        target = exercises_dir / path.name
        if not target.is_file():
            problems.append(f"missing: {target} (built from {path})")
            continue
        text = target.read_bytes().decode("utf-8", errors="replace")
        if text.replace("\r\n", "\n") != expected:
            problems.append(f"differs: {target} is not what {path} builds to")
        problems += leaks(target, text, region_lines(solution, str(path)))
    for target in sorted(exercises_dir.glob("*.ipynb")) if exercises_dir.is_dir() else []:
        if target.name not in names:
            problems.append(f"extra: {target} has no source {solutions_dir / target.name} (delete it)")
    return problems


def leaks(target: Path, text: str, secret: set[str]) -> list[str]:
    """One problem per exercise line that shows a line of a solution / hidden-test region."""
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return [f"unreadable: {target} is not a JSON notebook"]
    found = []
    for index, cell in enumerate(cells):
        source = cell.get("source", "")
        for number, line in enumerate(("".join(source) if isinstance(source, list) else source).split("\n"), 1):
            if line.strip() in secret:
                found.append(f"leak: {target} cells[{index}] line {number} shows solution text {line.strip()!r}")
    return found

"""Real nbgrader (a dev dependency, so nothing here skips) accepts the course files as they are.

- our schema check (`minirl.course.build.schema_problem`, which needs no nbgrader) accepts and refuses the same
  cell metadata as nbgrader's own validator, so the two cannot drift apart;
- end to end, in a temporary course folder with its own nbgrader_config.py and its own HOME / Jupyter dirs:
  `nbgrader generate_assignment` takes solutions/ as the source and releases exactly our exercises/ (cell for
  cell); `nbgrader autograde` gives the solutions every autograded point and the blank exercises, submitted
  unchanged, zero (scores read from nbgrader's gradebook); `nbgrader validate` passes the release filled in with
  the solutions. Exercise 07's written answer is left to a human by nbgrader, as by our grader.

The notebooks run in SMOKE mode (MINIRL_SMOKE=1). The three executing steps (21 notebook runs, most of it
`import minirl` in each fresh kernel) run side by side, each autograde in its own copy of the course folder so
that no two processes write one SQLite gradebook: this keeps the test near 2.5 minutes on 2 cores instead of ~5.
"""

import copy
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator

from minirl.course.build import is_manual_cell, is_test_cell, nbgrader, schema_problem

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
COURSE, ASSIGNMENT = "minirl-course", "minirl"
CELL_TIMEOUT = 600  # seconds per cell: generous, SMOKE cells take seconds
STEP_TIMEOUT = 1200  # seconds per nbgrader command
SUCCESS = "Success! Your notebook passes all the tests."

# ---------------------------------------------------------------- our schema check == nbgrader's validator

TEST = {"grade": True, "grade_id": "t", "locked": True, "points": 1, "schema_version": 3, "solution": False}
SOLVE = {"grade": False, "grade_id": "s", "locked": False, "schema_version": 3, "solution": True}
WRITTEN = {"grade": True, "grade_id": "w", "locked": False, "points": 2, "schema_version": 3, "solution": True}
PLAIN = {"grade": False, "locked": False, "schema_version": 3, "solution": False}


def changed(base, **fields):
    meta = {**base, **fields}
    return {key: value for key, value in meta.items() if value is not DROP}


DROP = object()
CODE, MARKDOWN, RAW = "code", "markdown", "raw"
GOOD = [
    (CODE, TEST), (CODE, SOLVE), (MARKDOWN, WRITTEN), (CODE, changed(TEST, solution=True)),
    (CODE, changed(TEST, points=0)), (CODE, changed(TEST, points=2.5)), (CODE, PLAIN), (RAW, PLAIN),
    (CODE, changed(PLAIN, grade_id="")), (MARKDOWN, changed(PLAIN, locked=True, grade_id="intro")),
    (MARKDOWN, changed(PLAIN, task=True, grade_id="task-1", points=3, locked=True)),
    (CODE, changed(TEST, checksum="0123456789abcdef0123456789abcdef", cell_type="code")),
    (MARKDOWN, changed(PLAIN, points=1)),  # points without grade: allowed, and counted by nobody
]
BAD = [
    (CODE, changed(TEST, schema_version=DROP)), (CODE, changed(TEST, schema_version=2)),
    (CODE, changed(TEST, schema_version=4)), (CODE, changed(TEST, schema_version=3.0)),
    (CODE, changed(TEST, schema_version="3")), (CODE, changed(TEST, schema_version=True)),
    (CODE, {}), (CODE, changed(TEST, grade=DROP)), (CODE, changed(TEST, locked=DROP)),
    (CODE, changed(TEST, solution=DROP)), (CODE, changed(TEST, extra="x")), (CODE, changed(TEST, grade="yes")),
    (CODE, changed(TEST, solution=1)), (MARKDOWN, changed(WRITTEN, task="no")),
    (CODE, changed(TEST, grade_id=DROP)), (CODE, changed(TEST, grade_id="")), (CODE, changed(SOLVE, grade_id="")),
    (CODE, changed(TEST, grade_id="a b")), (CODE, changed(TEST, grade_id=5)),
    (CODE, changed(PLAIN, grade_id="a.b")), (MARKDOWN, changed(PLAIN, locked=True)),
    (CODE, changed(TEST, points=DROP)), (CODE, changed(TEST, points=-1)), (CODE, changed(TEST, points="2")),
    (CODE, changed(TEST, points=True)), (CODE, changed(TEST, points=None)),
    (CODE, changed(TEST, checksum="abc")), (CODE, changed(TEST, checksum=5)),
    (CODE, changed(TEST, cell_type="heading")), (MARKDOWN, changed(WRITTEN, solution=False)),
    (MARKDOWN, changed(WRITTEN, grade=False)), (CODE, changed(PLAIN, task=True)), (RAW, changed(PLAIN, task=True)),
    (CODE, ["not", "a", "dict"]), (CODE, "grade"),
]
NEW_CELL = {CODE: new_code_cell, MARKDOWN: new_markdown_cell, RAW: new_raw_cell}


def notebook_of(*cases):
    return new_notebook(cells=[NEW_CELL[kind]("x = 1", metadata={"nbgrader": copy.deepcopy(meta)})
                               for kind, meta in cases])


def nbgrader_accepts(nb) -> bool:
    try:
        MetadataValidator().validate_nb(nb)
    except Exception:  # ValidationError, SchemaTooOld/NewError, and a TypeError/AttributeError on odd values
        return False
    return True


def we_accept(nb) -> bool:
    seen = {}
    return all(schema_problem(cell, seen, index) is None for index, cell in enumerate(nb.cells))


@pytest.mark.parametrize("kind, meta, good", [(*case, True) for case in GOOD] + [(*case, False) for case in BAD],
                         ids=lambda v: repr(v)[:60])
def test_our_schema_check_agrees_with_nbgrader(kind, meta, good):
    nb = notebook_of((kind, meta))
    assert we_accept(nb) == nbgrader_accepts(nb) == good


@pytest.mark.parametrize("first, second, good", [
    (TEST, changed(SOLVE, grade_id="t"), False),  # one grade_id on two graded cells
    (changed(PLAIN, locked=True, grade_id="t"), TEST, False),  # locked cells count too
    (changed(PLAIN, grade_id="t"), changed(PLAIN, grade_id="t"), True),  # plain cells do not
])
def test_duplicate_grade_ids_agree_with_nbgrader(first, second, good):
    nb = notebook_of((CODE, first), (CODE, second))
    assert we_accept(nb) == nbgrader_accepts(nb) == good


def test_every_course_notebook_is_valid_for_both():
    for path in SOLUTIONS + sorted((ROOT / "exercises").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert we_accept(nb) and nbgrader_accepts(nb), path


def test_we_are_stricter_than_nbgrader_only_on_non_finite_points():
    nb = notebook_of((CODE, changed(TEST, points=math.inf)))
    assert nbgrader_accepts(nb) and not we_accept(nb)


# ---------------------------------------------------------------- nbgrader end to end


def isolated_env(home: Path) -> dict:
    """The environment of every nbgrader call: no user or system Jupyter config, SMOKE notebooks."""
    home.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JUPYTER", "IPYTHON"))}
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "jupyter-config"), JUPYTER_DATA_DIR=str(home / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(home / "jupyter-runtime"), IPYTHONDIR=str(home / "ipython"),
               MPLCONFIGDIR=str(home / "matplotlib"), JUPYTER_PLATFORM_DIRS="1", MINIRL_SMOKE="1",
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               # three kernels share the cores: one thread each, or OpenMP's spinning threads eat the time
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def start(args, course: Path, env: dict, log: Path) -> tuple[subprocess.Popen, Path]:
    """`nbgrader ARGS` run in `course` (so its nbgrader_config.py is read), output into `log`."""
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, stdout=out,
                                stderr=subprocess.STDOUT, text=True), log


def finish(job: tuple[subprocess.Popen, Path]) -> str:
    process, log = job
    try:
        rc = process.wait(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        rc = process.wait()
    text = log.read_text(errors="replace")
    assert rc == 0, f"nbgrader {process.args[3:]} exited {rc}:\n{text[-6000:]}"
    return text


def new_course(root: Path) -> Path:
    course = root / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.course_id = {COURSE!r}\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"c.Execute.timeout = {CELL_TIMEOUT}  # seconds per cell\n")
    for path in SOLUTIONS:
        shutil.copy(path, course / "source" / ASSIGNMENT / path.name)
    return course


def copy_course(course: Path, to: Path) -> Path:
    """A copy of the course folder (gradebook included) whose config points at the copy."""
    shutil.copytree(course, to)
    config = to / "nbgrader_config.py"
    config.write_text(config.read_text().replace(repr(str(course)), repr(str(to))))
    return to


def filled(release: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The released notebook with every solution cell written as in the solution (what a good student hands in)."""
    answers = {nbgrader(c).get("grade_id"): c.source for c in solution.cells if nbgrader(c).get("solution")}
    out = copy.deepcopy(release)
    for cell in out.cells:
        if nbgrader(cell).get("solution"):
            cell.source = answers[nbgrader(cell)["grade_id"]]
    return out


def submit(course: Path, student: str, notebooks: list[Path]) -> None:
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    for path in notebooks:
        shutil.copy(path, folder / path.name)


def scores(course: Path, student: str) -> dict[str, dict]:
    """Per notebook, what nbgrader's gradebook holds for `student`."""
    out = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE) as gb:
        for path in SOLUTIONS:
            sub = gb.find_submission_notebook(path.stem, ASSIGNMENT, student)
            out[path.stem] = {
                "score": sub.score, "max_score": sub.max_score, "code_score": sub.code_score,
                "max_code_score": sub.max_code_score, "max_written_score": sub.max_written_score,
                "max_task_score": sub.max_task_score,
                "grades": {g.name: (g.auto_score, g.max_score, g.needs_manual_grade) for g in sub.grades},
            }
    return out


@pytest.fixture(scope="module")
def nbgrader_run(tmp_path_factory):
    """generate_assignment once; then autograde the solutions, autograde the blank exercises and validate the
    filled release, side by side. Returns what the assertions read."""
    assert len(SOLUTIONS) >= 8
    root = tmp_path_factory.mktemp("nbgrader")
    env = isolated_env(root / "home")
    course = new_course(root)
    began = time.monotonic()
    finish(start(["generate_assignment", ASSIGNMENT], course, env, root / "generate.log"))
    release = {p.stem: nbformat.read(course / "release" / ASSIGNMENT / p.name, as_version=4) for p in SOLUTIONS}
    blank_course = copy_course(course, root / "course-blank")
    submit(course, "solutions", SOLUTIONS)
    submit(blank_course, "blank", [ROOT / "exercises" / p.name for p in SOLUTIONS])  # our exercises/, untouched
    (root / "filled").mkdir()
    for path in SOLUTIONS:
        nbformat.write(filled(release[path.stem], nbformat.read(path, as_version=4)), root / "filled" / path.name)
    jobs = {
        "solutions": start(["autograde", ASSIGNMENT, "--student", "solutions"], course, env, root / "solutions.log"),
        "blank": start(["autograde", ASSIGNMENT, "--student", "blank"], blank_course, env, root / "blank.log"),
        "validate": start(["validate", *[str(root / "filled" / p.name) for p in SOLUTIONS]], course, env,
                          root / "validate.log"),
    }
    logs = {name: finish(job) for name, job in jobs.items()}
    print(f"nbgrader: generate_assignment + 2 autograde + validate of {len(SOLUTIONS)} notebooks took "
          f"{time.monotonic() - began:.0f} s")
    return {"release": release, "logs": logs, "solutions": scores(course, "solutions"),
            "blank": scores(blank_course, "blank")}


def points(path: Path, kind) -> dict[str, float]:
    return {nbgrader(c)["grade_id"]: nbgrader(c)["points"] for c in nbformat.read(path, as_version=4).cells if kind(c)}


@pytest.mark.slow
def test_nbgrader_releases_our_exercises_cell_for_cell(nbgrader_run):
    for path in SOLUTIONS:
        ours = nbformat.read(ROOT / "exercises" / path.name, as_version=4)
        theirs = nbgrader_run["release"][path.stem]
        assert [(c.cell_type, c.source) for c in theirs.cells] == [(c.cell_type, c.source) for c in ours.cells], path.name


@pytest.mark.slow
def test_nbgrader_autograde_gives_the_solutions_every_autograded_point(nbgrader_run):
    for path in SOLUTIONS:
        tests, manual = points(path, is_test_cell), points(path, is_manual_cell)
        got = nbgrader_run["solutions"][path.stem]
        assert got["max_code_score"] == sum(tests.values()) > 0, path.name  # the same accounting as our grader
        assert got["max_written_score"] + got["max_task_score"] == sum(manual.values()), path.name
        assert got["code_score"] == got["max_code_score"], (path.name, got, nbgrader_run["logs"]["solutions"][-3000:])
        for grade_id, max_points in tests.items():
            assert got["grades"][grade_id] == (max_points, max_points, False), (path.name, grade_id)
        for grade_id, max_points in manual.items():  # a written answer: left to a human, never scored by itself
            assert got["grades"][grade_id] == (None, max_points, True), (path.name, grade_id)
        assert got["score"] == sum(tests.values()), path.name
    assert points(ROOT / "solutions" / "07_tuning.ipynb", is_manual_cell) == {"07-explanation": 2}


@pytest.mark.slow
def test_nbgrader_autograde_gives_the_blank_exercises_zero(nbgrader_run):
    for path in SOLUTIONS:
        got = nbgrader_run["blank"][path.stem]
        assert got["max_code_score"] == sum(points(path, is_test_cell).values()) > 0, path.name
        assert got["score"] == got["code_score"] == 0, (path.name, got)
        for grade_id, max_points in points(path, is_test_cell).items():
            assert got["grades"][grade_id] == (0, max_points, False), (path.name, grade_id)
        # an answer left as "YOUR ANSWER HERE" scores 0 with nothing to read (our grader: "not answered")
        for grade_id, max_points in points(path, is_manual_cell).items():
            assert got["grades"][grade_id] == (0, max_points, False), (path.name, grade_id)


@pytest.mark.slow
def test_nbgrader_validate_passes_the_filled_release(nbgrader_run):
    log = nbgrader_run["logs"]["validate"]
    assert log.count(SUCCESS) == len(SOLUTIONS), log[-6000:]
    assert "VALIDATION FAILED" not in log and "HAVE CHANGED" not in log, log[-6000:]

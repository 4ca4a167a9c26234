"""The course tooling: exercises built from solutions/, the freshness check CI runs, and the autograder.

The fixture exercise is a tiny notebook (no torch) built here with nbformat: two functions to write,
two graded test cells with hidden tests, and a markdown answer graded by hand (1 point).
"""

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from minirl.course.build import CourseError, build, build_notebook, check
from minirl.course.grade import format_table, grade, grade_notebook
from minirl.course.__main__ import main

ROOT = Path(__file__).resolve().parents[1]

SOLUTION_CODE = '''\
def square(x):
    """x squared."""
    ### BEGIN SOLUTION
    return x * x
    ### END SOLUTION


### BEGIN SOLUTION
def total(xs):
    result = sum(square(x) for x in xs)
    return result
### END SOLUTION'''

EXERCISE_CODE = '''\
def square(x):
    """x squared."""
    # YOUR CODE HERE
    raise NotImplementedError()


# YOUR CODE HERE
raise NotImplementedError()'''

TEST_SQUARE = '''\
assert square(3) == 9, "square(3) should be 9"
### BEGIN HIDDEN TESTS
assert square(-4) == 16, "square(-4) should be 16"
### END HIDDEN TESTS'''

TEST_TOTAL = '''\
assert total([1, 2]) == 5
### BEGIN HIDDEN TESTS
assert SMOKE, "the grader sets MINIRL_SMOKE=1"
assert total([]) == 0
### END HIDDEN TESTS'''


def meta(grade_id, points=None, written=False):
    """nbgrader schema v3 cell metadata: a solution cell, a graded test cell, or a written answer graded by hand."""
    if written:
        return {"nbgrader": {"grade": True, "grade_id": grade_id, "locked": False, "points": points,
                             "schema_version": 3, "solution": True}}
    if points is None:
        return {"nbgrader": {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                             "solution": True}}
    return {"nbgrader": {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                         "schema_version": 3, "solution": False}}


def solution_notebook(code=SOLUTION_CODE):
    nb = new_notebook(metadata={"kernelspec": {"name": "my-env", "display_name": "My env", "language": "python"},
                                "widgets": {"state": {"secret": 16}}})
    solved = new_code_cell(code, metadata=meta("square_total"), execution_count=3,
                           outputs=[new_output("stream", name="stdout", text="16\n")])
    nb.cells = [
        new_markdown_cell("# Fixture exercise"),
        new_code_cell('import os\n\nSMOKE = os.environ.get("MINIRL_SMOKE") == "1"', metadata={"tags": ["parameters"]}),
        solved,
        new_code_cell(TEST_SQUARE, metadata=meta("test_square", 2)),
        new_markdown_cell("Why is a square never negative?\n\n### BEGIN SOLUTION\nBecause (-x) * (-x) = x * x.\n"
                          "### END SOLUTION", metadata=meta("why_positive", 1, written=True)),
        new_code_cell(TEST_TOTAL, metadata=meta("test_total", 3)),
    ]
    return nb


def write(nb, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def course(tmp_path):
    """A solutions/ folder holding the fixture exercise, and an exercises/ folder built from it."""
    write(solution_notebook(), tmp_path / "solutions" / "fixture.ipynb")
    build(tmp_path / "solutions", tmp_path / "exercises")
    return tmp_path


# ---------------------------------------------------------------- build


def test_build_replaces_solutions_at_their_indentation_and_drops_hidden_tests_and_outputs():
    exercise = build_notebook(solution_notebook())
    sources = [cell.source for cell in exercise.cells]
    assert sources[2] == EXERCISE_CODE
    assert sources[3] == 'assert square(3) == 9, "square(3) should be 9"'
    assert sources[4] == "Why is a square never negative?\n\nYOUR ANSWER HERE"
    assert sources[5] == "assert total([1, 2]) == 5"
    code = [cell for cell in exercise.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert "widgets" not in exercise.metadata and exercise.metadata.kernelspec.name == "python3"
    assert exercise.cells[3].metadata.nbgrader["grade_id"] == "test_square"  # metadata kept for the grader
    assert exercise.cells[1].metadata.tags == ["parameters"]


def test_build_is_deterministic_and_written_with_nbformat(course):
    first = (course / "exercises" / "fixture.ipynb").read_bytes()
    build(course / "solutions", course / "again")
    assert (course / "again" / "fixture.ipynb").read_bytes() == first
    assert first.endswith(b"}\n") and first.startswith(b'{\n "cells": [\n  {')  # 1-space indent
    nbformat.validate(nbformat.reads(first.decode(), as_version=4))


@pytest.mark.parametrize("code, problem", [
    ("x = 1\n### BEGIN SOLUTION\nx = 2", "line 2: '### BEGIN SOLUTION' is never closed"),
    ("### BEGIN SOLUTION\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS\n### END SOLUTION",
     "line 2: '### BEGIN HIDDEN TESTS' inside the solution region opened on line 1"),
    ("x = 1\n    ### END SOLUTION", "line 2: '### END SOLUTION' has no matching '### BEGIN SOLUTION'"),
    ("### BEGIN SOLUTION\nx = 1  ### END SOLUTION", "line 2: 'x = 1  ### END SOLUTION' looks like a marker"),
])
def test_malformed_markers_name_the_file_cell_and_line(tmp_path, code, problem):
    path = write(solution_notebook(code), tmp_path / "solutions" / "broken.ipynb")
    with pytest.raises(CourseError) as err:
        build(tmp_path / "solutions", tmp_path / "exercises")
    assert f"{path} cells[2] (grade_id 'square_total') {problem}" in str(err.value)
    assert not (tmp_path / "exercises").exists()  # nothing written


def test_bad_nbgrader_metadata_is_refused(tmp_path, capsys):
    nb = solution_notebook()
    nb.cells[5].metadata.nbgrader["grade_id"] = "test_square"
    write(nb, tmp_path / "solutions" / "dup.ipynb")
    assert main(["build", "--solutions", str(tmp_path / "solutions"), "--out", str(tmp_path / "ex")]) == 2
    err = capsys.readouterr().err
    assert "cells[5] (grade_id 'test_square'): grade_id 'test_square' is already used by cells[3]" in err
    nb = solution_notebook()
    del nb.cells[3].metadata.nbgrader["schema_version"]  # what nbgrader refuses as 'an old version'
    with pytest.raises(CourseError) as err:
        build_notebook(nb, "old.ipynb")
    assert str(err.value) == ("old.ipynb cells[3] (grade_id 'test_square'): nbgrader metadata has no schema_version, "
                              "so nbgrader refuses the notebook as 'an old version of the nbgrader metadata format' "
                              '(allowed: "schema_version": 3)')
    nb = solution_notebook()
    nb.cells[4].metadata.nbgrader["grade"] = False  # a markdown solution cell that nobody grades
    with pytest.raises(CourseError, match=r"cells\[4\] \(grade_id 'why_positive'\): nbgrader grade=false, "
                                          r"solution=true on a markdown cell is not allowed"):
        build_notebook(nb, "x.ipynb")
    nb = solution_notebook()
    nb.cells[3].metadata.nbgrader["points"] = "2"
    with pytest.raises(CourseError, match=r"cells\[3\] .*nbgrader points='2' is not allowed: use a number >= 0"):
        build_notebook(nb, "x.ipynb")
    nb = solution_notebook()
    nb.cells[1].source += "\n### BEGIN HIDDEN TESTS\nassert True\n### END HIDDEN TESTS"
    with pytest.raises(CourseError, match=r"cells\[1\]: has a HIDDEN TESTS region but is not a graded test cell"):
        build_notebook(nb, "x.ipynb")


def test_check_finds_stale_missing_extra_and_leaked_notebooks(course, capsys):
    args = ["build", "--check", "--solutions", str(course / "solutions"), "--out", str(course / "exercises")]
    assert check(course / "solutions", course / "exercises") == []
    assert main(args) == 0
    target = course / "exercises" / "fixture.ipynb"
    stale = nbformat.read(target, as_version=4)
    stale.cells[2].source = stale.cells[2].source.replace("# YOUR CODE HERE\nraise NotImplementedError()",
                                                          "def total(xs):\n    result = sum(square(x) for x in xs)")
    nbformat.write(stale, target)
    write(solution_notebook(), course / "exercises" / "old.ipynb")
    write(solution_notebook(), course / "solutions" / "new.ipynb")
    problems = check(course / "solutions", course / "exercises")
    assert problems == [
        f"differs: {target} is not what {course / 'solutions' / 'fixture.ipynb'} builds to",
        f"leak: {target} cells[2] line 7 shows solution text 'def total(xs):'",
        f"leak: {target} cells[2] line 8 shows solution text 'result = sum(square(x) for x in xs)'",
        f"missing: {course / 'exercises' / 'new.ipynb'} (built from {course / 'solutions' / 'new.ipynb'})",
        f"extra: {course / 'exercises' / 'old.ipynb'} has no source {course / 'solutions' / 'old.ipynb'} (delete it)",
    ]
    assert main(args) == 1
    assert "is stale or leaks solutions" in capsys.readouterr().err


def test_repo_exercises_are_up_to_date_with_solutions():
    """CI fails here when someone edits solutions/ and forgets `python -m minirl.course build`."""
    done = subprocess.run([sys.executable, "-m", "minirl.course", "build", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------- grade


def student_notebook(tmp_path, code):
    nb = build_notebook(solution_notebook())
    nb.cells[2].source = code
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One batch over a class of fixture students, graded once with --timeout 5 (the slow part)."""
    root = tmp_path_factory.mktemp("class")
    write(solution_notebook(), root / "solutions" / "fixture.ipynb")
    build(root / "solutions", root / "exercises")
    subs = root / "submissions"
    write(solution_notebook(), subs / "alice" / "fixture.ipynb")  # the solution itself: full marks
    write(solution_notebook(), subs / "alice" / ".ipynb_checkpoints" / "fixture.ipynb")  # skipped
    (subs / "bob").mkdir(parents=True)
    (subs / "bob" / "fixture.ipynb").write_bytes((root / "exercises" / "fixture.ipynb").read_bytes())
    write(student_notebook(root, SOLUTION_CODE.replace("x * x", "x * abs(x)")), subs / "carol" / "fixture.ipynb")
    write(student_notebook(root, SOLUTION_CODE.replace("result = sum", "while True:\n        pass\n    result = sum")),
          subs / "dave" / "fixture.ipynb")
    (subs / "eve").mkdir()
    (subs / "eve" / "fixture.ipynb").write_text('{"cells": [')
    frank = student_notebook(root, SOLUTION_CODE)
    frank.cells[3].source = "pass  # no tests here"  # restored from the solution by its grade_id
    del frank.cells[5]  # test_total deleted entirely
    frank.cells.append(new_code_cell("assert True", metadata=meta("bonus", 100)))  # invented: scores nothing
    write(frank, subs / "frank" / "fixture.ipynb")
    write(student_notebook(root, "import os\nos._exit(1)"), subs / "grace" / "fixture.ipynb")
    write(solution_notebook(), subs / "henry" / "unknown.ipynb")
    write(student_notebook(root, SOLUTION_CODE.replace("square(x) for", "x for")), subs / "ivan" / "fixture.ipynb")
    rows = grade(subs, root / "solutions", timeout=5, out=root / "grades")
    return root, {row["student"]: row for row in rows}


def test_batch_grades_every_student_and_writes_csv_and_json(graded):
    root, rows = graded
    assert list(rows) == ["alice", "bob", "carol", "dave", "eve", "frank", "grace", "henry", "ivan"]
    assert json.loads((root / "grades" / "grades.json").read_text()) == list(rows.values())
    csv_lines = (root / "grades" / "grades.csv").read_text().splitlines()
    assert csv_lines[0] == "student,exercise,points,max_points,manual_points,first_failure" and len(csv_lines) == 10


def test_the_table_counts_points_to_grade_by_hand_apart(graded):
    table = format_table(list(graded[1].values())).splitlines()
    alice = next(line for line in table if line.startswith("alice"))
    assert alice.split()[:5] == ["alice", "fixture", "5", "5", "1"]
    # only alice wrote an answer; the others left the exercise's text (or sent no readable notebook)
    assert table[-1] == ("autograded points 14 of 40, plus 1 points to grade by hand: 1 cell needs manual grading "
                         "(why_positive; see 'manual' in grades.json); 7 manual points scored 0 (not answered or "
                         "deleted)")


def test_the_solution_gets_full_marks(graded):
    alice = graded[1]["alice"]
    assert (alice["points"], alice["max_points"], alice["first_failure"]) == (5, 5, "")
    assert [t["grade_id"] for t in alice["tests"]] == ["test_square", "test_total"]
    # the written answer is not autograded, and not dropped either
    assert alice["manual_points"] == 1
    assert alice["manual"] == [{"grade_id": "why_positive", "max_points": 1, "status": "needs manual grading"}]


def test_the_unimplemented_exercise_gets_zero(graded):
    bob = graded[1]["bob"]
    assert (bob["points"], bob["max_points"]) == (0, 5)
    assert bob["first_failure"] == "test_square: NotImplementedError"
    assert bob["manual_points"] == 1 and bob["manual"][0]["status"].startswith("not answered: 0 points")


def test_a_wrong_implementation_gets_partial_marks_and_the_failing_hidden_test(graded):
    carol = graded[1]["carol"]
    assert (carol["points"], carol["max_points"]) == (3, 5)
    assert carol["first_failure"] == "test_square: AssertionError: square(-4) should be 16"


def test_a_bare_assert_reports_the_failing_line(graded):
    ivan = graded[1]["ivan"]
    assert (ivan["points"], ivan["max_points"]) == (2, 5)
    assert ivan["first_failure"] == "test_total: AssertionError in `assert total([1, 2]) == 5`"


def test_an_endless_loop_is_cut_off_and_the_rest_still_runs(graded):
    dave = graded[1]["dave"]
    assert (dave["points"], dave["max_points"]) == (2, 5)
    assert dave["first_failure"] == "test_total: TimeoutError: cell ran longer than 5 s and was interrupted"


def test_deleted_or_emptied_test_cells_are_restored_or_failed(graded):
    frank = graded[1]["frank"]
    assert (frank["points"], frank["max_points"]) == (2, 5)
    assert frank["first_failure"] == "test_total: test cell missing (it was deleted from the notebook)"


def test_broken_submissions_get_a_row_with_a_reason(graded):
    rows = graded[1]
    assert rows["eve"]["points"] == 0 and rows["eve"]["first_failure"].startswith("not a valid JSON notebook: ")
    assert rows["eve"]["manual"][0]["status"].startswith("unreadable: 0 points")
    assert (rows["grace"]["points"], rows["grace"]["first_failure"]) == (0, "kernel died while running cells[2]")
    assert rows["henry"]["points"] == 0 and rows["henry"]["first_failure"].startswith("no solution notebook")


def test_a_kernel_that_ignores_interrupts_is_killed_after_the_budget(tmp_path):
    solution = write(solution_notebook(), tmp_path / "solutions" / "fixture.ipynb")
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    student = write(student_notebook(tmp_path, code), tmp_path / "zoe" / "fixture.ipynb")
    row = grade_notebook(student, solution, timeout=1, student="zoe", budget=2)
    assert (row["student"], row["points"], row["max_points"]) == ("zoe", 0, 5)
    assert row["first_failure"] == "timed out: the notebook ran longer than 2 s in all; kernel killed"


def test_grade_cli_prints_a_table_and_refuses_bad_usage(tmp_path, capsys):
    write(solution_notebook(), tmp_path / "solutions" / "fixture.ipynb")
    (tmp_path / "fixture.ipynb").write_text("[]")
    args = ["grade", str(tmp_path / "fixture.ipynb"), "--solutions", str(tmp_path / "solutions"),
            "--out", str(tmp_path / "grades")]
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["student", "exercise", "points", "max", "by", "hand", "first", "failure"]
    assert table[1].split()[:5] == ["fixture", "fixture", "0", "5", "1"] and "not a notebook" in table[1]
    assert table[2] == ("autograded points 0 of 5, nothing to grade by hand; "
                        "1 manual points scored 0 (not answered or deleted)")
    assert main(["grade", str(tmp_path / "nowhere")]) == 2
    assert "PATH" in capsys.readouterr().err
    assert main(args + ["--timeout", "0"]) == 2


def test_execute_saves_a_notebook_with_its_progress_bars_as_a_terminal_shows_them(tmp_path):
    """Headless, tqdm's redraws are separate outputs (hundreds per training run); a committed lesson keeps one line."""
    import nbformat

    from minirl.course.execute import execute

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys\nfrom tqdm import tqdm\nfor _ in tqdm(range(50), desc='train', file=sys.stdout, mininterval=0):\n"
        "    pass\nprint('done')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nb, path)
    assert execute(path, timeout=120) > 0
    outputs = json.loads(path.read_text())["cells"][0]["outputs"]
    assert len(outputs) == 1 and outputs[0]["name"] == "stdout"
    lines = "".join(outputs[0]["text"]).splitlines()
    assert len(lines) == 2 and lines[0].startswith("train: 100%") and "50/50" in lines[0] and lines[1] == "done"


def test_grading_finds_the_solutions_of_the_checkout_from_any_folder(tmp_path, monkeypatch):
    from minirl.course.__main__ import default_folder

    monkeypatch.chdir(tmp_path)  # no solutions/ here: the checkout's, which this minirl is installed from
    assert Path(default_folder("solutions")) == Path(__file__).resolve().parents[1] / "solutions"
    (tmp_path / "solutions").mkdir()
    assert default_folder("solutions") == "solutions"  # here first

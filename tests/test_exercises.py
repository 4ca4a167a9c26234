"""The real course material: every solution earns full marks, every pristine exercise earns zero
(without crashing the grader), and a wrong implementation earns partial marks with a useful message."""

import json
from pathlib import Path

import nbformat
import pytest

from minirl.course.grade import grade, grade_notebook

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
pytestmark = pytest.mark.slow


@pytest.mark.skipif(not SOLUTIONS, reason="no solution notebooks in this checkout")
def test_at_least_eight_exercises():
    assert len(SOLUTIONS) >= 8
    assert sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb")) == [p.name for p in SOLUTIONS]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_solution_full_marks_and_exercise_zero(solution, tmp_path):
    full = grade_notebook(solution, solution, timeout=300)
    assert full["max_points"] > 0
    assert full["points"] == full["max_points"], full["first_failure"]
    blank = grade_notebook(ROOT / "exercises" / solution.name, solution, timeout=300)
    assert blank["points"] == 0 and blank["max_points"] == full["max_points"]
    assert blank["first_failure"], "an unimplemented exercise must say why it scored nothing"
    # cells graded by hand (exercise 07's written answer) are counted apart, never dropped
    assert full["manual_points"] == blank["manual_points"] == (2 if solution.stem == "07_tuning" else 0)
    assert all(m["status"] == "needs manual grading" for m in full["manual"])
    assert all(m["status"].startswith("not answered") for m in blank["manual"])


def test_wrong_implementation_gets_partial_marks(tmp_path):
    """GAE with the discount forgotten (gamma ignored): the reference case with gamma=1 passes, the rest fail."""
    solution = ROOT / "solutions" / "03_gae.ipynb"
    if not solution.exists():
        pytest.skip("03_gae.ipynb not present")
    nb = nbformat.read(solution, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            cell.source = cell.source.replace("gamma *", "1.0 *").replace("gamma*", "1.0*")
    student = tmp_path / "bob" / solution.name
    student.parent.mkdir()
    nbformat.write(nb, student)
    rows = grade(tmp_path, ROOT / "solutions", timeout=300, out=tmp_path / "grades")
    (row,) = rows
    assert 0 < row["points"] < row["max_points"], row
    assert row["first_failure"]
    saved = json.loads((tmp_path / "grades" / "grades.json").read_text())
    assert saved[0]["student"] == "bob"

"""The conda environment and pyproject.toml must name the same dependencies (same lower bounds)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge package name -> PyPI name


def requirement(spec: str) -> tuple[str, str]:
    name, bound = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", spec).groups()
    return CONDA_NAMES.get(name.lower(), name.lower()), bound.replace(" ", "")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_side = dict(requirement(s) for s in project["dependencies"] + project["optional-dependencies"]["dev"])
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = lines.index("dependencies:")
    conda = [ln.strip()[2:] for ln in lines[start + 1:] if ln.strip().startswith("- ")]
    conda_side = dict(requirement(s) for s in conda if not s.startswith(("python", "pip")))
    assert conda_side == pip_side


def test_course_extra_is_part_of_dev():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["course"]) <= set(extras["dev"])


def test_top_level_layout():
    for name in ("notebooks", "minirl", "exercises", "solutions", "tests", "environment.yml", "README.md",
                 "pyproject.toml", ".ci/run"):
        assert (ROOT / name).exists(), name


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"<!-- test-command -->\s*```bash\n(.+?)\n```", readme, re.S).group(1).strip()
    assert command in ci

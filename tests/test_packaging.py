"""Packaging: the conda environment and pyproject.toml name the same dependencies (same lower bounds); the wheel
carries the right name, license and package data."""

import email.parser
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel pip builds from this checkout (in an isolated build environment, as a user's pip would)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SetuptoolsDeprecationWarning" not in done.stderr, done.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_wheel_metadata_is_what_the_index_and_a_user_expect(wheel):
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    headers = email.parser.Parser().parsestr(wheel.read(meta).decode())
    assert headers["Name"] == "minirl-course"  # "minirl" on PyPI is another project
    assert headers["License-Expression"] == "MIT" and headers["License-File"] == "LICENSE"
    assert headers["Requires-Python"] == ">=3.10"  # torch 2.13 has wheels for 3.13 and 3.14 too
    assert headers["Author"] and len(headers.get_all("Classifier")) >= 5
    names = set(wheel.namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # what the lessons and exercises load from the package, not from a checkout
    for shipped in ("minirl/assets/tiny-countdown/model.safetensors", "minirl/assets/tiny-countdown/README.md",
                    "minirl/assets/tiny-worked/model.safetensors", "minirl/assets/tiny-worked/minirl_card.json",
                    "minirl/assets/tiny-countdown/generation_config.json", "minirl/assets/sweeps/lr_sweep.json",
                    "minirl/assets/sweeps/lesson05_lr.json", "minirl/course/selfcheck.py"):
        assert shipped in names, shipped
    assert not any(n.startswith(("notebooks/", "tests/", "benchmarks/")) for n in names)


def test_license_file_is_mit():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT" and project["project"]["license-files"] == ["LICENSE"]
    assert project["build-system"]["requires"] == ["setuptools>=77"]  # 77: SPDX license strings (PEP 639)

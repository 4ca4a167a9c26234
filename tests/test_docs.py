"""The words agree with the repository: links resolve, line links point at what they name, and every number a
lesson's "What you should see" quotes is a number that a cell of that lesson printed."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MARKDOWN = [ROOT / "README.md", *sorted(ROOT.glob("*/README.md")), *sorted(ROOT.glob("*/*/README.md")),
            ROOT / "benchmarks" / "BENCHMARKS.md", *sorted((ROOT / "studies").glob("**/*.md")),
            *sorted((ROOT / "minirl" / "assets").glob("*/*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
NUMBER = re.compile(r"(?<![\w.,])[-+−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])[-+−]?\d+(?:\.\d+)?(?![\w])")
PRINTED = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\d.,])\d+(?:\.\d+)?")  # "1.06x", "0.45]" count too


def cells(path: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == kind]


def printed_text(path: Path) -> str:
    """Everything the code cells of a notebook printed or displayed as text."""
    out = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/markdown") or o.get("data", {}).get("text/plain", "")
            out.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(out)


def documents():
    for path in MARKDOWN:
        yield path, path.read_text(encoding="utf-8")
    for path in [*LESSONS, *sorted((ROOT / "solutions").glob("*.ipynb")), *sorted((ROOT / "exercises").glob("*.ipynb"))]:
        yield path, "\n".join(cells(path, "markdown"))


@pytest.mark.parametrize("path, text", list(documents()), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_relative_links_resolve(path, text):
    missing = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:|^#", target):  # a web address or an anchor in the same page
            continue
        file = target.split("#")[0]
        if not (path.parent / file).exists():
            missing.append(target)
    assert missing == [], f"{path.relative_to(ROOT)} links to files that are not in the repository"
    assert "DESIGN.md" not in text  # the design notes are not part of this repository


def test_line_links_point_at_what_they_name():
    """[`rl_step`](../minirl/step.py#L210): line 210 of step.py must contain `rl_step`."""
    wrong, seen = [], 0
    for path in LESSONS:
        for text in cells(path, "markdown"):
            for name, file, line in re.findall(r"\[`([^`]+)`\]\(\.\./(minirl/[\w/]+\.py)#L(\d+)\)", text):
                seen += 1
                lines = (ROOT / file).read_text(encoding="utf-8").splitlines()
                target = lines[int(line) - 1] if int(line) <= len(lines) else ""
                if name.rstrip("()") not in target:
                    wrong.append(f"{path.name}: {name} -> {file}#L{line} holds {target.strip()[:60]!r}")
    assert seen >= 15, "lessons 02-04 link their implementation details to the lines of minirl"
    assert wrong == []


def quoted_numbers(text: str) -> list[str]:
    """Numbers a text states as results: with a decimal point, a percent sign or three or more digits.
    Maths ($...$) and code spans are left out: they hold formulas and settings, not measurements."""
    text = re.sub(r"\$\$.+?\$\$|\$[^$]+\$|`[^`]*`|\]\([^)]*\)", " ", text, flags=re.S)
    found = []
    for m in NUMBER.finditer(text):
        number = m.group(0).lstrip("+-−")
        after = text[m.end():m.end() + 2]
        year = re.fullmatch(r"(19[5-9]|20\d)\d", number) is not None  # a citation such as "Lian (2025)"
        if "." in number or after.lstrip().startswith("%") or (len(number.replace(",", "")) >= 3 and not year):
            found.append(number)
    return found


def what_you_should_see(path: Path) -> str:
    text = "\n".join(cells(path, "markdown"))
    m = re.search(r"^## What you should see\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return m.group(1) if m else ""


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_what_you_should_see_quotes_only_printed_numbers(path):
    section = what_you_should_see(path)
    assert section, f"{path.name} has no '## What you should see' section"
    printed = {n.replace(",", "") for n in PRINTED.findall(printed_text(path))}
    missing = [n for n in quoted_numbers(section) if n.replace(",", "") not in printed]
    assert missing == [], f"{path.name}: 'What you should see' quotes numbers no cell printed: {missing}"


def test_the_number_check_can_fail():
    assert quoted_numbers("accuracy 17.7 % -> 30.3 %, 300 steps, G = 8, $\\epsilon = 0.2$, `lr=1e-4` (Lian 2025)") == \
        ["17.7", "30.3", "300"]


# every learner downloads the committed outputs: they must not show where the notebook was executed
ABSOLUTE_PATH = re.compile(r"(?<![\w.])(?:/(?:home|Users|root|tmp|private|var/folders|work|opt|usr|mnt|content)/"
                           r"|(?<![\w])[A-Za-z]:\\(?=\w)|site-packages|dist-packages)")


@pytest.mark.parametrize("path", [*LESSONS, *sorted((ROOT / "solutions").glob("*.ipynb")),
                                  *sorted((ROOT / "exercises").glob("*.ipynb"))], ids=lambda p: p.name)
def test_committed_outputs_show_no_absolute_local_path(path):
    found = []
    for number, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        for o in cell.get("outputs", []):
            texts = [o.get("text", ""), o.get("evalue", ""), o.get("traceback", [])]
            texts += [v for k, v in o.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else text
                found += [f"cell {number}: ...{text[max(0, m.start() - 40):m.end() + 40]!r}"
                          for m in ABSOLUTE_PATH.finditer(text)]
                if str(ROOT) in text or str(Path.home()) in text:
                    found.append(f"cell {number}: the repository or home folder of the machine that ran it")
    assert found == [], f"{path.name} prints local paths; print them relative to the package or the repo"


def test_absolute_path_pattern_catches_what_it_should():
    for text in ("/home/ana/minirl/x.json", "saved to /tmp/minirl-rerun-abc/runs", "C:\\Users\\ana\\x",
                 "/usr/lib/python3/site-packages/minirl", "/content/minirl"):
        assert ABSOLUTE_PATH.search(text), text
    for text in ("minirl/assets/sweeps/lr_sweep.json", "lr 3e-4 / 1e-3", "1/2", "studies/claims-worked/runs"):
        assert not ABSOLUTE_PATH.search(text), text


def test_readme_holds_the_study_table_of_the_committed_results():
    """README's table of the paper's claims is `summary_table` of studies/claims-worked/results, row for row."""
    from minirl.study import CLAIMS
    from minirl.study.report import summary_table

    results = [json.loads((ROOT / "studies" / "claims-worked" / "results" / f"{name}.json").read_text(encoding="utf-8"))
               for name in CLAIMS]
    assert summary_table(results) in (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_holds_the_tuned_study_table_of_the_committed_results():
    """README's table of the tuning study is `summary_table` of studies/claims-tuned/results, row for row."""
    from minirl.study.claims_tuned import REGISTERED_ORDER
    from minirl.study.report import summary_table

    results = [json.loads((ROOT / "studies" / "claims-tuned" / "results" / f"{name}.json").read_text(encoding="utf-8"))
               for name in REGISTERED_ORDER]
    assert all(r["verdict"] != "not run" for r in results)
    assert summary_table(results) in (ROOT / "README.md").read_text(encoding="utf-8")

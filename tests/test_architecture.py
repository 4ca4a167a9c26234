"""The README's Architecture holds: imports run one way, the study has no cycle, run keys are stable."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import minirl
from minirl.config import RLConfig
from minirl.runs import WINGS, core_files, run_key
from minirl.tasks import Countdown, task_identity

PACKAGE = Path(minirl.__file__).resolve().parent
ENTRY_POINTS = ("cli.py", "__main__.py")  # the commands: above every layer, they may dispatch to a wing


def imported_modules(file: Path) -> set[str]:
    """Absolute names of the minirl modules `file` imports (relative imports resolved)."""
    package = ["minirl", *file.relative_to(PACKAGE).parent.parts]
    names = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("minirl")}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module.startswith("minirl"):
                names.add(module)
                names |= {f"{module}.{a.name}" for a in node.names}  # `from . import study` imports a module too
    return names


def test_the_core_never_imports_a_wing():
    offenders = {}
    for file in core_files():
        if file.name in ENTRY_POINTS and file.parent == PACKAGE:
            continue
        wings = {m for m in imported_modules(file) if m.split(".")[1:2] and m.split(".")[1] in WINGS}
        if wings:
            offenders[file.name] = sorted(wings)
    assert offenders == {}


def test_every_subpackage_is_the_core_or_a_wing():
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == {"tasks", *WINGS}
    hashed = {f.relative_to(PACKAGE).as_posix() for f in core_files()}
    assert {"trainer.py", "step.py", "losses.py", "tasks/countdown.py"} <= hashed
    assert not any(name.split("/")[0] in WINGS for name in hashed)


def test_the_study_imports_in_one_direction():
    """points, power <- claims <- claims_tuned <- jobs <- report <- tune <- report_tuned <- sizing_tuned <- pilot
    <- cli: no module imports one that comes after it."""
    order = ["points", "power", "claims", "claims_tuned", "jobs", "report", "tune", "report_tuned", "sizing_tuned",
             "pilot", "cli"]
    for i, name in enumerate(order):
        imports = {m.split(".")[2] for m in imported_modules(PACKAGE / "study" / f"{name}.py")
                   if m.startswith("minirl.study.") and m.split(".")[2] in order}
        later = imports & set(order[i + 1:])
        assert not later, f"study/{name}.py imports {sorted(later)}, which come after it"
    assert not any(m.startswith("minirl.course") for f in (PACKAGE / "study").glob("*.py") for m in imported_modules(f))


def test_run_keys_are_the_same_in_another_process(tmp_path):
    """A FunctionTask's identity names its functions by source, not by memory address, so the cache hits."""
    (tmp_path / "my_task.py").write_text(textwrap.dedent("""
        from minirl import FunctionTask

        def make_problem(rng):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            return f"{a}+{b}=", a + b, str(a + b)

        def reward(answer, completion):
            return 1.0 if completion.strip() == str(answer) else 0.0

        TASK = FunctionTask("addition", make_problem, reward)
    """))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from my_task import TASK\n"
            "from minirl import Countdown, RLConfig; from minirl.runs import run_key; from minirl.tasks import task_identity\n"
            "for task in (TASK, Countdown(num_count=4)):\n"
            "    print(run_key('p', task_identity(task), RLConfig.preset('grpo')))")
    sys.path.insert(0, str(tmp_path))
    try:
        from my_task import TASK
    finally:
        sys.path.remove(str(tmp_path))
    here = [run_key("p", task_identity(t), RLConfig.preset("grpo")) for t in (TASK, Countdown(num_count=4))]
    there = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert there.stdout.split() == here
    assert "0x" not in task_identity(TASK)
    # and it still tells tasks apart: another reward function, another field value
    other = type(TASK)("addition", TASK.make_problem, lambda answer, completion: 0.0)
    assert task_identity(other) != task_identity(TASK)
    assert task_identity(Countdown(num_count=3)) != task_identity(Countdown(num_count=4))

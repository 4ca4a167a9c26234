"""A training run on disk: its config, one metrics row per step, and a little metadata; plus a cache of runs.

A run folder holds these files:

    config.json        the RLConfig, as `RLConfig.to_dict()`
    meta.json          policy name, task, code version, status ("running" | "finished" | "failed" | "stopped"), ...
    metrics.jsonl      one JSON object per rollout step, appended and flushed as soon as the step ends
    completions.jsonl  what the policy wrote at each evaluation: a few fixed held-out problems, one JSON object per
                       (step, decoding, problem) with the prompt, the completion, its reward, components and correctness

The .jsonl files are append-only while training, so a run that crashes or is interrupted keeps every step it
finished; `Run.load` skips a half-written last line. Files are written by Python's `json`, which writes NaN and
±inf as the bare tokens `NaN` / `Infinity` / `-Infinity`: Python's `json` reads them back exactly, strict JSON
parsers do not. numpy and torch scalars are converted with `.item()`.

`RunCache` stores finished runs under a key (`run_key`) that hashes everything that determines the result:
policy, task, config, the source code of the RL core (`code_version`) and anything extra. Change any of
these and the key changes, so a stale result is never reused.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import RLConfig

STATUSES = ("running", "finished", "failed", "stopped")
CONFIG_FILE, META_FILE, METRICS_FILE, COMPLETIONS_FILE = "config.json", "meta.json", "metrics.jsonl", "completions.jsonl"
# minirl's wings (README.md, "Architecture"): sub-packages that use the RL core and that the core never imports, so
# nothing in them can change a training result. `code_version` hashes everything else.
WINGS = ("course", "study")


# ----------------------------------------------------------------------------- JSON helpers

def _to_json_value(obj: Any) -> Any:
    """`json.dumps(default=...)` hook: numpy/torch scalars and arrays become Python numbers and lists."""
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise ValueError(f"cannot store a value of type {type(obj).__name__} in a run file: {obj!r}; "
                    "use numbers, strings, bools, None, lists or dicts")


def _dumps(obj: Any, **kwargs) -> str:
    return json.dumps(obj, default=_to_json_value, **kwargs)


def _write_atomic(file: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename it over `file`: readers see old or new, never half."""
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _end_unfinished_line(file: Path) -> None:
    """Make `file` end in a newline before appending: a crash mid-write can leave a last line without one."""
    size = file.stat().st_size if file.exists() else 0
    if size == 0:
        return
    with open(file, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        start = data.rfind(b"\n") + 1
        try:
            json.loads(data[start:])  # complete row, only its newline is missing: keep it
            f.write(b"\n")
        except ValueError:
            f.truncate(start)  # half a row: drop it


def _append_line(file: Path, line: str) -> None:
    """Append one JSON line and flush it to disk (a crash afterwards keeps it)."""
    _end_unfinished_line(file)
    with open(file, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_jsonl(file: Path) -> list[dict]:
    """Rows of a .jsonl file; an unreadable *last* line is a write cut short by a crash and is skipped."""
    if not file.exists():
        return []
    lines = [line for line in file.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{file}: line {i + 1} of {len(lines)} is not valid JSON: {line[:80]!r}") from None
    return rows


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


def _as_float(value: Any) -> float:
    """A metric value as a float; None (a NaN written by a strict JSON writer) and non-numbers become NaN."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table of strings and numbers; pipes and line breaks inside a cell are escaped."""
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ").strip() or " "  # noqa: E731
    return "\n".join(["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(map(cell, row)) + " |" for row in rows])


# ----------------------------------------------------------------------------- Run

@dataclass
class Run:
    """One training run: `config`, `history` (one metrics dict per rollout step), `meta`, the `completions` written
    at its evaluations and its folder `path`."""

    config: RLConfig
    history: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    path: Path | None = None
    completions: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = Path(self.path).expanduser()

    @classmethod
    def start(cls, config: RLConfig, path: str | Path | None = None, **meta) -> "Run":
        """A new run with status "running", `started_at` and `code_version` filled in; saved if `path` is given."""
        meta = {"status": "running", "started_at": _now(), "code_version": code_version(), **meta}
        run = cls(config=config, meta=meta, path=Path(path) if path is not None else None)
        if run.path is not None:
            run.save()
        return run

    @property
    def label(self) -> str:
        """A short name that tells sweep points apart, e.g. "grpo lr=3e-05 G=8 B=8 clip=0.2/0.28 kl=0.04 seed=0".

        `meta["label"]`, if set, is used instead."""
        if self.meta.get("label"):
            return str(self.meta["label"])
        c = self.config
        parts = [c.algo, f"lr={c.lr:g}", f"G={c.group_size}", f"B={c.batch_size}",
                 f"clip={c.clip_low:g}/{c.clip_high:g}"]
        if c.kl_coef > 0:
            parts.append(f"kl={c.kl_coef:g}")
        if c.entropy_coef > 0:
            parts.append(f"ent={c.entropy_coef:g}")
        parts.append(f"seed={c.seed}")
        return " ".join(parts)

    @property
    def status(self) -> str:
        return self.meta.get("status", "running")

    # --- writing ---------------------------------------------------------------
    def append(self, row: dict) -> None:
        """Add one step's metrics; with a `path`, also append it to metrics.jsonl at once (survives a crash)."""
        if not isinstance(row, dict):
            raise ValueError(f"row={row!r} is not allowed: use a dict of metric name -> value")
        line = _dumps(row)
        self.history.append(json.loads(line))  # what load() would return: plain floats, not numpy/torch scalars
        if self.path is None:
            return
        if not (self.path / CONFIG_FILE).exists():
            self.save()  # first write to this folder: config and meta too, so the folder is a loadable run
            return
        _append_line(self.path / METRICS_FILE, line)

    def add_completions(self, rows: list[dict]) -> None:
        """Record what the policy wrote at an evaluation (rows with "step", "prompt", "completion", ...); with a
        `path`, also append them to completions.jsonl at once."""
        lines = [_dumps(row) for row in rows]
        self.completions += [json.loads(line) for line in lines]
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            for line in lines:
                _append_line(self.path / COMPLETIONS_FILE, line)

    def save(self, path: str | Path | None = None) -> Path:
        """Write config.json, meta.json and metrics.jsonl (each replaced atomically) to `path` or `self.path`."""
        if path is not None:
            self.path = Path(path).expanduser()
        if self.path is None:
            raise ValueError("path=None is not allowed here: this run has no folder yet; pass save(path=...)")
        self.path.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.path / CONFIG_FILE, self.config.to_json() + "\n")
        _write_atomic(self.path / META_FILE, _dumps(self.meta, indent=2, sort_keys=True) + "\n")
        _write_atomic(self.path / METRICS_FILE, "".join(_dumps(row) + "\n" for row in self.history))
        if self.completions:  # a run that kept none has no such file
            _write_atomic(self.path / COMPLETIONS_FILE, "".join(_dumps(row) + "\n" for row in self.completions))
        else:
            (self.path / COMPLETIONS_FILE).unlink(missing_ok=True)
        return self.path

    def set_status(self, status: str, error: str | None = None) -> None:
        """Record how the run ended (or that it runs); saves meta.json if the run has a folder."""
        if status not in STATUSES:
            raise ValueError(f"status={status!r} is not allowed: choose one of {list(STATUSES)}")
        self.meta["status"] = status
        if error is not None:
            self.meta["error"] = str(error)
        else:
            self.meta.pop("error", None)
        if status != "running":
            self.meta["ended_at"] = _now()
            if "seconds" not in self.meta and not math.isnan(self.final("wall_time")):
                self.meta["seconds"] = self.final("wall_time")
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            _write_atomic(self.path / META_FILE, _dumps(self.meta, indent=2, sort_keys=True) + "\n")

    # --- reading ---------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Run":
        """Read a run folder. A half-written last metrics line (crash) is skipped; a missing meta.json is {}."""
        path = Path(path).expanduser()
        if not (path / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"path={str(path)!r} is not a run folder: it has no {CONFIG_FILE}")
        config = RLConfig.from_dict(json.loads((path / CONFIG_FILE).read_text(encoding="utf-8")))
        meta_file = path / META_FILE
        meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
        if not isinstance(meta, dict):
            raise ValueError(f"{meta_file} holds {type(meta).__name__}, not a JSON object")
        return cls(config=config, history=_read_jsonl(path / METRICS_FILE), meta=meta, path=path,
                   completions=_read_jsonl(path / COMPLETIONS_FILE))

    def series(self, name: str, x: str = "step") -> tuple[list, list[float]]:
        """(x values, metric values) of the rows that have metric `name`, NaN kept.

        `x` is a metric too ("step", "samples", "wall_time"); rows without it are left out, except that a row
        without "step" uses its index."""
        xs, ys = [], []
        for i, row in enumerate(self.history):
            if name in row and (x in row or x == "step"):
                xs.append(row.get(x, i))
                ys.append(_as_float(row[name]))
        return xs, ys

    def final(self, name: str, default: float = math.nan) -> float:
        """The last non-NaN value of metric `name`, or `default` if there is none."""
        for row in reversed(self.history):
            value = _as_float(row.get(name))
            if not math.isnan(value):
                return value
        return default


# ----------------------------------------------------------------------------- keys and cache

def core_files() -> list[Path]:
    """The RL core's source files, sorted: every `*.py` of the package outside the WINGS folders."""
    root = Path(__file__).resolve().parent
    return sorted(f for f in root.rglob("*.py") if f.relative_to(root).parts[0] not in WINGS)


def code_version() -> str:
    """`minirl.__version__` + a short hash of the RL core's source (`core_files`): editing the math, the
    sampler or the trainer changes it and so invalidates every cached run; editing a lesson tool does not."""
    from . import __version__

    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for file in core_files():
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(file.read_bytes().replace(b"\r\n", b"\n") + b"\0")  # same hash on Windows checkouts
    return f"{__version__}+{digest.hexdigest()[:12]}"


def run_key(policy_identity: str, task_description: str, config: RLConfig, extra: dict | None = None) -> str:
    """16 hex characters that change whenever the policy (`Policy.identity()`: its name and weights), task, config,
    source code or `extra` change."""
    if not isinstance(config, RLConfig):
        raise ValueError(f"config={config!r} is not allowed: use an RLConfig")
    payload = {"policy": policy_identity, "task": task_description, "config": config.to_dict(),
               "code": code_version(), "extra": extra}
    canonical = _dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    """$MINIRL_CACHE if set, else ~/.cache/minirl/runs."""
    env = os.environ.get("MINIRL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "minirl" / "runs"


class RunCache:
    """Finished runs stored as folders `root/<run_key>`. The root is created only when a run is saved there."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()

    def path_for(self, key: str) -> Path:
        if not isinstance(key, str) or not key or key in (".", "..") or "/" in key or "\\" in key:
            raise ValueError(f"key={key!r} is not allowed: use a run_key(...) string (no path separators)")
        return self.root / key

    def get(self, key: str) -> Run | None:
        """The finished run stored under `key`, else None (missing, unfinished or unreadable: never raises)."""
        path = self.path_for(key)
        try:
            run = Run.load(path)
        except Exception:  # a corrupt or half-written folder is a cache miss, not an error
            return None
        return run if run.status == "finished" else None

    def __repr__(self) -> str:
        return f"RunCache({str(self.root)!r})"

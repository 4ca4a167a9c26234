"""`python -m minirl.course execute NOTEBOOK...`: run lessons the way they are committed.

Each notebook runs top to bottom in its own folder with a fresh kernel (nbclient), in its default mode unless
MINIRL_SMOKE is set, and is written back with its outputs. A progress bar redraws itself with carriage returns, and
a kernel that is not a terminal keeps every redraw as its own output (hundreds per training run); here each cell's
consecutive stream outputs are merged and every line keeps what a terminal would show, its last redraw. Saved widget
state is dropped (the panels rebuild it when run).
"""

from __future__ import annotations

import json
import time
from pathlib import Path


def terminal_text(text: str) -> str:
    """What a terminal shows of `text`: each line's text after its last carriage return."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def flatten_streams(nb: dict) -> dict:
    """Merge each cell's consecutive stream outputs of one name and keep their terminal text; drop widget state."""
    nb["metadata"].pop("widgets", None)
    for cell in nb["cells"]:
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
                if outputs and outputs[-1].get("output_type") == "stream" and outputs[-1]["name"] == out["name"]:
                    outputs[-1]["text"] += text
                    continue
                out = {**out, "text": text}
            outputs.append(out)
        for out in outputs:
            if out.get("output_type") == "stream":
                out["text"] = terminal_text(out["text"]).lstrip("\n").splitlines(keepends=True)
        if "outputs" in cell:
            cell["outputs"] = [o for o in outputs if o.get("output_type") != "stream" or "".join(o["text"]).strip()]
    return nb


def execute(path: str | Path, timeout: int = 3600) -> float:
    """Run the notebook at `path` in place; return the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
    seconds = time.perf_counter() - t0
    flat = flatten_streams(json.loads(nbformat.writes(nb)))
    path.write_text(json.dumps(flat, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return seconds

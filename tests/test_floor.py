"""The declared floors work: transformers and accelerate at the lowest versions pyproject.toml allows.

A second environment holds exactly those two releases (and what they need at those versions:
huggingface_hub < 1, an older tokenizers) and reuses everything else (torch, numpy, ...) from the running
environment through a .pth file, so building it costs one small pip install and never a second torch. It is
cached in pytest's cache folder (.pytest_cache/d/) and rebuilt only when the floors or the Python change.

In it, plain AutoTokenizer/AutoModelForCausalLM load the shipped policy, a run's checkpoint, a
`--save-policy` export and a tiny Qwen2 chat model, all written here by the newest transformers, to the same
token ids and the same logits; minirl trains 2 steps there (accelerate at its floor), and what it saves loads
here again to the same numbers.
"""

import inspect
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
FLOORED = ("transformers", "accelerate")
TRAIN = ["train", "--algo", "grpo", "--steps", "2", "--batch-size", "4", "--group-size", "4", "--eval-every", "0",
         "--eval-n", "8", "--max-new-tokens", "12", "--overlong-cache", "2", "--device", "cpu", "--quiet"]


def declared_floors() -> dict[str, str]:
    """{"transformers": "4.56", "accelerate": "1.0"}: the `>=` bound of each in project.dependencies."""
    floors = {}
    for spec in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(spec)
        if req.name in FLOORED:
            lower = [s.version for s in req.specifier if s.operator == ">="]
            assert len(lower) == 1, f"pyproject.toml: {spec!r} must have one '>=' floor"
            floors[req.name] = lower[0]
    assert set(floors) == set(FLOORED), floors
    return floors


def build_floor_env(folder: Path, floors: dict[str, str]) -> Path:
    """A venv with only the floor releases installed; the running environment's packages come after them."""
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))  # a .pth appends these
    (site / "_minirl_main_env.pth").write_text("".join(f"{p}\n" for p in ours))
    # the running pip installs into the floor venv (pip >= 22.3); pinning torch to the version it already sees
    # makes any resolution that wants another torch fail instead of downloading one
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--disable-pip-version-check",
           *(f"{name}=={version}" for name, version in floors.items()), f"torch=={metadata.version('torch')}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip could not install the floors:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    installed = sorted(p.name.split("-")[0].lower() for p in site.glob("*.dist-info"))
    assert "torch" not in installed and "numpy" not in installed, installed  # reused, never a second copy
    return python


@pytest.fixture(scope="module")
def floors():
    return declared_floors()


@pytest.fixture(scope="module")
def floor_python(floors, pytestconfig, tmp_path_factory):
    """The floor environment's python, from the cache when the floors did not change."""
    cache = getattr(pytestconfig, "cache", None)  # None under -p no:cacheprovider
    folder = cache.mkdir("minirl-floor-env") if cache is not None else tmp_path_factory.mktemp("floor-env")
    key = {"floors": floors, "python": sys.version, "base": sysconfig.get_paths()["purelib"],
           "torch": metadata.version("torch")}
    marker = folder / "minirl-floor.json"
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not (marker.exists() and json.loads(marker.read_text()) == key and python.exists()):
        python = build_floor_env(folder, floors)
        marker.write_text(json.dumps(key))
    return python


def probe(folder: str, prompts: list[str]) -> dict:
    """Plain transformers, as a Hub user would: load, encode (through the chat template if there is one),
    one forward, a few greedy tokens. Runs in both environments (its source is sent to the floor one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    chat = getattr(tok, "chat_template", None) is not None
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in prompts] if chat else prompts
    enc = tok(texts, padding=True, return_tensors="pt", add_special_tokens=not chat)
    inputs = list(enc.keys())  # generate(**enc) rejects anything else, e.g. token_type_ids
    enc = {k: enc[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        logits = model(**enc).logits
        greedy = model.generate(**enc, do_sample=False, max_new_tokens=6, pad_token_id=tok.pad_token_id)
    mask = enc["attention_mask"].bool()
    return {"classes": [type(tok).__name__, type(model).__name__], "dtype": str(model.dtype),
            "padding_side": tok.padding_side, "inputs": inputs, "ids": enc["input_ids"].tolist(),
            "mask": mask.long().tolist(), "texts": texts,
            "decoded": tok.batch_decode(enc["input_ids"], skip_special_tokens=True),
            "logits": logits[mask].tolist(), "greedy": greedy[:, enc["input_ids"].shape[1]:].tolist()}


FLOOR_SCRIPT = """
import json, sys
import torch
torch.set_num_threads(1)
import accelerate, transformers
{probe}
job = json.loads(open(sys.argv[1]).read())
versions = {{"transformers": transformers.__version__, "accelerate": accelerate.__version__}}
out = {{"versions": versions, "probes": {{}}}}
for name, folder in job["folders"].items():
    out["probes"][name] = probe(folder, job["prompts"][name])
import minirl
from minirl.cli import main
from minirl.policy import load_policy
out["minirl"] = minirl.__file__
for name, folder in job["folders"].items():  # minirl's own load path encodes like plain transformers
    ids = load_policy(folder, device="cpu").encode_prompts(job["prompts"][name])[0]
    out["probes"][name]["minirl_ids"] = ids.tolist()
out["train_rc"] = main(job["train"])  # a 2-step run: accelerate at its floor drives the trainer
out["metrics"] = [json.loads(line) for line in open(job["metrics"])]
out["bf16_rc"] = main(job["train_bf16"])  # accelerate's state reset between runs of one process, autocast
import pathlib
checkpoint = [str(p.parent) for p in pathlib.Path(job["floor_run"], "checkpoint").rglob("config.json")]
out["floor_folders"] = {{"floor_checkpoint": checkpoint[0], "floor_saved": job["floor_saved"]}}
out["floor_probes"] = {{name: probe(folder, job["prompts"][name]) for name, folder in out["floor_folders"].items()}}
open(sys.argv[2], "w").write(json.dumps(out))
"""


def prompts_for(chat: bool) -> list[str]:
    """Two Countdown prompts of different lengths, so that left padding is exercised."""
    from minirl import Countdown

    style = "chat" if chat else "compact"
    return [Countdown(num_count=n, prompt_style=style).problems("test", 1)[0].prompt for n in (3, 4)]


def find_model_folder(root: Path) -> str:
    """The Hugging Face model folder inside a run's checkpoint (whatever its layout)."""
    folders = sorted(p.parent for p in (root / "checkpoint").rglob("config.json"))
    assert len(folders) == 1, folders
    return str(folders[0])


@pytest.fixture(scope="module")
def floor_run(floor_python, tmp_path_factory, one_thread):
    """Write the folders with the newest transformers here, then load and train in the floor environment."""
    from minirl.cli import main
    from minirl.policy import SHIPPED_POLICY
    from minirl.tiny_hf import save_tiny_chat_model

    tmp = tmp_path_factory.mktemp("floor")
    assert main([*TRAIN, "--run-dir", str(tmp / "run"), "--save-policy", str(tmp / "saved")]) == 0
    folders = {"shipped": str(SHIPPED_POLICY), "checkpoint": find_model_folder(tmp / "run"),
               "saved": str(tmp / "saved"), "chat": str(save_tiny_chat_model(tmp / "chat"))}
    prompts = {name: prompts_for(name == "chat") for name in [*folders, "floor_checkpoint", "floor_saved"]}
    job = {"folders": folders, "prompts": prompts, "floor_run": str(tmp / "floor_run"),
           "floor_saved": str(tmp / "floor_saved"), "metrics": str(tmp / "floor_run" / "metrics.jsonl"),
           "train": [*TRAIN, "--run-dir", str(tmp / "floor_run"), "--save-policy", str(tmp / "floor_saved")],
           "train_bf16": [*TRAIN, "--steps", "1", "--mixed-precision", "bf16", "--run-dir", str(tmp / "floor_bf16")]}
    (tmp / "job.json").write_text(json.dumps(job))
    (tmp / "floor.py").write_text(FLOOR_SCRIPT.format(probe=inspect.getsource(probe)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(floor_python), str(tmp / "floor.py"), str(tmp / "job.json"), str(tmp / "out.json")],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"the floor environment failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    main_metrics = [json.loads(line) for line in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    return {"folders": folders, "prompts": prompts, "main_metrics": main_metrics,
            "floor_meta": json.loads((tmp / "floor_run" / "meta.json").read_text()),
            **json.loads((tmp / "out.json").read_text())}


def assert_same(here: dict, there: dict, what: str):
    assert here["inputs"] == there["inputs"] == ["input_ids", "attention_mask"], (
        f"{what}: the tokenizer returns {there['inputs']} at the floor, {here['inputs']} here; a causal LM's "
        "generate(**tokenizer(...)) accepts only input_ids and attention_mask (tokenizer_config.json should name "
        "them in model_input_names)")
    assert here["classes"][1] == there["classes"][1], what  # (4 has no TokenizersBackend: tokenizer classes differ)
    for key in ("dtype", "padding_side", "inputs", "ids", "mask", "decoded", "texts", "greedy"):
        assert here[key] == there[key], f"{what}: {key} differs between the newest transformers and the floor"
    a, b = torch.tensor(here["logits"]), torch.tensor(there["logits"])
    assert a.shape == b.shape and a.numel() > 0
    assert torch.allclose(a, b, rtol=0, atol=1e-5), f"{what}: logits differ by {(a - b).abs().max():.2e}"


def test_the_floor_environment_has_exactly_the_declared_floors(floor_run, floors):
    for name, version in floors.items():
        assert Version(floor_run["versions"][name]) == Version(version), (name, floor_run["versions"][name])
    assert Path(floor_run["minirl"]).resolve().is_relative_to(REPO), floor_run["minirl"]


@pytest.mark.parametrize("name", ["shipped", "checkpoint", "saved", "chat"])
def test_what_the_newest_transformers_writes_loads_at_the_floor(floor_run, name, one_thread):
    folder, prompts = floor_run["folders"][name], floor_run["prompts"][name]
    here, there = probe(folder, prompts), floor_run["probes"][name]
    assert_same(here, there, name)
    assert there["classes"][0] == "PreTrainedTokenizerFast"
    assert there["minirl_ids"] == there["ids"]
    if name != "chat":  # the character tokenizer round-trips the prompt exactly
        assert there["decoded"] == prompts


def test_minirl_trains_at_the_floor_as_it_does_here(floor_run):
    assert floor_run["train_rc"] == 0 and floor_run["floor_meta"]["status"] == "finished"
    assert floor_run["bf16_rc"] == 0
    rows, ours = floor_run["metrics"], floor_run["main_metrics"]
    assert [row["step"] for row in rows] == [row["step"] for row in ours] == [0, 1, 2]
    # same seed, same logits to ~1e-6: the same samples, so the counted metrics are equal
    for key in ("eval/accuracy_greedy", "eval/accuracy_sampled", "reward_mean", "accuracy", "completion_len_mean"):
        assert [row.get(key) for row in rows] == [row.get(key) for row in ours], key
    for row, mine in zip(rows[1:], ours[1:]):
        for key in ("policy_loss", "entropy", "grad_norm"):
            assert row[key] == pytest.approx(mine[key], rel=1e-4, abs=1e-6), (row["step"], key)


@pytest.mark.parametrize("name", ["floor_checkpoint", "floor_saved"])
def test_what_the_floor_writes_loads_on_the_newest(floor_run, name, one_thread):
    from minirl.policy import load_policy

    folder, prompts = floor_run["floor_folders"][name], floor_run["prompts"][name]
    assert_same(probe(folder, prompts), floor_run["floor_probes"][name], name)
    policy = load_policy(folder, device="cpu")
    assert policy.encode_prompts(prompts)[0].tolist() == floor_run["floor_probes"][name]["ids"]

"""Watching a run: what the policy writes at each evaluation is kept in the run folder, shown before/after, and
logged with the metrics through accelerate's trackers (read back here with TensorBoard's own event reader)."""

import json

import pytest
import yaml

from minirl import Countdown, RLConfig, load_policy
from minirl.cli import main
from minirl.plots import completions_table
from minirl.runs import Run
from minirl.trainer import COMPLETIONS_KEPT, train

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = dict(batch_size=4, group_size=4, eval_n=12, max_new_tokens=12, overlong_cache=2)


def test_every_evaluation_keeps_what_the_policy_wrote_for_the_same_problems(tmp_path):
    config = RLConfig.preset("grpo", steps=2, eval_every=1, **SMALL)
    run = train(load_policy(device="cpu"), Countdown(), config, run_dir=tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert rows == Run.load(tmp_path).completions == run.completions
    assert len(rows) == 3 * 2 * COMPLETIONS_KEPT  # steps 0, 1, 2 x greedy and sampled x the kept problems
    by_eval = {}
    for r in rows:
        assert set(r) == {"step", "decoding", "prompt", "completion", "reward", "correct", "components"}
        assert r["correct"] == (r["components"]["correct"] == 1.0) and r["reward"] == r["components"]["correct"]
        by_eval.setdefault((r["step"], r["decoding"]), []).append(r["prompt"])
    assert len({tuple(prompts) for prompts in by_eval.values()}) == 1  # the same problems at every evaluation

    table = completions_table(run, problems=3).splitlines()
    assert table[0] == "| prompt | step 0 (sampled) | step 2 (sampled) |" and len(table) == 2 + 3
    first, last = ([r for r in rows if r["step"] == s and r["decoding"] == "sampled"] for s in (0, 2))
    for line, before, after in zip(table[2:], first, last):
        assert line == (f"| {before['prompt']} | {'✓' if before['correct'] else '✗'} {before['completion'] or '(empty)'}"
                        f" | {'✓' if after['correct'] else '✗'} {after['completion'] or '(empty)'} |")
    assert completions_table(Run(config)) == ""


def test_a_resumed_run_keeps_the_completions_up_to_its_checkpoint(tmp_path):
    config = RLConfig.preset("grpo", steps=3, eval_every=1, checkpoint_every=1, **SMALL)
    stop_after_1 = lambda run, row: row["step"] < 1  # noqa: E731
    train(load_policy(device="cpu"), Countdown(), config, run_dir=tmp_path, progress=False, callbacks=[stop_after_1])
    run = train(load_policy(device="cpu"), Countdown(), config, run_dir=tmp_path, resume=True, progress=False)
    steps = [r["step"] for r in Run.load(tmp_path).completions]
    assert sorted(set(steps)) == [0, 1, 2, 3] and len(steps) == 4 * 2 * COMPLETIONS_KEPT == len(run.completions)


def read_events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})  # this folder's event files
    ea.Reload()
    scalars = {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}
    texts = {tag: [(e.step, make_ndarray(e.tensor_proto).item().decode()) for e in ea.Tensors(tag)]
             for tag in ea.Tags()["tensors"]}
    return scalars, texts


def test_report_to_tensorboard_logs_metrics_and_completions_through_accelerate(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="TensorBoard is in the dev extra: pip install tensorboard")
    run_dir = tmp_path / "run"
    assert main(["train", "--algo", "grpo", "--steps", "2", "--eval-every", "1", "--batch-size", "4",
                 "--group-size", "4", "--eval-n", "12", "--run-dir", str(run_dir), "--report-to", "tensorboard",
                 "--quiet"]) == 0
    capsys.readouterr()
    history = Run.load(run_dir).history
    scalars, texts = read_events(run_dir / "minirl")  # accelerate's project name; the config goes in as hparams
    hparams = [yaml.safe_load(f.read_text()) for f in (run_dir / "minirl").rglob("hparams.yml")]
    assert any(h["lr"] == RLConfig.preset("grpo").lr for h in hparams)
    assert [step for step, _ in scalars["reward_mean"]] == [1, 2]
    assert [v for _, v in scalars["reward_mean"]] == pytest.approx([r["reward_mean"] for r in history[1:]])
    assert [step for step, _ in scalars["eval/accuracy_sampled"]] == [0, 1, 2]
    assert [v for _, v in scalars["eval/accuracy_sampled"]] == pytest.approx(
        [r["eval/accuracy_sampled"] for r in history])
    (tag,) = [t for t in texts if t.startswith("eval/completions")]
    assert [step for step, _ in texts[tag]] == [0, 1, 2]
    step0 = [r for r in Run.load(run_dir).completions if r["step"] == 0]
    table = texts[tag][0][1]
    assert table.splitlines()[0] == "| decoding | prompt | completion | reward | correct |"
    assert all(f"| {r['decoding']} | {r['prompt']} |" in table for r in step0)


def test_report_to_needs_a_run_folder():
    config = RLConfig.preset("grpo", steps=1, **SMALL)
    with pytest.raises(ValueError, match="report_to='tensorboard' needs a run folder"):
        train(load_policy(device="cpu"), Countdown(), config, progress=False, report_to="tensorboard")

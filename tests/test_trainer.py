"""End-to-end: every preset trains, runs are deterministic, resumable, cached, and fail loudly but safely."""

import math
from types import SimpleNamespace

import pytest
import torch

from minirl import Countdown, FunctionTask, load_policy
from minirl.config import RLConfig
from minirl.runs import Run, RunCache
from minirl.trainer import TrainingDiverged, train

TASK = Countdown()
SMALL = dict(batch_size=4, group_size=4, steps=2, eval_every=0, eval_n=16, max_new_tokens=12, overlong_cache=2)
SMALL_PPO = dict(SMALL, group_size=1, batch_size=8)


def small(algo, **kw):
    return RLConfig.preset(algo, **{**(SMALL_PPO if algo == "ppo" else SMALL), **kw})


@pytest.mark.parametrize("algo", ["ppo", "grpo", "dapo", "dr_grpo", "rloo"])
def test_every_preset_trains_end_to_end(algo):
    policy = load_policy(device="cpu")
    before = [p.detach().clone() for p in policy.model.parameters()]
    cfg = small(algo, max_gen_batches=8)
    run = train(policy, TASK, cfg, progress=False)
    assert run.status == "finished"
    assert [r["step"] for r in run.history] == [0, 1, 2]
    last = run.history[-1]
    for key in ("reward_mean", "reward_std", "reward/correct", "reward/format_ok", "accuracy", "frac_reward_zero_std",
                "kept_group_frac", "gen_batches", "completion_len_mean", "completion_len_max", "truncation_rate",
                "entropy", "kl_ref", "approx_kl", "clip_frac_low", "clip_frac_high", "grad_norm", "lr",
                "tokens_per_s", "wall_time", "samples", "eval/accuracy_greedy", "eval/accuracy_sampled"):
        assert key in last, key
    if algo == "ppo":
        assert "value_loss" in last and "explained_variance" in last
        assert run.meta["critic_params"] == policy.model.config.hidden_size + 1
    else:
        assert run.meta["critic_params"] == 0
    changed = any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    assert changed, "training must change the policy"


def test_first_on_policy_step_has_ratio_one_and_no_clipping():
    run = train(load_policy(device="cpu"), TASK, small("grpo", steps=1), progress=False)
    row = run.history[-1]
    assert row["clip_frac_low"] == 0 and row["clip_frac_high"] == 0
    assert abs(row["approx_kl"]) < 1e-6


def test_several_epochs_use_old_logprobs_and_ratio_moves():
    cfg = small("grpo", steps=1, epochs=2, minibatches=2, lr=1e-3)
    row = train(load_policy(device="cpu"), TASK, cfg, progress=False).history[-1]
    assert row["approx_kl"] > 0  # the second minibatch/epoch sees a changed policy


def test_same_seed_same_metrics():
    a = train(load_policy(device="cpu"), TASK, small("dapo", steps=3), progress=False)
    b = train(load_policy(device="cpu"), TASK, small("dapo", steps=3), progress=False)
    timings = ("wall_time", "step_seconds", "tokens_per_s", "peak_mem_mb", "time/generation", "time/reference",
               "time/learn")
    strip = lambda h: [{k: v for k, v in r.items() if k not in timings} for r in h]  # noqa: E731
    assert strip(a.history) == strip(b.history)


def test_mixed_precision_can_change_between_runs_in_one_process():
    """accelerate keeps a global state; a bf16 run after an fp32 one (a notebook, the study) must still work."""
    fp32 = train(load_policy(device="cpu"), TASK, small("grpo", steps=1), progress=False)
    bf16 = train(load_policy(device="cpu"), TASK, small("grpo", steps=1, mixed_precision="bf16"), progress=False)
    again = train(load_policy(device="cpu"), TASK, small("grpo", steps=1), progress=False)
    assert [len(r.history) for r in (fp32, bf16, again)] == [2, 2, 2]
    assert fp32.history[1]["reward_mean"] == again.history[1]["reward_mean"]


def test_resume_matches_uninterrupted_run(tmp_path):
    cfg = small("grpo", steps=4, eval_every=2, checkpoint_every=2, lr=1e-4)
    full = train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path / "full", progress=False)
    stop_after_2 = lambda run, row: row["step"] < 2  # noqa: E731  (returns False at step 2: stop)
    part = train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path / "part", callbacks=[stop_after_2],
                 progress=False)
    assert part.status == "stopped" and part.history[-1]["step"] == 2
    resumed_policy = load_policy(device="cpu")
    resumed = train(resumed_policy, TASK, cfg, run_dir=tmp_path / "part", resume=True, progress=False)
    assert resumed.status == "finished"
    keys = ("reward_mean", "policy_loss", "grad_norm", "entropy", "eval/accuracy_sampled")
    for r_full, r_res in zip(full.history, resumed.history, strict=True):
        for k in keys:
            if k in r_full:
                assert r_full[k] == pytest.approx(r_res[k], abs=1e-6), (r_full["step"], k)
    on_disk = Run.load(tmp_path / "part")
    assert [r["step"] for r in on_disk.history] == [0, 1, 2, 3, 4]
    reloaded = load_policy(tmp_path / "part" / "checkpoint" / "policy", device="cpu")
    for a, b in zip(reloaded.model.parameters(), resumed_policy.model.parameters()):
        assert torch.equal(a, b)


def test_nan_reward_stops_with_clear_error_and_keeps_checkpoint(tmp_path):
    calls = {"n": 0}

    def reward(answer, completion):
        calls["n"] += 1
        # the step-0 evaluation scores 4 completions, each step 16: the third step meets a NaN
        return float("nan") if calls["n"] > 4 + 16 * 2 else 0.5 * (len(completion) % 2)

    task = FunctionTask("nan-after-two-steps", lambda rng: (f"{rng.randint(1, 9)}:", None, None), reward)
    cfg = small("grpo", steps=5, checkpoint_every=1, eval_n=2)
    with pytest.raises(TrainingDiverged, match="non-finite reward"):
        train(load_policy(device="cpu"), task, cfg, run_dir=tmp_path, progress=False)
    run = Run.load(tmp_path)
    assert run.status == "failed" and "non-finite" in run.meta["error"]
    assert run.history[-1]["step"] == 2  # both good steps are kept
    assert (tmp_path / "checkpoint" / "policy" / "model.safetensors").exists()


def test_diverging_learning_rate_is_caught(tmp_path):
    cfg = small("grpo", steps=3, lr=0.9, max_grad_norm=0.0, adam_eps=1e-30)
    try:
        run = train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path, progress=False)
    except TrainingDiverged as err:
        assert "lr" in str(err)
        assert Run.load(tmp_path).status == "failed"
    else:  # if it happened not to diverge, every logged number must still be finite
        assert all(math.isfinite(v) for r in run.history for v in r.values() if isinstance(v, float)
                   and not math.isnan(v))


def test_cache_returns_finished_run_without_training(tmp_path):
    cache = RunCache(tmp_path)
    cfg = small("grpo", steps=1)
    first = train(load_policy(device="cpu"), TASK, cfg, cache=cache, progress=False)
    policy = load_policy(device="cpu")
    before = [p.detach().clone() for p in policy.model.parameters()]
    second = train(policy, TASK, cfg, cache=cache, progress=False)
    assert second.history == first.history
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    third = train(load_policy(device="cpu"), TASK, cfg.replace(lr=cfg.lr * 2), cache=cache, progress=False)
    assert third.path != first.path


def test_a_trained_policy_is_not_answered_from_its_base_policys_cache(tmp_path):
    """The cache names a policy by its weights: after training, the same object (same name) is another policy."""
    cache, cfg = RunCache(tmp_path), small("grpo", steps=1)
    policy = load_policy(device="cpu")
    name, identity = policy.name, policy.identity()
    first = train(policy, TASK, cfg, cache=cache, progress=False)
    assert policy.name == name and policy.identity() != identity  # trained in place; the caller's name is kept
    second = train(policy, TASK, cfg, cache=cache, progress=False)  # from the trained weights: a new run
    assert second.path != first.path and len(list(tmp_path.iterdir())) == 2
    assert train(load_policy(device="cpu"), TASK, cfg, cache=cache, progress=False).path == first.path


def test_dynamic_sampling_gives_up_with_clear_error():
    task = FunctionTask("always-right", lambda rng: (f"{rng.randint(1, 9)}:", None, None), lambda a, c: 1.0)
    cfg = small("dapo", steps=1, max_gen_batches=2, eval_n=2)
    with pytest.raises(RuntimeError, match="max_gen_batches=2"):
        train(load_policy(device="cpu"), task, cfg, progress=False)


def test_separate_critic_costs_a_whole_model():
    policy = load_policy(device="cpu")
    run = train(policy, TASK, small("ppo", steps=1, critic="separate"), progress=False)
    assert run.meta["critic_params"] == policy.num_parameters + policy.model.config.hidden_size + 1


def test_real_model_path_with_chat_template(tmp_path):
    from minirl.tiny_hf import save_tiny_chat_model

    policy = load_policy(save_tiny_chat_model(tmp_path / "tiny-qwen"), device="cpu")
    task = Countdown(prompt_style="chat", reward_scheme="tinyzero")
    cfg = RLConfig.preset("grpo", batch_size=2, group_size=2, steps=1, max_new_tokens=8, eval_n=2, kl_coef=0.04)
    run = train(policy, task, cfg, progress=False)
    assert run.status == "finished" and run.history[-1]["truncation_rate"] >= 0


def test_advantage_fn_plugs_a_learners_estimator_into_the_trainer():
    seen = []

    def mean_only(rewards, group_ids):  # Dr. GRPO's estimator, written by "a learner"
        seen.append(len(rewards))
        means = torch.zeros(int(group_ids.max()) + 1).index_add_(0, group_ids, rewards)
        counts = torch.zeros_like(means).index_add_(0, group_ids, torch.ones_like(rewards))
        return rewards - (means / counts.clamp(min=1))[group_ids]

    run = train(load_policy(device="cpu"), TASK, small("grpo", steps=2), advantage_fn=mean_only, progress=False)
    assert seen == [16, 16] and run.status == "finished"
    with pytest.raises(ValueError, match="shape"):
        train(load_policy(device="cpu"), TASK, small("grpo", steps=1), advantage_fn=lambda r, g: r[:3], progress=False)
    with pytest.raises(ValueError, match="gae"):
        train(load_policy(device="cpu"), TASK, small("ppo", steps=1), advantage_fn=lambda r, g: r, progress=False)


def test_every_step_records_where_its_time_went():
    """rl_step times its phases; the benchmark reads them instead of copying the loop."""
    run = train(load_policy(device="cpu"), TASK, small("dapo", steps=2, max_gen_batches=8), progress=False)
    for row in run.history[1:]:
        phases = [row["time/generation"], row["time/reference"], row["time/learn"]]
        assert all(t > 0 for t in phases)
        assert sum(phases) <= row["step_seconds"] + 1e-6  # the phases are parts of the step


def test_progress_bar_shows_steps_and_time(capsys):
    train(load_policy(device="cpu"), TASK, small("grpo", steps=2))
    out = capsys.readouterr().out
    assert "2/2" in out and "reward=" in out and "<" in out  # steps done, rate and time left (tqdm's "[00:01<00:00")


# ----------------------------------------------------------------------------- checkpoints and fp16


def test_checkpoint_is_a_hub_folder_plus_trainer_state_beside_it(tmp_path):
    import json

    from transformers import AutoModelForCausalLM, GenerationConfig

    cfg = small("grpo", steps=2, temperature=0.9, max_new_tokens=10, eval_n=8)
    run = train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path, progress=False)
    folder = tmp_path / "checkpoint" / "policy"
    assert not list(folder.glob("*.pt")), "no pickle inside the model folder"
    state = torch.load(tmp_path / "checkpoint" / "trainer_state.pt", weights_only=True)  # no code runs on load
    assert state["step"] == 2 and state["scaler"] is None
    card = (folder / "README.md").read_text()
    front = card.split("---")[1]
    assert "license: mit" in front and "library_name: transformers" in front and "pipeline_tag: text-generation" in front
    assert "base_model" not in front  # minirl/tiny-countdown is not a Hub id
    assert "trained with GRPO" in card and "for 2 of 2 steps" in card
    final = run.history[-1]
    assert f"| 2 | {final['eval/accuracy_greedy']:.1%} | {final['eval/accuracy_sampled']:.1%} |" in card
    assert json.loads(card.split("```json")[1].split("```")[0]) == cfg.to_dict()
    generation = GenerationConfig.from_pretrained(folder)
    assert (generation.do_sample, generation.temperature, generation.top_k, generation.max_new_tokens) == (True, 0.9, 0, 10)
    AutoModelForCausalLM.from_pretrained(folder)  # plain transformers loads it


class InfiniteScale(torch.amp.GradScaler):
    """A loss scale of inf: every scaled gradient overflows, so the scaler must skip every update."""

    def __init__(self):
        super().__init__("cpu", init_scale=float("inf"))


@pytest.fixture
def fp16_scaler(monkeypatch):
    """fp16 gets no loss scaler on a CPU; give the run the one fp16 on a GPU gets, here an InfiniteScale (a test can
    swap `.scaler` before training)."""
    from minirl import trainer

    holder = SimpleNamespace(scaler=InfiniteScale())
    monkeypatch.setattr(trainer, "loss_scaler", lambda config, device: holder.scaler)
    return holder


def test_fp16_overflow_is_a_skipped_update_not_a_diverged_run(tmp_path, fp16_scaler):
    policy = load_policy(device="cpu")
    before = [p.detach().clone() for p in policy.model.parameters()]
    run = train(policy, TASK, small("grpo", steps=2), run_dir=tmp_path, progress=False)
    assert run.status == "finished"
    assert [r["updates_skipped"] for r in run.history[1:]] == [1, 1]
    assert all(math.isnan(r["policy_loss"]) and math.isnan(r["grad_norm"]) for r in run.history[1:])
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters())), "skipped: weights unchanged"
    assert run.history[-1]["lr"] == pytest.approx(run.history[1]["lr"])  # the schedule waits for a real update
    state = torch.load(tmp_path / "checkpoint" / "trainer_state.pt", weights_only=True)
    assert state["scaler"]["scale"] == float("inf") and state["scaler"]["_growth_tracker"] == 0


def test_unscaled_runs_log_no_skipped_updates():
    run = train(load_policy(device="cpu"), TASK, small("grpo", steps=1), progress=False)
    assert run.history[-1]["updates_skipped"] == 0


def test_resume_restores_the_loss_scaler(tmp_path, fp16_scaler):
    cfg = small("grpo", steps=3)
    stop_after_2 = lambda run, row: row["step"] < 2  # noqa: E731
    train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path, progress=False, callbacks=[stop_after_2])
    fp16_scaler.scaler = torch.amp.GradScaler("cpu", init_scale=8.0)  # a scale at which nothing overflows
    run = train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path, resume=True, progress=False)
    assert fp16_scaler.scaler.get_scale() == float("inf")  # the checkpoint's scale came back
    assert run.history[-1]["step"] == 3 and run.history[-1]["updates_skipped"] == 1


def test_a_checkpoint_in_the_old_layout_gets_a_clear_error(tmp_path):
    import shutil

    cfg = small("grpo", steps=2)
    train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path, progress=False, callbacks=[lambda r, row: False])
    folder = tmp_path / "checkpoint"
    for file in (folder / "policy").iterdir():  # the layout before the model folder moved into policy/
        shutil.move(str(file), folder / file.name)
    (folder / "policy").rmdir()
    with pytest.raises(ValueError, match="older minirl.*move them into"):
        train(load_policy(device="cpu"), TASK, cfg, run_dir=tmp_path, resume=True, progress=False)

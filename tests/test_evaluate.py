"""pass@k, evaluate() and the `python -m minirl evaluate` command."""

import math
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minirl import Countdown, FunctionTask, evaluate, pass_at_k

KEYS = {"accuracy", "pass_at_k", "format_rate", "reward_mean", "mean_length", "truncation_rate",
        "n_problems", "k", "greedy", "temperature", "length_p50", "length_p90", "length_p99", "length_max"}


pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- pass@k


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(1, 1, 1) == 1.0
    for n in (1, 2, 4, 8):  # n = k: "any of the k is correct"
        assert pass_at_k(n, 0, n) == 0.0
        for c in range(1, n + 1):
            assert pass_at_k(n, c, n) == 1.0


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_combinatorial_formula(nck):
    n, c, k = nck
    want = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    got = pass_at_k(n, c, k)
    assert 0.0 <= got <= 1.0
    assert got == pytest.approx(want, abs=1e-12)
    if c >= 1:
        assert got >= c / n - 1e-12  # pass@k >= pass@1


# ----------------------------------------------------------------------------- evaluate()


def check_metrics(m: dict, n: int, k: int, greedy: bool) -> None:
    rates = {key for key in m if key.startswith("rate/")}  # one per score component the task reports
    assert set(m) - rates == KEYS
    for key in rates:
        assert 0.0 <= m[key] <= 1.0, key
    assert m["n_problems"] == n and m["k"] == k and m["greedy"] is greedy
    for key in ("accuracy", "pass_at_k", "format_rate", "truncation_rate", "reward_mean"):
        assert 0.0 <= m[key] <= 1.0, key
    assert m["pass_at_k"] >= m["accuracy"] - 1e-12
    if k == 1:
        assert m["pass_at_k"] == pytest.approx(m["accuracy"])
    assert m["mean_length"] >= 1.0


def test_evaluate_greedy_and_sampled(tiny_policy):
    task = Countdown(num_count=3)
    g = evaluate(tiny_policy, task, n=24, seed=1)
    check_metrics(g, 24, 1, True)
    s = evaluate(tiny_policy, task, n=24, greedy=False, k=3, temperature=1.0, seed=1, batch_size=10)
    check_metrics(s, 24, 3, False)
    assert s["mean_length"] <= task.max_new_tokens
    # accuracy counts correct samples: it is a multiple of 1 / (n k)
    assert (s["accuracy"] * 72) == pytest.approx(round(s["accuracy"] * 72))
    # a correct Countdown answer gets reward 1, anything else less
    assert g["reward_mean"] == pytest.approx(g["accuracy"])
    # component rates: correct implies numbers_ok implies format_ok
    assert {"rate/format_ok", "rate/numbers_ok", "rate/correct"} <= set(g)
    assert g["rate/correct"] == pytest.approx(g["accuracy"]) and g["rate/format_ok"] == pytest.approx(g["format_rate"])
    assert g["rate/correct"] <= g["rate/numbers_ok"] <= g["rate/format_ok"]


def test_greedy_evaluation_is_deterministic(tiny_policy):
    task = Countdown(num_count=3)
    a = evaluate(tiny_policy, task, n=16, seed=2)
    b = evaluate(tiny_policy, task, n=16, seed=2, batch_size=5)  # batching does not matter for greedy
    assert a == b


def test_sampled_evaluation_is_reproducible_from_the_seed(tiny_policy):
    task = Countdown(num_count=3)
    a = evaluate(tiny_policy, task, n=12, greedy=False, k=2, seed=3)
    b = evaluate(tiny_policy, task, n=12, greedy=False, k=2, seed=3)
    assert a == b


def test_evaluate_restores_training_mode(fresh_policy):
    fresh_policy.model.train()
    evaluate(fresh_policy, Countdown(num_count=3), n=4)
    assert fresh_policy.model.training
    fresh_policy.model.eval()
    evaluate(fresh_policy, Countdown(num_count=3), n=4)
    assert not fresh_policy.model.training


@pytest.mark.parametrize("kwargs, name", [
    (dict(greedy=True, k=2), "k=2"),
    (dict(n=0), "n=0"),
    (dict(n=-1), "n=-1"),
    (dict(n=2.5), "n=2.5"),
    (dict(greedy=False, k=0), "k=0"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(greedy=False, temperature=0.0), "temperature="),
    (dict(max_new_tokens=-1), "max_new_tokens="),
])
def test_evaluate_rejects_bad_arguments(tiny_policy, kwargs, name):
    with pytest.raises(ValueError, match=name):
        evaluate(tiny_policy, Countdown(num_count=3), **{"n": 4, **kwargs})


def test_evaluate_on_a_function_task(tiny_policy):
    """Any task works: here 'write the sum of two digits'; the tiny policy mostly gets it wrong."""

    def make_problem(rng: random.Random):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return f"{a},{b}:", a + b, str(a + b)

    def reward(answer, completion):
        return {"reward": float(completion.strip() == str(answer)), "format_ok": float(completion.isdigit())}

    task = FunctionTask("add-digits", make_problem, reward, test_fraction=0.5)
    m = evaluate(tiny_policy, task, n=10, max_new_tokens=4)
    check_metrics(m, 10, 1, True)
    assert m["mean_length"] <= 4
    m = evaluate(tiny_policy, task, n=10, greedy=False, k=2, max_new_tokens=4)
    check_metrics(m, 10, 2, False)
    # a reward without a format component gives format_rate nan, not a made-up number
    plain = FunctionTask("add-digits-plain", make_problem, lambda a, c: float(c.strip() == str(a)),
                         test_fraction=0.5)
    m = evaluate(tiny_policy, plain, n=5, max_new_tokens=4)
    assert math.isnan(m["format_rate"]) and 0.0 <= m["accuracy"] <= 1.0


def test_evaluate_counts_correct_answers(tiny_policy):
    """A task whose every answer is correct gives accuracy 1; one whose none is gives 0."""
    make = lambda rng: (f"{rng.randint(0, 99)}:", None, None)  # noqa: E731
    always = FunctionTask("always", make, lambda a, c: 1.0, test_fraction=0.5)
    never = FunctionTask("never", make, lambda a, c: 0.0, test_fraction=0.5)
    for greedy, k in ((True, 1), (False, 3)):
        m = evaluate(tiny_policy, always, n=6, greedy=greedy, k=k, max_new_tokens=3)
        assert m["accuracy"] == m["pass_at_k"] == m["reward_mean"] == 1.0
        m = evaluate(tiny_policy, never, n=6, greedy=greedy, k=k, max_new_tokens=3)
        assert m["accuracy"] == m["pass_at_k"] == m["reward_mean"] == 0.0


# ----------------------------------------------------------------------------- command line


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", "minirl", "evaluate", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_evaluate_prints_a_table():
    out = run_cli("--n", "20", "--k", "2", "--threads", "1", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("policy: minirl/tiny-countdown (1,052,544 parameters, cpu)")
    header = next(i for i, line in enumerate(lines) if line.startswith("decoding"))
    assert "accuracy" in lines[header] and "pass@k" in lines[header]
    assert lines[header + 1].startswith("greedy")
    assert lines[header + 2].startswith("sampled") and "k=2" in lines[header + 2]
    assert "error" not in out.stderr.lower()


def test_cli_missing_policy_exits_2_with_one_error_line():
    out = run_cli("--policy", "/nonexistent", "--threads", "1")
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("error: ")
    assert "/nonexistent" in errors[0]
    assert "Traceback" not in out.stderr
    assert out.stdout == ""

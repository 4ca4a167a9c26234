"""minirl's GRPO/DAPO math against TRL's own code on fixed random tensors: benchmarks/bench_vs_trl.py's checks.

  1. group advantages, scale group / batch / none: minirl.advantages.group_advantages vs the lines of
     GRPOTrainer._generate_and_score_completions that compute them (with TRL's nanstd)
  2. the clipped per-token loss + beta * k3 KL and its aggregation (value and d loss / d logp; eps 0.2/0.2 and
     0.2/0.28, beta 0 and 0.04, 1 and 2 micro-batches) and the clip fractions and KL TRL logs: minirl.losses vs
     GRPOTrainer._compute_loss, per loss_type: grpo -> seq-mean-token-mean, bnpo -> token-mean (micro-batch
     tokens), dapo -> token-mean (step tokens), dr_grpo -> seq-mean-token-sum-norm (max_len = max_completion_length)
  3. log-probs and entropy on the tiny policy's logits and on random logits: minirl.rollout.completion_logprobs
     and minirl.losses.entropy_from_logits vs TRL's selective_log_softmax / entropy_from_logits
  4. two differences BENCHMARKS.md documents: all-equal groups, entropy of -inf logits
  5. after DAPO: GSPO (importance_sampling_level="sequence", loss_type="grpo") and CISPO (loss_type="cispo") against
     minirl.losses.policy_loss, value and gradient, with mutants (a flipped sign, a lost stop-gradient, a lost
     length normaliser) that these checks must catch

TRL's code is read from its installed source, taken out with `ast` and executed unchanged: `trl.trainer.utils` and
`trl.trainer.grpo_trainer` import `datasets` and `pandas`, which `pip install trl --no-deps` leaves out (with them
installed the modules import, but this path needs neither). _compute_loss runs on a stand-in `self`; the advantage
lines sit in a method too long to run alone, so they are copied, and each copy is found verbatim in TRL's file.
"""

from __future__ import annotations

import ast
import functools
import types
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

try:
    import trl
except ImportError as exc:  # also a TRL that fails to load: pytest.importorskip would only catch a missing one
    pytest.skip(f"TRL is not importable ({exc}); to run this cross-check: pip install trl --no-deps",
                allow_module_level=True)

from minirl import losses as L
from minirl.advantages import group_advantages
from minirl.policy import load_policy
from minirl.rollout import completion_logprobs, position_ids_from_mask, sample
from minirl.tasks import Countdown

TOL = 1e-6
TRL_DIR = Path(trl.__file__).parent
GRPO_PATH = TRL_DIR / "trainer" / "grpo_trainer.py"
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def assert_close(got, expected, what: str, tol: float = TOL) -> None:
    """max |got - expected| <= tol; the message names the worst element and both values there."""
    got, expected = torch.broadcast_tensors(torch.as_tensor(got).double(), torch.as_tensor(expected).double())
    diff = (got - expected).abs()
    worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))  # argmax picks a nan too
    where = f" at {worst}" if worst else ""  # an index, unless both are scalars
    assert diff[worst] <= tol, (f"{what}: max |diff| = {diff[worst]:.2e} > tol {tol:.1e}{where}: "
                                f"TRL (expected) {expected[worst]:.9g}, minirl (got) {got[worst]:.9g}")


def rel_tol(reference: torch.Tensor) -> float:
    """float32 keeps ~7 significant digits: TOL times the largest magnitude involved; float64: TOL."""
    return TOL * max(1.0, reference.abs().max().item()) if reference.dtype == torch.float32 else TOL


# ----------------------------------------------------------------------------- TRL's code
def extract(path: Path, names: set[str], cls: str | None = None) -> dict:
    """Execute the top-level functions `names` (or methods of class `cls`) of a source file, unchanged."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    nodes = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = names - {n.name for n in nodes}
    assert not missing, f"{path} has no {sorted(missing)} any more: this cross-check needs updating"
    from transformers.utils import is_triton_available

    namespace = {"torch": torch, "F": F, "is_triton_available": is_triton_available}
    for n in nodes:
        n.decorator_list = []  # e.g. @profiling_decorator: bookkeeping only
        exec(compile(ast.Module(body=[n], type_ignores=[]), str(path), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def trl_utils() -> dict:
    # _supports_trl_loss_kernel: _compute_loss asks it whether to take the GPU Triton path (never on CPU)
    return extract(TRL_DIR / "trainer" / "utils.py", {"selective_log_softmax", "entropy_from_logits", "nanstd",
                                                      "nanmin", "nanmax", "_supports_trl_loss_kernel"})


# ----------------------------------------------------------------------------- 1. group advantages
# Copied from GRPOTrainer._generate_and_score_completions (multi_objective_aggregation="sum_then_normalize",
# the default); test_copied_advantage_lines_are_in_trl finds each line in the installed file.
TRL_ADVANTAGE_LINES = [
    "mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)",
    "mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)",
    "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)",
    "std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)",
    "std_rewards = nanstd(rewards).expand_as(rewards)",
    "advantages = rewards - mean_grouped_rewards",
    "advantages = advantages / (std_rewards + 1e-4)",
    "advantages = torch.nan_to_num(advantages, nan=0.0)",
]


def trl_advantages(rewards, num_generations, scale_rewards, nanstd):
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:  # "batch"
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    advantages = torch.nan_to_num(advantages, nan=0.0)
    return advantages


N_GROUPS, G = 16, 8
GROUP_IDS = torch.arange(N_GROUPS).repeat_interleave(G)


@functools.cache
def reward_cases() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    n = N_GROUPS * G
    return {"binary": (torch.rand(n, generator=gen) < 0.3).float(),  # some groups all-equal
            "continuous": torch.randn(n, generator=gen),
            "tinyzero": torch.tensor([0.0, 0.1, 1.0])[torch.randint(0, 3, (n,), generator=gen)]}  # 0 / 0.1 / 1


def test_copied_advantage_lines_are_in_trl():
    source = {line.strip() for line in GRPO_PATH.read_text().splitlines()}
    missing = [line for line in TRL_ADVANTAGE_LINES if line.strip() not in source]
    assert not missing, f"copied TRL lines not in {GRPO_PATH} any more (this cross-check needs updating): {missing}"


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("rewards", ["binary", "continuous", "tinyzero"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_advantages_match_trl(dtype, rewards, scale, trl_utils):
    # float64 agrees only to ~5e-8: TRL's nanstd divides its int64 counts, count / (count - 1), in float32
    r = reward_cases()[rewards].to(DTYPES[dtype])
    assert_close(group_advantages(r, GROUP_IDS, scale=scale, eps=1e-4),
                 trl_advantages(r, G, scale, trl_utils["nanstd"]), f"{dtype} {rewards} rewards, scale={scale}")


# ----------------------------------------------------------------------------- 2. the loss
class StandInTrainer:
    """Just enough of a GRPOTrainer for its own _compute_loss to run on fixed tensors."""

    def __init__(self, loss_type, eps_low, eps_high, beta, max_completion_length, grad_accum, logps, entropies,
                 importance_sampling_level="token"):
        self.loss_type, self.epsilon_low, self.epsilon_high, self.beta = loss_type, eps_low, eps_high, beta
        self.max_completion_length = max_completion_length
        self.current_gradient_accumulation_steps = grad_accum
        self.args = types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=grad_accum)
        self.accelerator = types.SimpleNamespace(num_processes=1, sync_gradients=True,
                                                 reduce=lambda t, reduction="sum": t, gather=lambda t: t,
                                                 gather_for_metrics=lambda t: t)
        self.model = types.SimpleNamespace(training=True)
        self.aux_loss_enabled = self.use_vllm = self.vllm_importance_sampling_correction = False
        self._entropy_bonus_enabled = False
        self.top_entropy_quantile, self.off_policy_mask_threshold = 1.0, None
        self.importance_sampling_level = importance_sampling_level
        self._metrics = defaultdict(lambda: defaultdict(list))
        self._logps, self._entropies = logps, entropies

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return self._logps, self._entropies, None


MINIRL_AGGREGATE = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
                    "dr_grpo": "seq-mean-token-sum-norm"}
B, T, MAX_COMPLETION_LENGTH = 16, 12, 16  # padded to T < max_completion_length: matters for dr_grpo


@functools.cache
def loss_inputs(dtype: torch.dtype) -> types.SimpleNamespace:
    gen = torch.Generator().manual_seed(1)
    logp = -3 * torch.rand(B, T, generator=gen, dtype=dtype) - 0.01
    old = logp + 0.3 * torch.randn(B, T, generator=gen, dtype=dtype)  # wide enough that both clips trigger
    ref = logp + 0.3 * torch.randn(B, T, generator=gen, dtype=dtype)
    adv = torch.randn(B, generator=gen, dtype=dtype)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[3] = 0  # an empty completion: contributes 0 and still counts as a sequence in both
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    entropies = torch.rand(B, T, generator=gen, dtype=dtype)
    return types.SimpleNamespace(logp=logp, old=old, ref=ref, adv=adv, mask=mask, entropies=entropies)


def trl_inputs(x, rows: torch.Tensor, total_tokens: torch.Tensor) -> dict:
    """The `inputs` that GRPOTrainer._compute_loss reads, for the micro-batch `rows` of `loss_inputs`' tensors."""
    return {"prompt_ids": torch.ones(len(rows), 1, dtype=torch.long),
            "prompt_mask": torch.ones(len(rows), 1, dtype=torch.long),
            "completion_ids": torch.ones(len(rows), T, dtype=torch.long), "completion_mask": x.mask[rows],
            "advantages": x.adv[rows], "old_per_token_logps": x.old[rows], "ref_per_token_logps": x.ref[rows],
            "num_items_in_batch": total_tokens}


@pytest.fixture(scope="module")
def trl_compute_loss(trl_utils):
    """TRL's own `GRPOTrainer._compute_loss`, read from its installed source."""
    trl_namespace = extract(GRPO_PATH, {"_compute_loss"}, cls="GRPOTrainer")
    trl_namespace.update(nanmin=trl_utils["nanmin"], nanmax=trl_utils["nanmax"])
    return trl_namespace["_compute_loss"]


@pytest.fixture(scope="module")
def run_loss(trl_compute_loss):
    """minirl's loss and TRL's _compute_loss on the same micro-batches, once per case."""

    @functools.cache
    def run(dtype: str, loss_type: str, eps_high: float, beta: float, micro_batches: int) -> types.SimpleNamespace:
        x = loss_inputs(DTYPES[dtype])
        total_tokens = x.mask.sum()
        lp_trl, lp_minirl = x.logp.clone().requires_grad_(True), x.logp.clone().requires_grad_(True)
        trl_loss = minirl_loss = 0.0
        for rows in torch.arange(B).chunk(micro_batches):  # gradient-accumulation micro-batches
            m = x.mask[rows]
            trainer = StandInTrainer(loss_type, 0.2, eps_high, beta, MAX_COMPLETION_LENGTH, micro_batches,
                                     lp_trl[rows], x.entropies[rows])
            trl_loss = trl_loss + trl_compute_loss(trainer, None, trl_inputs(x, rows, total_tokens))
            # minirl: the per-token loss and aggregation of step.learn, with the step's totals
            pg, clip = L.clipped_surrogate(lp_minirl[rows], x.old[rows], x.adv[rows], 0.2, eps_high)
            tokens = pg + beta * L.kl_penalty(lp_minirl[rows], x.ref[rows], "k3") if beta else pg
            num_tokens = (m.sum() if loss_type == "bnpo" else total_tokens).clamp(min=1)
            minirl_loss = minirl_loss + L.aggregate(tokens, m, MINIRL_AGGREGATE[loss_type], num_tokens=num_tokens,
                                                    num_seqs=B, max_len=MAX_COMPLETION_LENGTH)
        trl_loss.backward()
        minirl_loss.backward()
        # the clip fractions of the last micro-batch: what TRL logs
        clip_fractions = torch.stack([L.masked_mean(clip.clipped_low, m), L.masked_mean(clip.clipped_high, m)])
        return types.SimpleNamespace(minirl_loss=minirl_loss.detach(), trl_loss=trl_loss.detach(),
                                     minirl_grad=lp_minirl.grad, trl_grad=lp_trl.grad,
                                     minirl_clip_fractions=clip_fractions, trl_metrics=trainer._metrics["train"])

    return run


def loss_cases(only_one_micro_batch: bool = False, only_with_kl: bool = False) -> list:
    """(dtype, loss_type, eps_high, beta, micro_batches), with ids such as float32-dapo-eps0.2/0.28-beta0.04-2micro"""
    return [pytest.param((dtype, loss_type, eps_high, beta, micro),
                         id=f"{dtype}-{loss_type}-eps0.2/{eps_high}-beta{beta:g}-{micro}micro")
            for dtype in DTYPES for loss_type in MINIRL_AGGREGATE for eps_high in (0.2, 0.28)
            for beta in (0.0, 0.04) for micro in (1, 2)
            # TRL's bnpo averages per-micro-batch token means (BENCHMARKS.md § 4): one micro-batch only
            if not (loss_type == "bnpo" and micro > 1)
            # TRL logs the statistics of the last micro-batch: compared where that is the whole batch
            and not (only_one_micro_batch and micro > 1) and not (only_with_kl and not beta)]


@pytest.mark.parametrize("case", loss_cases())
def test_loss_matches_trl(case, run_loss):
    run = run_loss(*case)
    assert_close(run.minirl_loss, run.trl_loss, f"loss, minirl {MINIRL_AGGREGATE[case[1]]}")


@pytest.mark.parametrize("case", loss_cases())
def test_gradient_matches_trl(case, run_loss):
    run = run_loss(*case)
    assert_close(run.minirl_grad, run.trl_grad, "d loss / d logp")


@pytest.mark.parametrize("case", loss_cases(only_one_micro_batch=True))
def test_clip_fractions_match_trl(case, run_loss):
    run = run_loss(*case)
    trl_fractions = [run.trl_metrics["clip_ratio/low_mean"][-1], run.trl_metrics["clip_ratio/high_mean"][-1]]
    assert_close(run.minirl_clip_fractions, trl_fractions, "clip fraction (low, high)")


@pytest.mark.parametrize("case", loss_cases(only_one_micro_batch=True, only_with_kl=True))
def test_logged_kl_matches_trl(case, run_loss):
    run = run_loss(*case)
    x = loss_inputs(DTYPES[case[0]])
    assert_close(L.masked_mean(L.kl_penalty(x.logp, x.ref, "k3"), x.mask), run.trl_metrics["kl"][-1], "mean k3 KL")


@pytest.mark.parametrize("dtype", DTYPES)
def test_wrong_pairing_differs_from_trl(dtype, run_loss):
    """Negative control: TRL's grpo against minirl's token-mean must differ, or the loss checks prove nothing."""
    x = loss_inputs(DTYPES[dtype])
    wrong = L.aggregate(L.clipped_surrogate(x.logp, x.old, x.adv)[0], x.mask, "token-mean")
    diff = (wrong - run_loss(dtype, "grpo", 0.2, 0.0, 1).trl_loss).abs().item()
    assert diff > TOL, f"TRL grpo and minirl token-mean agree to {diff:.2e}: the loss checks cannot tell them apart"


# ----------------------------------------------------------------------------- 3. log-probs and entropy
TEMPERATURES = [pytest.param(t, id=f"T{t}") for t in (1.0, 0.7)]


@pytest.fixture(scope="module")
def rollout():
    """The tiny policy's logits over a sampled, really left-padded batch, and minirl's log-probs per temperature."""
    torch.manual_seed(0)
    policy = load_policy(device="cpu")
    prompts = [p.prompt for p in Countdown().problems("train", 16, seed=0)]
    prompts += [p.prompt for p in Countdown(target_range=(1, 99)).problems("train", 16, seed=0)]  # 1 token shorter
    ids, pmask = policy.encode_prompts(prompts)
    roll = sample(policy, ids, pmask, max_new_tokens=16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        attn = torch.cat([pmask, roll.completion_mask], 1)
        logits = policy.model(input_ids=torch.cat([ids, roll.completion_ids], 1), attention_mask=attn,
                              position_ids=position_ids_from_mask(attn), use_cache=False).logits
        minirl = {t: completion_logprobs(policy.model, ids, pmask, roll.completion_ids, roll.completion_mask, t,
                                         with_entropy=True) for t in (1.0, 0.7)}
    # position P-1+t predicts completion token t
    return types.SimpleNamespace(logits=logits[:, ids.shape[1] - 1:-1], completion_ids=roll.completion_ids,
                                 mask=roll.completion_mask, minirl=minirl)


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_completion_logprobs_match_selective_log_softmax(temperature, rollout, trl_utils):
    theirs = trl_utils["selective_log_softmax"](rollout.logits, rollout.completion_ids, temperature) * rollout.mask
    # two float32 log-softmax routes differ by the rounding of the log-probs' own magnitude (9.5e-7 seen here on
    # log-probs down to -11.4 at T = 0.7): a tolerance relative to them, as for the logits below
    assert_close(rollout.minirl[temperature]["logprobs"], theirs, "completion_logprobs", rel_tol(theirs))


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_completion_entropy_matches_trl(temperature, rollout, trl_utils):
    theirs = trl_utils["entropy_from_logits"](rollout.logits / temperature) * rollout.mask
    assert_close(rollout.minirl[temperature]["entropy"] * rollout.mask, theirs, "completion_logprobs entropy")


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_entropy_from_logits_matches_trl_on_policy_logits(dtype, temperature, rollout, trl_utils):
    z = rollout.logits.to(DTYPES[dtype]) / temperature
    # logsumexp(z) - sum p z vs -sum p log p: in float32 they differ by the rounding of numbers as large as
    # the logits, hence a tolerance relative to max |logit|
    assert_close(L.entropy_from_logits(z), trl_utils["entropy_from_logits"](z), "entropy_from_logits", rel_tol(z))


@functools.cache
def random_logits(scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return scale * torch.randn(4, 12, 1000, generator=gen), torch.randint(0, 1000, (4, 12), generator=gen)


RANDOM_LOGITS = [pytest.param(dtype, scale, id=f"{dtype}-x{scale:g}") for scale in (1.0, 30.0) for dtype in DTYPES]


@pytest.mark.parametrize("dtype, scale", RANDOM_LOGITS)
def test_entropy_from_logits_matches_trl_on_random_logits(dtype, scale, trl_utils):
    z = random_logits(scale)[0].to(DTYPES[dtype])
    assert_close(L.entropy_from_logits(z), trl_utils["entropy_from_logits"](z), "entropy_from_logits", rel_tol(z))


@pytest.mark.parametrize("dtype, scale", RANDOM_LOGITS)
def test_log_softmax_gather_matches_selective_log_softmax(dtype, scale, trl_utils):
    z, idx = random_logits(scale)
    z = z.to(DTYPES[dtype])
    ours = z.log_softmax(-1).gather(-1, idx[..., None]).squeeze(-1)  # as in completion_logprobs
    assert_close(ours, trl_utils["selective_log_softmax"](z, idx), "log_softmax + gather", rel_tol(z))


# ----------------------------------------------------------------------------- 4. documented differences
def test_all_equal_group_is_zero_in_minirl_not_in_trl(trl_utils):
    r = torch.full((G,), 0.1)  # float32's mean of eight 0.1 is not exactly 0.1
    assert group_advantages(r, torch.zeros(G, dtype=torch.long)).eq(0).all()
    assert trl_advantages(r, G, "group", trl_utils["nanstd"]).ne(0).all(), "BENCHMARKS.md § 4 needs updating"


def test_minus_inf_logits_entropy_finite_in_minirl_not_in_trl(trl_utils):
    z = torch.randn(2, 3, 10, generator=torch.Generator().manual_seed(3))
    z[..., :4] = float("-inf")  # e.g. a masked vocabulary
    assert torch.isfinite(L.entropy_from_logits(z)).all()
    assert not torch.isfinite(trl_utils["entropy_from_logits"](z)).all(), "BENCHMARKS.md § 4 needs updating"


# ----------------------------------------------------------------------------- 5. after DAPO: GSPO and CISPO
# (name, TRL loss_type, TRL importance_sampling_level, TRL (epsilon, epsilon_high), minirl policy_loss, ratio_level,
#  (clip_low, clip_high), minirl aggregation). CISPO: TRL clamps the weight at epsilon_high itself, minirl at
#  1 + clip_high, and has no lower bound (clip_low 1: weights from 0)
AFTER_DAPO = {
    "gspo-eps0.05": ("grpo", "sequence", (0.05, 0.05), "clip", "sequence", (0.05, 0.05), "seq-mean-token-mean"),
    "gspo-eps0.2/0.28": ("grpo", "sequence", (0.2, 0.28), "clip", "sequence", (0.2, 0.28), "seq-mean-token-mean"),
    "cispo-max5": ("cispo", "token", (0.2, 5.0), "cispo", "token", (1.0, 4.0), "token-mean"),
    "cispo-max1.2": ("cispo", "token", (0.2, 1.2), "cispo", "token", (1.0, 0.2), "token-mean"),
}


def minirl_after_dapo(x, rows, lp, name, beta, total_tokens, mutant=None):
    """minirl's loss on the micro-batch `rows`, as step.learn computes it (a mutant changes one detail)."""
    _, _, _, kind, level, (low, high), agg = AFTER_DAPO[name]
    m = x.mask[rows]
    if mutant is None:
        pg, clip = L.policy_loss(kind, lp[rows], x.old[rows], x.adv[rows], m, clip_low=low, clip_high=high,
                                 ratio_level=level)
    elif mutant == "cispo without stop-gradient":  # the weight's own gradient leaks in
        ratio = torch.exp(lp[rows] - x.old[rows]).clamp(1 - low, 1 + high)
        pg, clip = -ratio * x.adv[rows][:, None] * lp[rows], None
    elif mutant == "cispo with a flipped sign":
        pg, clip = L.cispo_loss(lp[rows], x.old[rows], -x.adv[rows], low, high)
    elif mutant == "gspo without the length normaliser":  # the summed log-ratio, as for a whole-sequence ratio
        log_ratio = L.masked_sum(lp[rows] - x.old[rows], m, dim=1)[:, None].expand_as(lp[rows])
        ratio = torch.exp(log_ratio)
        A = x.adv[rows][:, None]
        pg, clip = torch.maximum(-ratio * A, -ratio.clamp(1 - low, 1 + high) * A), None
    tokens = pg + beta * L.kl_penalty(lp[rows], x.ref[rows], "k3") if beta else pg
    return L.aggregate(tokens, m, agg, num_tokens=total_tokens.clamp(min=1), num_seqs=B,
                       max_len=MAX_COMPLETION_LENGTH), clip


@pytest.fixture(scope="module")
def run_after_dapo(trl_compute_loss):

    @functools.cache
    def run(dtype: str, name: str, beta: float, micro_batches: int, mutant: str | None = None):
        loss_type, level, (eps, eps_high), *_ = AFTER_DAPO[name]
        x = loss_inputs(DTYPES[dtype])
        total_tokens = x.mask.sum()
        lp_trl, lp_minirl = x.logp.clone().requires_grad_(True), x.logp.clone().requires_grad_(True)
        trl_loss = minirl_loss = 0.0
        for rows in torch.arange(B).chunk(micro_batches):
            m = x.mask[rows]
            trainer = StandInTrainer(loss_type, eps, eps_high, beta, MAX_COMPLETION_LENGTH, micro_batches,
                                     lp_trl[rows], x.entropies[rows], importance_sampling_level=level)
            trl_loss = trl_loss + trl_compute_loss(trainer, None, trl_inputs(x, rows, total_tokens))
            loss, clip = minirl_after_dapo(x, rows, lp_minirl, name, beta, total_tokens, mutant)
            minirl_loss = minirl_loss + loss
        trl_loss.backward()
        minirl_loss.backward()
        return types.SimpleNamespace(minirl_loss=minirl_loss.detach(), trl_loss=trl_loss.detach(),
                                     minirl_grad=lp_minirl.grad, trl_grad=lp_trl.grad, clip=clip, mask=m,
                                     trl_metrics=trainer._metrics["train"])

    return run


AFTER_DAPO_CASES = [pytest.param((dtype, name, beta, micro), id=f"{dtype}-{name}-beta{beta:g}-{micro}micro")
                    for dtype in DTYPES for name in AFTER_DAPO for beta in (0.0, 0.04) for micro in (1, 2)]


@pytest.mark.parametrize("case", AFTER_DAPO_CASES)
def test_gspo_and_cispo_loss_match_trl(case, run_after_dapo):
    run = run_after_dapo(*case)
    assert_close(run.minirl_loss, run.trl_loss, f"loss of {case[1]}", rel_tol(run.trl_loss))


@pytest.mark.parametrize("case", AFTER_DAPO_CASES)
def test_gspo_and_cispo_gradient_match_trl(case, run_after_dapo):
    run = run_after_dapo(*case)
    assert_close(run.minirl_grad, run.trl_grad, f"d loss / d logp of {case[1]}", rel_tol(run.trl_grad))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", AFTER_DAPO)
def test_gspo_and_cispo_clip_fractions_match_trl(name, dtype, run_after_dapo):
    """The share of tokens (CISPO) or of sequences (GSPO) whose weight or ratio was clipped, as TRL logs it."""
    run = run_after_dapo(dtype, name, 0.0, 1)
    if name.startswith("cispo"):
        got, expected = L.masked_mean(run.clip.clipped_high, run.mask), run.trl_metrics["cispo_clip_ratio"][-1]
    else:  # at the sequence level TRL logs the share of sequences (every row), minirl's metric the share of tokens
        got = torch.stack([run.clip.clipped_low[:, 0].mean(), run.clip.clipped_high[:, 0].mean()])
        expected = [run.trl_metrics["clip_ratio/low_mean"][-1], run.trl_metrics["clip_ratio/high_mean"][-1]]
    assert_close(got, expected, f"clip fraction of {name}")
    if name != "cispo-max5":  # these inputs' ratios stay below 5: the weight is never capped there
        assert 0 < float(torch.as_tensor(expected).sum()) < 1, f"{name}: the inputs must clip some tokens, not all"


MUTANTS = [("cispo-max1.2", "cispo without stop-gradient"), ("cispo-max5", "cispo with a flipped sign"),
           ("gspo-eps0.2/0.28", "gspo without the length normaliser")]


@pytest.mark.parametrize("name, mutant", MUTANTS, ids=[m for _, m in MUTANTS])
def test_each_mutant_is_caught(name, mutant, run_after_dapo):
    """Negative controls: a changed sign, stop-gradient or normaliser must move the loss or its gradient beyond
    the tolerance, or the checks above prove nothing."""
    run = run_after_dapo("float64", name, 0.0, 1, mutant)
    gap = max((run.minirl_loss - run.trl_loss).abs().item(), (run.minirl_grad - run.trl_grad).abs().max().item())
    assert gap > 1e-3, f"the mutant '{mutant}' agrees with TRL to {gap:.2e}: the check cannot see it"

"""Numerical cross-check of minirl's GRPO/DAPO math against TRL's own source code.

    pip install trl --no-deps          # TRL's heavy dependencies (datasets, pandas, ...) are NOT needed
    python benchmarks/bench_vs_trl.py  # a few seconds; exits 1 if any asserted comparison fails

`import trl.trainer.utils` / `trl.trainer.grpo_trainer` pull in `datasets` and `pandas`, which minirl does not
install. So this script does not import those modules: it reads their source files from the installed TRL
package, takes the needed functions out with `ast`, and executes *that* code (unchanged) here:

  trl/trainer/utils.py         selective_log_softmax, entropy_from_logits, nanstd, nanmin, nanmax,
                               _supports_trl_loss_kernel (the GPU Triton path is never taken on CPU)
  trl/trainer/grpo_trainer.py  GRPOTrainer._compute_loss, run on a stand-in `self` whose
                               _get_per_token_logps_and_entropies returns our fixed tensors

The group advantages are computed inside GRPOTrainer._generate_and_score_completions, a long method that
cannot be run on its own; its lines are copied here and each copied line is checked, character for character,
to still be in the installed grpo_trainer.py (the script prints the line numbers it found).

Compared, on fixed random tensors (float32, tolerance 1e-6, plus a float64 run):
  1. group advantages (r - mean) / (std + 1e-4) for scale_rewards group / batch / none
       vs minirl.advantages.group_advantages(scale=group / batch / none, eps=1e-4)
  2. the per-token clipped loss (+ k3 KL with beta) and its aggregation, loss value and d loss / d logp:
       TRL loss_type "grpo"    vs minirl aggregate "seq-mean-token-mean"
       TRL loss_type "bnpo"    vs "token-mean" with this micro-batch's token count
       TRL loss_type "dapo"    vs "token-mean" with the token count of the whole step
       TRL loss_type "dr_grpo" vs "seq-mean-token-sum-norm" with max_len = max_completion_length
     with epsilon_low / epsilon_high 0.2 / 0.2 and 0.2 / 0.28, beta 0 and 0.04, 1 and 2 gradient-accumulation
     micro-batches; also the clip fractions and the KL that TRL logs.
  3. log-prob selection and entropy: TRL selective_log_softmax / entropy_from_logits on the tiny policy's
     logits vs minirl.rollout.completion_logprobs(with_entropy=True), and vs minirl.losses.entropy_from_logits.
"""

from __future__ import annotations

import ast
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

from minirl import losses as L
from minirl.advantages import group_advantages
from minirl.policy import load_policy
from minirl.rollout import completion_logprobs, position_ids_from_mask, sample
from minirl.tasks import Countdown

TOL = 1e-6
FAILURES: list[str] = []


def check(name: str, got: float, tol: float = TOL) -> None:
    ok = got <= tol
    print(f"  [{'ok' if ok else 'FAIL'}] {name}: max |diff| = {got:.2e}" + (f" (tol {tol:.1e})" if tol != TOL else ""))
    if not ok:
        FAILURES.append(name)


def rel_tol(reference: torch.Tensor) -> float:
    """1e-6 times the largest magnitude involved (float32 keeps ~7 significant digits)."""
    return TOL * max(1.0, reference.abs().max().item())


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


# ----------------------------------------------------------------------------- loading TRL's code
def find_trl() -> Path | None:
    try:
        import trl
    except ImportError:
        return None
    return Path(trl.__file__).parent


def extract(path: Path, names: set[str], cls: str | None = None) -> dict:
    """Execute the top-level functions `names` (or methods of class `cls`) of a source file, unchanged."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    nodes = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = names - {n.name for n in nodes}
    if missing:
        raise RuntimeError(f"{path} has no {sorted(missing)} any more: this cross-check needs updating")
    from transformers.utils import is_triton_available

    namespace = {"torch": torch, "F": F, "is_triton_available": is_triton_available}
    for n in nodes:
        n.decorator_list = []  # e.g. @profiling_decorator: bookkeeping only
        exec(compile(ast.Module(body=[n], type_ignores=[]), str(path), "exec"), namespace)
    print(f"  executed {path.name}: " + ", ".join(f"{n.name} (line {n.lineno})" for n in nodes))
    return namespace


def locate(path: Path, lines: list[str]) -> list[int]:
    """Line number of each copied line in the TRL file (whitespace-stripped exact match); error if absent."""
    src = [s.strip() for s in path.read_text().splitlines()]
    found = []
    for line in lines:
        hits = [i + 1 for i, s in enumerate(src) if s == line.strip()]
        if not hits:
            raise RuntimeError(f"copied TRL line not found in {path}: {line!r}: this cross-check needs updating")
        found.append(hits[0])
    return found


# ----------------------------------------------------------------------------- 1. group advantages
# Copied from GRPOTrainer._generate_and_score_completions (multi_objective_aggregation="sum_then_normalize",
# the default); `locate` proves each line is in the installed file.
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


def compare_advantages(utils_ns, grpo_path: Path) -> None:
    print("\n1. group advantages vs TRL GRPOTrainer._generate_and_score_completions")
    print(f"  copied lines found in {grpo_path.name} at lines {locate(grpo_path, TRL_ADVANTAGE_LINES)}")
    nanstd = utils_ns["nanstd"]
    gen = torch.Generator().manual_seed(0)
    n_groups, G = 16, 8
    group_ids = torch.arange(n_groups).repeat_interleave(G)
    cases = {
        "binary 0/1 rewards (some groups all-equal)": (torch.rand(n_groups * G, generator=gen) < 0.3).float(),
        "continuous rewards": torch.randn(n_groups * G, generator=gen),
        "tinyzero-style 0 / 0.1 / 1": torch.tensor([0.0, 0.1, 1.0])[torch.randint(0, 3, (n_groups * G,), generator=gen)],
    }
    for dtype in (torch.float32, torch.float64):
        for label, r in cases.items():
            r = r.to(dtype)
            for scale in ("group", "batch", "none"):
                ours = group_advantages(r, group_ids, scale=scale, eps=1e-4)
                theirs = trl_advantages(r, G, scale, nanstd)
                check(f"{str(dtype)[6:]:7s} {label:45s} scale={scale}", maxdiff(ours, theirs))
    # Why float64 differs by ~5e-8: nanstd's Bessel factor count / (count - 1) divides int64 tensors, which
    # torch does in float32. With that one factor in float64 the difference drops to float64 rounding.
    def nanstd_f64_factor(tensor, dim=None, keepdim=False):
        mean = torch.nanmean(tensor, dim=dim, keepdim=True)
        variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
        count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True).to(tensor.dtype)
        std = torch.sqrt(variance * count / (count - 1))
        return std if keepdim else (std.squeeze() if dim is None else std.squeeze(dim))

    r = cases["continuous rewards"].double()
    print(f"  note: float64, scale=group: TRL nanstd as is {maxdiff(group_advantages(r, group_ids), trl_advantages(r, G, 'group', nanstd)):.2e}; "
          f"with its Bessel factor in float64 {maxdiff(group_advantages(r, group_ids), trl_advantages(r, G, 'group', nanstd_f64_factor)):.2e}")
    # A documented difference: minirl sets all-equal groups to exactly 0; TRL computes (r - mean) / (0 + 1e-4),
    # which is 0 only when the group mean is exactly representable.
    r = torch.full((G,), 0.1)
    print(f"  note: a group of eight rewards 0.1 (float32): TRL gives {trl_advantages(r, G, 'group', nanstd)[0]:.3e}, "
          f"minirl {group_advantages(r, torch.zeros(G, dtype=torch.long))[0]:.3e} (all-equal groups are zeroed)")


# ----------------------------------------------------------------------------- 2. the loss
class StandInTrainer:
    """Just enough of a GRPOTrainer for its own _compute_loss to run on fixed tensors."""

    def __init__(self, loss_type, eps_low, eps_high, beta, max_completion_length, grad_accum, logps, entropies):
        self.loss_type, self.epsilon_low, self.epsilon_high, self.beta = loss_type, eps_low, eps_high, beta
        self.max_completion_length = max_completion_length
        self.current_gradient_accumulation_steps = grad_accum
        self.args = types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=grad_accum)
        self.accelerator = types.SimpleNamespace(num_processes=1, sync_gradients=True,
                                                 reduce=lambda t, reduction="sum": t, gather=lambda t: t,
                                                 gather_for_metrics=lambda t: t)
        self.model = types.SimpleNamespace(training=True)
        self.aux_loss_enabled = False
        self.top_entropy_quantile = 1.0
        self.off_policy_mask_threshold = None
        self.importance_sampling_level = "token"
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self._entropy_bonus_enabled = False
        self._metrics = defaultdict(lambda: defaultdict(list))
        self._logps, self._entropies = logps, entropies

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        return self._logps, self._entropies, None


OUR_AGG = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
           "dr_grpo": "seq-mean-token-sum-norm"}


def compare_losses(compute_loss, dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    B, T, L_MAX = 16, 12, 16  # completions padded to T = 12 < max_completion_length = 16 (matters for dr_grpo)
    logp = -3 * torch.rand(B, T, generator=gen, dtype=dtype) - 0.01
    old = logp + 0.3 * torch.randn(B, T, generator=gen, dtype=dtype)  # wide enough that both clips trigger
    ref = logp + 0.3 * torch.randn(B, T, generator=gen, dtype=dtype)
    adv = torch.randn(B, generator=gen, dtype=dtype)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[3] = 0  # an empty completion: contributes 0 and still counts as a sequence in both
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    entropies = torch.rand(B, T, generator=gen, dtype=dtype)
    total_tokens = mask.sum()

    for loss_type in ("grpo", "bnpo", "dapo", "dr_grpo"):
        for eps_low, eps_high in ((0.2, 0.2), (0.2, 0.28)):
            for beta in (0.0, 0.04):
                for ga in (1, 2):
                    if loss_type == "bnpo" and ga > 1:
                        continue  # see BENCHMARKS.md: TRL's bnpo averages per-micro-batch token means
                    theirs_loss, ours_loss = 0.0, 0.0
                    lp_t = logp.clone().requires_grad_(True)
                    lp_o = logp.clone().requires_grad_(True)
                    metrics = None
                    for rows in torch.arange(B).chunk(ga):  # gradient-accumulation micro-batches
                        m = mask[rows]
                        # TRL: its own _compute_loss on these micro-batch tensors
                        trainer = StandInTrainer(loss_type, eps_low, eps_high, beta, L_MAX, ga, lp_t[rows],
                                                 entropies[rows])
                        inputs = {"prompt_ids": torch.ones(len(rows), 1, dtype=torch.long),
                                  "prompt_mask": torch.ones(len(rows), 1, dtype=torch.long),
                                  "completion_ids": torch.ones(len(rows), T, dtype=torch.long), "completion_mask": m,
                                  "advantages": adv[rows], "old_per_token_logps": old[rows],
                                  "ref_per_token_logps": ref[rows], "num_items_in_batch": total_tokens}
                        theirs_loss = theirs_loss + compute_loss(trainer, None, inputs)
                        metrics = trainer._metrics["train"]
                        # minirl: the per-token loss and aggregation of step.learn, with the step's totals
                        pg, clip = L.clipped_surrogate(lp_o[rows], old[rows], adv[rows], eps_low, eps_high)
                        tokens = pg + beta * L.kl_penalty(lp_o[rows], ref[rows], "k3") if beta else pg
                        totals = dict(num_tokens=(m.sum() if loss_type == "bnpo" else total_tokens).clamp(min=1),
                                      num_seqs=B, max_len=L_MAX)
                        ours_loss = ours_loss + L.aggregate(tokens, m, OUR_AGG[loss_type], **totals)
                    theirs_loss.backward()
                    ours_loss.backward()
                    label = f"{str(dtype)[6:]:7s} {loss_type:7s} eps {eps_low}/{eps_high} beta {beta:<4} micro-batches {ga}"
                    check(f"{label} loss", maxdiff(ours_loss.detach(), theirs_loss.detach()))
                    check(f"{label} d loss/d logp", maxdiff(lp_o.grad, lp_t.grad))
                    if ga == 1:  # the logged statistics of the last (only) micro-batch
                        clip_low = L.masked_mean(clip.clipped_low, m).item()
                        clip_high = L.masked_mean(clip.clipped_high, m).item()
                        check(f"{label} clip fraction low / high ({clip_low:.3f} / {clip_high:.3f})",
                              max(abs(clip_low - metrics["clip_ratio/low_mean"][-1]),
                                  abs(clip_high - metrics["clip_ratio/high_mean"][-1])))
                        if loss_type == "grpo" and beta == 0 and eps_high == 0.2:  # negative control
                            wrong = L.aggregate(pg, m, "token-mean")
                            print(f"  control: TRL grpo vs minirl token-mean (a wrong pairing) differ by "
                                  f"{maxdiff(wrong.detach(), theirs_loss.detach()):.2e}, so the checks can fail")
                        if beta:
                            ours_kl = L.masked_mean(L.kl_penalty(logp, ref, "k3"), mask).item()
                            check(f"{label} logged mean KL", abs(ours_kl - metrics["kl"][-1]))


# ----------------------------------------------------------------------------- 3. log-probs and entropy
def compare_logprobs(utils_ns) -> None:
    print("\n3. log-prob selection and entropy vs TRL selective_log_softmax / entropy_from_logits")
    selective_log_softmax, trl_entropy = utils_ns["selective_log_softmax"], utils_ns["entropy_from_logits"]
    torch.manual_seed(0)
    policy = load_policy(device="cpu")
    task = Countdown()
    prompts = [p.prompt for p in task.problems("train", 16, seed=0)]
    prompts += [p.prompt for p in Countdown(target_range=(1, 99)).problems("train", 16, seed=0)]  # 1 token shorter
    ids, pmask = policy.encode_prompts(prompts)  # a really left-padded batch
    roll = sample(policy, ids, pmask, max_new_tokens=16, generator=torch.Generator().manual_seed(0))
    P, cmask = ids.shape[1], roll.completion_mask
    with torch.no_grad():
        attn = torch.cat([pmask, cmask], 1)
        logits = policy.model(input_ids=torch.cat([ids, roll.completion_ids], 1), attention_mask=attn,
                              position_ids=position_ids_from_mask(attn), use_cache=False).logits
        logits = logits[:, P - 1:-1]  # position P-1+t predicts completion token t
        for temperature in (1.0, 0.7):
            ours = completion_logprobs(policy.model, ids, pmask, roll.completion_ids, cmask, temperature,
                                       with_entropy=True)
            theirs = selective_log_softmax(logits, roll.completion_ids, temperature) * cmask
            check(f"completion_logprobs vs selective_log_softmax, T={temperature}", maxdiff(ours["logprobs"], theirs))
            h_theirs = trl_entropy(logits / temperature)
            check(f"completion_logprobs entropy vs TRL entropy_from_logits, T={temperature}",
                  maxdiff(ours["entropy"] * cmask, h_theirs * cmask))
            # a different, equivalent formula (logsumexp(z) - sum p z vs -sum p log p): in float32 the two differ
            # by rounding of numbers as large as the logits, hence a tolerance relative to max |logit|
            h_ours = L.entropy_from_logits(logits / temperature)
            check(f"minirl.losses.entropy_from_logits vs TRL entropy_from_logits (policy logits), T={temperature}",
                  maxdiff(h_ours, h_theirs), tol=rel_tol(logits / temperature))
            z64 = logits.double() / temperature
            check("  the same in float64", maxdiff(L.entropy_from_logits(z64), trl_entropy(z64)))
    gen = torch.Generator().manual_seed(2)
    for scale in (1.0, 30.0):
        for dtype in (torch.float32, torch.float64):
            z = (scale * torch.randn(4, 12, 1000, generator=gen)).to(dtype)
            idx = torch.randint(0, 1000, (4, 12), generator=gen)
            h = trl_entropy(z)
            check(f"{str(dtype)[6:]:7s} minirl.losses.entropy_from_logits vs TRL, random logits x{scale:g}, V=1000",
                  maxdiff(L.entropy_from_logits(z), h), tol=rel_tol(z) if dtype == torch.float32 else TOL)
            lp = selective_log_softmax(z, idx)
            check(f"{str(dtype)[6:]:7s} log_softmax + gather (as in completion_logprobs) vs selective_log_softmax, "
                  f"random logits x{scale:g}", maxdiff(z.log_softmax(-1).gather(-1, idx[..., None]).squeeze(-1), lp),
                  tol=rel_tol(z) if dtype == torch.float32 else TOL)
    z = torch.randn(2, 3, 10, generator=gen)
    z[..., :4] = float("-inf")  # e.g. a masked vocabulary
    print(f"  note: with -inf logits, minirl entropy_from_logits -> finite: "
          f"{bool(torch.isfinite(L.entropy_from_logits(z)).all())}; TRL entropy_from_logits -> finite: "
          f"{bool(torch.isfinite(trl_entropy(z)).all())}")


def main() -> int:
    torch.set_num_threads(2)
    trl_dir = find_trl()
    if trl_dir is None:
        print("TRL is not installed (pip install trl --no-deps): nothing to compare, skipped")
        return 0
    import trl

    print(f"# bench_vs_trl: minirl vs TRL {trl.__version__} ({trl_dir}), torch {torch.__version__}")
    utils_path, grpo_path = trl_dir / "trainer" / "utils.py", trl_dir / "trainer" / "grpo_trainer.py"
    utils_ns = extract(utils_path, {"selective_log_softmax", "entropy_from_logits", "nanstd", "nanmin", "nanmax",
                                    "_supports_trl_loss_kernel"})
    grpo_ns = extract(grpo_path, {"_compute_loss"}, cls="GRPOTrainer")
    grpo_ns.update(nanmin=utils_ns["nanmin"], nanmax=utils_ns["nanmax"])
    compare_advantages(utils_ns, grpo_path)
    print("\n2. per-token clipped loss + aggregation vs TRL GRPOTrainer._compute_loss (executed)")
    for dtype in (torch.float32, torch.float64):
        compare_losses(grpo_ns["_compute_loss"], dtype)
    compare_logprobs(utils_ns)
    n = sum(1 for _ in FAILURES)
    print(f"\n{'all comparisons agree' if not n else f'{n} comparison(s) FAILED: ' + ', '.join(FAILURES)}")
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())

"""Command line: `python -m minirl {evaluate,sft,...}`. Every flag is documented in `--help`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

import torch

from .config import PRESETS


# task option flags -> the keyword of TaskEntry.make they set; a flag left out keeps the task's own default
TASK_FLAGS = {"num_count": "num_count", "prompt_style": "prompt_style", "operators": "operators",
              "reward": "reward_scheme"}


def add_task_args(p: argparse.ArgumentParser) -> None:
    from .tasks import TASKS

    p.add_argument("--task", default="compact", metavar="TASK",
                   help="; ".join(f"{e.name}: {e.description}" for e in TASKS.values()) + " (default: compact)")
    p.add_argument("--num-count", type=int, default=None, help="numbers per Countdown problem (compact: 3 or 4; "
                   "worked: 2 to 5; default 3)")
    p.add_argument("--prompt-style", default=None, choices=["compact", "chat"],
                   help="compact task: compact (tiny character model) or chat (instruct models); default: from the policy")
    p.add_argument("--operators", default=None, help="allowed operators, a subset of '+-*/' (default: +-*)")
    p.add_argument("--reward", default=None, choices=["binary", "tinyzero", "dapo", "per_step"],
                   help="reward scheme: binary 0/1 (default), tinyzero 0/0.1/1, dapo -1/+1; worked task only: "
                        "per_step, partial credit per right step (deliberately hackable)")


def task_entry(args):
    """The registry entry of --task (an earlier name gives a warning, an unknown one a clear error)."""
    from .tasks import get_task

    return get_task(args.task)


def policy_for(args) -> str:
    """--policy, or the shipped policy of --task."""
    return args.policy or task_entry(args).policy


def make_task(args, policy=None):
    """--task built with the option flags that were given; a chat-template policy gets Countdown's chat prompt."""
    entry = task_entry(args)
    given = {key: getattr(args, flag) for flag, key in TASK_FLAGS.items() if getattr(args, flag, None) is not None}
    refused = sorted("--" + flag.replace("_", "-") for flag, key in TASK_FLAGS.items()
                     if key in given and key not in entry.options)
    if refused:
        raise ValueError(f"{', '.join(refused)} is not allowed with --task {entry.name}: it takes "
                         + (", ".join("--" + f.replace("_", "-") for f, k in TASK_FLAGS.items() if k in entry.options)
                            or "no task options"))
    if "prompt_style" in entry.options and "prompt_style" not in given and policy is not None:
        given["prompt_style"] = "chat" if policy.use_chat_template else "compact"
    return entry.make(**given)


def cmd_evaluate(args) -> int:
    from . import evaluate, load_policy
    from .tasks import task_budget

    torch.set_num_threads(args.threads) if args.threads else None
    policy = load_policy(policy_for(args), device=args.device, dtype=args.dtype)
    task = make_task(args, policy)
    print(f"policy: {policy.name} ({policy.num_parameters:,} parameters, {policy.device}); "
          f"task: {task.name}{f', {task.num_count} numbers' if hasattr(task, 'num_count') else ''}, {args.split} split")
    rows = []
    for greedy in (True, False):
        t0 = time.perf_counter()
        m = evaluate(policy, task, n=args.n, greedy=greedy, k=1 if greedy else args.k, split=args.split,
                     temperature=args.temperature, seed=args.seed, max_new_tokens=args.max_new_tokens)
        m["seconds"] = time.perf_counter() - t0
        rows.append(m)
    print(f"{'decoding':<22}{'accuracy':>10}{'pass@k':>9}{'format':>9}{'length':>8}{'trunc':>8}{'sec':>7}")
    for m in rows:
        name = "greedy" if m["greedy"] else f"sampled T={m['temperature']:g} k={m['k']}"
        print(f"{name:<22}{m['accuracy']:>10.1%}{m['pass_at_k']:>9.1%}{m['format_rate']:>9.1%}"
              f"{m['mean_length']:>8.1f}{m['truncation_rate']:>8.1%}{m['seconds']:>7.1f}")
    m, budget = rows[-1], args.max_new_tokens or task_budget(task)["max_new_tokens"]
    print(f"sampled lengths (tokens, EOS included): half within {m['length_p50']:g}, 90 % within {m['length_p90']:g}, "
          f"99 % within {m['length_p99']:g}, the longest {m['length_max']}; {m['truncation_rate']:.1%} cut at the "
          f"budget of {budget}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def cmd_sft(args) -> int:
    """Make a shipped policy: tiny-countdown (--task compact) or tiny-worked (--task worked), sft.py."""
    from .sft import WORKED_RECIPE, ship_compact, ship_worked

    torch.set_num_threads(args.threads) if args.threads else None
    entry = task_entry(args)
    if entry.name not in ("compact", "worked"):
        raise ValueError(f"--task {args.task} is not allowed for sft: it makes the shipped policies of the tasks "
                         "'compact' and 'worked'")
    command = "python -m minirl sft " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    common = dict(seed=args.seed, eval_n=args.eval_n, eval_k=args.eval_k, command=command)
    if entry.name == "worked":  # its recipe, with every flag given overriding its entry
        recipe = {k: (v if getattr(args, k, None) is None else getattr(args, k)) for k, v in WORKED_RECIPE.items()}
        out, evaluations, seconds = ship_worked(args.out, recipe, **common)
    else:
        out, evaluations, seconds = ship_compact(args.out, steps=args.steps or 300, batch_size=args.batch_size or 128,
                                                 lr=args.lr or 1e-3, **common)
    print(f"saved to {out}: " + "; ".join(f"{e['label']}: greedy {e['greedy']['accuracy']:.1%}, sampled "
                                          f"{e['sampled']['accuracy']:.1%}" for e in evaluations)
          + f" ({seconds:.0f} s of SFT)")
    return 0


def add_config_args(p: argparse.ArgumentParser) -> None:
    """One --flag per RLConfig field, its help the field's own (config.knob); unset flags keep the preset's value."""
    import dataclasses

    from .config import RLConfig

    for f in dataclasses.fields(RLConfig):
        if f.name == "algo":
            continue
        flag, text = "--" + f.name.replace("_", "-"), f.metadata["help"].replace("%", "%%")  # argparse formats %
        if f.type == "bool":
            p.add_argument(flag, type=lambda v: v.lower() in ("1", "true", "yes", "on"), default=None,
                           metavar="BOOL", help=f"{text} (default: preset)")
        else:
            kind = {"int": int, "float": float, "str": str}[f.type]
            p.add_argument(flag, type=kind, default=None, help=f"{text} (default: preset)")


def config_from_args(args, task=None):
    """The preset with every flag that was given; without --max-new-tokens, L_max and L_cache are the task's
    budget (`tasks.task_budget`)."""
    import dataclasses

    from .config import RLConfig

    if getattr(args, "config_json", None):
        return RLConfig.from_dict(json.loads(args.config_json))
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(RLConfig)
                 if f.name != "algo" and getattr(args, f.name, None) is not None}
    if task is not None and "max_new_tokens" not in overrides:
        from .tasks import task_budget

        overrides = {**task_budget(task), **overrides}
    from .config import TUNED_LR

    task_name = task_entry(args).name if getattr(args, "task", None) else "compact"
    # a task without tuned learning rates (your own) starts at the compact task's
    return RLConfig.preset(args.algo, task=task_name if task_name in TUNED_LR else "compact", **overrides)


def cmd_train(args) -> int:
    from accelerate import PartialState

    from . import load_policy
    from .card import trained_card
    from .checkpoint import CHECKPOINT, POLICY
    from .runs import RunCache
    from .trainer import train

    torch.set_num_threads(args.threads) if args.threads else None
    policy = load_policy(policy_for(args), device=args.device, dtype=args.dtype)
    task = make_task(args, policy)
    config = config_from_args(args, task)
    cache = None if args.no_cache or args.run_dir else RunCache(args.cache)
    report_to = [name.strip() for name in args.report_to.split(",")] if args.report_to else None
    run = train(policy, task, config, run_dir=args.run_dir, resume=args.resume, cache=cache,
                progress=not args.quiet, report_to=report_to)
    if not PartialState().is_main_process:  # under a launcher only the main process keeps metrics and saves
        return 0
    first = run.history[0]
    print(f"{config.algo}: {len(run.history) - 1} steps in {run.meta.get('seconds', float('nan')):.0f} s; "
          f"held-out sampled accuracy {first.get('eval/accuracy_sampled', float('nan')):.1%} -> "
          f"{run.final('eval/accuracy_sampled'):.1%}, greedy {first.get('eval/accuracy_greedy', float('nan')):.1%} -> "
          f"{run.final('eval/accuracy_greedy'):.1%}; run folder: {run.path}")
    if args.save_policy:  # from the run's final checkpoint: also right when the run came from the cache
        trained = load_policy(run.path / CHECKPOINT / POLICY, device="cpu") if run.path is not None else policy
        trained.save(args.save_policy, trained_card(run, run.history[-1]["step"]), temperature=config.temperature,
                     top_p=config.top_p, max_new_tokens=config.max_new_tokens)
        print(f"trained policy saved to {args.save_policy}")
    return 0


def cmd_compare(args) -> int:
    from .compare import compare

    overrides = {k: v for k, v in (("steps", args.steps), ("lr", args.lr), ("seed", args.seed)) if v is not None}
    compare(args.out, algos=tuple(a.strip() for a in args.algos.split(",")), cache_dir=args.cache,
            threads=args.threads, quiet=args.quiet, task=args.task, jobs=args.jobs, **overrides)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minirl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("evaluate", help="held-out accuracy of a policy on a task (greedy and sampled)")
    p.add_argument("--policy", default=None, help="folder or Hugging Face id; default: the task's shipped policy")
    p.add_argument("--n", type=int, default=300, help="number of held-out problems")
    p.add_argument("--k", type=int, default=4, help="samples per problem for the sampled evaluation (pass@k)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--seed", type=int, default=0, help="seed for problem choice and sampling")
    p.add_argument("--split", default="test", choices=["test", "val", "train"], help="test (held-out, default), val "
                   "(train problems training never draws) or train")
    p.add_argument("--max-new-tokens", type=int, default=None, help="completion budget (default: the task's)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", action="store_true", help="also print the metrics as JSON")
    add_task_args(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("sft", help="make a tiny base policy: supervised warm start from scratch")
    p.add_argument("--task", default="compact", metavar="TASK",
                   help="compact: tiny-countdown; worked: tiny-worked (recipe: minirl.sft.WORKED_RECIPE)")
    p.add_argument("--steps", type=int, default=None, help="SFT steps (default: 300; worked: its recipe)")
    p.add_argument("--batch-size", type=int, default=None, help="problems per step (default: 128; worked: recipe)")
    p.add_argument("--lr", type=float, default=None, help="AdamW learning rate (default: 1e-3; worked: recipe)")
    p.add_argument("--hidden-size", type=int, default=None, help="worked task: model width (default: recipe)")
    p.add_argument("--four-share", type=float, default=None, help="worked task: share of 4-number problems")
    p.add_argument("--retry-rate", type=float, default=None, help="worked task: share of traces with a restart")
    p.add_argument("--giveup-rate", type=float, default=None, help="worked task: share of the others that stop unsolved")
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation, data and order")
    p.add_argument("--eval-n", type=int, default=300, help="held-out problems for the model card")
    p.add_argument("--eval-k", type=int, default=4, help="samples per problem for sampled accuracy")
    p.add_argument("--out", default=None, help="output folder; default: the package's shipped policy folder")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.set_defaults(func=cmd_sft)

    p = sub.add_parser("train", help="one RL run: a preset plus any RLConfig field as a flag")
    p.add_argument("--algo", default="grpo", choices=list(PRESETS),
                   help="the preset to start from (see RLConfig.preset); default grpo")
    add_config_args(p)
    p.add_argument("--policy", default=None, help="folder or Hugging Face id; default: the task's shipped policy")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", default="float32", help="weights: float32 (default: AdamW updates of ~1e-6 vanish in "
                   "bf16 weights; use --mixed-precision bf16 for speed), auto, bfloat16 or float16")
    p.add_argument("--run-dir", default=None, help="folder for metrics.jsonl, config.json and checkpoints")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    p.add_argument("--cache", default=None, help="run cache folder (default: $MINIRL_CACHE or ~/.cache/minirl/runs)")
    p.add_argument("--no-cache", action="store_true", help="always train, never answer from the run cache")
    p.add_argument("--save-policy", default=None, help="also save the trained policy to this folder")
    p.add_argument("--report-to", default=None, help="experiment trackers for the metrics and the completions, as "
                   "accelerate names them (tensorboard, trackio, wandb, ..., comma-separated, or all); they write "
                   "into the run folder")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--config-json", default=None, help="a whole RLConfig as JSON (overrides --algo and the flags)")
    add_task_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("compare", help="PPO vs GRPO vs DAPO from the shipped policy, same budget: table + PNG")
    p.add_argument("--out", default="results", help="folder for compare.md, compare.json and compare.png")
    p.add_argument("--algos", default="ppo,grpo,dapo", help="comma-separated presets to compare")
    p.add_argument("--steps", type=int, default=None, help="rollout steps per algorithm (default: the task's "
                   "compare length, minirl.tasks.TASKS)")
    p.add_argument("--lr", type=float, default=None, help="learning rate for all (default: each its own tuned one, "
                   "config.TUNED_LR)")
    p.add_argument("--seed", type=int, default=None, help="seed for all (default: 0)")
    p.add_argument("--cache", default=None, help="run cache folder (default: $MINIRL_CACHE or ~/.cache/minirl/runs)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (default 1)")
    p.add_argument("--jobs", type=int, default=2, help="runs side by side (default 2: one per core)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--task", default="compact", metavar="TASK", help="the task, from its shipped policy "
                   "(minirl.tasks.TASKS: compact, worked)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("study", add_help=False, help="re-test the paper's claims H1..H9 with seeds "
                       "(python -m minirl study --help for its options)")
    sub.add_parser("tune", add_help=False, help="the learning-rate sweep behind config.TUNED_LR "
                   "(python -m minirl tune --help for its options)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["study"]:  # the study is a wing with its own parser, so `study --help` lists its options
        from .study import main as study_main

        return study_main(argv[1:])
    if argv[:1] == ["tune"]:  # the learning-rate sweep lives in the study wing too
        from .study.tune import main as tune_main

        return tune_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # our validation errors: one clear line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:  # under `accelerate launch`: close the process group ourselves, not in interpreter shutdown (SIGABRT)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

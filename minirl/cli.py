"""Command line: `python -m minirl {evaluate,sft,...}`. Every flag is documented in `--help`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

import torch


def add_task_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-count", type=int, default=3, help="numbers per Countdown problem (3 or 4)")
    p.add_argument("--prompt-style", default=None, choices=["compact", "chat"],
                   help="compact (tiny character model) or chat (instruct models); default: from the policy")
    p.add_argument("--operators", default="+-*", help="allowed operators, a subset of '+-*/'")


def make_task(args, policy=None):
    from .tasks import Countdown

    style = args.prompt_style or ("chat" if policy is not None and policy.use_chat_template else "compact")
    return Countdown(num_count=args.num_count, operators=args.operators, prompt_style=style)


def cmd_evaluate(args) -> int:
    from . import evaluate, load_policy

    torch.set_num_threads(args.threads) if args.threads else None
    policy = load_policy(args.policy, device=args.device, dtype=args.dtype)
    task = make_task(args, policy)
    print(f"policy: {policy.name} ({policy.num_parameters:,} parameters, {policy.device}); "
          f"task: {task.num_count}-number Countdown, held-out split")
    rows = []
    for greedy in (True, False):
        t0 = time.perf_counter()
        m = evaluate(policy, task, n=args.n, greedy=greedy, k=1 if greedy else args.k,
                     temperature=args.temperature, seed=args.seed)
        m["seconds"] = time.perf_counter() - t0
        rows.append(m)
    print(f"{'decoding':<22}{'accuracy':>10}{'pass@k':>9}{'format':>9}{'length':>8}{'trunc':>8}{'sec':>7}")
    for m in rows:
        name = "greedy" if m["greedy"] else f"sampled T={m['temperature']:g} k={m['k']}"
        print(f"{name:<22}{m['accuracy']:>10.1%}{m['pass_at_k']:>9.1%}{m['format_rate']:>9.1%}"
              f"{m['mean_length']:>8.1f}{m['truncation_rate']:>8.1%}{m['seconds']:>7.1f}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def cmd_sft(args) -> int:
    from . import evaluate
    from .policy import SHIPPED_POLICY, new_tiny_policy
    from .sft import model_card, sft, write_card
    from .tasks import Countdown

    torch.set_num_threads(args.threads) if args.threads else None
    task = Countdown(num_count=3)
    policy = new_tiny_policy(seed=args.seed)
    t0 = time.perf_counter()
    history = sft(policy, task, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    seconds = time.perf_counter() - t0
    greedy = evaluate(policy, task, n=args.eval_n, greedy=True, seed=0)
    sampled = evaluate(policy, task, n=args.eval_n, greedy=False, k=args.eval_k, temperature=1.0, seed=0)
    out = args.out or SHIPPED_POLICY
    policy.name = "minirl/tiny-countdown"
    policy.save(out)
    command = "python -m minirl sft " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    meta = {"command": command, "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
            "seed": args.seed, "num_parameters": policy.num_parameters, "seconds": round(seconds, 1),
            "final_loss": history[-1]["loss"], "greedy": greedy, "sampled": sampled}
    card = model_card(command=command, task_description="3 numbers from 1-9, operators + - *, compact prompt",
                      **{k: v for k, v in meta.items() if k != "command"})
    write_card(out, card, meta)
    print(f"saved to {out}: greedy {greedy['accuracy']:.1%}, sampled {sampled['accuracy']:.1%} "
          f"({seconds:.0f} s of SFT)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minirl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("evaluate", help="held-out accuracy of a policy on Countdown (greedy and sampled)")
    p.add_argument("--policy", default=None, help="folder or Hugging Face id; default: the shipped tiny policy")
    p.add_argument("--n", type=int, default=300, help="number of held-out problems")
    p.add_argument("--k", type=int, default=4, help="samples per problem for the sampled evaluation (pass@k)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--seed", type=int, default=0, help="seed for problem choice and sampling")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", action="store_true", help="also print the metrics as JSON")
    add_task_args(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("sft", help="make the tiny base policy: supervised warm start from scratch")
    p.add_argument("--steps", type=int, default=300, help="SFT steps")
    p.add_argument("--batch-size", type=int, default=128, help="problems per step")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation, data and order")
    p.add_argument("--eval-n", type=int, default=300, help="held-out problems for the model card")
    p.add_argument("--eval-k", type=int, default=4, help="samples per problem for sampled accuracy")
    p.add_argument("--out", default=None, help="output folder; default: the package's shipped policy folder")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.set_defaults(func=cmd_sft)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:  # our validation errors: one clear line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2

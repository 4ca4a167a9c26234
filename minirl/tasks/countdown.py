"""The Countdown game: combine the given numbers with + - * / to hit a target.

Example: numbers 3, 5, 7 and target 26 -> "3*7+5". Every number must be used
exactly once. It is a good RL toy: answers are cheap to check exactly, easy
problems exist for tiny models, and hard ones exist for real LLMs.

The checker, `safe_eval`, never runs model output as code: it whitelists
characters, bounds length and nesting, parses with `ast` and walks the tree
with exact `Fraction` arithmetic, so it answers any string in well under 10 ms (tests/test_countdown.py times
it) and can only raise ValueError.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from fractions import Fraction

from minirl.tasks.base import Problem, Score, check_test_fraction, sample_split

MAX_EXPR_CHARS = 256  # longer expressions are rejected before any parsing
MAX_LITERAL = 9999  # integer literals have at most 4 digits
MAX_PAREN_DEPTH = 32  # deeper nesting is rejected by a plain scan, before ast.parse
MAX_MAGNITUDE = 10**30  # bound on |numerator| and denominator of every intermediate value
MAX_COMPLETION_CHARS = 10_000  # chat scoring only looks at the last this-many characters

_ALLOWED_CHARS = frozenset("0123456789+-*/() ")
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


# ----------------------------------------------------------------------------- safe arithmetic


def _check_operators(operators: str, where: str) -> None:
    """operators must be a non-empty string of distinct symbols from "+-*/"."""
    ok = isinstance(operators, str) and operators and set(operators) <= set("+-*/")
    if not ok or len(set(operators)) != len(operators):
        raise ValueError(f"{where}={operators!r} is not allowed: use a non-empty subset of '+-*/' without repeats")


def _parse(expr: str, operators: str) -> ast.expr:
    """Check the text, parse it, and validate the tree; raise ValueError with a reason."""
    if not isinstance(expr, str):
        raise TypeError(f"expression must be a str, got {type(expr).__name__}")
    if len(expr) > MAX_EXPR_CHARS:  # check first: every later step is then cheap
        raise ValueError(f"expression is too long: {len(expr)} characters, at most {MAX_EXPR_CHARS}")
    expr = expr.strip(" ")  # ast.parse rejects leading spaces as an "unexpected indent"
    if not expr:
        raise ValueError("expression is empty")
    for ch in expr:  # a whitelist, so unicode digits, letters and dots never reach the parser
        if ch not in _ALLOWED_CHARS:
            if ch == ".":
                raise ValueError("decimal numbers are not allowed: use whole numbers")
            raise ValueError(f"character {ch!r} is not allowed: use digits, spaces, + - * / and parentheses")
    if "**" in expr:
        raise ValueError("'**' (power) is not allowed")
    if "//" in expr:
        raise ValueError("'//' (floor division) is not allowed")
    depth = 0
    for ch in expr:  # bound nesting here so the parser and our walk can never recurse deeply
        depth += (ch == "(") - (ch == ")")
        if depth > MAX_PAREN_DEPTH:
            raise ValueError(f"parentheses are nested too deeply: at most {MAX_PAREN_DEPTH} levels")
        if depth < 0:
            raise ValueError("unbalanced parentheses: ')' without a matching '('")
    if depth:
        raise ValueError("unbalanced parentheses: '(' is never closed")
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as err:
        raise ValueError(f"syntax error: {err.msg}") from None
    _check_tree(tree, operators)
    return tree


def _check_tree(node: ast.expr, operators: str) -> None:
    """Only non-negative integer literals and binary + - * / from `operators` are allowed."""
    if isinstance(node, ast.BinOp):
        op = _AST_OPS.get(type(node.op))
        if op is None:
            raise ValueError(f"operator {type(node.op).__name__} is not allowed: use one of {operators}")
        if op not in operators:
            raise ValueError(f"operator {op!r} is not allowed here: use one of {operators}")
        _check_tree(node.left, operators)
        _check_tree(node.right, operators)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        if node.value > MAX_LITERAL:
            raise ValueError(f"number {node.value} is too large: at most {MAX_LITERAL}")
    elif isinstance(node, ast.UnaryOp):
        raise ValueError("unary + or - is not allowed (e.g. -3 or --3): only numbers and binary operators")
    else:
        raise ValueError(f"unsupported syntax ({type(node).__name__}): use numbers, + - * / and parentheses")


def _evaluate(node: ast.expr) -> Fraction:
    """Exact value of a checked tree; ValueError on division by zero or huge numbers."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    left, right = _evaluate(node.left), _evaluate(node.right)
    op = _AST_OPS[type(node.op)]
    if op == "+":
        value = left + right
    elif op == "-":
        value = left - right
    elif op == "*":
        value = left * right
    elif right == 0:
        raise ValueError("division by zero")
    else:
        value = left / right
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise ValueError(f"intermediate value is too large (above {MAX_MAGNITUDE:.0e})")
    return value


def _literals(node: ast.expr) -> list[int]:
    """Integer literals of a checked tree, left to right."""
    if isinstance(node, ast.Constant):
        return [node.value]
    return _literals(node.left) + _literals(node.right)


def safe_eval(expr: str, operators: str = "+-*/") -> Fraction:
    """Exact value of an arithmetic expression such as "(7+1)/2", without running any code.

    Allowed: non-negative integers up to MAX_LITERAL, binary operators from
    `operators`, parentheses and spaces. Everything else (unary minus, **, //,
    decimals, letters, unicode digits, ...) raises ValueError with the reason.
    """
    _check_operators(operators, "safe_eval operators")
    return _evaluate(_parse(expr, operators))


def used_numbers(expr: str) -> list[int]:
    """The integer literals of `expr` in order, e.g. "3*7+5" -> [3, 7, 5]; ValueError if it does not parse."""
    return _literals(_parse(expr, "+-*/"))


# ----------------------------------------------------------------------------- problem generation


def _build_tree(rng: random.Random, leaves: list[int], operators: str) -> int | tuple:
    """A random binary tree over `leaves` (in order): leaves are ints, nodes are (op, left, right)."""
    if len(leaves) == 1:
        return leaves[0]
    cut = 1 + int(rng.random() * (len(leaves) - 1))  # random shape: split the leaves anywhere
    op = operators[int(rng.random() * len(operators))]
    return (op, _build_tree(rng, leaves[:cut], operators), _build_tree(rng, leaves[cut:], operators))


def _tree_value(tree: int | tuple) -> int | Fraction | None:
    """Exact value of a generated tree (ints stay ints until a division); None on division by zero."""
    if isinstance(tree, int):
        return tree
    op, left, right = tree
    a, b = _tree_value(left), _tree_value(right)
    if a is None or b is None:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return None if b == 0 else Fraction(a) / b


def _render(tree: int | tuple) -> tuple[str, int]:
    """Text of a tree with minimal parentheses, plus its precedence (3 for a number)."""
    if isinstance(tree, int):
        return str(tree), 3
    op, left, right = tree
    prec = _PRECEDENCE[op]
    (ltext, lprec), (rtext, rprec) = _render(left), _render(right)
    if lprec < prec:  # (a+b)*c
        ltext = f"({ltext})"
    if rprec < prec or (rprec == prec and op in "-/"):  # a*(b+c), a-(b+c), a/(b*c); but a+b+c
        rtext = f"({rtext})"
    return ltext + op + rtext, prec


def _check_range(where: str, value: object, lo_min: int, hi_max: int) -> tuple[int, int]:
    """A (lo, hi) pair of ints with lo_min <= lo <= hi <= hi_max; lists are accepted."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = value
        if all(type(v) is int for v in (lo, hi)) and lo_min <= lo <= hi <= hi_max:
            return (lo, hi)
    raise ValueError(f"{where}={value!r} is not allowed: use (lo, hi) integers with {lo_min} <= lo <= hi <= {hi_max}")


@dataclass
class Countdown:
    """Countdown: reach `target` from the given numbers, each used exactly once."""

    num_count: int = 3  # how many numbers each problem gives: 3 or 4
    number_range: tuple[int, int] = (1, 9)  # inclusive range of the numbers, 1 <= lo <= hi <= 99
    target_range: tuple[int, int] = (1, 999)  # inclusive range of targets, 1 <= lo <= hi <= 9999
    operators: str = "+-*"  # allowed operators: a non-empty subset of "+-*/"
    prompt_style: str = "compact"  # "compact" ("3,5,7:026=") for tiny models, "chat" for instruct models
    reward_scheme: str = "binary"  # "binary" 0/1, "tinyzero" 0/0.1/1, "dapo" -1/+1
    test_fraction: float = 0.2  # share of problem keys (sorted numbers|target) held out (~395 for the defaults)
    val_fraction: float = 0.1  # share of problem keys kept out of training for tuning (the "val" split)
    name: str = "countdown"  # identifier used in logs

    def __post_init__(self) -> None:
        if type(self.num_count) is not int or self.num_count not in (3, 4):
            raise ValueError(f"Countdown.num_count={self.num_count!r} is not allowed: use 3 or 4")
        self.number_range = _check_range("Countdown.number_range", self.number_range, 1, 99)
        self.target_range = _check_range("Countdown.target_range", self.target_range, 1, 9999)
        _check_operators(self.operators, "Countdown.operators")
        if self.prompt_style not in ("compact", "chat"):
            raise ValueError(f"Countdown.prompt_style={self.prompt_style!r} is not allowed: use 'compact' or 'chat'")
        if self.reward_scheme not in ("binary", "tinyzero", "dapo"):
            raise ValueError(
                f"Countdown.reward_scheme={self.reward_scheme!r} is not allowed: use 'binary', 'tinyzero' or 'dapo'"
            )
        check_test_fraction("Countdown", self.test_fraction, self.val_fraction)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Countdown.name={self.name!r} is not allowed: use a non-empty string")

    # -- problems

    @property
    def max_new_tokens(self) -> int:
        """A completion length that fits any answer: 16 tokens for compact prompts, 256 for chat ones."""
        return 16 if self.prompt_style == "compact" else 256

    def problems(self, split: str, n: int, seed: int = 0) -> list[Problem]:
        """n problems from "train" (may repeat), "val" or "test" (distinct keys); deterministic in (split, n, seed)."""
        rng = random.Random(f"countdown|{split}|{seed}")  # str seeds are hashed with sha512: stable
        # 20k draws in a row with nothing new means the val or test split has run dry.
        return sample_split(self._draw, split, n, rng, self.test_fraction, 20_000, "Countdown",
                            self.val_fraction)

    def _draw(self, rng: random.Random) -> Problem:
        """One random problem, in either split; the caller filters by key."""
        lo, hi = self.number_range
        tlo, thi = self.target_range
        for _ in range(10_000):
            numbers = [rng.randint(lo, hi) for _ in range(self.num_count)]
            leaves = numbers[:]
            rng.shuffle(leaves)  # the solution uses the numbers in a random order
            tree = _build_tree(rng, leaves, self.operators)
            value = _tree_value(tree)
            if value is None or value != int(value) or not tlo <= value <= thi:
                continue  # not a positive integer in range: redraw
            target = int(value)
            return Problem(
                prompt=self._prompt(numbers, target),
                answer={"numbers": tuple(numbers), "target": target},
                solution=self._solution(_render(tree)[0]),
                key=",".join(map(str, sorted(numbers))) + f"|{target}",
            )
        raise ValueError(
            f"Countdown could not make a problem with target_range={self.target_range} from "
            f"number_range={self.number_range}, operators={self.operators!r}: widen the ranges"
        )

    def _prompt(self, numbers: list[int], target: int) -> str:
        if self.prompt_style == "compact":  # fixed length for single-digit numbers
            width = len(str(self.target_range[1]))
            return ",".join(map(str, numbers)) + f":{target:0{width}d}="
        ops = [op for op in "+-*/" if op in self.operators]
        example = f"(1 {ops[0]} 2) {'*' if '*' in ops else ops[-1]} 3"
        return (
            f"Using the numbers {list(numbers)}, create an equation that equals {target}. "
            f"You can use basic arithmetic operations ({', '.join(ops)}) and each number must be used "
            f"exactly once. Show your reasoning briefly, then give the final equation inside "
            f"<answer> </answer> tags, for example <answer> {example} </answer>."
        )

    def _solution(self, expression: str) -> str:
        return expression if self.prompt_style == "compact" else f"<answer> {expression} </answer>"

    # -- scoring

    def extract_expression(self, completion: str) -> str | None:
        """The expression part of a completion, or None when there is none.

        compact: the whole completion, stripped. chat: the text inside the LAST
        <answer>...</answer> pair, searched in the last MAX_COMPLETION_CHARS
        characters only (so scoring cost is bounded), whitespace runs -> one space.
        """
        if self.prompt_style == "compact":
            return completion.strip()
        text = completion[-MAX_COMPLETION_CHARS:]
        end = text.rfind("</answer>")  # two rfinds: linear time, unlike a backtracking regex
        start = text.rfind("<answer>", 0, max(end, 0))
        if end < 0 or start < 0:
            return None
        return " ".join(text[start + len("<answer>") : end].split())

    def score(self, problem: Problem, completion: str) -> Score:
        """Score a completion: components format_ok, numbers_ok, correct (0/1) and the scheme's reward.

        format_ok: an expression was found and parses under safe_eval's grammar
        with this task's operators (a division by zero still counts as well-formed).
        numbers_ok: its literals are exactly the given numbers, each used once.
        correct: numbers_ok and its exact value equals the target.
        """
        format_ok = numbers_ok = correct = False
        expression = self.extract_expression(completion) if isinstance(completion, str) else None
        if expression is not None:
            try:
                tree = _parse(expression, self.operators)
                format_ok = True
            except ValueError:
                tree = None
            if tree is not None:
                numbers_ok = sorted(_literals(tree)) == sorted(problem.answer["numbers"])
                try:
                    correct = numbers_ok and _evaluate(tree) == problem.answer["target"]
                except ValueError:  # division by zero or a huge intermediate value
                    correct = False
        if self.reward_scheme == "binary":
            reward = 1.0 if correct else 0.0
        elif self.reward_scheme == "tinyzero":
            reward = 1.0 if correct else (0.1 if format_ok else 0.0)
        else:  # dapo
            reward = 1.0 if correct else -1.0
        components = {"format_ok": float(format_ok), "numbers_ok": float(numbers_ok), "correct": float(correct)}
        return Score(reward=reward, components=components)

"""minirl: PPO, GRPO and DAPO for language-model reasoning, small enough to read in an afternoon.

Data flows one way: task -> policy -> rollout -> reward -> advantages -> loss -> trainer -> run.
"""

from .evaluate import evaluate, pass_at_k
from .policy import Policy, load_policy, new_tiny_policy
from .rollout import Rollout, completion_logprobs, sample
from .tasks import Countdown, FunctionTask, Problem, Score, Task

__version__ = "0.1.0"
__all__ = [
    "Countdown", "FunctionTask", "Policy", "Problem", "Rollout", "Score", "Task",
    "completion_logprobs", "evaluate", "load_policy", "new_tiny_policy", "pass_at_k", "sample",
]

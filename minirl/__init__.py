"""minirl: PPO, GRPO and DAPO for language-model reasoning, small enough to read in an afternoon.

Data flows one way: task -> policy -> rollout -> reward -> advantages -> loss -> step -> trainer -> run.
The RL step is `minirl.step.rl_step`; `minirl.course` (lessons, exercises) and `minirl.study` (the paper's
claims) are wings on top of this core, which never imports them (README.md, "Architecture").
"""

from .evaluate import evaluate, pass_at_k
from .policy import Policy, load_policy, new_tiny_policy
from .rollout import Rollout, completion_logprobs, sample
from .config import ConfigError, RLConfig
from .runs import Run, RunCache
from .tasks import Countdown, FunctionTask, Problem, Score, Task, WorkedCountdown
from .step import rl_step
from .trainer import DynamicSamplingExhausted, TrainingDiverged, train

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "Countdown", "DynamicSamplingExhausted", "FunctionTask", "Policy", "Problem", "RLConfig",
    "Rollout", "Run", "RunCache", "Score", "Task", "TrainingDiverged", "WorkedCountdown", "train",
    "completion_logprobs", "evaluate", "load_policy", "new_tiny_policy", "pass_at_k", "rl_step", "sample",
]

"""Tasks: where problems come from and how completions are scored."""

from minirl.tasks.base import FunctionTask, Problem, Score, Task, in_test_split, task_identity
from minirl.tasks.countdown import Countdown, safe_eval, used_numbers
from minirl.tasks.steps import CountdownSteps, replay

__all__ = ["Problem", "Score", "Task", "FunctionTask", "Countdown", "CountdownSteps", "safe_eval", "used_numbers",
           "replay", "in_test_split", "task_identity"]

"""Tasks: where problems come from and how completions are scored; `registry` names the ones minirl ships."""

from minirl.tasks.base import FunctionTask, Problem, Score, Task, in_test_split, split_of, task_identity
from minirl.tasks.countdown import Countdown, safe_eval, used_numbers
from minirl.tasks.registry import TASKS, TaskEntry, get_task, register_task, task_budget
from minirl.tasks.worked import WorkedCountdown, replay

__all__ = ["Problem", "Score", "Task", "FunctionTask", "Countdown", "WorkedCountdown", "safe_eval", "used_numbers",
           "replay", "in_test_split", "split_of", "task_identity", "TASKS", "TaskEntry", "get_task", "register_task", "task_budget"]


"""Small helpers shared by the benchmark scripts (not part of minirl).

- `timeit()`: median (and spread) of wall-clock times after warm-up.
- `header()`: the versions and thread count a result was measured with.

The scripts do not watch the machine: run them on a quiet one (BENCHMARKS.md says how) and say when it was not.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time


def timeit(fn, repeats: int = 10, warmup: int = 2) -> dict:
    """Run fn() `warmup` + `repeats` times; return median / min / max seconds and the timed results."""
    for _ in range(warmup):
        fn()
    times, results = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        results.append(fn())
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "n": repeats,
            "times": times, "results": results, "result": results[-1]}


def header(title: str) -> None:
    import accelerate
    import torch
    import transformers

    print(f"# {title}")
    print(f"date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"accelerate {accelerate.__version__}, torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (near 0 on a quiet machine)")

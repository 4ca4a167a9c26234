"""Small helpers shared by the benchmark scripts (not part of minirl).

- `wait_for_quiet()`: the benchmark machine has 2 cores; a second torch job running at the same time makes
  both several times slower, so every timed script first waits until no other heavy minirl job is running.
- `timeit()`: median (and spread) of wall-clock times after warm-up.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import time

# the jobs named in the benchmark brief, plus any other `python -m minirl ...` command (sft, study, eval, ...)
BUSY_PATTERN = "minirl compare|minirl train|pytest|smoke.py|-m minirl|bin/minirl "


def other_jobs() -> list[str]:
    """Command lines of other heavy jobs (pgrep never lists itself; this script's name does not match)."""
    out = subprocess.run(["pgrep", "-af", BUSY_PATTERN], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip() and not line.startswith(f"{os.getpid()} ")]


def wait_for_quiet(max_wait_s: float = 25 * 60, poll_s: float = 15.0) -> bool:
    """Poll every `poll_s` until no other heavy job runs: none matches BUSY_PATTERN and, over a 2 s sample,
    other processes use under 30 % of the CPU. Returns True if quiet, False if we gave up after max_wait_s."""
    t0 = time.monotonic()
    while True:
        jobs = other_jobs()
        if not jobs:
            with CpuMonitor() as cpu:
                time.sleep(2.0)
            if cpu.share < 0.30:
                return True
            jobs = [f"(unnamed processes using {cpu.share:.0%} of the CPU)"]
        if time.monotonic() - t0 > max_wait_s:
            print(f"[bench] gave up waiting after {max_wait_s / 60:.0f} min: timings may be contended by:")
            for j in jobs:
                print("   ", j[:120])
            return False
        print(f"[bench] waiting for {len(jobs)} other job(s) to finish ({time.monotonic() - t0:.0f} s so far)")
        time.sleep(poll_s)


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


def header(title: str, quiet: bool) -> None:
    import accelerate
    import torch
    import transformers

    print(f"# {title}")
    print(f"date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"accelerate {accelerate.__version__}, torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"other heavy jobs: {'none' if quiet else 'YES - timings may be contended'}")


def footer(quiet_at_start: bool) -> None:
    """Say whether another heavy job was running when the timings ended (a job that came and went is missed)."""
    jobs = other_jobs()
    print(f"\nother heavy jobs at the end: {'none' if not jobs else 'YES - timings may be contended'}; "
          f"at the start: {'none' if quiet_at_start else 'YES'}; load average at end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


class CpuMonitor:
    """CPU time used by OTHER processes while a block ran, from /proc/stat minus this process's own CPU time.

    Catches contention that a name pattern misses. `share` is a fraction of all cores (0.05 = 5 %)."""

    def __enter__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), self._busy(), self._own()
        return self

    def __exit__(self, *exc):
        elapsed = time.monotonic() - self.t0
        other = (self._busy() - self.busy0) - (self._own() - self.own0)
        self.share = max(0.0, other) / max(elapsed * (os.cpu_count() or 1), 1e-9)
        return False

    @staticmethod
    def _busy() -> float:
        try:
            with open("/proc/stat") as fh:
                v = [int(x) for x in fh.readline().split()[1:]]
        except OSError:
            return float("nan")
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait; guest is in user

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    def describe(self) -> str:
        flag = " - CONTENDED, rerun" if self.share > 0.10 else ""
        return f"other processes used {self.share:.0%} of the CPU meanwhile{flag}"

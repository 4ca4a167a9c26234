"""Shared fixtures. Tests run on the CPU with few threads so that they are quick and repeatable."""

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network
os.environ.setdefault("MINIRL_SMOKE", "1")  # notebooks run by nbval (and the grader) use their SMOKE settings
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread: on 2 shared cores, 2 OpenMP threads slow these tiny forwards down ~50x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_policy():
    """The shipped tiny Countdown policy (read-only: tests that train must copy it)."""
    from minirl import load_policy

    return load_policy(device="cpu")


@pytest.fixture
def fresh_policy():
    """A copy of the shipped policy that a test may train."""
    from minirl import load_policy

    return load_policy(device="cpu")

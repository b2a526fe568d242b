"""Measuring the distributed tests' cost: with ``TUNEKIT_TEST_LAUNCH_LOG=FILE`` each test appends its CPU seconds
(this process and the launches it waited for) beside the launch lines of tests/distributed_helpers.note_launch."""

from __future__ import annotations

import os
import resource

import pytest


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get("TUNEKIT_TEST_LAUNCH_LOG")
    start = _cpu_seconds()
    yield
    if log:
        with open(log, "a") as f:
            f.write(f"{item.nodeid}\tcpu {_cpu_seconds() - start:.1f} s\n")

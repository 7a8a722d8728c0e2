"""Whether a parser takes linear time on hostile input, told apart without a flaky threshold.

A parse of an input 4 times as large must take less than 16 times as long (a linear parser
takes about 4 times, a quadratic one 16, a cubic one 64): each size is timed as the best of a few
runs (one where it takes over a second) in this thread's CPU time, which other processes and
threads do not inflate. A run is also
stopped after :data:`CAP_SECONDS` of wall-clock time (SIGALRM, which a running regular
expression answers), so a parser that takes minutes fails the test in seconds instead of hanging.
"""

from __future__ import annotations

import gc
import signal
import time
from collections.abc import Callable
from types import FrameType

import pytest

#: How many times larger the second input is.
GROWTH = 4
#: How many times longer its parse may take: GROWTH ** 2, what a quadratic parser takes.
MOST_RATIO = 16
#: The most seconds one parse may take (the linear parsers take milliseconds).
CAP_SECONDS = 5.0
REPEATS = 3
#: After this many seconds of runs of one input, its best time so far is taken.
ENOUGH_SECONDS = 1.0

#: For the tests that time a parse: a fine thread clock, and a timer to stop a slow parse.
needs_clocks = pytest.mark.skipif(
    not hasattr(signal, "setitimer") or time.get_clock_info("thread_time").resolution > 1e-6,
    reason="timing a parse needs a fine thread clock and signal.setitimer",
)


class _TooSlowError(Exception):
    """A parse ran past :data:`CAP_SECONDS`."""


def _stop(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise _TooSlowError


def best_seconds(run: Callable[[], object]) -> float:
    """The least CPU time of this thread that :data:`REPEATS` calls of ``run`` took (fewer once
    they took :data:`ENOUGH_SECONDS`); the test fails where one call takes longer than
    :data:`CAP_SECONDS` of wall-clock time."""
    best, spent = float("inf"), 0.0
    previous = signal.signal(signal.SIGALRM, _stop)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(REPEATS):
            signal.setitimer(signal.ITIMER_REAL, CAP_SECONDS)
            start = time.thread_time()
            run()
            seconds = time.thread_time() - start
            signal.setitimer(signal.ITIMER_REAL, 0)
            best, spent = min(best, seconds), spent + seconds
            if spent > ENOUGH_SECONDS:
                break
    except _TooSlowError:
        pytest.fail(f"one parse took more than {CAP_SECONDS} s: not linear time")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if enabled:
            gc.enable()
    return best


def assert_linear(parse: Callable[[str], object], hostile: Callable[[int], str], size: int) -> None:
    """``parse`` of ``hostile(GROWTH * size)`` takes less than :data:`MOST_RATIO` times as long
    as ``parse`` of ``hostile(size)``, and neither takes :data:`CAP_SECONDS`."""
    small, large = hostile(size), hostile(GROWTH * size)
    small_seconds = best_seconds(lambda: parse(small))
    large_seconds = best_seconds(lambda: parse(large))
    assert large_seconds < MOST_RATIO * small_seconds, (
        f"{GROWTH}x the input took {large_seconds / small_seconds:.1f}x as long "
        f"({small_seconds:.4f} s, then {large_seconds:.4f} s): not linear time"
    )

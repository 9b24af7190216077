"""The benchmark harness (bench/common.py): interleaved rounds, cold calls apart, the
ratio's direction and text, equal threads on both sides."""

from __future__ import annotations

import time
from collections.abc import Callable

import numba
import pytest

from bench import common


def sleeper(calls: list[str], name: str, seconds: float, cold_extra: float = 0.0) -> Callable[[], str]:
    """A contender that records its calls and sleeps ``seconds`` (plus ``cold_extra`` the first time)."""

    def run() -> str:
        time.sleep(seconds + (cold_extra if name not in calls else 0.0))
        calls.append(name)
        return name

    return run


def test_cold_call_first_then_rounds_alternate_who_goes_first() -> None:
    calls: list[str] = []
    timings = common.interleaved(
        {"ours": sleeper(calls, "ours", 0.0), "peer": sleeper(calls, "peer", 0.0)}, rounds=4
    )
    assert calls[:2] == ["ours", "peer"]  # the cold calls, in the order given
    warm = calls[2:]
    assert [warm[i] for i in range(0, 8, 2)] == ["ours", "peer", "ours", "peer"]
    assert len(timings.warm["ours"]) == len(timings.warm["peer"]) == 4
    assert timings.results == {"ours": "ours", "peer": "peer"}


def test_without_warmup_no_cold_call() -> None:
    calls: list[str] = []
    timings = common.interleaved({"a": sleeper(calls, "a", 0.0)}, rounds=2, warmup=False)
    assert calls == ["a", "a"]
    assert timings.cold == {}
    assert len(timings.warm["a"]) == 2


def test_slower_peer_gives_a_ratio_above_one_and_cold_is_apart() -> None:
    calls: list[str] = []
    timings = common.interleaved(
        {"ours": sleeper(calls, "ours", 0.01, cold_extra=0.1), "peer": sleeper(calls, "peer", 0.04)},
        rounds=3,
    )
    assert timings.cold["ours"] >= 0.1  # the compile-like first call is not in the warm rounds
    assert max(timings.warm["ours"]) < 0.1
    ratio = common.ratios_of(timings.warm["peer"], timings.warm["ours"])
    assert all(r > 1.5 for r in ratio)
    assert timings.ratio("ours", "peer").startswith("0.")  # the other way round: ours is slower
    summary = timings.summary()
    assert summary["ours"]["cold_s"] == timings.cold["ours"]
    assert summary["peer"]["median_s"] == pytest.approx(timings.median("peer"))
    assert len(summary["peer"]["warm_s"]) == 3


def test_ratio_text_is_median_with_min_and_max() -> None:
    assert common.ratio_text([2.0, 3.0, 6.0], [1.0, 1.0, 2.0]) == "3.00× (2.00–3.00)"
    assert common.ratio_text([], []) == "n/a"
    assert common.ratio_text([3.0], [2.0]) == "1.50×"  # one cold pair: no spread
    summary = common.ratio_summary([4.0, 1.0], [2.0, 1.0])
    assert (summary["median"], summary["min"], summary["max"]) == (1.5, 1.0, 2.0)


def test_same_threads_pins_and_restores_numba() -> None:
    before = numba.get_num_threads()
    with common.same_threads(1) as n:
        assert n == 1
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before


def test_a_cpu_clock_does_not_count_sleeping() -> None:
    spin_until = 0.02

    def spin() -> None:
        start = time.thread_time()
        while time.thread_time() - start < spin_until:
            pass

    timings = common.interleaved(
        {"spin": spin, "sleep": lambda: time.sleep(0.05)}, rounds=2, clock=time.thread_time
    )
    assert min(timings.warm["spin"]) >= spin_until
    assert max(timings.warm["sleep"]) < 0.01  # asleep: no CPU time on this thread

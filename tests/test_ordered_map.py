"""lmc_dist.ordered_map: a function mapped in spawned processes, results in order, errors
where a loop in one process raises them, a dead helper's items computed here."""

from __future__ import annotations

import logging
import multiprocessing
import os

import pytest

from lmc_dist.ordered_map import ordered_map


def square(n: int) -> int:
    return n * n


def square_but_3(n: int) -> int:
    if n == 3:
        raise ValueError(f"no square of {n}")
    return n * n


def die_in_a_helper(n: int) -> tuple[int, bool]:
    """n and whether it was computed in a helper; a helper given 5 dies."""
    helper = multiprocessing.parent_process() is not None
    if helper and n == 5:
        os._exit(3)
    return n, helper


def test_results_come_in_the_items_order_from_helpers():
    assert list(ordered_map(die_in_a_helper, [(n,) for n in range(4)], 2)) \
        == [(n, True) for n in range(4)]
    assert list(ordered_map(square, [(n,) for n in range(30)], 3)) == [n * n for n in range(30)]


def test_an_items_error_is_raised_after_the_results_before_it():
    results = ordered_map(square_but_3, [(n,) for n in range(10)], 2)
    assert [next(results) for _ in range(3)] == [0, 1, 4]
    with pytest.raises(ValueError, match="no square of 3"):
        next(results)


def test_an_error_reading_the_items_comes_after_the_items_read_before_it():
    def items():
        yield from [(1,), (2,), (3,), (4,)]
        raise OSError("disk gone")

    got = []
    with pytest.raises(OSError, match="disk gone"):
        for result in ordered_map(square, items(), 4):
            got.append(result)
    assert got == [1, 4, 9, 16]
    got = []
    with pytest.raises(ValueError, match="no square of 3"):     # the earlier error first
        for result in ordered_map(square_but_3, items(), 4):
            got.append(result)
    assert got == [1, 4]


def test_the_items_of_a_dead_helper_are_computed_here(caplog):
    with caplog.at_level(logging.WARNING, logger="lmc_dist.ordered_map"):
        results = list(ordered_map(die_in_a_helper, [(n,) for n in range(12)], 2))
    assert [n for n, _ in results] == list(range(12))
    assert results[5] == (5, False)
    assert all(helper for _, helper in results[:2])     # (taken before 5 was given out)
    assert [r.getMessage().split(" (")[0] for r in caplog.records
            if r.name == "lmc_dist.ordered_map"] == ["a helper process died"]


def test_processes_below_one_are_refused():
    with pytest.raises(ValueError, match="at least 1, not 0"):
        next(ordered_map(square, [(1,)], 0))

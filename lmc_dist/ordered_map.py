"""A function mapped over items in spawned processes, the results given back in the items'
order as they come: what the corpus scan parses a large json corpus' blocks with
(:func:`lmc_dist.partition.scan`)."""

from __future__ import annotations

import collections
import logging
import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

LOG = logging.getLogger(__name__)

R = TypeVar("R")


def ordered_map(function: Callable[..., R], items: Iterable[tuple[Any, ...]],
                processes: int) -> Iterator[R]:
    """``function(*item)`` for each of ``items``, in order, computed in ``processes`` spawned
    processes (``function`` and the items' values picklable; ``function`` importable by
    its module's name).

    At most twice ``processes`` items are read ahead of the result given, so that memory is
    bounded however many items there are.  An exception that ``function`` raises for an item
    is raised where that item's result would be given, after the results of the items before
    it, as a loop in one process would; one that iterating ``items`` raises, after the
    results (or exception) of the items read before it.  The processes ignore SIGINT (Ctrl-C
    stops the caller, which ends them); should one of them die (killed, out of memory), the
    items not yet given are computed in this process (a warning says so).

    Raises:
        ValueError: ``processes`` is below 1.
    """
    if processes < 1:
        raise ValueError(f"processes must be at least 1, not {processes}")
    pending: collections.deque[tuple[Future | None, tuple[Any, ...]]] = collections.deque()
    broken = False      # (a helper died: the items from then on are computed here)

    def submit(item: tuple[Any, ...]) -> None:
        nonlocal broken
        future = None
        if not broken:
            try:
                future = pool.submit(function, *item)
            except BrokenProcessPool as e:
                broken = _broke(e)
        pending.append((future, item))

    def take() -> R:
        nonlocal broken
        future, item = pending.popleft()
        if future is not None:
            try:
                return future.result()
            except BrokenProcessPool as e:
                broken = broken or _broke(e)
        return function(*item)

    iterator = iter(items)
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_ignore_interrupts) as pool:
        try:
            while True:
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                except Exception:
                    while pending:      # (an earlier item's error comes first, as in one process)
                        yield take()
                    raise
                submit(item)
                if len(pending) >= 2 * processes:
                    yield take()
            while pending:
                yield take()
        finally:
            for future, _ in pending:
                if future is not None:
                    future.cancel()


def _broke(error: BrokenProcessPool) -> bool:
    """Warn that the pool broke (once: the callers ask only while it is not known); True."""
    LOG.warning("a helper process died (%s): the rest is computed in this process", error)
    return True


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


__all__ = ["ordered_map"]

"""What counts as a hit, written once: the per-token rules of the statistics, shared by
``lmc stats`` (:mod:`lmchallenge.stats.state`, :mod:`lmchallenge.stats.columnar`), ``lmc pretty``
and ``lmc diff``.

* Next-word prediction (``wc``): the rank of the target among the completions offered
  before any character is typed (``completions[0]``); Hit@N for N in :data:`NEXT_WORD_RANKS`.
* Prefix completion (``wc``): the word counts as completed from the first prefix length at
  which the rest of the target is among the first :data:`COMPLETION_MAX_RANK` completions;
  the characters after that prefix are saved, those before it typed
  (:func:`typed_characters`).
"""

from __future__ import annotations

from collections.abc import Sequence

NEXT_WORD_RANKS = (1, 3, 10, 20)
"""Hit@N is reported for these N."""

COMPLETION_MAX_RANK = 2
"""A prefix completion counts when the rest of the word is among the first two completions."""


def rank_of(items: Sequence[str], item: str, max_rank: int | None = None) -> int | None:
    """1-based rank of ``item`` among ``items`` (looking at the first ``max_rank`` only),
    or None."""
    try:
        return items.index(item, 0, len(items) if max_rank is None else max_rank) + 1
    except ValueError:
        return None


def completion_start(completions: Sequence[Sequence[str]], target: str) -> int | None:
    """The first prefix length at which the rest of ``target`` is among the first
    :data:`COMPLETION_MAX_RANK` completions, or None."""
    for start, candidates in enumerate(completions):
        if rank_of(candidates, target[start:], COMPLETION_MAX_RANK) is not None:
            return start
    return None


DIFF_NEXT_WORD_RANK = 3
"""``lmc diff`` (as LM Challenge 5.x) counts a word predicted at rank <= 3 before any character
is typed as typed from nothing (:func:`typed_characters`)."""


def typed_characters(completions: Sequence[Sequence[str]], target: str,
                     next_word_rank: int = COMPLETION_MAX_RANK) -> int:
    """Characters of ``target`` typed before it is offered: the first prefix length at which
    the rest of the target is among the first :data:`COMPLETION_MAX_RANK` completions (the
    first ``next_word_rank`` when nothing is typed yet), or ``len(target)`` when never.
    With the default ``next_word_rank`` this is :func:`completion_start`."""
    for start, candidates in enumerate(completions):
        limit = next_word_rank if start == 0 else COMPLETION_MAX_RANK
        if rank_of(candidates, target[start:], limit) is not None:
            return start
    return len(target)


__all__ = ["NEXT_WORD_RANKS", "COMPLETION_MAX_RANK", "rank_of", "completion_start",
           "typed_characters", "DIFF_NEXT_WORD_RANK"]

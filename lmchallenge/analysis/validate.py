"""Checking that logs follow the LM Challenge 5.x log schema (``lmc validate``).

The schema (``lmchallenge/logs/log.schema``, JSON Schema 2020-12) encodes the log format
(docs/formats.md, "Log"): the common fields ``user``, ``message``,
``token``, ``character``, ``target`` and optional ``select``, and the game payloads
``completions`` (wc), ``logp`` (we/ce), ``verbatim`` + ``results`` (wr). It checks the form of
a log, not its fairness (for example, that a model's probabilities sum to one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lmchallenge.errors import InputError
from lmchallenge.logs.check import problem, schema
from lmchallenge.logs.schema import payload_games

__all__ = ["problem", "schema", "validate", "validate_files"]


def validate(data: Iterable[Any], name: str = "<log>") -> int:
    """Check every datum of a log against :func:`schema`.

    Args:
        data: log datums (dicts).
        name: the log's name, for the error message.
    Returns:
        The number of datums checked.
    Raises:
        InputError: ``NAME:N: field F: what is wrong`` for the first bad datum (N counts
            datums from 1: the line number of a jsonlines log without blank lines), or for
            the first datum of another game than the first datum's.
    """
    return validate_files([(name, data)])


def validate_files(files: Iterable[tuple[str, Iterable[Any]]]) -> int:
    """:func:`validate` of the files of one log in order (a run directory's parts:
    ``(file name, datums)`` pairs), each bad datum named by its file and its number there,
    and every datum of the one game of the first.

    Returns:
        The number of datums checked, in all.
    Raises:
        InputError: as :func:`validate`.
    """
    total, games = 0, None
    for name, data in files:
        n = 0
        for n, datum in enumerate(data, start=1):
            reason = problem(datum)
            found = payload_games(datum) if reason is None and isinstance(datum, dict) else []
            if found:      # (a datum without payload goes with any game)
                games = games or found
                if found != games:
                    reason = (f"a datum of {'/'.join(found)} after datums of "
                              f"{'/'.join(games)}: a log holds one game")
            if reason is not None:
                raise InputError(name, n, reason)
        total += n
    return total

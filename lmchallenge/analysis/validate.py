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

from lmchallenge.logs.check import problem, schema, validate_files

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

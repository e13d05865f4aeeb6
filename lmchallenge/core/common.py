"""``lmchallenge.core.common``, where LM Challenge 5.x kept its shared helpers: the names a
5.x model or script uses from it (5.2's ``sample/ngram.py`` reads ``WORD_TOKENIZER`` there),
each the project's own.  5.x's command-line helpers (click parameter types, ``verbosity``,
ANSI rendering) are not kept: they were the commands' insides, not an API."""

from __future__ import annotations

import contextlib
from typing import IO, Any

from lmchallenge.analysis.grep import is_selected
from lmchallenge.logs.files import open_text
from lmchallenge.logs.jsonl import dump_jsonlines, load_jsonlines
from lmchallenge.stats.outcomes import rank_of as rank
from lmchallenge.stats.output import flatten
from lmchallenge.tokenize import CHARACTER_TOKENIZER, WORD_TOKENIZER

__all__ = ["WORD_TOKENIZER", "CHARACTER_TOKENIZER", "load_jsonlines", "dump_jsonlines",
           "auto_open", "is_selected", "flatten_keys", "rank"]


def flatten_keys(d: dict[str, Any], separator: str = ".") -> dict[str, Any]:
    """The nested dict ``d`` as one level, keys joined by ``separator`` (``{"a": {"b": 1}}``
    -> ``{"a.b": 1}``), as 5.x's helper of that name, arguments named as 5.x named them
    (:func:`lmchallenge.stats.output.flatten`)."""
    return flatten(d, separator=separator)


def auto_open(filename: str, mode: str = "rt") -> contextlib.AbstractContextManager[IO[str]]:
    """``filename`` opened as UTF-8 text (``mode`` ``"rt"`` or ``"wt"``), gunzipped where its
    name ends in ``.gz``, ``-`` being stdin/stdout; a context manager, as 5.x's helper of that
    name, arguments named as 5.x named them (:func:`lmchallenge.logs.files.open_text`)."""
    return open_text(filename, mode)

"""``lmchallenge.core.errors``, where LM Challenge 5.x kept the typo model of the ``wr`` game:
its default configuration (the ``error_config`` that :func:`lmchallenge.run.wr` takes) and the
two operations a script uses, each the project's own (:class:`lmchallenge.games.typos.ErrorModel`).

The model (docs/formats.md, "wr"): each character of a word is replaced, with probability
``p_anykey``, by one drawn uniformly from ``error_chars``.  The project's own errors (the
exceptions it raises) are :mod:`lmchallenge.errors`, not this module.
"""

from __future__ import annotations

import random
from typing import Any

from lmchallenge.games.typos import DEFAULT_ERROR_CHARS, DEFAULT_P_ANYKEY, error_model_of

__all__ = ["DEFAULT_CONFIG", "corrupt", "score"]

DEFAULT_CONFIG: dict[str, Any] = {"p_anykey": DEFAULT_P_ANYKEY, "error_chars": DEFAULT_ERROR_CHARS}
"""The ``wr`` game's default typo model, as 5.x named it: ``{"p_anykey": 0.1, "error_chars":
ASCII letters and "_-#@"}`` (a copy is what to change: ``dict(DEFAULT_CONFIG, p_anykey=0.05)``)."""


def corrupt(config: dict[str, Any], word: str, rand: random.Random | Any = random) -> str:
    """``word`` as the typo model of ``config`` types it, drawing from ``rand`` (a
    ``random.Random``, or the ``random`` module); a string of the same length.  The draws
    are not 5.x's: the same seed gives other typos (docs/formats.md, "wr").

    Raises:
        ValueError: a ``config`` out of range (see :func:`lmchallenge.games.typos.error_model_of`).
    """
    return error_model_of(config).corrupt(word, rand)


def score(config: dict[str, Any], input_word: str, word: str) -> float:
    """The log-probability (natural log, nats) that ``word`` was typed as ``input_word`` under
    the typo model of ``config``: ``k log(1 - p_anykey) + (n - k) log(p_anykey)`` for ``k`` of
    the ``n`` characters kept (the words have the same length; 5.x's formula, to the last digit).

    Raises:
        ValueError: a ``config`` out of range (see :func:`lmchallenge.games.typos.error_model_of`).
    """
    return error_model_of(config).score(input_word, word)

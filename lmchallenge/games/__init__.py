"""The LM Challenge games as a Python API: ``wc``, ``we``, ``ce``, ``wr``.

Each takes a model (any object with ``predict``/``train``/``clear``, see
:mod:`lmchallenge.model`) and data (an iterable of strings, one message each, or of dicts
``{"text", "user"|"userId", "timestamp"}``), and returns an iterator of log datums.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lmchallenge.corpus import messages_from_data
from lmchallenge.games.typos import ErrorModel, error_model_of
from lmchallenge.games.entropy import Entropy
from lmchallenge.games.runner import Game, run_game
from lmchallenge.games.wc import WordCompletion
from lmchallenge.games.wr import WordReranking

Log = Iterator[dict[str, Any]]


def wc(model: Any, data: Iterable[Any], train: bool = False, next_word_only: bool = False) -> Log:
    """Word completion: next-word predictions and prefix completions of every word token."""
    return run_game(WordCompletion(next_word_only), model, messages_from_data(data), train)


def we(model: Any, data: Iterable[Any], train: bool = False) -> Log:
    """Word entropy: the model's log-probability of every word token."""
    return run_game(Entropy(characters=False), model, messages_from_data(data), train)


def ce(model: Any, data: Iterable[Any], train: bool = False) -> Log:
    """Character entropy: the model's log-probability of every character."""
    return run_game(Entropy(characters=True), model, messages_from_data(data), train)


def wr(model: Any, data: Iterable[Any], vocab: Iterable[str], train: bool = False, seed: int = 42,
       num_candidates: int = 100, error_config: ErrorModel | dict | None = None) -> Log:
    """Word reranking: LM scores of the candidates for a corrupted version of every word.

    Args:
        vocab: the words candidates are drawn from, in order (ties go to earlier words).
        seed: seeds each message's corruption together with its user and message number.
        num_candidates: most candidates per token.
        error_config: an :class:`ErrorModel` or a dict ``{"p_anykey", "error_chars"}`` (other
            keys are ignored with a warning, as LM Challenge 5.x ignored them silently).
    """
    from lmchallenge.games.candidates import CandidateSearch  # imports NumPy: only for wr
    if isinstance(error_config, dict):
        error_config = error_model_of(error_config)
    game = WordReranking(CandidateSearch(vocab), seed=seed, num_candidates=num_candidates,
                         error_model=error_config or ErrorModel())
    return run_game(game, model, messages_from_data(data), train)


__all__ = ["wc", "we", "ce", "wr", "Game", "run_game", "WordCompletion", "Entropy",
           "WordReranking"]

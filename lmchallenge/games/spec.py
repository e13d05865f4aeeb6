"""A game and its options as plain data, so it can be rebuilt in another process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lmchallenge.logs.schema import GAMES
from lmchallenge.games.typos import error_model_of, read_vocabulary
from lmchallenge.games.entropy import Entropy
from lmchallenge.games.runner import Game
from lmchallenge.games.wc import WordCompletion
from lmchallenge.games.wr import WordReranking



@dataclass(frozen=True)
class GameSpec:
    """A picklable description of a game.

    Attributes:
        name: ``wc``, ``we``, ``ce`` or ``wr``.
        options: ``wc``: ``next_word_only``; ``wr``: ``vocab`` (path), ``seed``,
            ``num_candidates``, ``error_chars``, ``p_anykey``.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in GAMES:
            raise ValueError(f"unknown game {self.name!r} (expected one of {GAMES})")

    def build(self, warn: bool = False) -> Game:
        """The game object (reads the vocabulary of ``wr``; with ``warn``, warns if it looks
        like no word list: :func:`lmchallenge.games.typos.read_vocabulary`)."""
        o = self.options
        if self.name == "wc":
            return WordCompletion(next_word_only=bool(o.get("next_word_only", False)))
        if self.name in ("we", "ce"):
            return Entropy(characters=self.name == "ce")
        from lmchallenge.games.candidates import CandidateSearch  # imports NumPy: only for wr
        error_model = error_model_of({key: o[key] for key in ("p_anykey", "error_chars") if key in o})
        return WordReranking(CandidateSearch(read_vocabulary(o["vocab"], warn=warn)),
                             seed=int(o.get("seed", 42)),
                             num_candidates=int(o.get("num_candidates", 100)),
                             error_model=error_model)

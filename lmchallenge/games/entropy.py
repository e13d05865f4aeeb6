"""Word and character entropy (``we``, ``ce``).

For each token the model scores the token itself after the text before it; the log keeps
``logp``, the model's normalised log-probability (natural log) of the token, or ``null``
when the model cannot score it (``../shared/seeds/001_a51f61792860ca8b.txt``, "we & ce logs").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..model import Predict, Result
from ..tokenize import Token, character_tokenizer, find_tokens, word_tokenizer

LOG = logging.getLogger(__name__)


def target_score(answer: Result, target: str) -> float | None:
    """The score the answer gives ``target``, or ``None`` if it gives none."""
    if len(answer) > 1:
        LOG.warning("model returned %d results for a single candidate", len(answer))
    for text, score in answer:
        if text == target:
            return score
    return None


@dataclass
class Entropy:
    """The ``we`` (``characters=False``) or ``ce`` (``characters=True``) game."""

    characters: bool = False

    @property
    def name(self) -> str:
        return "ce" if self.characters else "we"

    def message_queries(self, user: str | None, message: int,
                        text: str) -> Iterator[tuple[Token, list[Predict], Any]]:
        tokenizer = character_tokenizer() if self.characters else word_tokenizer()
        for token in find_tokens(text, tokenizer):
            yield token, [Predict(text[:token.character], [token.target])], None

    def payload(self, token: Token, answers: list[Result], state: Any) -> dict[str, Any]:
        return {"logp": target_score(answers[0], token.target)}

"""Word and character entropy (``we``, ``ce``).

For each token the model scores the token itself after the text before it; the log keeps
``logp``, the model's normalised log-probability (natural log) of the token, or ``null``
when the model cannot score it (docs/formats.md, "Log", we & ce).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lmchallenge.model.wire import Predict

from lmchallenge.model.wire import Result
from lmchallenge.tokenize import Token, character_tokenizer, find_tokens, word_tokenizer

LOG = logging.getLogger(__name__)


def target_score(answer: Result, target: str) -> float | None:
    """The score the answer gives ``target``, or ``None`` if it gives none."""
    for text, score in answer:
        if text == target:
            return score
    return None


MULTI_CHARACTER_WARNING = ("ce: the model answered %r, not one character, when asked to score %r:"
                           " is it a word model? ce scores characters (a character model: "
                           "lmc-ngram train --chars); with a word model its statistics mean little")
"""Warned once per run when a ``ce`` answer is not a single character."""

POSITIVE_WARNING = ("%s: the model scored %r %r, above 0: a log-probability is at most 0 (LM "
                    "Challenge logs natural-log probabilities); entropies of these scores mean "
                    "nothing (warned once)")
"""Warned once per run when a ``we``/``ce`` score is above 0 (not a log-probability)."""

EXTRA_RESULTS_WARNING = ("%s: the model answered %d results when asked to score %r alone (%r): "
                         "only its score counts (warned once)")
"""Warned once per run when an answer holds more than the one candidate asked for (it was
warned at every token: thousands of lines)."""

POSITIVE_TOLERANCE = 1e-4
"""A score up to this much above 0 is a probability of 1 computed in floating point (float32
rounding gives ~1e-7), not a mistake."""


@dataclass
class Entropy:
    """The ``we`` (``characters=False``) or ``ce`` (``characters=True``) game.

    In ``ce`` an answer of more than one character (a word model's) is warned about once, and
    in both a score above 0 (not a log-probability: a probability, or a score of another
    kind) and an answer with more results than the one candidate asked for."""

    characters: bool = False
    _warned: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return "ce" if self.characters else "we"

    def message_queries(self, user: str | None, message: int,
                        text: str) -> Iterator[tuple[Token, list[Predict], Any]]:
        tokenizer = character_tokenizer() if self.characters else word_tokenizer()
        for token in find_tokens(text, tokenizer):
            yield token, [Predict(text[:token.character], [token.target])], None

    def payload(self, token: Token, answers: list[Result], state: Any) -> dict[str, Any]:
        answer = answers[0]
        if self.characters and "characters" not in self._warned:
            odd = next((text for text, _ in answer if len(text) != 1), None)
            if odd is not None:
                self._warn_once("characters", MULTI_CHARACTER_WARNING, odd, token.target)
        if len(answer) > 1:
            self._warn_once("extra", EXTRA_RESULTS_WARNING, self.name, len(answer), token.target,
                            answer)
        logp = target_score(answer, token.target)
        if logp is not None and logp > POSITIVE_TOLERANCE:
            self._warn_once("positive", POSITIVE_WARNING, self.name, token.target, logp)
        return {"logp": logp}

    def _warn_once(self, kind: str, message: str, *args: Any) -> None:
        """Log ``message % args`` the first time a warning of ``kind`` comes in this run."""
        if kind not in self._warned:
            self._warned.add(kind)
            LOG.warning(message, *args)

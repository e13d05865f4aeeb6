"""Word reranking (``wr``): correcting a sloppy typist.

Each word token is corrupted by :class:`lmchallenge.games.typos.ErrorModel`; the nearest words of
the vocabulary to the corruption (plus the corruption and the true word) are the
candidates; each gets the error model's score, and the model scores them all after the text
before the word.  The log keeps ``verbatim`` (the corruption) and ``results``:
``[candidate, error score, lm score or null]``, best error score first
(docs/formats.md, "Log", wr).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lmchallenge.games.typos import ErrorModel, message_rng
from lmchallenge.model.wire import Predict
from lmchallenge.model.wire import Result
from lmchallenge.tokenize import Token, find_tokens, word_tokenizer

if TYPE_CHECKING:  # the search imports NumPy; the other games need not
    from lmchallenge.games.candidates import CandidateSearch


def choose_candidates(found: list[str], target: str, typed: str, n: int) -> list[str]:
    """At most ``n`` candidates: the best of ``found``, always including ``target`` and ``typed``."""
    keep = max(0, n - (target not in found) - (typed not in found))
    chosen = found[:keep]
    for extra in (target, typed):
        if extra not in chosen:
            chosen.append(extra)
    return chosen


@dataclass
class WordReranking:
    """The ``wr`` game.

    Attributes:
        search: candidate search over the vocabulary.
        seed: the run's seed (with user and message, seeds each message's corruption).
        num_candidates: most candidates per token (target and corruption included).
        error_model: corruption and error scores.
    """

    search: CandidateSearch
    seed: int = 42
    num_candidates: int = 100
    error_model: ErrorModel = field(default_factory=ErrorModel)
    name: str = "wr"

    def message_queries(self, user: str | None, message: int,
                        text: str) -> Iterator[tuple[Token, list[Predict], Any]]:
        rng = message_rng(self.seed, user, message)
        for token in find_tokens(text, word_tokenizer()):
            target = token.target
            typed = self.error_model.corrupt(target, rng)
            candidates = choose_candidates(self.search(typed, self.num_candidates), target,
                                           typed, self.num_candidates)
            scored = sorted(((c, self.error_model.score(typed, c)) for c in candidates),
                            key=lambda pair: -pair[1])
            context = text[:token.character]
            yield token, [Predict(context, [c for c, _ in scored])], (typed, scored)

    def payload(self, token: Token, answers: list[Result], state: Any) -> dict[str, Any]:
        typed, scored = state
        lm = dict(answers[0])
        return {"verbatim": typed,
                "results": [[c, error, lm.get(c)] for c, error in scored]}

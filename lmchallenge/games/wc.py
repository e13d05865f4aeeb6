"""Word completion (``wc``): next-word prediction and prefix completion.

For each word token the model is asked for its continuations after the text before the
word, then after each proper prefix of the word (``--next-word-only``: the first query
only).  The log keeps ``completions[i]``: the continuations proposed after typing ``i``
characters, best first (docs/formats.md, "Log", wc).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lmchallenge.model.wire import Predict

from lmchallenge.model.wire import Result
from lmchallenge.tokenize import Token, find_tokens, word_tokenizer


def ranked(answer: Result) -> list[str]:
    """The continuations of an answer, highest score first (ties keep the model's order); an
    answer with a ``None`` score (an in-process model's unscored continuation, which LM
    Challenge 5.x's ``wc`` allows) keeps the model's order."""
    previous = math.inf
    try:
        for _, score in answer:
            if not score <= previous:  # out of order or NaN (rare): sort, stably
                return [text for text, _ in sorted(answer, key=lambda pair: -pair[1])]
            previous = score
    except TypeError:   # a None score met (compared or sorted)
        pass
    return [text for text, _ in answer]


@dataclass
class WordCompletion:
    """The ``wc`` game.

    Attributes:
        next_word_only: only ask for next-word predictions (no prefixes).
    """

    next_word_only: bool = False
    name: str = "wc"

    def message_queries(self, user: str | None, message: int,
                        text: str) -> Iterator[tuple[Token, list[Predict], Any]]:
        for token in find_tokens(text, word_tokenizer()):
            context = text[:token.character]
            target = token.target
            if self.next_word_only:
                predicts = [Predict(context, None)]
            else:
                predicts = [Predict(context + target[:i], None) for i in range(len(target))]
            yield token, predicts, None

    def payload(self, token: Token, answers: list[Result], state: Any) -> dict[str, Any]:
        return {"completions": [ranked(answer) for answer in answers]}

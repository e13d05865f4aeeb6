"""The typing error model of the word reranking game (``wr``); its candidate search is
:mod:`lmchallenge.games.candidates`.

The corruption is LM Challenge 5.x's "sloppy typist": each character of a word is, with
probability ``p_anykey``, replaced by a character drawn uniformly from ``error_chars``
(docs/statistics.md, "wr").  The error score of a
candidate word ``w`` for a corrupted word ``v`` of the same length is the log-probability
(natural log) of that many kept and replaced characters::

    score(v, w) = k * log(1 - p_anykey) + (len(w) - k) * log(p_anykey),  k = #{i: v[i] == w[i]}

Randomness is seeded per message from ``(seed, user, message)`` with a stable hash
(docs/architecture.md, invariant 2), so a message is corrupted the same way whatever process or
partition evaluates it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import string
from dataclasses import dataclass, fields
from typing import Any

LOG = logging.getLogger(__name__)

DEFAULT_ERROR_CHARS = string.ascii_letters + "_-#@"
DEFAULT_P_ANYKEY = 0.1


@dataclass(frozen=True)
class ErrorModel:
    """Character substitution errors.

    Attributes:
        p_anykey: probability that a character is replaced (0 < p < 1).
        error_chars: the characters a replacement is drawn from.
    """

    p_anykey: float = DEFAULT_P_ANYKEY
    error_chars: str = DEFAULT_ERROR_CHARS

    def __post_init__(self) -> None:
        if not 0.0 < self.p_anykey < 1.0:
            raise ValueError(f"p_anykey must be in (0, 1), got {self.p_anykey}")
        if not self.error_chars:
            raise ValueError("error_chars must not be empty")
        if unprintable(self.error_chars):
            raise ValueError(f"error_chars must not hold whitespace or control characters "
                             f"(a typed word is one token): {self.error_chars!r}")

    def corrupt(self, word: str, rng: random.Random) -> str:
        """``word`` as typed by the sloppy typist, drawing from ``rng``."""
        p = self.p_anykey
        chars = self.error_chars
        return "".join(rng.choice(chars) if rng.random() < p else ch for ch in word)

    def score(self, typed: str, word: str) -> float:
        """Log-probability (nats) that ``word`` was typed as ``typed`` (same length)."""
        kept = sum(a == b for a, b in zip(typed, word))
        # log(1 - p), not log1p(-p): the scores LM Challenge 5.2 logs, to the last digit
        return kept * math.log(1 - self.p_anykey) + (len(word) - kept) * math.log(self.p_anykey)


def unprintable(chars: str) -> str:
    """The characters of ``chars`` that a typo may not be (whitespace, control characters:
    a typed word is one token, and the model protocol separates candidates by TAB and
    requests by line), sorted, once each; empty when there are none."""
    return "".join(sorted({ch for ch in chars if ch.isspace() or not ch.isprintable()}))


def error_model_of(config: dict[str, Any]) -> ErrorModel:
    """The :class:`ErrorModel` of a 5.x-style ``error_config`` dict (``p_anykey``,
    ``error_chars``; a key it lacks takes the default; other keys are ignored with a
    warning, as LM Challenge 5.x ignored them silently: QA, a TypeError naming
    ``ErrorModel.__init__``).

    Raises:
        ValueError: ``p_anykey`` not in (0, 1), or ``error_chars`` empty or not printable.
    """
    known = {f.name for f in fields(ErrorModel)}
    ignored = sorted(set(config) - known, key=str)
    if ignored:
        LOG.warning("wr: error_config keys ignored: %s (it takes p_anykey and error_chars)",
                    ", ".join(map(repr, ignored)))
    return ErrorModel(**{key: value for key, value in config.items() if key in known})


def message_rng(seed: int, user: str | int | None, message: int) -> random.Random:
    """The random stream of one message: seeded by SHA-256 of ``(seed, user, message)``
    (the user ``1`` and the user ``"1"`` get different streams).

    Independent of process, partition and ``PYTHONHASHSEED``.
    """
    name = "" if user is None else f"u:{user}" if isinstance(user, str) else f"i:{user}"
    key = f"{seed}\x1f{name}\x1f{message}".encode("utf-8")
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:16], "big"))


def read_vocabulary(path: str, warn: bool = False) -> list[str]:
    """Read a word list (one word per line, UTF-8, ``.gz`` ok), in file order; with
    ``warn``, warn (logging) when it looks like something else (:func:`unlike_a_word_list`).

    Raises:
        InputError: the file cannot be read or is not UTF-8.
    """
    from lmchallenge.corpus import decode_lines, open_binary
    from lmchallenge.errors import InputError
    try:
        with open_binary(path) as stream:
            words = [text for _, text in decode_lines(stream, path) if text]
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None
    why = unlike_a_word_list(words) if warn else None
    if why:
        LOG.warning("%s: %s", path, why)
    return words


def unlike_a_word_list(words: list[str]) -> str | None:
    """Why ``words`` (a word list's lines) look like something else than a word list, if
    they do: a corpus given in its place (QA: ``wr CORPUS VOCAB`` swapped ran to the end,
    the dictionary taken for the corpus and two JSON lines for the words), or empty (QA:
    ``wr /dev/null`` ran without a word)."""
    if not words:
        return "it holds no word: the candidates are the target and its typo only"
    if words[0].startswith("{") and words[0].rstrip().endswith("}"):
        return ("its lines look like JSON, not one word each: is it a corpus? (wr takes the "
                "word list first: wr VOCAB [CORPUS])")
    spaced = sum(1 for word in words if len(word.split()) > 1)
    if spaced * 2 > len(words):
        return (f"{spaced} of its {len(words)} lines hold several words: is it a corpus? (wr "
                "takes the word list first: wr VOCAB [CORPUS])")
    return None

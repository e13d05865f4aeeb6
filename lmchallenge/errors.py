"""The typing error model of the word reranking game (``wr``) and its candidate search.

The corruption is LM Challenge 5.x's "sloppy typist": each character of a word is, with
probability ``p_anykey``, replaced by a character drawn uniformly from ``error_chars``
(``../shared/seeds/004_f8d502719510d365.txt``, "Word Reranking").  The error score of a
candidate word ``w`` for a corrupted word ``v`` of the same length is the log-probability
(natural log) of that many kept and replaced characters::

    score(v, w) = k * log(1 - p_anykey) + (len(w) - k) * log(p_anykey),  k = #{i: v[i] == w[i]}

Randomness is seeded per message from ``(seed, user, message)`` with a stable hash
(DESIGN.md invariant 2), so a message is corrupted the same way whatever process or
partition evaluates it.
"""

from __future__ import annotations

import hashlib
import math
import random
import string
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

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

    def corrupt(self, word: str, rng: random.Random) -> str:
        """``word`` as typed by the sloppy typist, drawing from ``rng``."""
        p = self.p_anykey
        chars = self.error_chars
        return "".join(rng.choice(chars) if rng.random() < p else ch for ch in word)

    def score(self, typed: str, word: str) -> float:
        """Log-probability (nats) that ``word`` was typed as ``typed`` (same length)."""
        kept = sum(a == b for a, b in zip(typed, word))
        return kept * math.log1p(-self.p_anykey) + (len(word) - kept) * math.log(self.p_anykey)


def message_rng(seed: int, user: str | None, message: int) -> random.Random:
    """The random stream of one message: seeded by SHA-256 of ``(seed, user, message)``.

    Independent of process, partition and ``PYTHONHASHSEED``.
    """
    key = f"{seed}\x1f{'' if user is None else 'u:' + user}\x1f{message}".encode("utf-8")
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:16], "big"))


class CandidateSearch:
    """Finds the vocabulary words nearest to a typed word (most characters in place).

    Words are bucketed by length; each bucket is a position-major code-point matrix of
    shape ``(length, words)`` in the narrowest unsigned dtype that holds its code points
    (``uint8`` for Latin-1 words), so a search compares one contiguous row per typed
    character.  The best ``n`` words are chosen by counting: the match threshold that
    admits at least ``n`` words, then every word above it and the first words at it.  Ties
    are broken by vocabulary order (first occurrence in the list).

    Args:
        words: the vocabulary, in order (duplicates and empty strings are dropped).
    """

    def __init__(self, words: Iterable[str]):
        ordered = list(dict.fromkeys(w for w in words if w))
        self.size = len(ordered)
        by_length: dict[int, list[str]] = {}
        for word in ordered:
            by_length.setdefault(len(word), []).append(word)
        self._words = by_length
        self._codes = {length: _position_major_codes(ws) for length, ws in by_length.items()}

    def __call__(self, typed: str, n: int) -> list[str]:
        """Up to ``n`` words of ``len(typed)`` with the most positions equal to ``typed``,
        most matches first, then in vocabulary order."""
        codes = self._codes.get(len(typed))
        if codes is None or n <= 0:
            return []
        matches = _count_matches(codes, typed)
        words = self._words[len(typed)]
        return [words[i] for i in _best(matches, len(typed), n)]


def _position_major_codes(words: list[str]) -> np.ndarray:
    """Code points of equal-length ``words`` as a ``(length, len(words))`` matrix."""
    codes = np.array([[ord(c) for c in w] for w in words], dtype=np.uint32)
    top = int(codes.max())
    dtype = np.uint8 if top <= 0xFF else np.uint16 if top <= 0xFFFF else np.uint32
    return np.ascontiguousarray(codes.T, dtype=dtype)


def _count_matches(codes: np.ndarray, typed: str) -> np.ndarray:
    """Per word (column of ``codes``), how many positions hold the code point of ``typed``
    there, as ``uint8`` (words are far shorter than 256 characters)."""
    matches = np.zeros(codes.shape[1], dtype=np.uint8)
    equal = np.empty(codes.shape[1], dtype=bool)
    top = np.iinfo(codes.dtype).max
    for row, char in zip(codes, typed):
        point = ord(char)
        if point <= top:  # a code point wider than the bucket's dtype matches no word
            np.equal(row, point, out=equal)
            matches += equal.view(np.uint8)
    return matches


def _best(matches: np.ndarray, length: int, n: int) -> np.ndarray:
    """Indices of the ``n`` best words by (matches descending, index ascending)."""
    threshold = length
    while threshold > 0 and np.count_nonzero(matches >= threshold) < n:
        threshold -= 1
    above = np.flatnonzero(matches > threshold)
    chosen = np.concatenate([above, np.flatnonzero(matches == threshold)[:n - len(above)]])
    key = (length - matches[chosen].astype(np.int64)) * len(matches) + chosen
    return chosen[np.argsort(key)]


def read_vocabulary(path: str) -> list[str]:
    """Read a word list (one word per line, UTF-8, ``.gz`` ok), in file order.

    Raises:
        InputError: the file cannot be read or is not UTF-8.
    """
    from .corpus import decode_lines, open_binary
    from .exceptions import InputError
    try:
        with open_binary(path) as stream:
            return [text for _, text in decode_lines(stream, path) if text]
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None

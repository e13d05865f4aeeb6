"""The candidate search of the word reranking game (``wr``): the vocabulary words nearest
to a corrupted word (docs/architecture.md, "Performance": words bucketed by length as code-point
arrays, matches counted with NumPy, ties broken by vocabulary order).

Its own module so that the other games do not import NumPy.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


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
    there, as ``uint8`` for words shorter than 256 characters (nearly all), else ``uint16``
    (a vocabulary's URLs or base64: 256 matches counted in ``uint8`` wrapped to 0)."""
    matches = np.zeros(codes.shape[1], dtype=np.uint16 if len(typed) > 0xFF else np.uint8)
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

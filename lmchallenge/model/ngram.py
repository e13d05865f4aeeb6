"""The built-in n-gram model of ``lmc-ngram``: word or character n-grams with interpolated
modified Kneser-Ney smoothing, a per-user unigram cache, and a memory-mappable model file.

Smoothing (Chen & Goodman 1998, "An Empirical Study of Smoothing Techniques for Language
Modeling", TR-10-98, section 3.5, interpolated modified Kneser-Ney), for a history ``h``
of ``k - 1`` units and its shortened history ``h'`` (``h`` without its oldest unit)::

    P_k(w | h) = max(c_k(h w) - D_k(c_k(h w)), 0) / c_k(h .)  +  gamma_k(h) * P_{k-1}(w | h')
    gamma_k(h) = (D_k1 N1(h .) + D_k2 N2(h .) + D_k3+ N3+(h .)) / c_k(h .)
    D_k1 = 1 - 2Y n2/n1,  D_k2 = 2 - 3Y n3/n2,  D_k3+ = 3 - 4Y n4/n3,  Y = n1 / (n1 + 2 n2)

where ``c_k`` is the raw count at the highest order and the continuation count
``N1+(. h w)`` (number of distinct units seen before ``h w``) at lower orders, except for
n-grams that start at the beginning of a line, which keep raw counts (nothing can precede
them; KenLM does the same).  ``n_r`` is the number of n-grams of order ``k`` with count
``r``.  The unigram level interpolates with the uniform distribution over the vocabulary,
so every vocabulary unit has a non-zero probability.  A history never seen passes the
lower order's distribution through unchanged (``gamma = 1``).

Units and vocabulary:

* word models use the project word tokenizer (:func:`lmchallenge.tokenize.word_tokenizer`);
  character models use code points (spaces included);
* each corpus line is one message: a history never crosses a line, and the first unit of a
  line is predicted after the begin-of-line symbol;
* the vocabulary is the units seen at least ``min_count`` times in training.  Probabilities
  are normalised over the vocabulary: there is no ``<unk>`` word, and a unit outside the
  vocabulary cannot be scored (the protocol then omits it).  Rarer units are only a
  boundary: n-grams containing them are not counted and a history is cut after them (they
  still count as a distinct left neighbour for continuation counts).

The per-user cache (Kuhn & De Mori 1990, "A cache-based natural language model for speech
recognition") is a unigram distribution over the units the user typed since the last
``clear``; with ``N`` cached units the model is the mixture::

    P(w | h) = (1 - mu) P_static(w | h) + mu c_cache(w) / N,   mu = weight * N / (N + halfway)

which is normalised over the vocabulary plus the cached units (a unit the user typed that
is not in the static vocabulary becomes scorable through the cache).  With ``N = 0`` the
model is exactly the static model.  The defaults (weight 0.05, halfway 50) gave the lowest
``we --train`` entropy among the few settings tried on the rails commit sample (4.760 vs
4.776 without a cache, 4.793 with weight 0.2).

Model file (:func:`save_tables` / :func:`load_tables`): a small header then raw aligned
little-endian arrays, loaded with a read-only memory map, so loading costs milliseconds and
many model processes on one machine share one copy of the tables in the page cache.

Top-N without a full scan: the ids of the vocabulary are in code-point order, so the words
extending a prefix are one id range, and the continuations of a history are one block of
rows sorted by id, with a precomputed order by probability.  The best ``N`` words are among
the best ``N`` of each order (continuations of each history suffix, then the unigrams),
which :meth:`NgramTables.best` takes with a few vectorised lookups.  ``wc`` asks for the next
word after a history, then for each prefix of the word typed after the same history: the
history's continuations are then scored once (:meth:`NgramTables.continuations`) and each
query takes the best of an id range of them and of the unigram order
(:meth:`NgramTables.best_of`).

Measured on the KJV Old Testament (23,145 lines, 703,285 words; a 2-core machine shared
with other jobs): word trigram model trained in 4 s (2.5 s of it tokenizing), file 11.6 MB;
character 6-gram model 5 s, 10.2 MB; ``serve`` answers its first request 0.3 s after
starting; through the pipe, about 6,500 top-20 predictions/s (the ``wc`` requests of
``kjv/test.sample.txt``), 15,000-19,000 single-candidate words/s (``we``) and 23,000-46,000
characters/s (``ce``).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import json
import math
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import regex

from lmchallenge.errors import InputError, LmcError
from lmchallenge.model.api import Model
from lmchallenge.model.wire import Result
from lmchallenge.tokenize import longest_emoji, space_may_be_in_token, word_tokenizer

BOS = 0
"""Id of the begin-of-line symbol (its vocabulary entry is the empty string)."""

UNITS = ("word", "char")
FILE_MAGIC = b"LMCNGRAM\x01\n"
FORMAT_VERSION = 1
_ALIGN = 64
_WHITESPACE = regex.compile(r"\s")
_LAST_WHITESPACE = regex.compile(r"\s", flags=regex.REVERSE)
_DEFAULT_DISCOUNTS = (0.5, 1.0, 1.5)
ROWS_MEMO = 1 << 16
"""Histories (as vocabulary ids) whose table rows an :class:`NgramModel` remembers, the most
recently used: on KJV text 80% of ``we`` queries repeat a history of the 26k seen in 5,000
lines."""
TOP_MEMO = 1 << 13
"""(history, prefix) pairs whose predictions an :class:`NgramModel` remembers until its cache
changes, the most recently used (about 20 MB with 20 predictions each): of ``wc``'s prediction
queries on 1,000 KJV lines, 37% repeat a pair.  As many static model's best (ids and
probabilities, about 6 MB) are kept across ``train``, for a model with a user cache."""
CONTINUATIONS_MEMO = 256
"""Histories (as vocabulary ids) whose :class:`Continuations` an :class:`NgramModel` keeps for
its next-word predictions and completions, the most recently used: ``wc`` asks for the next
word after a history, then for each prefix of the word typed, all after that history."""
CONTINUATIONS_MOST = 4096
"""The most continuations of a history that an :class:`NgramModel` computes at once (at most
about 100 KB each, 25 MB for :data:`CONTINUATIONS_MEMO` of them); a history with more is
answered by :meth:`NgramTables.best`, which reads only the best of each of its suffixes."""
MAX_ORDER = 64
"""The highest n-gram order a model file may have (a history's ids are packed in int64 keys
order by order; higher orders are of no use for these corpora anyway)."""
LONG_STRETCH = 64
"""Code points after a context's last whitespace (or from its start, where it has none) that
:class:`NgramModel` tokenizes from there at each query; a longer stretch (a line of emoji
written without spaces, or of CJK words and punctuation) is tokenized from the line's anchor,
so that a line of many tokens costs linear, not quadratic, time (a single long token is still
tokenized from its start at each query: a run of flags, of post-4.0 emoji, of CJK letters)."""
TOP_MEMO_PREFIX = 16
"""Longest prefix (code points) whose predictions are remembered: a long word typed one
character at a time would otherwise keep every one of its prefixes."""


# Static tables -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Continuations:
    """The units that the suffixes of one history continue (:meth:`NgramTables.continuations`).

    Attributes:
        ids: int64, sorted, distinct: the ids that some suffix of the history continues.
        probs: float64, ``P(id | history)`` of each (as :meth:`NgramTables.probs`).
        scale: ``P(w | history) = scale * P_1(w)`` for every other id ``w`` (the product of
            the history's interpolation weights).
    """

    ids: np.ndarray
    probs: np.ndarray
    scale: float

    def probs_of(self, ids: np.ndarray, unigram: np.ndarray) -> np.ndarray:
        """``P(id | history)`` of each of ``ids`` (int64), ``unigram`` being the tables'
        ``prob[0]``: the same floats as :meth:`NgramTables.probs`, one search instead of
        one per history suffix."""
        result = self.scale * unigram[ids]
        if len(self.ids) and len(ids):
            at = np.minimum(self.ids.searchsorted(ids), len(self.ids) - 1)
            hit = self.ids[at] == ids
            result[hit] = self.probs[at[hit]]
        return result


@dataclass
class NgramTables:
    """The static n-gram model: a trie of n-grams stored as sorted arrays.

    Ids: ``0`` is the begin-of-line symbol, ``1..V`` the vocabulary in code-point order (so
    the words starting with a prefix are a contiguous id range).  ``B = V + 1``.

    Attributes:
        unit: ``"word"`` or ``"char"``.
        order: n, the longest n-gram (>= 1).
        vocab: ``V + 1`` strings, ``vocab[0] == ""`` (begin of line), then sorted units.
        prob: ``prob[k - 1]`` float64, interpolated ``P_k(w | h)`` of each row of order k;
            for k = 1 the rows are the ids (``prob[0][0] == 0``: begin of line is never
            predicted).
        keys: ``keys[k - 1]`` int64 for k >= 2, sorted: ``row_of(h) * B + w`` where
            ``row_of(h)`` is the row of history ``h`` in the order k-1 table (``keys[0]``
            is ``None``: the row of a unigram is its id).
        gamma: ``gamma[k - 1]`` float64 for k < n: interpolation weight of the lower order
            when the row (an n-gram of order k) is the history of order k+1 (1.0 when it
            has no continuation).
        rank: ``rank[k - 1]`` int64 rows of order k sorted by (history, -prob, id); for
            k = 1 the ids ``1..V`` by (-prob, id).
        meta: training facts (counts, discounts, min_count), saved in the file header.
    """

    unit: str
    order: int
    vocab: list[str]
    prob: list[np.ndarray]
    keys: list[np.ndarray | None]
    gamma: list[np.ndarray]
    rank: list[np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)
    _index: dict[str, int] | None = field(default=None, repr=False)

    @property
    def base(self) -> int:
        """B = V + 1, the radix of the keys."""
        return len(self.vocab)

    @property
    def index(self) -> dict[str, int]:
        """Unit -> id (built on first use)."""
        if self._index is None:
            self._index = {w: i for i, w in enumerate(self.vocab) if i}
        return self._index

    def prefix_range(self, prefix: str) -> tuple[int, int]:
        """Ids ``[lo, hi)`` of the vocabulary units that start with ``prefix`` and are
        strictly longer (all units for ``""``)."""
        vocab = self.vocab
        if not prefix:
            return 1, len(vocab)
        lo = bisect.bisect_right(vocab, prefix, lo=1)
        hi = bisect.bisect_left(vocab, prefix + "\U0010ffff", lo=lo)
        return lo, hi

    # -- lookups
    def _find(self, k: int, key: int) -> int:
        """Row of ``key`` in the order-k table, or -1."""
        keys = self.keys[k - 1]
        pos = int(keys.searchsorted(key))
        return pos if pos < len(keys) and int(keys[pos]) == key else -1

    def _not_continued(self, ids: np.ndarray, histories: list[tuple[int, int]]) -> np.ndarray:
        """Mask of ``ids`` that continue none of ``histories`` ((order k, row in the order
        k-1 table) pairs)."""
        keep = np.ones(len(ids), dtype=bool)
        for k, row in histories:
            keep &= _absent(row * self.base + ids, self.keys[k - 1])
        return keep

    def history_rows(self, history: Sequence[int]) -> list[int]:
        """Rows of the suffixes of ``history`` that are in the model.

        Args:
            history: ids, oldest first (at most ``order - 1`` are used).
        Returns:
            ``rows`` with ``rows[j - 1]`` the row of the last ``j`` ids in the order-j table,
            for ``j = 1 .. m`` where ``m`` is the longest suffix found (``[]`` if none).
        """
        history = list(history)[max(0, len(history) - (self.order - 1)):]
        rows: list[int] = []
        base = self.base
        for j in range(1, len(history) + 1):
            suffix = history[-j:]
            row = suffix[0]
            for k in range(2, j + 1):
                row = self._find(k, row * base + suffix[k - 1])
                if row < 0:
                    return rows
            rows.append(row)
        return rows

    def prob_of(self, word: int, rows: Sequence[int]) -> float:
        """``P(word | history)`` for ``rows`` from :meth:`history_rows`."""
        base = self.base
        scale = 1.0
        for j in range(len(rows), 0, -1):
            found = self._find(j + 1, rows[j - 1] * base + word)
            if found >= 0:
                return scale * float(self.prob[j][found])
            scale *= float(self.gamma[j - 1][rows[j - 1]])
        return scale * float(self.prob[0][word])

    def probs(self, ids: np.ndarray, rows: Sequence[int]) -> np.ndarray:
        """``P(id | history)`` for an int array of ids (vectorised :meth:`prob_of`)."""
        base = self.base
        result = np.zeros(len(ids))
        todo = np.ones(len(ids), dtype=bool)
        scale = 1.0
        for j in range(len(rows), 0, -1):
            keys = self.keys[j]
            if len(keys):      # else no n-gram of order j + 1 (no training line that long)
                wanted = rows[j - 1] * base + ids
                pos = np.minimum(keys.searchsorted(wanted), len(keys) - 1)
                hit = todo & (keys[pos] == wanted)
                result[hit] = scale * self.prob[j][pos[hit]]
                todo &= ~hit
            scale *= float(self.gamma[j - 1][rows[j - 1]])
        result[todo] = scale * self.prob[0][ids[todo]]
        return result

    def best(self, rows: Sequence[int], lo: int, hi: int,
             n: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``n`` most probable ids in ``[lo, hi)`` after a history (ties by id).

        Each order contributes its best candidates: the continuations of each history
        suffix (then the unigrams) in decreasing probability, skipping ids that a longer
        suffix continues (they were scored there).  The top ``n`` overall are among the
        first ``n`` of every order.

        Returns:
            ``(probabilities, ids)``, most probable first.
        """
        found_p: list[np.ndarray] = []
        found_id: list[np.ndarray] = []
        longer: list[tuple[int, int]] = []
        scale = 1.0
        for j in range(len(rows), -1, -1):
            order, ids, probs = self._level(j, rows, lo, hi)
            kept = _first_kept(ids, n, lambda chunk: self._not_continued(chunk, longer))
            found_p.append(scale * probs[order[kept]])
            found_id.append(ids[kept])
            if j:
                longer.append((j + 1, rows[j - 1]))
                scale *= float(self.gamma[j - 1][rows[j - 1]])
        p = np.concatenate(found_p)
        ids = np.concatenate(found_id)
        top = np.lexsort((ids, -p))[:n]
        return p[top], ids[top]

    def continuations(self, rows: Sequence[int], most: int) -> Continuations | None:
        """The units that some suffix of a history continues in the tables, with their
        probabilities after the whole history; ``None`` if there are more than ``most``.

        Every other unit's probability is the unigram one scaled by all the history's
        interpolation weights (``scale``), so the best ``n`` of any id range are among the
        best ``n`` continuations in it and the best ``n`` of the unigram order in it that are
        not continuations (:meth:`best_of`).

        The shortest suffix's continuations are read as they are stored (a block of rows
        sorted by id, with their probabilities), and the longer suffixes' written over
        them: the suffix of an n-gram that :func:`train_tables` counted is counted too, so
        they are among them (tables where one is not give ``None``, as if too many).

        Args:
            rows: from :meth:`history_rows`.
            most: the largest number of continuations worth computing at once (a common
                history of a large model continues with most of its vocabulary).
        """
        base = self.base
        blocks = []     # (suffix length, first row, end row, the weight of its probabilities
        scale = 1.0     # as probs() has it), the longest suffix first
        for j in range(len(rows), 0, -1):
            keys = self.keys[j]
            h = rows[j - 1] * base
            start, end = int(keys.searchsorted(h)), int(keys.searchsorted(h + base))
            if end - start > most:
                return None
            blocks.append((j, start, end, scale))
            scale *= float(self.gamma[j - 1][rows[j - 1]])
        if not blocks:
            return Continuations(np.zeros(0, dtype=np.int64), np.zeros(0), scale)
        j, start, end, weight = blocks.pop()
        ids = self.keys[j][start:end] % base
        probs = weight * self.prob[j][start:end]
        for j, start, end, weight in reversed(blocks):
            longer = self.keys[j][start:end] % base
            if _absent(longer, ids).any():
                return None
            probs[ids.searchsorted(longer)] = weight * self.prob[j][start:end]
        return Continuations(ids, probs, scale)

    def best_of(self, known: Continuations, lo: int, hi: int,
                n: int) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`best`, for the history whose :meth:`continuations` are ``known``: the
        same answer with a few vectorised operations a query, for the queries of ``wc``
        that share a history (the next word, then each prefix of it)."""
        ids, probs = known.ids, known.probs
        if lo == 1 and hi == self.base:
            top = _best_positions(ids, probs, n)
            kept = self.rank[0][_first_kept(self.rank[0], n, lambda chunk: _absent(chunk, ids))]
        else:
            a, b = int(ids.searchsorted(lo)), int(ids.searchsorted(hi))
            ids, probs = ids[a:b], probs[a:b]
            top = _best_positions(ids, probs, n)
            units = np.arange(lo, hi)
            kept = lo + _best_positions(units, self.prob[0][lo:hi], n,
                                        _absent(units, known.ids))
        p = np.concatenate((probs[top], known.scale * self.prob[0][kept]))
        ids = np.concatenate((ids[top], kept))
        top = np.lexsort((ids, -p))[:n]
        return p[top], ids[top]

    def _level(self, j: int, rows: Sequence[int], lo: int,
               hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows in decreasing probability, their ids, the table's probabilities)`` of
        the ids in ``[lo, hi)`` continuing the history suffix of length j (0: unigrams)."""
        base = self.base
        if j == 0:
            probs = self.prob[0]
            if lo == 1 and hi == base:
                order = self.rank[0]
            else:
                order = lo + np.argsort(-probs[lo:hi], kind="stable")
            return order, order, probs
        keys = self.keys[j]
        probs = self.prob[j]
        h = rows[j - 1]
        start = int(keys.searchsorted(h * base + lo))
        end = int(keys.searchsorted(h * base + hi))
        if lo == 1 and hi == base:
            order = self.rank[j][start:end]
        else:
            order = start + np.argsort(-probs[start:end], kind="stable")
        return order, keys[order] % base, probs


def _best_positions(ids: np.ndarray, probs: np.ndarray, n: int,
                    keep: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``n`` highest ``probs`` (ties by lower id) among those ``keep``
    marks (all if ``None``): those at or above the n-th highest (a partition, linear), then
    sorted, so that a history with thousands of continuations is not sorted whole."""
    if keep is None and len(ids) <= 4 * n:     # few: sorted whole
        return np.lexsort((ids, -probs))[:n]
    at = np.arange(len(ids)) if keep is None else np.flatnonzero(keep)
    if len(at) > 4 * n:
        p = probs[at]
        at = at[p >= np.partition(p, len(p) - n)[len(p) - n]]
    return at[np.lexsort((ids[at], -probs[at]))][:n]


def _first_kept(items: np.ndarray, n: int,
                keep: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Positions of the first ``n`` of ``items`` that ``keep`` (a mask of a slice of them)
    keeps, read in growing chunks: most stop at the first."""
    found = [np.zeros(0, dtype=np.int64)]
    taken, start, size = 0, 0, max(32, 2 * n)
    while taken < n and start < len(items):
        found.append(start + np.flatnonzero(keep(items[start:start + size]))[:n - taken])
        taken += len(found[-1])
        start += size
        size *= 4
    return np.concatenate(found)


def _absent(ids: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Mask of ``ids`` not in ``sorted_ids`` (int arrays; the second sorted)."""
    if not len(sorted_ids):
        return np.ones(len(ids), dtype=bool)
    pos = np.minimum(sorted_ids.searchsorted(ids), len(sorted_ids) - 1)
    return sorted_ids[pos] != ids


# Training ----------------------------------------------------------------------------------

def _row_codes(rows: np.ndarray, base: int) -> np.ndarray:
    """Dense int64 codes of the rows of ``rows`` (N, k) that preserve lexicographic order."""
    code = rows[:, 0].astype(np.int64)
    for j in range(1, rows.shape[1]):
        _, inverse = np.unique(code, return_inverse=True)
        code = inverse.astype(np.int64).reshape(-1) * base + rows[:, j]
    return code


def _unique_rows(rows: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows in lexicographic order and how often each occurs.

    Rows of ids below ``base`` are packed into one int64 each when ``base ** k`` fits
    (one sort); otherwise they get dense codes column by column."""
    k = rows.shape[1]
    if len(rows) == 0:
        return rows.reshape(0, k), np.zeros(0, dtype=np.int64)
    packed = base ** k < 2 ** 62
    if packed:
        codes = np.zeros(len(rows), dtype=np.int64)
        for col in range(k):
            codes *= base
            codes += rows[:, col]
        codes.sort()
    else:
        codes = np.sort(_row_codes(rows, base))
    first = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    counts = np.diff(np.append(first, len(codes))).astype(np.int64)
    if not packed:
        _, where = np.unique(_row_codes(rows, base), return_index=True)
        return rows[where], counts
    distinct = codes[first]
    out = np.empty((len(distinct), k), dtype=np.int64)
    for col in range(k - 1, -1, -1):
        out[:, col] = distinct % base
        distinct = distinct // base
    return out, counts


def _windows(stream: np.ndarray, k: int, unk: int, unk_first: bool) -> np.ndarray:
    """Windows of ``k`` ids of ``stream`` within one line and without rare units
    (a rare unit is allowed in the first column when ``unk_first``)."""
    if len(stream) < k:     # a corpus of fewer units than the order
        return np.empty((0, k), dtype=stream.dtype)
    view = np.lib.stride_tricks.sliding_window_view(stream, k)
    ok = np.ones(len(view), dtype=bool)
    for col in range(k):
        if col:
            ok &= view[:, col] != BOS
        if col or not unk_first:
            ok &= view[:, col] != unk
    return view[ok]


def _discounts(counts: np.ndarray) -> tuple[float, float, float]:
    """Modified Kneser-Ney discounts (D1, D2, D3+) from counts-of-counts (Chen & Goodman
    1998, eq. 26); the usual defaults when the counts-of-counts cannot give them."""
    n = [int(np.count_nonzero(counts == r)) for r in (1, 2, 3, 4)]
    if min(n) == 0:
        return _DEFAULT_DISCOUNTS
    y = n[0] / (n[0] + 2 * n[1])
    found = (1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2])
    if not all(0 < d <= r + 1 for r, d in enumerate(found)):
        return _DEFAULT_DISCOUNTS
    return found


def _lookup_rows(keys: list[np.ndarray | None], rows: np.ndarray, base: int) -> np.ndarray:
    """Rows in the order-m trie table of the n-grams ``rows`` (N, m) (all must exist)."""
    found = rows[:, 0].astype(np.int64)
    for col in range(1, rows.shape[1]):
        found = np.searchsorted(keys[col], found * base + rows[:, col])
    return found


def _smooth(counts: np.ndarray, history: np.ndarray, n_histories: int, lower: np.ndarray,
            discounts: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Interpolated modified Kneser-Ney for one order.

    Args:
        counts: (N,) count of each n-gram (raw or continuation).
        history: (N,) row of each n-gram's history in the lower table.
        n_histories: size of the lower table.
        lower: (N,) lower-order probability of each n-gram's word.
    Returns:
        ``(prob, gamma)``: (N,) interpolated probabilities and (n_histories,) the lower
        order's weight per history (1.0 for histories without continuations).
    """
    d1, d2, d3 = discounts
    discount = np.where(counts == 1, d1, np.where(counts == 2, d2, d3))
    total = np.bincount(history, weights=counts, minlength=n_histories)
    mass = np.bincount(history, weights=discount, minlength=n_histories)
    gamma = np.ones(n_histories)
    seen = total > 0
    gamma[seen] = mass[seen] / total[seen]
    prob = (counts - discount) / total[history] + gamma[history] * lower
    return prob, gamma


def train_tables(lines: Iterable[Sequence[str]], order: int = 3, unit: str = "word",
                 min_count: int = 1) -> NgramTables:
    """Count and smooth the n-grams of ``lines``.

    Args:
        lines: each line (message) as a sequence of units (word tokens or characters).
        order: n (>= 1).
        unit: ``"word"`` or ``"char"`` (recorded in the model; units are given already split).
        min_count: units seen fewer times are left out of the vocabulary.
    Returns:
        The tables; deterministic for a given input.
    Raises:
        LmcError: ``order`` < 1, ``min_count`` < 1, or no unit reaches ``min_count``.
    """
    if not 1 <= order <= MAX_ORDER:    # beyond it, a model file load_tables refuses (QA)
        raise LmcError(f"n-gram order must be from 1 to {MAX_ORDER}, not {order}")
    if min_count < 1:
        raise LmcError(f"min count must be at least 1, not {min_count}")
    if unit not in UNITS:
        raise LmcError(f"unit must be one of {UNITS}, not {unit!r}")
    lines = [list(line) for line in lines]
    raw = Counter(u for line in lines for u in line)
    vocab = [""] + sorted(u for u, c in raw.items() if c >= min_count and u)
    if not any(raw):
        raise LmcError(f"the training corpus holds no {unit} (it is empty, or blank lines)")
    if len(vocab) == 1:
        raise LmcError(f"no {unit} occurs at least {min_count} times in the training corpus")
    base = len(vocab)
    unk = base
    index = {u: i for i, u in enumerate(vocab) if i}
    stream = np.array([i for line in lines for i in (BOS, *[index.get(u, unk) for u in line])],
                      dtype=np.int64)
    ngrams: list[tuple[np.ndarray, np.ndarray]] = []  # per order: rows, counts used
    for k in range(1, order + 1):
        rows, counts = _unique_rows(_windows(stream, k, unk, unk_first=False), base + 1)
        if k < order:
            extended, _ = _unique_rows(_windows(stream, k + 1, unk, unk_first=True), base + 1)
            suffixes, continuation = _unique_rows(extended[:, 1:], base + 1)
            later = rows[:, 0] != BOS
            assert np.array_equal(rows[later], suffixes), "continuation counts misaligned"
            counts = counts.copy()
            counts[later] = continuation
        ngrams.append((rows, counts))

    prob: list[np.ndarray] = []
    keys: list[np.ndarray | None] = [None]
    gamma: list[np.ndarray] = []
    rank: list[np.ndarray] = []
    discounts: list[list[float]] = []
    # order 1: interpolate with the uniform distribution over the vocabulary
    rows, counts = ngrams[0]
    unigram = np.zeros(base, dtype=np.int64)
    unigram[rows[:, 0]] = counts
    d = _discounts(counts[rows[:, 0] != BOS])
    discounts.append(list(d))
    p1, _ = _smooth(unigram[1:].astype(np.float64), np.zeros(base - 1, dtype=np.int64), 1,
                    np.full(base - 1, 1.0 / (base - 1)), d)
    prob.append(np.concatenate([[0.0], p1]))
    rank.append(1 + np.lexsort((np.arange(base - 1), -p1)))
    for k in range(2, order + 1):
        rows, counts = ngrams[k - 1]
        history = _lookup_rows(keys, rows[:, :-1], base)
        key = history * base + rows[:, -1]
        assert np.all(np.diff(key) > 0), "trie keys not sorted"
        if k == 2:
            lower = prob[0][rows[:, 1]]
        else:
            lower = prob[k - 2][_lookup_rows(keys, rows[:, 1:], base)]
        d = _discounts(counts)
        discounts.append(list(d))
        pk, gk = _smooth(counts.astype(np.float64), history, len(prob[k - 2]), lower, d)
        keys.append(key)
        prob.append(pk)
        gamma.append(gk)
        rank.append(np.lexsort((rows[:, -1], -pk, history)).astype(np.int64))
    meta = {"min_count": min_count, "lines": len(lines), "units": int(sum(raw.values())),
            "vocabulary": base - 1, "discounts": discounts,
            "ngrams": [len(r) for r, _ in ngrams]}
    return NgramTables(unit=unit, order=order, vocab=vocab, prob=prob, keys=keys, gamma=gamma,
                       rank=rank, meta=meta)


# Model files -------------------------------------------------------------------------------

def _arrays(tables: NgramTables) -> dict[str, np.ndarray]:
    """The arrays of ``tables``' model file, in the order of :func:`_array_names`."""
    joined = "".join(tables.vocab).encode("utf-8")
    by_kind = {"prob": tables.prob, "rank": tables.rank, "keys": tables.keys,
               "gamma": tables.gamma}
    arrays = {"vocab_text": np.frombuffer(joined, dtype=np.uint8),
              "vocab_lengths": np.array([len(w) for w in tables.vocab], dtype="<i8")}
    for name in _array_names(tables.order)[2:]:
        kind = _kind(name)
        arrays[name] = by_kind[kind][int(name[len(kind):]) - 1].astype(_ARRAY_DTYPES[kind])
    return arrays


def _kind(name: str) -> str:
    """An array's name without its order (``prob3``: ``prob``)."""
    return name.rstrip("0123456789")


def _array_names(order: int) -> list[str]:
    """The arrays of a model file of ``order``, in the order they are written."""
    names = ["vocab_text", "vocab_lengths"]
    for k in range(1, order + 1):
        names += [f"prob{k}", f"rank{k}"] + ([f"keys{k}"] if k >= 2 else []) \
            + ([f"gamma{k}"] if k < order else [])
    return names


def _header_crc(header: dict[str, Any]) -> int:
    """CRC-32 of the header's JSON without its ``checksum`` (what the checksum covers
    before the arrays)."""
    body = {key: value for key, value in header.items() if key != "checksum"}
    return zlib.crc32(json.dumps(body, sort_keys=True).encode("utf-8"))


def save_tables(tables: NgramTables, path: str | os.PathLike) -> None:
    """Write ``tables`` to ``path`` (a temporary file of this process beside it, renamed
    when complete: :func:`lmchallenge.logs.files.atomic_path`).

    Layout: ``FILE_MAGIC``, an 8-byte little-endian header length, a JSON header (sorted
    keys: unit, order, meta, each array's dtype, shape and byte offset, and ``checksum``:
    the CRC-32 of the header without it and of the bytes after the header, 8 hex digits),
    then the arrays, each aligned to 64 bytes.  The same tables always give the same bytes.

    Raises:
        OSError: the file cannot be written (named by ``path``).
    """
    from lmchallenge.logs.files import atomic_path

    specs: dict[str, dict[str, Any]] = {}
    body: list[Any] = []      # the bytes after the header: each array's padding, then the array
    offset = 0
    for name, array in _arrays(tables).items():
        aligned = -(-offset // _ALIGN) * _ALIGN
        specs[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": aligned}
        body += [b"\0" * (aligned - offset), np.ascontiguousarray(array).reshape(-1).view(np.uint8)]
        offset = aligned + array.nbytes
    fields = {"format": FORMAT_VERSION, "unit": tables.unit, "order": tables.order,
              "meta": tables.meta, "arrays": specs}
    crc = _header_crc(fields)
    for chunk in body:
        crc = zlib.crc32(chunk, crc)
    header = json.dumps({**fields, "checksum": f"{crc:08x}"}, sort_keys=True).encode("utf-8")
    start = -(-(len(FILE_MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    with atomic_path(path) as temporary, open(temporary, "wb") as out:
        out.write(FILE_MAGIC + len(header).to_bytes(8, "little") + header)
        out.write(b"\0" * (start - out.tell()))
        out.writelines(body)


def _header_problem(header: Any, data_bytes: int) -> str | None:
    """What is wrong with a model file's header (its fields, and arrays that do not fit in
    the ``data_bytes`` after it), or None."""
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    unknown = sorted(set(header) - {"format", "unit", "order", "meta", "arrays", "checksum"})
    if unknown:
        return f"its header has the unknown field {unknown[0]!r}"
    order, specs = header.get("order"), header.get("arrays")
    if header.get("unit") not in UNITS:
        return f"unit {header.get('unit')!r} is not one of {', '.join(UNITS)}"
    if isinstance(order, bool) or not isinstance(order, int) or not 1 <= order <= MAX_ORDER:
        return f"order {order!r} is not a whole number from 1 to {MAX_ORDER}"
    if not isinstance(header.get("meta"), dict):
        return "its header has no meta object"
    if not isinstance(specs, dict) or set(specs) != set(_array_names(order)):
        return f"its arrays are not those of an order-{order} model"
    lengths: dict[str, int] = {}
    for name, spec in specs.items():
        try:
            shape = [int(n) for n in spec["shape"]]
            dtype = np.dtype(spec["dtype"])
            end = int(spec["offset"]) + dtype.itemsize * math.prod(shape)
        except (KeyError, TypeError, ValueError):
            return f"array {name} is not described right"
        wanted = _ARRAY_DTYPES[_kind(name)]
        if dtype.str != wanted or len(shape) != 1:
            return f"array {name} is {dtype.str} in {len(shape)} dimensions, not {wanted} in 1"
        if shape[0] < 0 or int(spec["offset"]) < 0 or end > data_bytes:
            return f"array {name} does not fit in the file"
        lengths[name] = shape[0]
    return _lengths_problem(lengths, order)


_ARRAY_DTYPES = {"vocab_text": "|u1", "vocab_lengths": "<i8", "prob": "<f8", "gamma": "<f8",
                 "rank": "<i8", "keys": "<i8"}
"""The type of each array of a model file (by name without its order)."""


def _lengths_problem(lengths: dict[str, int], order: int) -> str | None:
    """Whether the arrays' lengths agree: one probability and one length per vocabulary unit
    (``BOS`` included), a rank per unit but ``BOS``, and per n-gram of order k >= 2 a key,
    a probability, a rank and, below the highest order, a back-off weight."""
    vocabulary = lengths["vocab_lengths"]
    expected = {"prob1": vocabulary, "rank1": vocabulary - 1}
    if order > 1:
        expected["gamma1"] = vocabulary
    for k in range(2, order + 1):
        expected.update({f"prob{k}": lengths[f"keys{k}"], f"rank{k}": lengths[f"keys{k}"]})
        if k < order:
            expected[f"gamma{k}"] = lengths[f"keys{k}"]
    for name, length in expected.items():
        if lengths[name] != length:
            return f"array {name} has {lengths[name]} entries, not {length}"
    return None


def load_tables(path: str | os.PathLike) -> NgramTables:
    """Memory-map a model file written by :func:`save_tables`, checked: its header's fields,
    its arrays within the file and, where the file has one (files written since the checksum
    was added), its checksum.

    Raises:
        InputError: the file is missing, not a model file, of another format version, or
            damaged (truncated, changed since it was written).
    """
    path = str(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(len(FILE_MAGIC))
            if magic != FILE_MAGIC:
                raise InputError(path, None, "not an lmc-ngram model file")
            size = int.from_bytes(f.read(8), "little")
            room = os.fstat(f.fileno()).st_size - len(FILE_MAGIC) - 8
            if size > room:
                raise InputError(path, None, _damaged("its header runs past its end"))
            header = json.loads(f.read(size).decode("utf-8"))
    except OSError as e:
        raise InputError(path, None, f"cannot read model: {e.strerror or e}") from None
    except ValueError:      # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise InputError(path, None, _damaged("its header is not JSON")) from None
    if isinstance(header, dict) and header.get("format") != FORMAT_VERSION:
        raise InputError(path, None, f"model format {header.get('format')} is not supported "
                                     f"(expected {FORMAT_VERSION}); train it again")
    start = -(-(len(FILE_MAGIC) + 8 + size) // _ALIGN) * _ALIGN
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    problem = _header_problem(header, max(0, len(mapped) - start))
    if problem is None and "checksum" in header:
        found = zlib.crc32(mapped[start:], _header_crc(header))
        if f"{found:08x}" != header["checksum"]:
            problem = "its checksum does not match: changed since it was written"
    if problem is not None:
        raise InputError(path, None, _damaged(problem))
    try:
        return _tables(header, mapped, start)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise InputError(path, None, _damaged(f"{type(e).__name__}: {e}")) from None


def _damaged(problem: str) -> str:
    return f"damaged lmc-ngram model file ({problem}); train it again"


def _tables(header: dict[str, Any], mapped: np.ndarray, start: int) -> NgramTables:
    """The tables of a model file whose ``header`` was checked, mapped as ``mapped``."""

    def array(name: str) -> np.ndarray:
        spec = header["arrays"][name]
        return np.frombuffer(mapped, dtype=np.dtype(spec["dtype"]), count=spec["shape"][0],
                             offset=start + spec["offset"])

    text = array("vocab_text").tobytes().decode("utf-8")
    ends = np.cumsum(array("vocab_lengths")).tolist()
    if (ends[-1] if ends else 0) != len(text):
        raise ValueError("the vocabulary's lengths do not add up to its text")
    vocab = [text[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    order = int(header["order"])
    return NgramTables(
        unit=header["unit"], order=order, vocab=vocab,
        prob=[array(f"prob{k}") for k in range(1, order + 1)],
        keys=[None] + [array(f"keys{k}") for k in range(2, order + 1)],
        gamma=[array(f"gamma{k}") for k in range(1, order)],
        rank=[array(f"rank{k}") for k in range(1, order + 1)],
        meta=header["meta"])


# Per-user cache ----------------------------------------------------------------------------

@dataclass
class UnigramCache:
    """Counts of the units a user typed since the last ``clear``.

    Attributes:
        weight: the largest mixture weight of the cache (``mu`` tends to it as N grows).
        halfway: cached units at which ``mu`` is ``weight / 2``.
    """

    weight: float = 0.05
    halfway: float = 50.0
    counts: Counter = field(default_factory=Counter)
    total: int = 0

    def add(self, units: Iterable[str]) -> None:
        for unit in units:
            self.counts[unit] += 1
            self.total += 1

    def clear(self) -> None:
        self.counts.clear()
        self.total = 0

    @property
    def mu(self) -> float:
        """The cache's mixture weight now (0 when empty)."""
        return self.weight * self.total / (self.total + self.halfway) if self.total else 0.0

    def prob(self, unit: str) -> float:
        """``c_cache(unit) / N`` (0 when empty)."""
        return self.counts.get(unit, 0) / self.total if self.total else 0.0


# The model ---------------------------------------------------------------------------------

def _last(units: Sequence[str], need: int) -> Sequence[str]:
    """The last ``need`` of ``units``."""
    return units[max(0, len(units) - need):]


def _reaches(matches: list[Any], end: int) -> bool:
    """Whether the last of ``matches`` ends at ``end`` (the prefix of a word being typed)."""
    return bool(matches) and matches[-1].end() == end


def tail_matches(context: str, tokenizer: Any, need: int,
                 floor: int = 0) -> tuple[list[Any], bool] | None:
    """The matches of the last word tokens of ``context``, tokenizing only its end.

    Tokenizing from a whitespace character that no token holds
    (:func:`~lmchallenge.tokenize.space_may_be_in_token`) gives the same tokens as
    tokenizing the whole context.  ``tokenizer`` is used like a compiled ``regex`` pattern
    (``finditer(string, pos)``: the word tokenizer).

    Returns:
        ``(matches, whole)``: at least ``need`` matches before one that ends at the end of
        the context (the prefix of a word being typed) unless ``whole``, and whether they
        start at the start of the context; ``None`` if they would start before ``floor``.
    """
    span = 48 * (need + 1)
    while True:
        start = 0
        if span < len(context):
            space = _WHITESPACE.search(context, len(context) - span)
            start = space.start() if space else 0
        if start < floor:
            return None
        if start and space_may_be_in_token(context, start):
            span *= 4       # inside an emoji spelled with spaces: start further back
            continue
        matches = list(tokenizer.finditer(context, start))
        complete = len(matches) - _reaches(matches, len(context))
        if start == 0 or complete >= need:
            return matches, start == 0
        span *= 4


@dataclass(frozen=True, slots=True)
class _Anchor:
    """Where the tokenization of any text extending ``text`` may start: a token of them all
    starts at ``position`` (:func:`~lmchallenge.tokenize.longest_emoji`), after ``history``
    (their last history units before it, begin of line as ``""``)."""

    text: str
    position: int
    history: list[str]


def check_options(top: Any, cache_weight: Any, cache_halfway: Any) -> None:
    """Raise ValueError unless ``top`` is a whole number >= 0, ``cache_weight`` a float in
    [0, 1) and ``cache_halfway`` a float > 0 (:class:`NgramModel`'s options)."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise ValueError(f"top must be a whole number >= 0, not {top!r}")
    for name, value, fits, what in (
            ("cache_weight", cache_weight, lambda v: 0 <= v < 1, "from 0 to below 1"),
            ("cache_halfway", cache_halfway, lambda v: v > 0, "above 0")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not fits(value):
            raise ValueError(f"{name} must be a number {what}, not {value!r}")


def refusals(unit: str) -> dict[str, str]:
    """The games a model of ``unit`` (``word`` or ``char``) does not play, each with why
    (:attr:`lmchallenge.model.api.Model.refuses`; QA: a word model in ``ce`` and a
    character model in ``we`` gave figures that meant nothing, exit 0)."""
    if unit == "word":
        return {"ce": "a word model scores words, not characters: train a character model "
                      "(lmc-ngram train --chars) for ce"}
    why = ("a character model scores characters, not words: train a word model (lmc-ngram "
           "train without --chars) for the word games")
    return {game: why for game in ("wc", "we", "wr")}


class NgramModel(Model):
    """An :class:`NgramTables` model answering the LM Challenge model API.

    Word models follow the ``WordModel`` semantics of LM Challenge 5.x: the context is
    split by the word tokenizer into the previous words of the message and the prefix of
    the word being typed (the last token if it reaches the end of the context).

    * ``predict(context, None)``: the ``top`` most probable vocabulary words that extend the
      prefix (strictly longer), as ``(rest of the word, log P(word | previous words))``;
      with an empty prefix, the next words.  Character models: the ``top`` next characters.
    * ``predict(context, candidates)``: ``(candidate, log P)`` for each scorable candidate,
      where the scored text is ``prefix + candidate``.  If that text tokenizes with the
      prefix as a whole token of its own (context ``"And God said"``, candidate ``","``),
      the prefix is a finished word: it joins the history and the rest is scored after it
      (LM Challenge 5.x would look up ``"said,"`` and never find it).  A text of several
      tokens (or characters) is scored as the product of their probabilities.  Candidates
      with a unit that is neither in the vocabulary nor in the cache are left out.

    Scores are natural-log probabilities normalised over the vocabulary plus the cached
    units.  Results are sorted by decreasing score, ties by text.

    A word model does not play ``ce``, a character model none of the word games
    (:attr:`refuses`, set from the model file: :func:`refusals`).

    Args:
        model: path of a model file (or tables already loaded).
        top: how many predictions to return without candidates (a whole number >= 0).
        cache_weight: largest mixture weight of the per-user cache, in [0, 1) (0 disables
            it).
        cache_halfway: cached units at which the cache weight is half of ``cache_weight``
            (> 0).
    Raises:
        InputError: the model file cannot be read.
        ValueError: an option out of its range (``lmc-ngram serve``'s limits: QA, a
            ``cache_weight`` of 1.5 gave "better" entropies, -1 probabilities summing to 1.6).
    """

    def __init__(self, model: str | os.PathLike | NgramTables, top: int = 20,
                 cache_weight: float = 0.05, cache_halfway: float = 50.0):
        check_options(top, cache_weight, cache_halfway)
        self.tables = model if isinstance(model, NgramTables) else load_tables(model)
        self.refuses = refusals(self.tables.unit)
        self.top = int(top)
        self.cache = UnigramCache(weight=float(cache_weight), halfway=float(cache_halfway))
        self._tokenizer = word_tokenizer() if self.tables.unit == "word" else None
        self._head: tuple[str, list[str]] | None = None
        self._anchor: _Anchor | None = None
        self._cached: _CacheView | None = None
        # history ids -> table rows; (history ids, prefix) -> predictions, until train/clear
        self._rows_of = functools.lru_cache(maxsize=ROWS_MEMO)(self.tables.history_rows)
        self._top_of = functools.lru_cache(maxsize=TOP_MEMO)(self._top)
        self._static_of = functools.lru_cache(maxsize=TOP_MEMO)(self._static)  # kept by train
        self._continuations_of = functools.lru_cache(maxsize=CONTINUATIONS_MEMO)(
            self._continuations)

    # -- the API
    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        history, prefix = self._split(context)
        if candidates is None:
            ids = tuple(self._history_ids(history))
            if len(prefix) > TOP_MEMO_PREFIX:
                return self._top(ids, prefix)
            return list(self._top_of(ids, prefix))
        found = []
        for candidate in candidates:
            logp = self._score(history, prefix, candidate)
            if logp is not None:
                found.append((candidate, logp))
        found.sort(key=lambda item: (-item[1], item[0]))
        return found

    def train(self, text: str) -> None:
        units = self._units(text)
        self.cache.add(units)
        if self._cached is not None:
            self._cached.add(Counter(units), self.tables.index)
        self._top_of.cache_clear()

    def clear(self) -> None:
        self.cache.clear()
        self._cached = None
        self._top_of.cache_clear()

    # -- helpers
    def _units(self, text: str) -> list[str]:
        return self._tokenizer.findall(text) if self._tokenizer is not None else list(text)

    def _split(self, context: str) -> tuple[list[str], str]:
        """The history units (begin of line as ``""``) and the typed prefix."""
        need = self.tables.order - 1
        if self._tokenizer is None:
            units = list(_last(context, need))
            return ([""] if len(context) < need else []) + units, ""
        # The words before the last whitespace do not change while a word is typed: the
        # history they give is kept for the next context with the same start.
        space = _LAST_WHITESPACE.search(context)
        cut = space.end() if space else 0
        if space and space_may_be_in_token(context, space.start()) \
                or len(context) - cut > LONG_STRETCH:     # "... 👍 🏽"; "😂😂😂..."
            history, matches = self._anchored_matches(context, need)
            prefix = matches.pop().group() if _reaches(matches, len(context)) else ""
            return _last([*history, *(m.group() for m in matches)], need), prefix
        head = context[:cut]
        if self._head is None or self._head[0] != head:
            self._head = (head, self._head_history(head, need))
        history = self._head[1]
        if cut == len(context):     # after a space (most queries of we): nothing typed yet
            return history, ""
        matches = list(self._tokenizer.finditer(context, cut))
        prefix = matches.pop().group() if _reaches(matches, len(context)) else ""
        if matches:
            history = [*history, *(m.group() for m in matches)]
        return history, prefix

    def _head_history(self, head: str, need: int) -> list[str]:
        """The last ``need`` history units of ``head`` (a context cut after a whitespace
        character, or ``""``), begin of line as ``""``.

        A head that extends the previous one (the next word of the same line, as in ``we``
        and ``wc``) is tokenized only from where the previous one ended: unless an emoji
        spelled with spaces goes on across that whitespace, the tokens after it are the
        same either way.
        """
        old = self._head[0] if self._head is not None else None
        if old is not None and head.startswith(old) \
                and not (old and space_may_be_in_token(head, len(old) - 1)):
            units = [*self._head[1], *self._tokenizer.findall(head, len(old))]
        else:
            history, matches = self._anchored_matches(head, need)
            units = [*history, *(m.group() for m in matches)]
        return _last(units, need)

    def _anchored_matches(self, text: str, need: int) -> tuple[list[str], list[Any]]:
        """``(history, matches)``: the matches of the last tokens of ``text`` and the last
        ``need`` history units before them (begin of line as ``""``), for a text that may
        not be tokenized from its last whitespace (an emoji spelled with spaces may go on
        across it).

        They are tokenized from a whitespace no token holds near the end
        (:func:`tail_matches`), or, where there is none after it, from the anchor an earlier
        text of the line left, if ``text`` extends it; the last match that starts more than
        :func:`~lmchallenge.tokenize.longest_emoji` code points before the end is the next
        anchor.  So a line made of such emoji ("👨 ‍ 👩 ‍ 👧 👨 ‍ 👩 ...", where every space may
        be inside one) is tokenized in time linear in its length, not once from its start
        per query, and a long context after a short one of the same line is not tokenized
        from the short one's anchor (QA: 0.13 s a query after 20,000 words).
        """
        anchor = self._anchor
        if anchor is not None and not text.startswith(anchor.text):
            anchor = None
        tail = tail_matches(text, self._tokenizer, need, anchor.position if anchor else 0)
        if tail is None:
            history, complete = anchor.history, True
            matches = list(self._tokenizer.finditer(text, anchor.position))
        else:
            matches, complete = tail
            history = [""] if complete else []
        limit = len(text) - longest_emoji() - 1
        k = len(matches)
        while k and matches[k - 1].start() > limit:
            k -= 1
        if k:
            before = [*history, *(m.group() for m in matches[:k - 1])]
            if complete or len(before) >= need:
                start = matches[k - 1].start()
                self._anchor = _Anchor(text[:start + longest_emoji() + 1], start,
                                       _last(before, need))
        return history, matches

    def _history_ids(self, history: Sequence[str]) -> list[int]:
        """Ids of the last ``order - 1`` history units, cut after the last unknown one."""
        tables = self.tables
        ids: list[int] = []
        for unit in _last(history, tables.order - 1):
            found = BOS if unit == "" else tables.index.get(unit)
            ids = [] if found is None else [*ids, found]
        return ids

    def _prob(self, unit: str, history: Sequence[str]) -> float:
        """Mixture probability of ``unit`` after ``history`` (0 if unscorable)."""
        tables = self.tables
        wid = tables.index.get(unit)
        static = tables.prob_of(wid, self._rows_of(tuple(self._history_ids(history)))) \
            if wid is not None else 0.0
        mu = self.cache.mu
        return (1 - mu) * static + mu * self.cache.prob(unit) if mu else static

    def _score(self, history: list[str], prefix: str, candidate: str) -> float | None:
        text = prefix + candidate
        units = self._units(text)
        if prefix and len(units) > 1 and units[0] == prefix:
            history = [*history, prefix]
            units = units[1:]
        if not units:
            return None
        logp = 0.0
        for unit in units:
            p = self._prob(unit, history)
            if p <= 0.0:
                return None
            logp += math.log(p)
            history = [*history, unit]
        return logp

    def _top(self, ids: tuple[int, ...], prefix: str) -> Result:
        """The ``top`` best completions of ``prefix`` after the history of ``ids``
        (:meth:`_history_ids`).

        The best static words (:meth:`_static`).  With a cache, those that are not cached
        (a word outside the static best is beaten by all of them, cached or not, so it is
        not among the best either), the best cached vocabulary words (scored exactly,
        vectorised) and the best cached words outside the vocabulary (scored by the cache
        alone) are merged.
        """
        if self.top <= 0:
            return []
        tables = self.tables
        vocab = tables.vocab
        cut = len(prefix)
        mu = self.cache.mu   # without a cache, _top_of keeps the answer: _static_of need not
        probs, found_ids = self._static_of(ids, prefix) if mu and cut <= TOP_MEMO_PREFIX \
            else self._static(ids, prefix)
        if not mu:
            return [(vocab[i][cut:], math.log(p))
                    for p, i in zip(probs.tolist(), found_ids.tolist())]
        view = self._cache_view()
        kept = _absent(found_ids, view.ids)
        found = [((1 - mu) * p, vocab[i])
                 for p, i in zip(probs[kept].tolist(), found_ids[kept].tolist())]
        lo, hi = tables.prefix_range(prefix)
        a, b = int(view.ids.searchsorted(lo)), int(view.ids.searchsorted(hi))
        if a < b:   # the cached vocabulary units in the range, scored exactly
            known = self._continuations_of(ids)
            rows = self._rows_of(ids)
            wids = view.ids[a:b]
            static = tables.probs(wids, rows) if known is None else \
                known.probs_of(wids, tables.prob[0])
            mixed = (1 - mu) * static + mu * view.counts[a:b] / self.cache.total
            best = _best_positions(wids, mixed, self.top)
            found.extend(zip(mixed[best].tolist(), (vocab[i] for i in wids[best].tolist())))
        found.extend((mu * count / self.cache.total, word)
                     for word, count in view.best_outside(prefix, self.top))
        found.sort(key=lambda item: (-item[0], item[1]))
        del found[self.top:]
        return [(word[cut:], math.log(p)) for p, word in found]

    def _static(self, ids: tuple[int, ...], prefix: str) -> tuple[np.ndarray, np.ndarray]:
        """``(probabilities, ids)`` of the ``top`` best completions of ``prefix`` after the
        history of ``ids`` in the static model (no cache), best first:
        :meth:`NgramTables.best_of` the history's continuations (kept for the next prefix
        of the same history), or :meth:`NgramTables.best` where there are more than
        :data:`CONTINUATIONS_MOST` of them."""
        lo, hi = self.tables.prefix_range(prefix)
        known = self._continuations_of(ids)
        if known is None:
            return self.tables.best(self._rows_of(ids), lo, hi, self.top)
        return self.tables.best_of(known, lo, hi, self.top)

    def _continuations(self, ids: tuple[int, ...]) -> Continuations | None:
        """:meth:`NgramTables.continuations` of the history of ``ids`` (``None``: too many,
        and :meth:`NgramTables.best` answers)."""
        return self.tables.continuations(self._rows_of(ids), CONTINUATIONS_MOST)

    def _cache_view(self) -> _CacheView:
        """The cache as :meth:`_top` reads it: made from the cache at its first use after
        ``clear``, then kept in step by ``train``."""
        if self._cached is None:
            self._cached = _CacheView()
            self._cached.add(self.cache.counts, self.tables.index)
        return self._cached


@dataclass
class _CacheView:
    """A user cache as :meth:`NgramModel._top` reads it, updated a message at a time (QA: a
    user cache of 16,800 units took 26 ms to sort again after each message, four times the
    message's ``wc`` queries).

    Attributes:
        ids: int64, sorted: the ids of the cached units that are in the vocabulary.
        counts: float64: their counts in the cache.
        outside: the cached units outside the vocabulary, sorted (those that extend a
            prefix are one range of it).
        outside_counts: their counts, in the same order.
        by_count: ``(-count, unit)`` of the same, sorted: by decreasing count then unit.
    """

    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    outside: list[str] = field(default_factory=list)
    outside_counts: list[int] = field(default_factory=list)
    by_count: list[tuple[int, str]] = field(default_factory=list)

    def add(self, counts: dict[str, int], index: dict[str, int]) -> None:
        """Count ``counts`` (unit -> times seen) in; ``index`` is the vocabulary's."""
        known = sorted((index[u], c) for u, c in counts.items() if u in index)
        if known:
            ids = np.array([i for i, _ in known], dtype=np.int64)
            added = np.array([c for _, c in known], dtype=np.float64)
            at = self.ids.searchsorted(ids)
            there = at < len(self.ids)
            there[there] = self.ids[at[there]] == ids[there]
            self.counts[at[there]] += added[there]
            self.ids = np.insert(self.ids, at[~there], ids[~there])
            self.counts = np.insert(self.counts, at[~there], added[~there])
        for unit, count in counts.items():
            if unit in index:
                continue
            i = bisect.bisect_left(self.outside, unit)
            if i < len(self.outside) and self.outside[i] == unit:
                old = self.outside_counts[i]
                del self.by_count[bisect.bisect_left(self.by_count, (-old, unit))]
                self.outside_counts[i] = old + count
            else:
                self.outside.insert(i, unit)
                self.outside_counts.insert(i, count)
            bisect.insort(self.by_count, (-self.outside_counts[i], unit))

    def best_outside(self, prefix: str, n: int) -> list[tuple[str, int]]:
        """``(unit, count)`` of the ``n`` most frequent cached units outside the vocabulary
        that extend ``prefix`` (strictly longer), ties by unit: a range of :attr:`outside`
        found by bisection (QA: ``wc --train`` on a corpus of words the model did not know
        spent half its time comparing each prefix with every such unit)."""
        if not prefix:
            return [(unit, -count) for count, unit in self.by_count[:n]]
        lo = bisect.bisect_right(self.outside, prefix)
        hi = bisect.bisect_left(self.outside, prefix + "\U0010ffff", lo=lo)
        return heapq.nsmallest(n, zip(self.outside[lo:hi], self.outside_counts[lo:hi]),
                               key=lambda item: (-item[1], item[0]))


def corpus_units(path: str, unit: str, fmt: str = "auto") -> Iterator[list[str]]:
    """The messages of a corpus (text or marked-up jsonlines, ``.gz`` ok) as unit lists."""
    from lmchallenge.corpus import read_corpus
    tokenizer = word_tokenizer() if unit == "word" else None
    for message in read_corpus(path, fmt):
        yield tokenizer.findall(message.text) if tokenizer is not None else list(message.text)


__all__ = ["NgramTables", "NgramModel", "UnigramCache", "train_tables", "save_tables",
           "load_tables", "corpus_units", "tail_matches", "BOS"]

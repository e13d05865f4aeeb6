"""How big a partition is: its cost in model queries, and a size chosen for the cluster.

A partition's work is its model queries (each one a request and an answer over the model's
pipe or call), not its characters: per token, the games ask

* ``wc``: one query per character of the word (the word's context, then each proper prefix
  of it: :meth:`lmchallenge.games.wc.WordCompletion.message_queries`), one with
  ``--next-word-only``; about 3.6-4.3 queries a token on English text;
* ``we`` and ``wr``: one query per word token (``wr``'s lists its candidates);
* ``ce``: one query per character (code point).

:func:`query_cost` estimates a message's queries from its text with a few C-level string
operations (the scan runs on the client, one pass over the whole corpus): ``wc`` the
characters that are not spaces (every character of a word token is one query; on the
shipped corpora the estimate is within 0.01% of the real count), ``we``/``wr`` the spaces,
tabs and ASCII punctuation plus one (runs of punctuation are counted per character; within 2%
of the real count on the shipped corpora, single messages within about 15%), ``ce`` the
characters.  Each estimate is a count of some ASCII bytes of the text and its characters
(:class:`QueryCost`), so that the scan of a plain-text corpus computes it for a whole block
of lines at once (:meth:`QueryCost.of_lines`).  Only the ratio between partitions matters
for balance; the absolute figure matters for :data:`MIN_PARTITION_QUERIES` and
:data:`MAX_PARTITION_QUERIES`.

:class:`ForCluster` chooses the size when the run starts: the corpus' queries, estimated
from its first :data:`SAMPLE_BYTES` (cost per byte times the file's size), divided into
``PARTITIONS_PER_WORKER`` full-size partitions per worker; the last ``workers`` partitions'
worth is tapered (guided self-scheduling with the worker count as divisor,
:func:`lmc_dist.partition.taper_limit`), which gives about 4 to 6 partitions per worker in
all.
The chosen :class:`PartitionSize` is recorded in the manifest, and ``--resume`` cuts with
the recorded size whatever the cluster it runs on; the cut is a function of (corpus, game,
recorded size) alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from lmchallenge.games.spec import GameSpec

PARTITIONS_PER_WORKER = 4
"""Full-size partitions per worker before the taper (the taper adds about 2 per worker)."""
MIN_PARTITION_QUERIES = 5_000
"""Smallest chosen size: about 0.3 s of the cheapest model measured (the built-in n-gram,
about 60 us a query), so that a partition's fixed costs (task, file, statistics state: tens
of milliseconds, BENCHMARKS.md "scaling") stay a small part of it."""
MAX_PARTITION_QUERIES = 1_000_000
"""Largest chosen size: about a minute of that model, so that a lost worker loses little
and the progress and manifest stay current."""
SAMPLE_BYTES = 4 << 20
"""Bytes at the start of the corpus read to estimate its queries per byte."""

_SEPARATORS = b" \t" + b',.;:!?"()[]{}<>/=*+`'


@dataclass(frozen=True)
class QueryCost:
    """Estimated model queries of one message, from its text: ``cost(text)`` (an int).

    Every estimate counts the ``counted`` bytes of the text's UTF-8 form (ASCII, so also its
    characters) and its characters: ``words``, the count plus one (0 for an empty text);
    else the characters less the count.  ``cost(text)`` computes it with C-level string
    operations, :meth:`of_lines` for many lines from those two counts.

    Attributes:
        counted: the ASCII bytes counted.
        words: which of the two formulas.
    """

    counted: bytes
    words: bool

    def __call__(self, text: str) -> int:
        data = text.encode("utf-8", "surrogatepass")
        counted = len(data) - len(data.translate(None, self.counted))
        if self.words:
            return counted + 1 if data else 0
        return len(text) - counted

    def of_lines(self, counted: np.ndarray, characters: np.ndarray) -> np.ndarray:
        """The estimates of many texts, as ``cost(text)`` gives each.

        Args:
            counted: per text, how many of its UTF-8 bytes are among ``counted`` (int64).
            characters: per text, its characters (code points; int64, same shape).
        Returns:
            Per text, its estimated queries (int64, same shape).
        """
        return counted + (characters > 0) if self.words else characters - counted


WE_COST = QueryCost(_SEPARATORS, words=True)
"""One query a word token (``we``, ``wr``, ``wc --next-word-only``)."""
WC_COST = QueryCost(b" \t\n", words=False)
"""One query a character of a word (``wc``)."""
CE_COST = QueryCost(b"", words=False)
"""One query a character (``ce``)."""


def query_cost(game: GameSpec) -> QueryCost:
    """The estimator of a message's model queries for ``game`` (see the module docstring)."""
    if game.name == "wc" and not game.options.get("next_word_only"):
        return WC_COST
    if game.name == "ce":
        return CE_COST
    return WE_COST


@dataclass(frozen=True)
class PartitionSize:
    """The size partitions are cut at, as recorded in the manifest (``partition_size``).

    Attributes:
        unit: ``queries`` (estimated by :func:`query_cost`) or ``characters``
            (``--partition-chars``, and runs recorded before sizes were chosen).
        limit: a partition is closed at the first message that takes it to ``limit``.
        taper_divisor: near the end of the corpus a partition holds at most
            1/``taper_divisor`` of what remains.
        workers: the cluster size the limit was chosen for (None: given by the user).
        estimated_queries: the corpus' queries as estimated when the size was chosen.
    """

    unit: str
    limit: int
    taper_divisor: int = 4
    workers: int | None = None
    estimated_queries: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionSize:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class ForCluster:
    """Choose the size for ``workers`` workers once the corpus' queries are estimated."""

    workers: int
    per_worker: int = PARTITIONS_PER_WORKER
    min_queries: int = MIN_PARTITION_QUERIES
    max_queries: int = MAX_PARTITION_QUERIES

    def resolve(self, estimated_queries: float) -> PartitionSize:
        """The size: ``estimated_queries / (per_worker * workers)`` within
        ``[min_queries, max_queries]``, tapering by the number of workers (the last
        ``workers`` partitions' worth of queries, a ``1/per_worker`` of the corpus)."""
        share = int(estimated_queries // (self.per_worker * self.workers))
        limit = max(self.min_queries, min(self.max_queries, share))
        return PartitionSize(unit="queries", limit=limit, taper_divisor=self.workers,
                             workers=self.workers, estimated_queries=int(estimated_queries))


def recorded_size(manifest: dict[str, Any]) -> PartitionSize:
    """The size a manifest's partitions were cut at (``partition_chars`` in runs recorded
    before sizes were chosen for the cluster)."""
    if manifest.get("partition_size"):
        return PartitionSize.from_json(manifest["partition_size"])
    return PartitionSize(unit="characters", limit=int(manifest["partition_chars"]))

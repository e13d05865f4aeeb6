"""The statistics as typed records: what ``lmc stats`` prints for one log (docs/statistics.md).

Human statistics (:class:`Stats`, the default output) are ratios; raw statistics
(:class:`RawStats`, ``--no-human``) are the counts and sums they are computed from.  A group
(``prediction``, ``completion``, ``entropy``, ``reranking``) is present only when the log has
data of its game.
"""

from __future__ import annotations

from typing import Any, TypedDict


class PredictionStats(TypedDict, total=False):
    """wc next-word prediction, over selected tokens: Hit@N for N in 1, 3, 10, 20 and the
    mean reciprocal rank (``mrr``); ``hit``: the fraction whose target is predicted at all."""

    hit: float
    hit1: float
    hit3: float
    hit10: float
    hit20: float
    mrr: float


class CompletionStats(TypedDict):
    """wc completion: ``characters`` (keystroke savings, a fraction of characters) and
    ``tokens`` (fraction of words completed from a prefix)."""

    characters: float
    tokens: float


class EntropyStats(TypedDict):
    """we/ce: ``mean`` cross-entropy in nats per scored token, ``hit`` the fraction scored,
    ``fingerprint`` of the scored tokens (8 hex digits)."""

    fingerprint: str
    hit: float
    mean: float


class RerankingStats(TypedDict):
    """wr: ``accuracy`` after reranking with the fitted mixture (LM Challenge 5.x's fit),
    ``base_accuracy`` with the error model alone, ``max_candidates`` per token,
    ``accuracy_at_least_base`` (not in 5.x) the best of the 5.x fit, a fit started from the
    error model alone and the error model alone (never below ``base_accuracy``)."""

    accuracy: float
    base_accuracy: float
    max_candidates: int
    accuracy_at_least_base: float


class Stats(TypedDict, total=False):
    """Human statistics of one log (``lmc stats``)."""

    fingerprint: str
    users: int
    messages_per_user: float
    tokens_per_user: float
    characters_per_token: float
    skipped: float
    prediction: PredictionStats
    completion: CompletionStats
    entropy: EntropyStats
    reranking: RerankingStats


class RawStats(TypedDict):
    """Raw statistics of one log (``lmc stats --no-human``): counts and sums.

    ``prediction``: ``srr`` (sum of reciprocal ranks), ``hit``, ``hitN`` (counts);
    ``completion``: ``characters`` saved, ``tokens`` completed; ``entropy``: ``sum`` of -logp
    in nats, scored ``tokens``, ``fingerprint`` (int); ``reranking``: ``max_candidates``,
    ``base_correct`` (``already_correct`` when there is no wr data), ``correct``, ``args`` of
    the fitted mixture (or None), ``correct_at_least_base`` (not in 5.x; absent without wr
    data).
    """

    skipped: int
    users: int
    messages: int
    tokens: int
    characters: int
    fingerprint: int
    prediction: dict[str, float]
    completion: dict[str, int]
    entropy: dict[str, Any]
    reranking: dict[str, Any]


__all__ = ["Stats", "RawStats", "PredictionStats", "CompletionStats", "EntropyStats",
           "RerankingStats"]

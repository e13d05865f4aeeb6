"""Global statistics of a distributed run from its partitions' mergeable states.

Each partition task leaves a :class:`lmchallenge.stats.StatsState` on its worker. The client
gathers only their small summaries (counts, exact sums, fingerprints) and merges them in
partition order (docs/architecture.md, invariant 4). The ``wr`` score matrices stay where they were
produced: :class:`DistributedScores` first gathers each worker's partitions into one
matrix set on that worker, then answers the questions of the mixture fit
(:func:`lmchallenge.stats.reranking.fit`: widest row, k-th smallest LM score, correct rows under
given parameters) with one small task per worker, so every optimiser step is a map-reduce
of integer counts and gives exactly the numbers of a single process.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from distributed import Client, Future

from lmchallenge.stats import compute, reranking
from lmchallenge.stats.state import StatsState, humanize

from lmc_dist.connection import require_scheduler, submit

BISECTION_STEPS = 32
"""Rounds of the k-th-value search: one per bit of a float32."""


def rows_of(state: StatsState) -> int:
    """Log rows (selected or not) that a state has seen."""
    return state.rows


def stats_of_run_dir(run_dir: str, human: bool = True) -> dict[str, Any]:
    """The statistics of a run directory's partitions, read again (honouring ``select``),
    as ``lmc stats`` prints them for the concatenated log (without ``log``)."""
    return compute.state_of_log(run_dir).result(human=human)


def run_dir_intervals(run_dir: str, settings: Any) -> dict[str, list[float]]:
    """``{key path: [low, high]}`` of a run directory read part by part, as ``lmc stats
    --confidence`` gives them for it (``settings``: :class:`lmchallenge.stats.bootstrap.Settings`).

    Raises:
        LmcError: the run is not finished (and ``--partial`` was not given).
    """
    from lmchallenge.stats import bootstrap

    summary = bootstrap.summarise(run_dir)
    return bootstrap.intervals(summary.table, summary.metrics(), settings)


# --- tasks run on the workers ----------------------------------------------------------------

def _summary_of(outcome: Any) -> tuple[StatsState, bool]:
    """The outcome's state without its score matrices, and whether it has ``wr`` scores."""
    return outcome.state.summary(), outcome.state.scores.max_candidates() > 0


def _scores_of(*outcomes: Any) -> reranking.ScoreMatrices:
    merged = reranking.ScoreMatrices()
    for outcome in outcomes:
        merged.merge(outcome.state.scores)
    return merged


def _shape_of(scores: reranking.ScoreMatrices) -> tuple[int, int]:
    return scores.max_candidates(), scores.finite_lm_count()


def _count_at_most(scores: reranking.ScoreMatrices, value: np.float32) -> int:
    return scores.count_lm_at_most(value)


def _correct(scores: reranking.ScoreMatrices, model: reranking.InterpolationModel | None,
             width: int) -> int:
    return scores.correct(model, width)


# --- the client side -------------------------------------------------------------------------

def _sortable(value: np.float32) -> int:
    """The float32's position in a total order of float32s, as an unsigned 32-bit integer."""
    bits = int(np.array([value], dtype=np.float32).view(np.uint32)[0])
    return bits ^ 0xFFFFFFFF if bits & 0x80000000 else bits | 0x80000000


def _from_sortable(key: int) -> np.float32:
    bits = key ^ 0x80000000 if key & 0x80000000 else key ^ 0xFFFFFFFF
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


class DistributedScores:
    """The ``wr`` score matrices of a run, one merged set per worker, as a
    :class:`lmchallenge.stats.reranking.ScoreSource`.

    Args:
        client: the run's client.
        outcomes: futures of :class:`lmc_dist.worker.PartitionOutcome` (still on the workers).
    """

    def __init__(self, client: Client, outcomes: Sequence[Future]):
        self._client = client
        by_worker: dict[str, list[Future]] = defaultdict(list)
        require_scheduler(client)
        who_has = client.who_has(list(outcomes))
        for future in outcomes:
            holders = who_has.get(future.key) or [None]
            by_worker[sorted(holders)[0]].append(future)
        self._scores = [submit(client, _scores_of, *futures, pure=False,
                                      workers=[address] if address else None)
                        for address, futures in sorted(by_worker.items(), key=lambda kv: str(kv[0]))]
        shapes = client.gather([submit(client, _shape_of, f, pure=False) for f in self._scores])
        self._max_candidates = max((w for w, _ in shapes), default=0)
        self._finite = sum(n for _, n in shapes)

    def _sum(self, function: Any, *args: Any) -> int:
        futures = [submit(self._client, function, scores, *args, pure=False) for scores in self._scores]
        return sum(self._client.gather(futures))

    def max_candidates(self) -> int:
        return self._max_candidates

    def finite_lm_count(self) -> int:
        return self._finite

    def kth_finite_lm(self, k: int) -> np.float32:
        """The k-th smallest LM score other than ``-inf``, by bisection over the float32
        order: each step counts, on every worker, the scores at most a pivot."""
        low, high = 0, 0xFFFFFFFF
        while low < high:
            middle = (low + high) // 2
            if self._sum(_count_at_most, _from_sortable(middle)) > k:
                high = middle
            else:
                low = middle + 1
        return _from_sortable(low)

    def correct(self, model: reranking.InterpolationModel | None, width: int) -> int:
        return self._sum(_correct, model, width)

    def release(self) -> None:
        """Drop the gathered matrices from the workers."""
        for future in self._scores:
            future.release()
        self._scores = []


def global_stats(client: Client, outcomes: Sequence[Future], human: bool = True,
                 intervals: Any = None, parts: Sequence[str] = ()) -> dict[str, Any]:
    """The statistics of the whole run, as ``lmc stats`` prints them for the concatenated
    log (without ``log``).

    Args:
        client: the run's client.
        outcomes: futures of the partition outcomes, in partition order.
        human: ratios (default) or raw sums.
        intervals: :class:`lmchallenge.stats.bootstrap.Settings` to add ``"ci"`` as ``lmc stats
            --confidence`` does (from the per-group sums of ``parts``); None: no intervals.
        parts: the partitions' log files, in partition order (with ``intervals``).
    Raises:
        CancelledError, CommClosedError: ``client`` lost its scheduler (at once:
            :mod:`lmc_dist.connection`).
    """
    result, fit = _global_stats(client, outcomes, human)
    if intervals is not None:
        reported = result if human else humanize(result)
        from lmchallenge.stats.bootstrap import holding

        result["ci"] = holding(run_intervals(client, parts, fit, reported, intervals), reported)
    return result


def _global_stats(client: Client, outcomes: Sequence[Future],
                  human: bool) -> tuple[dict[str, Any], reranking.RerankingFit]:
    summaries = client.gather([submit(client, _summary_of, f, pure=False) for f in outcomes])
    total = StatsState()
    for summary, _ in summaries:
        total.merge(summary)
    if not any(has_scores for _, has_scores in summaries):   # not wr: nothing to fit
        fit = reranking.RerankingFit(0, 0, 0, None)
        return total.result(human=human, fit=fit), fit
    scores = DistributedScores(client, outcomes)
    try:
        fit = reranking.fit(scores)
    finally:
        scores.release()
    return total.result(human=human, fit=fit), fit


# --- bootstrap intervals ----------------------------------------------------------------------

def _groups_of_part(path: str, model: reranking.InterpolationModel | None) -> Any:
    """The per-group sums of one partition's log (read column-wise, as ``lmc stats``
    reads a run dir part by part), ``wr`` tokens counted under the global fit."""
    from lmchallenge.stats.bootstrap import GroupSums

    groups = GroupSums()
    compute.state_of_log(path, groups=groups)
    groups.finish(model)
    return groups


def run_intervals(client: Client, parts: Sequence[str], fit: reranking.RerankingFit,
                  reported: dict[str, Any], settings: Any) -> dict[str, list[float]]:
    """``{key path: [low, high]}`` of the run, from the partitions' per-group sums (made on
    the workers, merged here in partition order): equal to ``lmc stats --confidence`` on
    the run dir, or on the concatenated log, with the same settings (a group never spans
    two partitions, so its sums are the same numbers).  ``reported``: the human statistics
    (which figures get an interval)."""
    from lmchallenge.stats import bootstrap

    futures = [submit(client, _groups_of_part, path, fit.model, pure=False) for path in parts]
    merged = bootstrap.GroupSums()
    for groups in client.gather(futures):
        merged.merge(groups)
    return bootstrap.intervals(merged.table(), bootstrap.present_metrics(reported), settings)

"""What one ``lmc-dist run`` is asked to do: :class:`DistJob`, made by :mod:`lmc_dist.cli`
and read by the layers below it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lmchallenge.games.spec import GameSpec
from lmchallenge.model.spec import PredictorSpec

from lmc_dist.resources import Resources

DEFAULT_PARTITION_CHARS = 100_000
"""The size of a partition before sizes were chosen for the cluster (now only a suggestion
for ``--partition-chars``)."""


@dataclass(frozen=True)
class DistJob:
    """One ``lmc-dist run``.

    Attributes:
        predictor, game: what to run.
        input: corpus path or fsspec URL (``.gz`` ok).
        run_dir: output directory (every worker must reach it at the same path).
        corpus_format: ``auto``, ``text`` or ``json``.
        out_format: ``parquet`` or ``jsonl``.
        scheduler: address of an existing Dask scheduler, or None for an embedded cluster.
        workers: worker processes of the embedded cluster (default: one per usable CPU,
            :func:`lmc_dist.cluster.embedded_workers`).
        partition_chars: target characters per partition (None: a size in estimated model
            queries chosen for the cluster, :class:`lmc_dist.sizing.ForCluster`; on
            ``--resume``, the size recorded in the run dir).
        train: train/clear the model per user (groups are never split).
        resume: finish the run already in ``run_dir``.
        retries: extra attempts of a failed partition.
        output: also concatenate the log into this file (jsonl, jsonl.gz or parquet).
        progress: show a progress bar (None: when stderr is a terminal).
        intervals: bootstrap settings (:class:`lmchallenge.stats.bootstrap.Settings`): the
            statistics carry ``"ci"`` as ``lmc stats --confidence`` gives them (None: not).
        resources: Dask worker resources each partition task needs (``{"GPU": 1.0}``;
            :mod:`lmc_dist.resources`): only workers declaring them run partitions; the
            embedded cluster's workers declare them.  None: any worker.
    """

    predictor: PredictorSpec
    game: GameSpec
    input: str
    run_dir: str
    corpus_format: str = "auto"
    out_format: str = "parquet"
    scheduler: str | None = None
    workers: int | None = None
    partition_chars: int | None = None
    train: bool = False
    resume: bool = False
    retries: int = 1
    output: str | None = None
    progress: bool | None = None
    intervals: Any = None
    resources: Resources | None = None

"""``lmc-dist run``: a game over a corpus on a Dask cluster, partition by partition.

The client scans the corpus into partitions (:mod:`lmc_dist.partition`), submits one task
per partition (workers read their byte range themselves and write
``part-NNNNN.parquet``/``.jsonl.gz`` atomically), records finished partitions in
``_manifest.json``, merges the partitions' statistics states in partition order into
``_stats.json`` (the wr mixture fit is evaluated where the score matrices are, see
:mod:`lmc_dist.reduce`), and optionally concatenates the partitions into one log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dask
from distributed import Client, LocalCluster, as_completed
from tqdm import tqdm

from lmchallenge.exceptions import LmcError, ModelError
from lmchallenge.games.spec import GameSpec
from lmchallenge.convert import CONVERTED_PREFIX, convert_file, join_logs
from lmchallenge.log import atomic_path
from lmchallenge.model import PredictorSpec

from . import manifest as mf
from . import reduce
from .partition import scan
from .worker import (PLUGIN_NAME, ModelPool, PartitionTask, evaluate_partition, part_name,
                     state_of_existing_part)

LOG = logging.getLogger(__name__)
DEFAULT_PARTITION_CHARS = 100_000
EMBEDDED_CONFIG = {
    "distributed.worker.profile.enabled": False,        # stack sampling every 10 ms
    "distributed.admin.tick.interval": "1s",            # event-loop watchdog, 20 ms by default
    "distributed.admin.system-monitor.interval": "5s",  # dashboard resource plots, 500 ms
    "distributed.worker.memory.monitor-interval": "1s",  # worker/nanny memory checks, 100 ms
}
"""Dask settings of the embedded cluster: its background work, which takes CPU from the models
on the same cores, falls from about 6% to 3% of a core for one worker (BENCHMARKS.md,
"scaling"), and to about half that again with the memory monitor at 1 s (an idle 2-worker
cluster: 0.30 -> 0.14 CPU-s per 10 s); the dashboard loses the profile page and fine-grained
resource plots, and a worker over its memory limit is caught within a second, not 0.1 s."""


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
        workers: worker processes of the embedded cluster (default: one per core).
        partition_chars: target characters per partition.
        train: train/clear the model per user (groups are never split).
        resume: finish the run already in ``run_dir``.
        retries: extra attempts of a failed partition.
        output: also concatenate the log into this file (jsonl, jsonl.gz or parquet).
        progress: show a progress bar (None: when stderr is a terminal).
    """

    predictor: PredictorSpec
    game: GameSpec
    input: str
    run_dir: str
    corpus_format: str = "auto"
    out_format: str = "parquet"
    scheduler: str | None = None
    workers: int | None = None
    partition_chars: int = DEFAULT_PARTITION_CHARS
    train: bool = False
    resume: bool = False
    retries: int = 1
    output: str | None = None
    progress: bool | None = None


@dataclass
class RunReport:
    """What a finished run reports.

    Attributes:
        stats: the statistics (as ``lmc stats`` prints for the whole log, without ``log``).
        tokens: log rows.
        seconds: wall time.
        workers: number of workers used.
        partitions: number of partitions.
        failed: messages of partitions that failed (empty on success).
    """

    stats: dict[str, Any]
    tokens: int
    seconds: float
    workers: int
    partitions: int
    failed: list[str] = field(default_factory=list)

    def summary_line(self) -> str:
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return (f"lmc-dist: {self.tokens} tokens in {self.seconds:.1f} s ({rate:,.0f} tokens/s) "
                f"on {self.workers} worker{'s' if self.workers != 1 else ''}, "
                f"{self.partitions} partitions")


@contextlib.contextmanager
def connect(job: DistJob) -> Iterator[Client]:
    """A client of ``job.scheduler``, or of an embedded LocalCluster (one worker process per
    core, one thread each, made with :data:`EMBEDDED_CONFIG`) that is shut down afterwards."""
    if job.scheduler:
        with Client(job.scheduler) as client:
            yield client
        return
    n = job.workers or os.cpu_count() or 1
    with dask.config.set(EMBEDDED_CONFIG):  # read when the scheduler, nannies, workers start
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=_dashboard_address(), silence_logs=logging.ERROR)
    with cluster, Client(cluster) as client:
        yield client


def _dashboard_address() -> str | None:
    try:
        import bokeh  # noqa: F401  (the dashboard needs it)
    except ImportError:
        return None
    return "127.0.0.1:0"


def _identity(job: DistJob, scan_result) -> dict[str, Any]:
    return mf.new_manifest(
        game=job.game.name, game_options=job.game.options, predictor=job.predictor.describe(),
        corpus=job.input, scan=scan_result, train=job.train, partition_chars=job.partition_chars,
        out_format=job.out_format,
        part_names=[part_name(p.index, job.out_format) for p in scan_result.partitions])


def execute(job: DistJob) -> RunReport:
    """Run ``job`` to completion (or to failure of some partitions).

    Raises:
        InputError: bad corpus (before any model starts).
        LmcError: the run dir holds another run (without ``--resume``) or cannot be resumed.
        KeyboardInterrupt: after saving the manifest (the run can be resumed).
    """
    started = time.monotonic()
    os.makedirs(job.run_dir, exist_ok=True)
    old = mf.load(job.run_dir)
    if old is not None and not job.resume:
        raise LmcError(f"{job.run_dir} already holds a run (_manifest.json): use --resume to "
                       "finish it, or a new --run-dir")
    scanned = scan(job.input, job.corpus_format, job.partition_chars, job.train, job.run_dir)
    manifest = _identity(job, scanned)
    done: set[int] = set()
    if old is not None:
        mf.check_resumable(old, manifest)
        for entry, new_entry in zip(old["partitions"], manifest["partitions"]):
            if entry["state"] == "done" and os.path.exists(os.path.join(job.run_dir, entry["file"])):
                new_entry.update(entry)
                done.add(entry["index"])
        manifest["started"] = old.get("started", manifest["started"])
    mf.save(job.run_dir, manifest)
    _remove_stale_parts(job.run_dir, manifest)
    _remove_temporaries(job.run_dir)

    tasks = [PartitionTask(run_dir=os.path.abspath(job.run_dir), input_path=os.path.abspath(scanned.path)
                           if "://" not in scanned.path else scanned.path,
                           corpus_name=job.input, corpus_format=scanned.corpus_format, partition=p,
                           game=job.game, predictor=job.predictor, train=job.train,
                           out_format=job.out_format)
             for p in scanned.partitions]
    with connect(job) as client:
        client.register_plugin(ModelPool(), name=PLUGIN_NAME)
        workers = len(client.scheduler_info().get("workers", {})) or (job.workers or 1)
        if client.dashboard_link and _dashboard_address() is not None or job.scheduler:
            LOG.warning("dask dashboard: %s", client.dashboard_link)
        outcomes, failed = _run_partitions(client, job, tasks, done, manifest)
        stats = None
        if not failed:
            stats = reduce.global_stats(client, [outcomes[i] for i in range(len(tasks))])
            with atomic_path(os.path.join(job.run_dir, mf.STATS)) as tmp:
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(stats, f, sort_keys=True)
                    f.write("\n")
            manifest["finished"] = mf.now()
            mf.save(job.run_dir, manifest)
            if job.output:
                write_output(job.run_dir, [p["file"] for p in manifest["partitions"]], job.output,
                             job.game.name, client)
    tokens = sum(p.get("rows") or 0 for p in manifest["partitions"] if p["state"] == "done")
    _remove_temporaries(job.run_dir)
    return RunReport(stats=stats or {}, tokens=tokens, seconds=time.monotonic() - started,
                     workers=workers, partitions=len(tasks), failed=failed)


def write_output(run_dir: str, part_files: list[str], output: str, game: str,
                 client: Client | None = None) -> None:
    """Concatenate the partitions (in order) into the log file ``output``, atomically
    (:func:`lmchallenge.convert.join_logs`: the client only joins files, which keeps this
    serial step small).  Partitions of another form than the output's are first converted
    by the workers of ``client``, one task each (in this process without one)."""
    sources = [os.path.join(run_dir, name) for name in part_files]
    if client is None:
        join_logs(sources, output, game)
        return

    def on_workers(pairs, game):
        client.gather(client.map(convert_file, *zip(*pairs), game=game, pure=False))

    join_logs(sources, output, game, convert=on_workers)


def _summary(outcome) -> dict[str, Any]:
    return outcome.summary()


def _remove_stale_parts(run_dir: str, manifest: dict[str, Any]) -> None:
    """Delete part files the manifest does not count as done (a half-finished earlier try)."""
    keep = {p["file"] for p in manifest["partitions"] if p["state"] == "done"}
    for name in os.listdir(run_dir):
        if name.startswith("part-") and name not in keep:
            os.unlink(os.path.join(run_dir, name))


def _remove_temporaries(run_dir: str) -> None:
    """Delete temporary files left by a process that died while writing: part files being
    written, and partitions converted for ``--output`` (:func:`write_output`)."""
    for name in os.listdir(run_dir):
        if (name.startswith(".part-") and ".tmp-" in name) or name.startswith((CONVERTED_PREFIX, "." + CONVERTED_PREFIX)):
            os.unlink(os.path.join(run_dir, name))


def _run_partitions(client: Client, job: DistJob, tasks: list[PartitionTask], done: set[int],
                    manifest: dict[str, Any]) -> tuple[dict[int, Any], list[str]]:
    """Submit every partition (finished ones only re-read their file), track them to the end.

    Returns:
        (futures of the partition outcomes by index, failure messages).
    """
    run_id = uuid.uuid4().hex[:8]
    order = sorted(tasks, key=lambda t: -t.partition.characters) if job.train else tasks
    futures: dict[Any, int] = {}
    outcomes: dict[int, Any] = {}
    for rank, task in enumerate(order):
        index = task.partition.index
        key = f"lmc-part-{index:05d}-{run_id}"
        if index in done:
            future = client.submit(state_of_existing_part, task.output_path, index,
                                   task.partition.characters, key=key, pure=False)
        else:
            future = client.submit(evaluate_partition, task, key=key, pure=False,
                                   retries=job.retries, priority=len(order) - rank)
        futures[future] = index
        outcomes[index] = future
    failed: list[str] = []
    bar = tqdm(total=len(tasks), unit="part", file=sys.stderr, dynamic_ncols=True,
               disable=not (sys.stderr.isatty() if job.progress is None else job.progress))
    tokens = 0
    start = time.monotonic()
    try:
        for future in as_completed(list(futures)):
            index = futures[future]
            entry = manifest["partitions"][index]
            if future.status == "error":
                error = future.exception()
                entry.update(state="failed", error=str(error))
                failed.append(_failure_message(tasks[index], error))
            else:
                summary = client.submit(_summary, future, pure=False).result()
                tokens += summary["rows"]
                entry.update(state="done", rows=summary["rows"], elapsed=summary["elapsed"],
                             began=summary["began"], worker=summary["worker"], error=None)
            mf.save(job.run_dir, manifest)
            bar.update(1)
            rate = tokens / max(1e-9, time.monotonic() - start)
            bar.set_postfix_str(f"{tokens} tok, {rate:,.0f} tok/s", refresh=False)
    except KeyboardInterrupt:
        client.cancel(list(futures))
        mf.save(job.run_dir, manifest)
        raise
    finally:
        bar.close()
    return outcomes, failed


def _failure_message(task: PartitionTask, error: BaseException) -> str:
    p = task.partition
    where = (f"partition {p.index} (lines {p.first_line}-{p.first_line + p.messages - 1} of "
             f"{task.corpus_name}, first message {p.first_message})")
    if isinstance(error, ModelError):
        return f"{where}: {error}"
    return f"{where}: {type(error).__name__}: {error}"

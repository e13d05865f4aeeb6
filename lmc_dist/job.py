"""``lmc-dist run``: a game over a corpus on a Dask cluster, partition by partition.

The client locks the run dir (:mod:`lmc_dist.commit`), scans the corpus into partitions
(:mod:`lmc_dist.partition`) while the embedded cluster starts, submits one task per
partition (workers read their byte range themselves and write
``_temporary/part-NNNNN.parquet``/``.jsonl.gz`` atomically), records
each finished partition in ``_manifest.json`` as soon as its task ends, merges the
partitions' statistics states in partition order (the wr mixture fit is evaluated where the
score matrices are, see :mod:`lmc_dist.reduce`), commits the run (``_stats.json``, the parts
moved to the top level, ``finished`` in the manifest; the layout is described in
:mod:`lmchallenge.logs.rundir`), and optionally concatenates the partitions into one log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, as_completed
from distributed.comm.core import CommClosedError
from tqdm import tqdm

from lmchallenge.corpus import check_unchanged, is_url
from lmchallenge.errors import InputError, LmcError, ModelError
from lmchallenge.games.job import warn_empty_log
from lmchallenge.games.typos import read_vocabulary
from lmchallenge.logs.convert import convert_file, join_logs
from lmchallenge.logs.files import check_parquet_name, check_writable, file_form
from lmchallenge.logs.rundir import STATS, changed_part, finished_part
from lmchallenge.model.files import changed, files_as_named, named_files

from lmc_dist import commit
from lmc_dist import manifest as mf
from lmc_dist import reduce
from lmc_dist.cluster import (cluster_name, cluster_size, connect, dashboard_address,
                              watching_workers, workers_of)
from lmc_dist.connection import require_scheduler, submit
from lmc_dist.failures import StartFailures, failure_messages, stop_reason
from lmc_dist.partition import scan, sha256_of
from lmc_dist.pool import register_model_pool, release_models
from lmc_dist.quiet import TASK_PREFIX, start_without_sigint
from lmc_dist.sizing import ForCluster, PartitionSize, query_cost, recorded_size
from lmc_dist.spec import DistJob
from lmc_dist.worker import (PartitionTask, evaluate_partition, finish_models, part_name,
                             state_of_existing_part)

LOG = logging.getLogger(__name__)
STOPPED_EARLY = "stopped_early"
"""Manifest key: the run stopped when its model failed alike as it started
(:func:`_run_partitions`); the next run in the run dir does not stop so."""


@dataclass
class RunReport:
    """What a finished run reports.

    Attributes:
        stats: the statistics (as ``lmc stats`` prints for the whole log, without ``log``).
        tokens: log rows.
        seconds: wall time.
        workers: number of workers used.
        partitions: number of partitions.
        failed: one message per distinct error of the partitions that failed (empty on
            success; :func:`lmc_dist.failures.failure_messages`).
        failed_partitions: how many partitions failed.
        not_run: how many partitions were not run: the run stopped when its model failed
            alike as it started (:class:`lmc_dist.failures.StartFailures`).
        stopped_by: why, where ``not_run`` (:func:`lmc_dist.failures.stop_reason`).
        kept_partitions, kept_tokens: the partitions done before this invocation (a
            ``--resume``), and their rows (counted in ``tokens``).
    """

    stats: dict[str, Any]
    tokens: int
    seconds: float
    workers: int
    partitions: int
    failed: list[str] = field(default_factory=list)
    failed_partitions: int = 0
    not_run: int = 0
    stopped_by: str = ""
    kept_partitions: int = 0
    kept_tokens: int = 0

    def summary_line(self) -> str:
        """The tokens and partitions this invocation made, at what rate; a ``--resume`` also
        says what was done before it (not counted in the rate)."""
        made = self.tokens - self.kept_tokens
        rate = made / self.seconds if self.seconds > 0 else 0.0
        partitions = self.partitions - self.kept_partitions
        line = (f"lmc-dist: {made:,} tokens in {self.seconds:.1f} s ({rate:,.0f} tokens/s) "
                f"on {self.workers} worker{'s' if self.workers != 1 else ''}, "
                f"{partitions} partition{'s' if partitions != 1 else ''}")
        if self.kept_partitions:
            line += (f"; {self.kept_tokens:,} tokens in {self.kept_partitions} "
                     f"partition{'s' if self.kept_partitions != 1 else ''} were done before "
                     f"(--resume): {self.tokens:,} tokens in all")
        return line


def _identity(job: DistJob, scan_result, old: dict[str, Any] | None) -> dict[str, Any]:
    chars = job.partition_chars
    if chars is None and old is not None:   # --resume without --partition-chars: as recorded
        chars = old.get("partition_chars")
    manifest = mf.new_manifest(
        game=job.game.name, game_options=job.game.options, predictor=job.predictor.describe(),
        corpus=job.input, scan=scan_result, train=job.train, partition_chars=chars,
        out_format=job.out_format,
        part_names=[part_name(p.index, job.out_format) for p in scan_result.partitions])
    manifest["partition_size"] = scan_result.size.to_json()
    # a Python model's options are not in its spec: without them a --resume with other ones
    # (another model file, another top) made a log of two models that passed for one (QA)
    manifest["predictor_options"] = dict(job.predictor.options or {})
    manifest["predictor_files"] = named_files(job.predictor.describe(), job.predictor.options)
    manifest["user_type"] = scan_result.users.kind if old is None else old.get("user_type", "string")
    vocabulary = job.game.options.get("vocab")
    manifest["vocabulary_sha256"] = None if vocabulary is None else sha256_of(vocabulary)
    return manifest


def _warn_if_the_model_changed(old: dict[str, Any], manifest: dict[str, Any]) -> None:
    """Warn if a file the model's command names changed since the run being resumed began
    (its finished partitions were made with the file as it was then); ``manifest`` keeps the
    stamps the run began with."""
    before = old.get("predictor_files")
    if before is None:      # written by an lmc-dist that did not record them
        return
    for path in changed(before, manifest["predictor_files"]):
        LOG.warning("%s changed since this run began (%s): its finished partitions were made "
                    "with the file as it was; if the model is not the same, use a new --run-dir",
                    path, "it is gone" if path not in manifest["predictor_files"]
                    else "another size or modification time")
    manifest["predictor_files"] = before


def partition_size(job: DistJob, old: dict[str, Any] | None) -> int | PartitionSize | ForCluster | None:
    """The size to cut ``job``'s corpus at: the one recorded in the run dir being resumed
    (``old``), else ``--partition-chars``, else one chosen for the cluster's size
    (:func:`lmc_dist.cluster.cluster_size`); None when that size is the workers a
    ``--scheduler`` has now, which only its client can tell."""
    if old is not None:
        return recorded_size(old)
    if job.partition_chars is not None:
        return job.partition_chars
    if job.scheduler and not job.workers:
        return None
    return ForCluster(workers=cluster_size(job))


def execute(job: DistJob) -> RunReport:
    """Run ``job`` to completion (or to failure of some partitions), holding the run dir's
    lock throughout (:func:`lmc_dist.commit.locked`); the run commits when every partition
    is done (:func:`lmc_dist.commit.commit`).

    Raises:
        InputError: bad corpus (before any model starts), or an ``--output`` that cannot
            be written (before anything is done).
        RunDirBusy: another ``lmc-dist run`` is writing the run dir.
        LmcError: the run dir holds another run with a partition done (without
            ``--resume``; one with none done is started anew), cannot be resumed,
            does not exist (with ``--resume``: a mistyped path would cost a whole run), or
            holds files lmc-dist did not write (and no manifest).
        KeyboardInterrupt: after saving the manifest (the run can be resumed).
    """
    started = time.monotonic()
    if job.output:
        check_writable(job.output, (job.input, job.game.options.get("vocab")),  # before any work
                       run_dir=job.run_dir)
    if job.game.options.get("vocab") is not None:   # as lmc run reads it: FILE:LINE, at once
        read_vocabulary(job.game.options["vocab"], warn=True)
    if is_url(job.run_dir):      # (QA: s3://b/run was written as the local s3:/b/run)
        raise InputError(job.run_dir, None, "the run dir cannot be a URL: it is a directory on "
                         "a file system that the client and every worker mount at the same path "
                         "(deploy/README.md)")
    if job.out_format == "parquet":
        check_parquet_name(os.path.abspath(job.run_dir), "the run dir's path, which its "
                           "Parquet parts' paths hold,", "write jsonl parts (--part-format jsonl)")
    if job.resume and not os.path.exists(job.run_dir):
        raise LmcError(f"{job.run_dir}: no such run dir to resume (without --resume, lmc-dist "
                       "run starts a run there)")
    with commit.locked(job.run_dir):
        return _execute_locked(job, started)


def _execute_locked(job: DistJob, started: float) -> RunReport:
    old = mf.load(job.run_dir)
    stopped_before = bool(old and old.get(STOPPED_EARLY))
    if old is not None and _nothing_done(job.run_dir, old):
        LOG.warning("%s holds a run none of whose partitions is done: starting it anew",
                    job.run_dir)
        old = None
    if old is not None and not job.resume and old.get("finished"):
        raise LmcError(f"{job.run_dir} already holds a finished run (its statistics are in "
                       f"{STATS}): give a new --run-dir")
    if old is not None and not job.resume:
        raise LmcError(f"{job.run_dir} already holds a run (_manifest.json): use --resume to "
                       "finish it, or a new --run-dir")
    if old is None:     # from the start: the scan and the cluster's start take seconds
        commit.begin(job.run_dir)
    with scanned_while_connecting(job, old) as (client, scanned):
        report = _run_scanned(job, client, scanned, old, may_stop_early=not stopped_before)
    commit.remove_leftovers(job.run_dir)
    report.seconds = time.monotonic() - started     # the cluster's shutdown included
    return report


def _nothing_done(run_dir: str, old: dict[str, Any]) -> bool:
    """Whether the unfinished run of ``old`` (its manifest) has no partition done, neither
    recorded nor in place: a run that failed or stopped at its start (a mistyped model
    command) leaves nothing that another run, with or without ``--resume``, would lose."""
    if old.get("finished"):
        return False
    return all(p.get("state") != "done" and finished_part(run_dir, p["file"]) is None
               for p in old.get("partitions", []))


@contextlib.contextmanager
def scanned_while_connecting(job: DistJob, old: dict[str, Any] | None) -> Iterator[tuple[Client, Any]]:
    """A client (:func:`lmc_dist.cluster.connect`) and the scanned corpus (:func:`lmc_dist.partition.scan`),
    the scan running in a thread while the embedded cluster starts: its worker processes
    import Dask for about half a second, a 1M-line corpus takes seconds to scan, and neither
    waits for the other (BENCHMARKS.md, "scaling").  A bad corpus is reported even when the
    cluster fails to start too.  A ``--scheduler`` whose workers size the partitions is
    asked once connected, and the scan follows (a client connects in a fraction of a second).

    Raises:
        InputError: the corpus is bad (no model has started; the cluster is shut down).
        LmcError: the cluster did not start.
    """
    size = partition_size(job, old)
    if size is None:      # the size of a --scheduler's cluster: the scan waits for the client
        with connect(job) as client:
            yield client, scan(job.input, job.corpus_format, ForCluster(workers=cluster_size(job, client)),
                               job.train, job.run_dir, cost=query_cost(job.game))
        return
    scanning = in_background(scan, job.input, job.corpus_format, size, job.train, job.run_dir,
                             cost=query_cost(job.game))
    try:
        with connect(job) as client:
            yield client, scanning.result()
    except LmcError:
        scanning.result()       # the corpus' error first: the cluster's may follow from it
        raise


def in_background(function: Any, *args: Any, **kwargs: Any) -> Future:
    """``function(*args, **kwargs)`` started in a daemon thread (an interrupted ``lmc-dist``
    exits without waiting for it; a Ctrl-C goes to the main thread,
    :func:`lmc_dist.quiet.start_without_sigint`); its value or exception in the future."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(function(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the thread that asks
            future.set_exception(e)

    start_without_sigint(threading.Thread(
        target=run, daemon=True, name=f"lmc-dist-{getattr(function, '__name__', 'background')}"))
    return future


def _run_scanned(job: DistJob, client: Client, scanned: Any, old: dict[str, Any] | None,
                 may_stop_early: bool = True) -> RunReport:
    """Record the run in its manifest, run the partitions still to do and commit the run
    (when all of them succeeded); the report's ``seconds`` is left for the caller.  With
    ``may_stop_early`` the run stops when its model fails alike as it starts
    (:func:`_run_partitions`)."""
    resumed = scanned.groups.warning(job.input)
    if resumed is not None:
        LOG.warning("%s", resumed)
    if job.out_format == "parquet":
        scanned.users.check_parquet(job.input, "write the parts as jsonl (--part-format jsonl)")
    if job.output and file_form(job.output) == "parquet":
        scanned.users.check_parquet(job.input, "write --output as .jsonl or .jsonl.gz")
    manifest = _identity(job, scanned, old)
    if old is not None:
        mf.check_resumable(old, manifest)
        _warn_if_the_model_changed(old, manifest)
        manifest["started"] = old.get("started", manifest["started"])
        manifest["run"] = old.get("run", manifest["run"])     # the same run, resumed
        manifest["finished"] = old.get("finished")
    _finished_partitions(job.run_dir, old, manifest)
    before = [i for i, p in enumerate(manifest["partitions"]) if p["state"] == "done"]
    if not manifest["finished"]:
        commit.begin(job.run_dir)
    commit.remove_leftovers(job.run_dir)
    mf.save(job.run_dir, manifest)

    model_files = files_as_named(job.predictor.describe(), job.predictor.options)
    tasks = [PartitionTask(run_dir=os.path.abspath(job.run_dir), input_path=scanned.path if is_url(scanned.path)
                           else os.path.abspath(scanned.path),
                           corpus_name=job.input, corpus_format=scanned.corpus_format, partition=p,
                           game=job.game, predictor=job.predictor, train=job.train,
                           out_format=job.out_format, user_type=manifest["user_type"],
                           run=manifest["run"], client=client.id, model_files=model_files)
             for p in scanned.partitions]
    register_model_pool(client, job)
    workers = workers_of(client, job) or (job.workers or 1)
    if client.dashboard_link and dashboard_address() is not None or job.scheduler:
        LOG.warning("dask dashboard: %s", client.dashboard_link)
    outcomes, errors, not_run, made = _run_partitions(client, job, tasks, manifest, may_stop_early)
    gone = _check_models(client, job, manifest)
    for _ in range(job.retries):   # partitions removed after they were done: made again
        if not gone or not_run:
            break
        again, errors_again, not_run, made_again = _run_partitions(
            client, job, [tasks[i] for i in sorted(gone)], manifest, may_stop_early)
        made |= made_again
        outcomes.update(again)
        errors.update(errors_again)
        gone = _check_models(client, job, manifest)
    errors.update(gone)
    if not errors:      # a corpus rewritten under the run: its parts are of two versions
        check_unchanged(scanned.path, scanned.version, what="lmc-dist",
                        again="if only its modification time changed (a touch), --resume "
                              "finishes the run (it checks the corpus' content), else start "
                              "again in a new --run-dir")
    stats = None if errors else _finish(client, job, [outcomes[i] for i in range(len(tasks))],
                                        manifest)
    entries = manifest["partitions"]
    tokens = sum(p.get("rows") or 0 for p in entries if p["state"] == "done")
    if stats is not None and tokens == 0:   # said, as lmc run says it (QA: said nothing)
        warn_empty_log(job.input, scanned.messages)
    # rows as the run ends: a part file in place that the manifest had not recorded yet (an
    # interrupted run) has its rows from the worker that read it back (QA: counted as 0, so
    # the summary gave its tokens to this invocation's rate); one whose file turned out
    # unreadable was made again, by this invocation (QA: counted as kept)
    kept = [i for i in before if i not in made]
    # workers that joined a --scheduler's cluster after the start took partitions too (QA:
    # 'on 1 worker' where two made them)
    workers = max(workers, len({entries[i].get("worker") for i in made} - {None}))
    return RunReport(stats=stats or {}, tokens=tokens, seconds=0.0,
                     workers=workers, partitions=len(tasks), failed=failure_messages(tasks, errors),
                     failed_partitions=len(errors), not_run=len(not_run),
                     stopped_by=stop_reason(errors) if not_run else "", kept_partitions=len(kept),
                     kept_tokens=sum(entries[i].get("rows") or 0 for i in kept))


def _finish(client: Client, job: DistJob, outcomes: list[Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """Reduce the finished partitions ``outcomes`` (futures, in partition order) into the
    run's statistics, commit the run and write ``--output``; the statistics.

    Raises:
        LmcError: the client lost the scheduler before the commit (every partition is kept:
            ``--resume`` reduces them again) or while writing ``--output`` (the run is
            complete; ``lmc convert`` writes the log without a cluster).
    """
    parts = [p["file"] for p in manifest["partitions"]]
    try:
        stats = reduce.global_stats(client, outcomes, intervals=job.intervals,
                                    parts=[str(finished_part(job.run_dir, p)) for p in parts])
    except (CancelledError, CommClosedError):
        raise LmcError(f"lost {cluster_name(job)} after all {len(parts)} partitions were done, "
                       f"before the statistics; they are kept in {job.run_dir}: run again with "
                       "--resume when the cluster is back") from None
    client.cancel(outcomes)   # released: a worker lost now costs nothing
    commit.commit(job.run_dir, manifest, stats)
    if job.output:
        try:
            write_output(job.run_dir, parts, job.output, job.game.name, client)
        except (CancelledError, CommClosedError):
            raise LmcError(f"lost {cluster_name(job)} while writing {job.output}; the run in "
                           f"{job.run_dir} is complete (statistics in {STATS}): write the log "
                           f"with `lmc convert {job.run_dir} -o {job.output}`") from None
        except OSError as e:     # a full disk: the run is done all the same
            raise LmcError(f"{job.output}: cannot write: {e.strerror or e}; the run in "
                           f"{job.run_dir} is complete (statistics in {STATS}): write the log "
                           f"with `lmc convert {job.run_dir} -o FILE`") from None
    return stats


def _check_models(client: Client, job: DistJob, manifest: dict[str, Any]) -> dict[int, ModelError]:
    """Finish the workers' models (:func:`lmc_dist.worker.finish_models`: each shell model's
    output read to its end, so that one that wrote more answer lines than it was asked is
    seen, however late the extra line came), then find the partitions recorded as done
    whose file is gone: a worker removes the files that a model process answered when it is
    found out of step, or fails before it could be checked (their answers may belong to
    other requests).  They are recorded as failed in ``manifest`` (saved), and returned
    with their errors by index: a run is never committed without them."""
    try:
        found = client.run(finish_models, job.predictor, client.id, on_error="return")
    except (OSError, CancelledError):  # the scheduler gone: the files say what is done
        found = {}
    found_out = [error for answer in found.values() if isinstance(answer, list)
                 for error in answer]
    removed = ModelError(job.predictor.describe(), "the partition's file is gone: the model "
                         "process that answered it failed later, or wrote more answer lines "
                         "than it was asked, so its answers may belong to other requests (a "
                         "worker removes the files such a process answered)", stderr_tail=None,
                         where="")
    gone: dict[int, ModelError] = {}
    for entry in manifest["partitions"]:
        if entry["state"] != "done" or finished_part(job.run_dir, entry["file"]) is not None:
            continue
        error = next((e for e in found_out if entry["file"] in e.reason),
                     found_out[0] if found_out else removed)
        gone[entry["index"]] = error
        entry.update(state="failed", error=str(error))
    if gone:
        mf.save(job.run_dir, manifest)
    return gone


def _finished_partitions(run_dir: str, old: dict[str, Any] | None, manifest: dict[str, Any]) -> None:
    """Mark in ``manifest`` the partitions whose files are in place (a file in place is whole:
    it was renamed there when written) as done, with their entries of the old manifest (rows,
    timings)."""
    old_entries = old["partitions"] if old is not None else [None] * len(manifest["partitions"])
    for entry, new_entry in zip(old_entries, manifest["partitions"]):
        found = finished_part(run_dir, new_entry["file"])
        if found is None:
            continue
        if old is None:     # of no run this one continues (one started anew): not its work
            LOG.warning("%s: of an earlier run in the run dir, not this one's: removed", found)
            os.remove(found)
            continue
        changed = changed_part(found, entry) if entry is not None else None
        if changed is not None:        # cut short or swapped since: made again
            LOG.warning("%s: %s: computing it again", found, changed)
            os.remove(found)
            continue
        if entry is not None and entry.get("state") == "done":
            new_entry.update(entry)
        new_entry["state"] = "done"


def write_output(run_dir: str, part_files: list[str], output: str, game: str,
                 client: Client | None = None) -> None:
    """Concatenate the partitions (in order) into the log file ``output``, atomically
    (:func:`lmchallenge.logs.convert.join_logs`: the client only joins files, which keeps this
    serial step small).  Partitions of another form than the output's are first converted
    by the workers of ``client``, one task each (in this process without one).

    Raises:
        CancelledError, CommClosedError: ``client`` lost its scheduler (:mod:`lmc_dist.connection`).
    """
    # absolute: the workers converting them run in other working directories
    sources = [os.path.join(os.path.abspath(run_dir), name) for name in part_files]
    if client is None:
        join_logs(sources, output, game)
        return

    def on_workers(pairs, game):
        require_scheduler(client)
        client.gather(client.map(convert_file, *zip(*pairs), game=game, pure=False))

    join_logs(sources, output, game, convert=on_workers)


def _summary(outcome) -> dict[str, Any]:
    return outcome.summary()


def _summary_on_worker(key: str, dask_worker=None) -> dict[str, Any]:
    """The summary of the outcome ``key`` held by this worker (run by ``Client.run`` on the
    worker's event loop: it does not wait for a task slot behind the next partition)."""
    return dask_worker.data[key].summary()


def summary_now(client: Client, future: Any, task: PartitionTask, entry: dict[str, Any]
                ) -> dict[str, Any]:
    """The finished partition ``future``'s summary, asked of the worker that holds it at
    once; where that worker is gone, from the part file it wrote before its task ended
    (made by the task, not read back, where its manifest ``entry`` was not done or records
    another size; its timings and worker are then None), and only without one through a
    task.

    A task that depends on a lost result is run again on the workers, and is lost with them
    again where they keep dying (QA: a Python model's segmentation faults on the one worker
    took the summary's task with them, 4 times, and the run ended in Dask's KilledWorker
    traceback).

    Raises:
        CancelledError: the client lost the scheduler (Dask cancels its futures).
        CommClosedError: the scheduler went away during the request.
    """
    require_scheduler(client)
    holders = client.who_has([future]).get(future.key) or ()
    for address in holders:
        try:
            return client.run(_summary_on_worker, future.key, workers=[address])[address]
        except Exception:  # noqa: BLE001 - the worker left or spilled it: from the file
            break
    path = finished_part(task.run_dir, os.path.basename(task.output_path))
    if path is None:
        return submit(client, _summary, future, pure=False).result()
    outcome = state_of_existing_part(str(path), task.partition.index, task.partition.characters)
    made = entry["state"] != "done" or entry.get("bytes") != outcome.bytes
    return dict(outcome.summary(), made=made, elapsed=None, began=None, worker=None)


def _run_partitions(client: Client, job: DistJob, tasks: list[PartitionTask], manifest: dict[str, Any],
                    may_stop_early: bool = True
                    ) -> tuple[dict[int, Any], dict[int, BaseException], set[int], set[int]]:
    """Submit every partition (finished ones only re-read their file, or are made again where
    it cannot be read), track them to the end,
    recording each in the manifest as soon as its task ends.  With ``may_stop_early``, stop
    (the tasks not ended cancelled, :data:`STOPPED_EARLY` set in the manifest) when the model
    fails alike as it starts (:class:`StartFailures`) before any partition succeeded: a
    model that cannot start never finishes one.  A model that fails on what the first
    requests of two partitions hold (a batching model reads many before it answers) looks
    the same; the flag lets the next run in the run dir go all the way.

    Returns:
        (futures of the partition outcomes by index, errors of failed partitions by index,
        the indices of the partitions not run because the run stopped early, the indices of
        the partitions evaluated here rather than read back from an earlier run's file).
    Raises:
        LmcError: the client lost the scheduler (the manifest is saved: ``--resume``).
        KeyboardInterrupt: after cancelling the tasks and saving the manifest.
    """
    run_id = uuid.uuid4().hex[:8]
    order = sorted(tasks, key=lambda t: -(t.partition.queries or t.partition.characters)) \
        if job.train else tasks
    futures: dict[Any, int] = {}
    outcomes: dict[int, Any] = {}
    by_index = {task.partition.index: task for task in tasks}
    for rank, task in enumerate(order):
        index = task.partition.index
        key = f"{TASK_PREFIX}part-{index:05d}-{run_id}"
        # a finished partition's task reads its file back (made again if it cannot be read)
        future = client.submit(evaluate_partition, task, key=key, pure=False,
                               retries=job.retries, priority=len(order) - rank,
                               resources=job.resources)
        futures[future] = index
        outcomes[index] = future
    errors: dict[int, BaseException] = {}
    made: set[int] = set()
    at_start = StartFailures()
    ended: set[int] = set()
    succeeded = False
    bar = tqdm(total=len(tasks), unit="part", file=sys.stderr, dynamic_ncols=True,
               disable=not (sys.stderr.isatty() if job.progress is None else job.progress))
    tokens = 0
    start = time.monotonic()
    saver = mf.Saver(job.run_dir)
    try:
        for future in watching_workers(client, job, as_completed(list(futures))):
            index = futures[future]
            entry = manifest["partitions"][index]
            if future.status == "cancelled":   # the client lost the scheduler: Dask cancels them all
                raise CancelledError(f"partition {index}'s task was cancelled")
            ended.add(index)
            if future.status == "error":
                errors[index] = future.exception()
                entry.update(state="failed", error=str(errors[index]))
                if may_stop_early and not succeeded and at_start.stop(index, errors[index]):
                    client.cancel([f for f, i in futures.items() if i not in ended])
                    manifest[STOPPED_EARLY] = True
                    saver.save(manifest)
                    break
            else:
                succeeded = True
                summary = summary_now(client, future, by_index[index], entry)
                tokens += summary["rows"]
                if summary["made"]:
                    made.add(index)
                if index in made or entry["state"] != "done" or entry.get("rows") is None:
                    # (a partition read back keeps the timings of the run that made it)
                    entry.update(state="done", rows=summary["rows"], bytes=summary["bytes"],
                                 elapsed=summary["elapsed"], began=summary["began"],
                                 worker=summary["worker"], error=None)
            saver.changed(manifest)
            bar.update(1)
            rate = tokens / max(1e-9, time.monotonic() - start)
            bar.set_postfix_str(f"{tokens} tok, {rate:,.0f} tok/s", refresh=False)
    except KeyboardInterrupt:
        client.cancel(list(futures))
        saver.save(manifest)
        if job.scheduler:
            release_models(client)
        raise
    except (CancelledError, CommClosedError):   # raised above, or by a summary's request to
        # the scheduler as it went away: either way the scheduler is lost
        saver.save(manifest)
        done = sum(finished_part(job.run_dir, p["file"]) is not None for p in manifest["partitions"])
        raise LmcError(f"lost {cluster_name(job)} during the run; {done} of {len(tasks)} partitions "
                       f"are done and kept in {job.run_dir}: run again with --resume when the "
                       "cluster is back") from None
    finally:
        bar.close()
    saver.flush(manifest)
    return outcomes, errors, set(outcomes) - ended, made

"""Quiet failures: the errors of lmc-dist's tasks are reported once, by the client.

* A partition that fails raises on its worker, where ``distributed`` logs it ("Compute
  Failed", the exception and a traceback, per attempt): the client reports the same error,
  with the partition's lines, once (:func:`lmc_dist.failures.failure_messages`).  Workers drop
  those log records for lmc-dist's own tasks (:class:`OwnTaskFailures`); records of any other
  task, and every other record, stay.
* Ctrl-C on a terminal sends SIGINT to the whole foreground process group: the embedded
  cluster's workers (and their model processes) would each die with a traceback while the
  client shuts them down anyway.  They are started with SIGINT ignored
  (:func:`sigint_deferred`), and the client's own Dask scheduler and client, cut off in the
  middle of their work, close without logging (:func:`quiet_interruption`), so the client's
  one line is all the user sees.  One record escapes that: a Ctrl-C that lands while
  ``distributed.utils.sync`` is starting its call makes the event loop log a ``NameError``
  from sync's ``cancel`` (its future is not set yet; an upstream race), logged by the loop
  thread before the client's main thread is back in lmc-dist's code.  The client drops that
  record (:class:`SyncCancelRace`, :func:`client_filters`).
* A scheduler that goes away during a run (``--scheduler``) cancels every task the client
  holds: lmc-dist saves the manifest and says so in one line (``--resume`` finishes the run).
  Closing the client then cuts short its attempt to reconnect, which ``distributed`` logs
  with a trace; the client drops those records (:class:`LostScheduler`).
* A partition whose workers all died running it (a Python model that crashed its worker's
  process, say) is reported by the client with its lines and what may have killed them; the
  embedded cluster's scheduler, in the client's process, does not log it too
  (:class:`OwnKilledWorkers`), nor a broadcast that a dead worker did not answer
  (:class:`BroadcastToGoneWorker`); before it closes, the embedded cluster waits a few seconds
  for the workers being restarted (:func:`lmc_dist.cluster.workers_back`).
* A worker that closes (the embedded cluster at the end of every run, a cluster scaled down)
  while its heartbeat to the scheduler is under way logs the heartbeat's failure, with a
  trace, at ERROR: the worker's own connection pool, closing, cut the heartbeat off (an
  upstream race; CI saw it once before lmc-dist's summary line).  Workers drop that record
  once they are closing (:class:`ClosingHeartbeat`); a heartbeat that fails while the worker
  runs is still logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import weakref
from collections.abc import Iterator
from typing import Any

TASK_PREFIX = "lmc-"
"""Prefix of the keys of lmc-dist's tasks (``lmc-part-NNNNN-RUNID``)."""


class OwnTaskFailures(logging.Filter):
    """Drops ``distributed``'s "Compute Failed" records of lmc-dist's tasks."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            lines = record.getMessage().split("\n", 2)
        except Exception:  # noqa: BLE001 - a malformed record is not ours to judge
            return True
        return not (lines[0] == "Compute Failed" and len(lines) > 1 and TASK_PREFIX in lines[1])


_FILTER = OwnTaskFailures()


class SyncCancelRace(logging.Filter):
    """Drops the event loop's record of the ``NameError`` that ``distributed.utils.sync``'s
    ``cancel`` callback raises when a KeyboardInterrupt comes before its future is set."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, NameError):
            return True
        frame = error.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        code = frame.tb_frame.f_code if frame is not None else None
        return not (code is not None and code.co_name == "cancel"
                    and code.co_filename.endswith(("distributed/utils.py", "distributed\\utils.py")))


RECONNECT_FAILED = "Failed to reconnect to scheduler after %.2f seconds, closing client"
"""The message ``distributed.client`` logs when its attempt to reconnect ends unsuccessfully
(also when the client is closed meanwhile, with the full timeout in the text)."""


class LostScheduler(logging.Filter):
    """Drops ``distributed.client``'s records of a reconnection cut short: when the scheduler
    goes away the client tries to reconnect, and lmc-dist, closing it at once to report the
    lost cluster in one line, cancels that attempt, which ``distributed`` logs at ERROR twice
    (its coroutine cancelled, with a trace ending in ``asyncio.CancelledError``, and
    :data:`RECONNECT_FAILED`, which then names a timeout that did not pass); and the client's
    batched stream to the scheduler logs its closing at INFO, with a trace (Dask's logging
    configuration shows ``distributed``'s INFO records)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "distributed.batched":   # "Batched Comm Closed", with a trace
            return record.levelno >= logging.WARNING
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, asyncio.CancelledError) or record.msg == RECONNECT_FAILED)


@contextlib.contextmanager
def client_filters() -> Iterator[None]:
    """While the body runs, the client process drops :class:`SyncCancelRace`'s records
    (tornado logs the loop's callback errors as ``tornado.application``),
    :class:`LostScheduler`'s and (the embedded cluster's scheduler runs in this process)
    :class:`OwnKilledWorkers`' and :class:`BroadcastToGoneWorker`'s."""
    lost = LostScheduler()
    filtered = [(logging.getLogger("tornado.application"), SyncCancelRace()),
                (logging.getLogger("distributed.client"), lost),
                (logging.getLogger("distributed.batched"), lost),
                (logging.getLogger("distributed.scheduler"), OwnKilledWorkers()),
                (logging.getLogger("distributed.scheduler"), BroadcastToGoneWorker())]
    for logger, drop in filtered:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger, drop in filtered:
            logger.removeFilter(drop)


WORKERS_DIED = "Task %s marked as failed because %d workers died while trying to run it"
"""The message ``distributed.scheduler`` logs at ERROR when a task has outlived
``distributed.scheduler.allowed-failures`` workers (then the task's ``KilledWorker``)."""


class OwnKilledWorkers(logging.Filter):
    """Drops the scheduler's :data:`WORKERS_DIED` record of an lmc-dist task: the client
    says what it means for that partition (:func:`lmc_dist.failures.failure_messages`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == WORKERS_DIED and isinstance(record.args, tuple)
                    and str(record.args[0]).startswith(TASK_PREFIX))


class BroadcastToGoneWorker(logging.Filter):
    """Drops the scheduler's ERROR record of a broadcast (``Client.run``,
    ``Client.register_plugin``) that a worker did not answer because it had died: every
    broadcast to the embedded cluster is lmc-dist's, and each handles a worker's failure
    (:func:`lmc_dist.pool.held_models`, :func:`lmc_dist.job._check_models`); QA: the line
    came before lmc-dist's own in a quarter of the runs of a model that ends its worker's
    process."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.ERROR and isinstance(record.msg, str)
                    and record.msg.startswith("broadcast to ") and " failed: " in record.msg)


HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat."
"""The message ``distributed.worker`` logs when a heartbeat fails with an OSError."""

_CLOSING = frozenset({"closing", "closing_gracefully", "closed"})
"""The names of ``distributed.core.Status`` members of a worker on its way out."""


class ClosingHeartbeat(logging.Filter):
    """Drops a worker's record of a failed heartbeat once that worker is closing (its status
    is one of :data:`_CLOSING`, or the failure is its connection pool closing)."""

    def __init__(self, worker: Any = None) -> None:
        super().__init__()
        self._worker = weakref.ref(worker) if worker is not None else None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != HEARTBEAT_FAILED:
            return True
        worker = self._worker() if self._worker is not None else None
        status = getattr(getattr(worker, "status", None), "name", None)
        error = record.exc_info[1] if record.exc_info else None
        return not (status in _CLOSING or "ConnectionPool closing" in str(error))


def quiet_worker(worker: Any = None) -> None:
    """In the process of ``worker`` (a ``distributed.Worker``): drop the failure records of
    lmc-dist's tasks, and the record of a heartbeat cut off as the worker closes."""
    logger = logging.getLogger("distributed.worker")
    logger.addFilter(_FILTER)
    for old in [f for f in logger.filters if isinstance(f, ClosingHeartbeat)]:
        logger.removeFilter(old)
    logger.addFilter(ClosingHeartbeat(worker))


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """While the body runs (in the main thread; elsewhere a no-op), SIGINT is ignored, so the
    processes it starts inherit an ignored SIGINT (the disposition survives ``exec``, and
    Python leaves an ignored SIGINT ignored) and a terminal's Ctrl-C never reaches them.  It
    is also blocked meanwhile: a blocked signal is kept pending even while ignored (signal(7)),
    so a Ctrl-C during the body is raised as KeyboardInterrupt when it ends.  Multiprocessing's
    resource tracker, which a body starting processes starts, unblocks SIGINT in the thread
    that starts it (a Ctrl-C would then be delivered while ignored: lost): it is started
    before.  A SIGTERM during the body is noted and raised again when it ends, for the handler
    in place before (:class:`lmchallenge.errors.Terminated` under ``lmc-dist``): not blocked,
    since the processes started would inherit the mask and could not be terminated (a Python
    handler is not inherited)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    terms: list[int] = []
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if terms:
            signal.raise_signal(signal.SIGTERM)     # to the handler the body replaced


def start_without_sigint(thread: threading.Thread) -> None:
    """Start ``thread`` with SIGINT blocked in it (a new thread inherits its starter's signal
    mask): the kernel then never hands a Ctrl-C to it, where :func:`sigint_deferred` could not
    keep it pending, but to the main thread, which runs Python's handlers anyway."""
    if not hasattr(signal, "pthread_sigmask"):
        thread.start()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def quiet_interruption() -> Iterator[None]:
    """On KeyboardInterrupt out of the body, disable logging for the rest of the process
    (it is exiting): the scheduler and client closing with work under way would otherwise
    log "Closed comm" and "Task exception was never retrieved" records, each with a trace."""
    try:
        yield
    except KeyboardInterrupt:
        logging.disable(logging.CRITICAL)
        raise

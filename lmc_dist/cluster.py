"""The Dask cluster a run is on: an embedded LocalCluster or a ``--scheduler``'s
(:func:`connect`), its size (:func:`cluster_size`), and a watch on its workers while the run
waits for them (:func:`watching_workers`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import dask
from dask.utils import parse_timedelta
from distributed import Client, LocalCluster

from lmchallenge.errors import LmcError
from lmchallenge.tuning import DASK_EMBEDDED_CONFIG, usable_cpus

from lmc_dist.connection import missing_tls, unresolved_host
from lmc_dist.quiet import client_filters, quiet_interruption, sigint_deferred, start_without_sigint
from lmc_dist.resources import format_resources, offering, require_offered
from lmc_dist.spec import DistJob
from lmc_dist.worker import EMBEDDED_WORKER

LOG = logging.getLogger(__name__)
EMBEDDED_CONFIG = {**DASK_EMBEDDED_CONFIG, f"distributed.nanny.pre-spawn-environ.{EMBEDDED_WORKER}": "1"}
"""Dask settings of the embedded cluster (:data:`lmchallenge.tuning.DASK_EMBEDDED_CONFIG`; its
workers' processes are told they are its: :data:`lmc_dist.worker.EMBEDDED_WORKER`)."""


@contextlib.contextmanager
def connect(job: DistJob) -> Iterator[Client]:
    """A client of ``job.scheduler``, or of an embedded LocalCluster (one worker process per
    core, one thread each, made with :data:`EMBEDDED_CONFIG`) that is shut down afterwards.
    The scheduler's HTTP server (which runs with or without a dashboard) takes a free
    loopback port, not 8787, which another cluster on the machine may hold."""
    if job.scheduler:
        with client_filters(), scheduler_client(job.scheduler) as client, quiet_interruption():
            yield client
        return
    n = embedded_workers(job)
    cluster = None
    try:   # the settings are read when the scheduler, nannies and workers start; the
        # cluster's processes inherit an ignored SIGINT
        with sigint_deferred(), dask.config.set(EMBEDDED_CONFIG):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=dashboard_address() or "127.0.0.1:0",
                                   silence_logs=logging.ERROR, resources=job.resources)
    except KeyboardInterrupt:          # Ctrl-C during the start, delivered on unblocking
        if cluster is not None:
            cluster.close()
        raise
    except (RuntimeError, OSError, TimeoutError) as e:   # e.g. a worker killed as it started
        raise LmcError(f"the embedded Dask cluster did not start ({str(e).rstrip('.')}); run again "
                       "(with --resume if the run dir holds a run)") from None
    with client_filters(), cluster, Client(cluster) as client, quiet_interruption():
        yield client
        workers_back(client, n)


RESTART_GRACE_SECONDS = 5.0
"""How long the embedded cluster waits, before it closes, for workers its nannies restart."""


def workers_back(client: Client, workers: int, timeout: float = RESTART_GRACE_SECONDS) -> None:
    """Wait, at most ``timeout`` seconds, until the cluster of ``client`` has ``workers``
    workers again: a worker that its nanny restarts (after a model killed it) while the
    embedded cluster closes prints Dask's INFO start lines and a ``ConnectionPool is
    closed`` traceback (a race in Dask's close; QA: 1 run in 6 of a Python model that ends
    its process).  Immediate where none is being restarted.  Only after a run that ended
    with its report (failed partitions included): not after a Ctrl-C or an error of the
    cluster, which ``yield`` raises, and which must not wait."""
    with contextlib.suppress(Exception):    # (TimeoutError: closing anyway)
        client.wait_for_workers(workers, timeout=timeout)


CONNECT_GRACE_SECONDS = 5.0
"""How much longer than Dask's connect timeout a client may take to get an answer."""


def scheduler_client(address: str, say_after: float = 2.0) -> Client:
    """A client of the Dask scheduler at ``address``; where none has answered after
    ``say_after`` seconds and Dask waits for one at least 5 s
    (``distributed.comm.timeouts.connect``: 30 s), a warning says what the run waits for.

    Raises:
        LmcError: its host name does not resolve (at once: Dask waited its connect timeout),
            a TLS address has no usable certificates in Dask's configuration (at once),
            no scheduler answers there (within Dask's ``distributed.comm.timeouts.connect``),
            or none has finished the client's start within three times that and
            :data:`CONNECT_GRACE_SECONDS`.
    """
    unresolved = unresolved_host(address) or missing_tls(address)
    if unresolved is not None:
        raise LmcError(f"cannot reach the Dask scheduler at {address}: {unresolved}")
    limit = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")
    waiting = threading.Timer(say_after, LOG.warning, (
        "no answer yet from the Dask scheduler at %s: waiting up to %g s (Dask's "
        "distributed.comm.timeouts.connect)", address, limit))
    waiting.daemon = True
    if limit >= 5:
        waiting.start()
    made: list[Any] = []

    def make() -> None:
        try:
            made.append(Client(address))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            made.append(e)

    # Dask bounds each step of its client's start (the connection, the scheduler's
    # information, the stream's start: each within the connect timeout), not the handshake:
    # a server that is not a scheduler (its dashboard's port) held the client for ever
    deadline = 3 * limit + CONNECT_GRACE_SECONDS
    connecting = threading.Thread(target=make, name="lmc-dist-connect", daemon=True)
    try:
        start_without_sigint(connecting)
        connecting.join(deadline)
    finally:
        waiting.cancel()
    if not made:
        raise LmcError(f"no Dask scheduler answered at {address} within {deadline:g} s (a server "
                       "listens there, but does not speak Dask's protocol, such as the "
                       "dashboard's port, or is too busy to answer)")
    if isinstance(made[0], (OSError, TimeoutError)):
        raise LmcError(f"cannot reach the Dask scheduler at {address} ({str(made[0]).rstrip('.')})")
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def cluster_name(job: DistJob) -> str:
    """The cluster ``job`` runs on, for messages."""
    return f"the Dask cluster at {job.scheduler}" if job.scheduler else "the embedded Dask cluster"


def dashboard_address() -> str | None:
    """The embedded cluster's dashboard address: a free loopback port where bokeh (which
    Dask's dashboard needs) is installed, else None (no dashboard to link to)."""
    try:
        import bokeh  # noqa: F401  (the dashboard needs it)
    except ImportError:
        return None
    return "127.0.0.1:0"


def cluster_size(job: DistJob, client: Client | None = None) -> int:
    """Workers ``job`` will run on: ``--workers``, else the workers the scheduler of
    ``client`` has now (with ``--resources``: those declaring them), else (an embedded
    cluster) one per usable CPU (:func:`embedded_workers`).

    Raises:
        LmcError: no worker declares the ``--resources`` asked for.
    """
    if job.workers:
        return job.workers
    if client is not None:
        return max(1, workers_of(client, job))
    return embedded_workers(job)


def embedded_workers(job: DistJob) -> int:
    """Workers of ``job``'s embedded cluster: ``--workers``, else one per CPU this process
    may use (:func:`lmchallenge.tuning.usable_cpus`: less than the machine's under
    ``taskset`` or a container's CPU quota)."""
    return job.workers or usable_cpus()


def workers_of(client: Client, job: DistJob) -> int:
    """Workers of ``client``'s cluster that can run ``job``'s partitions now (with
    ``--resources``: those declaring them).

    Raises:
        LmcError: no worker declares the ``--resources`` asked for.
    """
    found = client.scheduler_info().get("workers", {})
    if job.resources:
        return require_offered(found, job.resources, cluster_name(job))
    return len(found)


WORKER_WATCH_SECONDS = 5.0
"""How long a ``--scheduler`` cluster may have no worker before a run warns that it waits."""


def watching_workers(client: Client, job: DistJob, items: Iterable[Any],
                      every: float = WORKER_WATCH_SECONDS) -> Iterator[Any]:
    """``items``, while (on a ``--scheduler`` cluster) a thread asks the scheduler for its
    workers every ``every`` seconds and warns where the run would otherwise wait in silence:
    each time the cluster has had no worker (none started, or every one lost), and each time
    the scheduler has not answered within Dask's ``distributed.comm.timeouts.connect`` (a
    scheduler stopped, swapped out or cut off by the network: its connections stay open, so
    Dask itself waits for ever), then once it answers again."""
    if not job.scheduler:
        yield from items
        return
    stop = threading.Event()
    limit = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")

    def watch() -> None:
        alone = False
        silent_since: float | None = None
        while not stop.wait(every):
            asked = time.monotonic()
            try:
                # the workers' details only where --resources needs them, else their count
                # (on 1,000 workers, details every few seconds are a large message)
                identity = client.sync(client.scheduler.identity,
                                       n_workers=-1 if job.resources else 0,
                                       callback_timeout=limit)
            except TimeoutError:
                if silent_since is None:
                    silent_since = asked
                    LOG.warning("no answer from the Dask scheduler at %s for %g s (Dask's "
                                "distributed.comm.timeouts.connect): the run waits for it (a "
                                "stopped or overloaded scheduler, or the network to it); Ctrl-C "
                                "stops the run, and --resume finishes it", job.scheduler, limit)
                continue
            except Exception:  # noqa: BLE001 - the scheduler gone: the run itself says so
                return
            if silent_since is not None:
                LOG.warning("the Dask scheduler at %s answers again, after %.0f s", job.scheduler,
                            time.monotonic() - silent_since)
                silent_since = None
            connected = identity.get("workers", {})
            workers = len(offering(connected, job.resources)) if job.resources \
                else identity.get("n_workers", 0)
            if workers == 0 and not alone and job.resources:
                wanted = format_resources(job.resources)
                LOG.warning("no Dask worker declaring the resources %s that --resources asks for "
                            "is connected to %s (%d other workers): the run waits for one (`dask "
                            "worker %s --resources \"%s\"`)", wanted, cluster_name(job),
                            len(connected), job.scheduler, wanted)
            elif workers == 0 and not alone:
                LOG.warning("no Dask worker is connected to %s: the run waits for one (`dask "
                            "worker %s`)", cluster_name(job), job.scheduler)
            alone = workers == 0

    start_without_sigint(threading.Thread(target=watch, name="lmc-dist-worker-watch", daemon=True))
    try:
        yield from items
    finally:
        stop.set()

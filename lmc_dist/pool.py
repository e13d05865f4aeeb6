"""The models' pool on the cluster's workers (:class:`lmc_dist.worker.ModelPool`): registered
as a run starts (:func:`register_model_pool`), and the models of runs that have gone finished
(:func:`finish_orphans`, :func:`release_models`)."""

from __future__ import annotations

import contextlib
import logging

from distributed import Client

from lmchallenge.errors import LmcError, first_line

from lmc_dist.cluster import cluster_name, embedded_workers
from lmc_dist.spec import DistJob
from lmc_dist.worker import PLUGIN_NAME, ModelPool, finish_orphaned_models, model_clients

LOG = logging.getLogger(__name__)


def register_model_pool(client: Client, job: DistJob) -> None:
    """Register :class:`lmc_dist.worker.ModelPool` on every worker, now and later, unless
    the cluster has it (another run's, going on: :attr:`ModelPool.idempotent`), and, on a
    ``--scheduler``'s cluster, finish the models that runs whose client has gone left in it
    (:func:`finish_orphans`).

    Raises:
        LmcError: a worker cannot take the pool (one without this package), or workers were
            lost as the run started.
    """
    _register_model_pool(client, job)
    if job.scheduler:       # an embedded cluster is the run's own, its workers this package's
        finish_orphans(client, job)


def finish_orphans(client: Client, job: DistJob) -> None:
    """Finish, on every worker, the models of runs whose Dask client the scheduler no longer
    has (:func:`lmc_dist.worker.finish_orphaned_models`: the idle ones now, those a task
    still uses when it ends, on a thread of the worker); their errors are no run's to report
    (the part files such a model answered are removed: their run's ``--resume`` makes them
    again).  The workers' clients (:func:`held_models`) are asked for before the
    scheduler's, so that a run starting meanwhile is never taken for gone.  Skipped, said
    with ``-v``, where the scheduler cannot be asked (one that does not run pickled
    functions).

    Raises:
        LmcError: a worker cannot run this package's functions.
    """
    held = held_models(client, job)
    if not held:
        return
    try:
        live = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.clients))
        gone = held - set(live)
        if gone:
            client.run(finish_orphaned_models, sorted(gone), on_error="return")
    except Exception as e:  # noqa: BLE001 - a clean-up: the run goes on without it
        LOG.info("the models of earlier runs on %s were not looked for (%s)", client.scheduler.address,
                 first_line(e))


def release_models(client: Client) -> None:
    """Finish, on every worker of a shared cluster, the models of this client's run, which
    it leaves as it stops (Ctrl-C, SIGTERM): the idle ones now, those a task still uses
    when it ends (:func:`lmc_dist.worker.finish_orphaned_models`, as for a client gone).
    Otherwise they wait, idle, for the next run's start (QA: a model process of 75 MB per
    worker, a GPU model's memory, after Ctrl-C).  A clean-up: nothing is said if the
    cluster cannot be asked."""
    with contextlib.suppress(Exception):
        client.run(finish_orphaned_models, [client.id], ended=True, on_error="return")


def held_models(client: Client, job: DistJob) -> set[str]:
    """The Dask clients whose runs have models on the workers
    (:func:`lmc_dist.worker.model_clients`); none if a worker is lost meanwhile.  It checks
    too that every worker can run this package's functions: a cluster that has the pool
    already is not sent it again, so a worker without the package is found here.

    Raises:
        LmcError: a worker cannot (:func:`_cannot_set_up`).
    """
    try:
        held = client.run(model_clients, on_error="return")
    except OSError:     # a worker went away: its models with it
        return set()
    for answer in held.values():
        if isinstance(answer, BaseException):
            raise _cannot_set_up(job, answer)
    return {c for ids in held.values() for c in ids}


def _register_model_pool(client: Client, job: DistJob) -> None:
    """Register the pool (:func:`register_model_pool`).  A worker that dies meanwhile fails
    the broadcast; the scheduler keeps the pool and gives it to the worker its nanny starts,
    so the run waits for the workers to be back (and registers again: a no-op where the
    scheduler has the pool).

    Raises:
        LmcError: workers are lost, or one cannot take the pool.
    """
    try:
        client.register_plugin(ModelPool(), name=PLUGIN_NAME)
        return
    except OSError:          # CommClosedError: a worker went away during the broadcast
        pass
    except Exception as e:  # noqa: BLE001 - a worker's error, raised again here
        raise _cannot_set_up(job, e) from None
    try:
        if not job.scheduler:
            client.wait_for_workers(embedded_workers(job), timeout=60)
        client.register_plugin(ModelPool(), name=PLUGIN_NAME)
    except (OSError, TimeoutError) as e:
        raise LmcError(f"{cluster_name(job)} lost workers as the run started ({str(e).rstrip('.')}); run again "
                       "(with --resume if the run dir holds a run)") from None
    except Exception as e:  # noqa: BLE001 - a worker's error, raised again here
        raise _cannot_set_up(job, e) from None


def _cannot_set_up(job: DistJob, error: BaseException) -> LmcError:
    """The error of a worker that cannot take the run's model pool: most often one without
    this package (Dask raises its ``ModuleNotFoundError`` wrapped in an ``Exception``)."""
    return LmcError(f"a worker of {cluster_name(job)} cannot set the run up ({first_line(error)}): "
                    "every worker needs lmchallenge-dist installed, the same version as here "
                    "(deploy/README.md)")

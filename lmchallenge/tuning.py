"""Process tuning, in one place: settings of the interpreter, the C library and the thread pools
that make ``lmc``, ``lmc-dist`` and their workers faster, each applied where it takes effect.

* :func:`limit_blas_threads` must run before NumPy is first imported: OpenBLAS reads
  ``OPENBLAS_NUM_THREADS`` when it loads.  The ``lmc`` entry point calls it first thing, before
  any command module is imported.
* :func:`keep_freed_memory` (glibc's ``mallopt``) and :func:`freeze_heap` (``gc.freeze``) can run
  at any time; they tune a process that exits when its command is done.
* :data:`DASK_EMBEDDED_CONFIG` is the Dask configuration of ``lmc-dist``'s embedded cluster.
* :func:`usable_cpus` sizes a process's own pools (the neural model's torch threads under
  ``lmc``, the helper processes of ``lmc-dist``'s scan, its embedded cluster).

The figures behind each setting are in BENCHMARKS.md.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

def usable_cpus() -> int:
    """The CPUs this process may use, as Dask counts them (``dask.system.cpu_count``): the
    machine's, less where the process's affinity (``taskset``) or its container's CPU quota
    (``docker run --cpus``, a cgroup limit) allows fewer.  What a pool of threads or
    processes of this process is sized by.  (Dask is imported on the first call, not with
    this module: 0.2 s that most ``lmc`` commands do not need.)"""
    import dask.system
    return dask.system.cpu_count()


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""Environment variables that size the BLAS thread pools NumPy and SciPy load.

Not ``OMP_NUM_THREADS``: OpenBLAS reads its own variable first, and Arrow sizes its CPU thread
pool from ``OMP_NUM_THREADS`` (``pyarrow.cpu_count()``), so setting it would make the
multi-threaded jsonl decoding of ``lmc stats`` single-threaded (BENCHMARKS.md: 0.78 s against
0.60 s for a 260k-row log on 2 cores); torch reads it too."""


LIMITED_BY = "LMC_BLAS_LIMITED_BY"
"""Environment variable ``PID:NAMES``: the process whose :func:`limit_blas_threads` set the
variables ``NAMES`` (comma-separated).  A process can so tell its own limit from the user's
and from a parent's (:func:`own_limits`)."""


def limit_blas_threads() -> None:
    """One BLAS thread, unless the user chose otherwise (the variables are only set when
    unset, and :data:`LIMITED_BY` says which were).  ``lmc`` does no heavy linear algebra
    (the wr mixture fit is a 2-parameter optimisation): a pool of busy-waiting BLAS threads,
    one per core, only takes CPU from the Parquet decoding thread and the model processes.
    Takes effect only if NumPy is not imported yet.  torch reads ``MKL_NUM_THREADS`` too: a
    model that computes with torch gets its threads back through :func:`model_environment`
    (its own process) or :func:`own_limits` (in process)."""
    unset = [name for name in BLAS_THREAD_VARIABLES if name not in os.environ]
    for name in unset:
        os.environ[name] = "1"
    if unset:
        os.environ[LIMITED_BY] = f"{os.getpid()}:{','.join(unset)}"


def own_limits() -> list[str]:
    """The variables this process's :func:`limit_blas_threads` set (not the user's, and not
    a parent's: an ``lmc-dist`` worker's model keeps the one thread its parent gave it, one
    model process per core)."""
    pid, _, names = os.environ.get(LIMITED_BY, "").partition(":")
    return names.split(",") if pid == str(os.getpid()) and names else []


def _own_entries() -> list[str]:
    """:func:`own_limits` and, when there are any, :data:`LIMITED_BY` itself."""
    own = own_limits()
    return [*own, LIMITED_BY] if own else []


GAME_VARIABLE = "LMC_GAME"
"""The environment variable that tells a model process the game it plays (``we``, ``wc``,
``wr``, ``ce``): a model that cannot play one refuses it (docs/formats.md)."""


WORKER_VARIABLE = "LMC_WORKER"
"""The environment variable that tells a model process the name of the ``lmc-dist`` worker
that started it (set in the worker's process; absent under ``lmc run``): ``lmc-neural
connect`` spreads the workers over its servers by it."""


def model_environment(game: str | None = None) -> dict[str, str]:
    """The environment for a model process this process starts: its own, without the
    limits of :func:`own_limits`, so that ``lmc run``'s one model computes with the threads
    it would have alone (torch: one per core), and with :data:`GAME_VARIABLE` set to
    ``game`` when given."""
    dropped = _own_entries()
    environment = {name: value for name, value in os.environ.items() if name not in dropped}
    if game is not None:
        environment[GAME_VARIABLE] = game
    return environment


def lift_own_limits() -> None:
    """Remove :func:`own_limits` from this process's environment (before torch is imported:
    a model server of the project's own, ``lmc-neural serve``)."""
    for name in _own_entries():
        os.environ.pop(name, None)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3     # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of handing it back to the kernel at once.

    The column-wise statistics allocate and free NumPy arrays for every batch.  With glibc's
    defaults (trim and mmap thresholds from 128 KiB) each batch faults in and zeroes fresh
    pages again: 14,000 of the 24,000 page faults of ``lmc stats`` on a 1,000,000-row Parquet
    log.  Does nothing where the C library is not glibc.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)       # glibc's largest


def freeze_heap() -> None:
    """Move every object the garbage collector tracks into its permanent generation.

    Call it once a process's long-lived objects exist (the command's modules; a Dask worker's
    state after its first partition) and again before exit: frozen objects are not traversed
    by the full collections a run's allocations set off, nor by the collections at exit
    (about 20 ms of ``lmc stats``).

    Frozen objects are not freed at exit, so an extension module that checks for leaks as
    the interpreter ends (:data:`LEAK_CHECKING_MODULES`: nanobind's reports of triton, which
    torch imports, pages of them after an in-process neural model) would report them: where
    one is loaded at exit, the heap is unfrozen first (:func:`thaw_for_leak_checks`)."""
    gc.freeze()
    atexit.unregister(thaw_for_leak_checks)  # registered once, however often this is called
    atexit.register(thaw_for_leak_checks)


LEAK_CHECKING_MODULES = ("triton._C.libtriton",)
"""Extension modules that report objects still alive when the interpreter ends."""


def thaw_for_leak_checks() -> None:
    """Unfreeze the heap (:func:`gc.unfreeze`) if a module of :data:`LEAK_CHECKING_MODULES`
    is loaded: its objects are then freed at exit, as without :func:`freeze_heap`."""
    if any(name in sys.modules for name in LEAK_CHECKING_MODULES):
        gc.unfreeze()


DASK_EMBEDDED_CONFIG = {
    "distributed.worker.profile.enabled": False,        # stack sampling every 10 ms
    "distributed.admin.tick.interval": "1s",            # event-loop watchdog, 20 ms by default
    "distributed.admin.system-monitor.interval": "5s",  # dashboard resource plots, 500 ms
    "distributed.worker.memory.monitor-interval": "1s",  # worker/nanny memory checks, 100 ms
}
"""Dask settings of ``lmc-dist``'s embedded cluster: its background work, which takes CPU from
the models on the same cores, falls from about 6% to 3% of a core for one worker, and to
about half that again with the memory monitor at 1 s (an idle 2-worker cluster: 0.30 -> 0.14
CPU-s per 10 s); the dashboard loses the profile page and fine-grained resource plots, and a
worker over its memory limit is caught within a second, not 0.1 s."""


__all__ = ["limit_blas_threads", "keep_freed_memory", "freeze_heap", "DASK_EMBEDDED_CONFIG"]

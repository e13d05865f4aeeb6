"""What runs on a Dask worker: long-lived model processes and the partition task.

Each worker thread keeps one model per predictor and run alive across partitions (models can
take seconds to load): started on first use, finished at the end of its run, when a later
run starts after its run's client has gone, and when the worker closes (a :class:`ModelPool`
worker plugin, registered with ``Client.register_plugin`` once per cluster, so that runs
sharing a scheduler never stop each other's models), and discarded after a failure so the
next partition starts a fresh one.  A model process found to write more answer lines than
it is asked, or that fails before it can be finished, loses every partition it answered
(:class:`ModelPool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from distributed import WorkerPlugin, get_worker

from lmchallenge.errors import InputError, LmcError, ModelError
from lmchallenge.tuning import WORKER_VARIABLE, freeze_heap
from lmchallenge.games.runner import Game, run_game
from lmchallenge.games.spec import GameSpec
from lmchallenge.logs.io import write_log
from lmchallenge.logs.rundir import TEMPORARY, WRITE_CHECK, finished_part
from lmchallenge.model.files import files_as_named, other_files
from lmchallenge.model.shell import ShellModel
from lmchallenge.model.spec import PredictorSpec, close_model
from lmchallenge.stats.compute import state_of_log

from lmc_dist import reduce
from lmc_dist.manifest import load as load_manifest
from lmc_dist.partition import Partition, read_partition
from lmc_dist.quiet import quiet_worker

LOG = logging.getLogger(__name__)
PLUGIN_NAME = "lmc-model-pool"
EMBEDDED_WORKER = "LMC_DIST_EMBEDDED_WORKER"
"""Environment variable set in the worker processes of ``lmc-dist``'s embedded cluster (by
their nannies, restarted ones too): their standard output, which is the client's, goes to
stderr (:meth:`ModelPool.setup`), since the client's is the statistics'."""
PART_GZIP_LEVEL = 1
"""gzip level of ``.jsonl.gz`` partition files: level 1 compresses a wc log about 3x faster
than level 6 for files about 1.3x as large (BENCHMARKS.md, "scaling")."""


ModelKey = tuple[int, str, str | None, str | None]
"""A model process of the pool: its thread, :func:`_spec_key`, game (it is told its game as
it starts) and the Dask client id of its run (one per ``lmc-dist`` run: runs sharing a
cluster never share a model process, so one run's end or failure never touches another's)."""


def _spec_key(spec: Any) -> str:
    return json.dumps(asdict(spec), sort_keys=True, default=str)


class ModelPool(WorkerPlugin):
    """Per-thread model processes and per-process game objects of one worker.

    A model process that writes more answer lines than it is asked (a ``print`` to stdout)
    shifts every later answer onto the wrong request, and the extra line may be read only
    after the partition it came in has been written (:attr:`ModelError.out_of_step`).  So
    the pool remembers the part files each model process answered; when the process is
    found out of step (in a partition, at the start of the next one, or when it is
    finished: :meth:`finish_idle`, :meth:`close_all`), or fails in a way that leaves it
    unchecked (:func:`unchecked`: it hangs, exits or answers garbage before it is
    finished), those files are removed, and the run cannot pass for complete with them
    (``lmc_dist.job`` makes them again, or marks them failed).  A process stopped from
    outside (a signal: Ctrl-C, the worker closing) keeps them: an interrupted run keeps its
    work."""

    name = PLUGIN_NAME
    idempotent = True
    """Registered once per cluster: a later run's registration would replace the pool, which
    stops the models of the runs going on (Dask tears the old plugin down)."""

    def __init__(self) -> None:
        self._models: dict[ModelKey, Any] = {}
        self._served: dict[ModelKey, list[str]] = {}   # part files each model answered
        self._gone: set[str] = set()    # clients whose runs' models end with their task
        self._ended: set[str] = set()   # of those, the ones whose run said it has ended
        self._busy: set[ModelKey] = set()
        self._games: dict[str, Game] = {}
        self._lock = threading.Lock()
        self._frozen = False

    def __getstate__(self) -> dict:
        return {}  # sent to workers empty: models and locks are made there

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def setup(self, worker=None) -> None:
        self.__init__()
        quiet_worker(worker)
        # a Python model that crashes the worker's process: its Python stack on stderr
        faulthandler.enable(all_threads=False)
        if worker is not None:      # for the model processes this worker starts
            os.environ[WORKER_VARIABLE] = str(worker.name)
        if os.environ.get(EMBEDDED_WORKER):     # a Python model's prints: not into the stats
            with contextlib.suppress(AttributeError, OSError):     # a closed stdout or stderr
                sys.stdout.flush()
            with contextlib.suppress(OSError):
                os.dup2(2, 1)

    def teardown(self, worker=None) -> None:
        self.close_all()

    def close_all(self) -> list[ModelError]:
        """Finish every idle model (:func:`finish_model`) and stop those a task still uses
        (a cancelled task's thread runs on: the unanswered requests of its model are not
        extra lines); the errors of the idle ones found out of step."""
        with self._lock:
            idle = [key for key in self._models if key not in self._busy]
            busy = [key for key in self._models if key in self._busy]
        for key in busy:
            self._discard(key)
        return self._finish(idle)

    def finish_idle(self, spec: PredictorSpec, client: str | None = None) -> list[ModelError]:
        """Finish the models of ``spec`` in the run of ``client`` that no task is using
        (:func:`finish_model`: a shell model's input is closed and its output read to the
        end, so an extra answer line is seen however late it comes); the errors of those found
        out of step, or failed (an exit code other than 0 included: :func:`unchecked`), whose
        part files are removed.  The next task starts a new model."""
        wanted = _spec_key(spec)
        with self._lock:
            keys = [key for key in self._models
                    if key[1] == wanted and key[3] == client and key not in self._busy]
        return self._finish(keys)

    def clients(self) -> set[str]:
        """The Dask clients whose runs have models in the pool."""
        with self._lock:
            return {key[3] for key in self._models if key[3] is not None}

    def finish_orphans(self, gone: set[str], ended: bool = False) -> None:
        """Finish the models of the runs of Dask clients ``gone`` (a client killed, or stopped
        before its run's end, leaves its models to the pool): the idle ones on a thread of
        their own (finishing a model may wait for its timeout; this runs on the worker's
        event loop), those a task still uses (the scheduler does not stop a running task)
        when it ends; a task of such a client that starts later takes the client for alive
        again (it was only cut off a while).  As with :meth:`finish_idle`, the part files of
        those found out of step are removed, so that the run's ``--resume`` makes them
        again; their errors are no run's to report.  With ``ended`` (the clients said so
        themselves, stopping), a task of theirs that starts later (one the scheduler had
        handed out before it was cancelled) does not take them for alive again: its model
        too is finished when it ends (QA: CI saw a model left after Ctrl-C)."""
        with self._lock:
            self._gone |= gone
            if ended:
                self._ended |= gone
            keys = [key for key in self._models if key[3] in self._gone and key not in self._busy]
        if keys:
            threading.Thread(target=self._finish, args=(keys,), daemon=True,
                             name="lmc-finish-orphans").start()

    def _finish(self, keys: list[ModelKey]) -> list[ModelError]:
        found = []
        for key in keys:
            with self._lock:
                if key in self._busy:       # taken by a task since: its run goes on
                    continue
                model = self._models.pop(key, None)
                served = self._served.pop(key, [])
            if model is None:
                continue
            try:
                finish_model(model)
            except ModelError as e:
                if unchecked(model, e):
                    found.append(drop_served(e, served))
                else:       # its answers stand (a Python model's; a process stopped from outside)
                    LOG.warning("%s", e)
            except Exception:  # noqa: BLE001 - closing at the end: nothing else to do
                pass
        return found

    @contextlib.contextmanager
    def using(self, spec: PredictorSpec, game: str | None = None,
              client: str | None = None) -> Iterator[tuple[Any, Callable[[str], None]]]:
        """This thread's model for ``spec`` in the run of Dask client ``client`` (started on
        first use) and a function that records a part file it answered, while a task uses
        it.  On a failure the model is discarded (the next use starts a fresh one); a shell
        model's :class:`ModelError` that leaves it :func:`unchecked` also removes the part
        files it answered before, and is raised saying so.  The model of a run whose client
        has gone (:meth:`finish_orphans`) is finished when the task ends.
        """
        key = (threading.get_ident(), _spec_key(spec), game, client)
        with self._lock:
            if client not in self._ended:
                self._gone.discard(client)
            model = self._models.get(key)
            if model is not None:
                self._busy.add(key)
        if model is None:
            model = spec.create(game=game)
            with self._lock:
                self._models[key] = model
                self._served[key] = []
                self._busy.add(key)
        try:
            yield model, self._served[key].append
        except ModelError as e:
            served = self._discard(key)
            if not unchecked(model, e):
                raise
            raise drop_served(e, served) from None
        except BaseException:
            self._discard(key)
            raise
        finally:
            with self._lock:
                self._busy.discard(key)
                orphan = client in self._gone
            if orphan:
                self._finish([key])

    def _discard(self, key: ModelKey) -> list[str]:
        """Stop the model of ``key`` (the next use restarts it); the part files it answered."""
        with self._lock:
            model = self._models.pop(key, None)
            served = self._served.pop(key, [])
        if model is not None:
            kill = getattr(model, "kill", None)
            if kill is not None:
                kill()
            try:
                close_model(model)
            except Exception:  # noqa: BLE001 - it failed already; the error is reported
                pass
        return served

    def freeze_heap_once(self) -> None:
        """After this process's first partition, move every object the garbage collector
        tracks into its permanent generation (:func:`gc.freeze`): the modules, Dask's
        state and the game's data, everything loaded by then, stay for the worker's life,
        and the collector's full passes, which the games' allocations set off, no longer
        traverse them (they took a third of a wc partition's CPU time when it wrote
        Parquet; BENCHMARKS.md, "scaling")."""
        with self._lock:
            if self._frozen:
                return
            self._frozen = True
        freeze_heap()

    def game(self, spec: GameSpec) -> Game:
        """The game object for ``spec`` (built once per worker process: wr loads a vocabulary)."""
        key = _spec_key(spec)
        with self._lock:
            game = self._games.get(key)
            if game is None:
                game = self._games[key] = spec.build()
        return game


def finish_model(model: Any) -> None:
    """End ``model``: a shell model's ``finish`` (its input closed, its output read to the
    end: :meth:`lmchallenge.model.shell.ShellModel.finish`), else :func:`close_model`.

    Raises:
        ModelError: the shell model wrote more than it was asked (``out_of_step``), or
            exited with an error.
    """
    if isinstance(model, ShellModel):
        model.finish()
    else:
        close_model(model)


def unchecked(model: Any, error: ModelError) -> bool:
    """True when ``model``, which raised ``error``, is a model process that can no longer be
    checked for answers out of step: it was found out of step, or it failed (hung, exited,
    answered garbage) before it could be finished, unless it was stopped from outside (a
    signal: :attr:`ModelError.stopped`).  Never a Python model: its answers came as its
    calls returned."""
    return isinstance(model, ShellModel) and (error.out_of_step or not error.stopped)


def drop_served(error: ModelError, served: list[str]) -> ModelError:
    """Remove the part files ``served`` (paths) that a model process found out of step, or
    :func:`unchecked`, answered, and return ``error`` saying so (the worker's log says it
    too)."""
    names = [os.path.basename(path) for path in served]
    for path in served:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    if not names:
        return error
    LOG.info("model %r: %s: removed %s, which it answered", error.command, error.reason,
             ", ".join(names))
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    why = ("so the answers it gave may belong to other requests" if error.out_of_step else
           "and a model process that fails keeps none of its answers")
    return error.with_reason(
        f"{error.reason}; {why}: the partition{'s' if len(names) > 1 else ''} it answered "
        f"before {'are' if len(names) > 1 else 'is'} removed, to be made again ({shown})")


async def finish_models(spec: PredictorSpec, client: str | None = None,
                        dask_worker: Any = None) -> list[ModelError]:
    """Run on every worker at the end of a run (``Client.run``, which passes the worker as
    ``dask_worker`` and awaits a coroutine on the worker's event loop): finish the worker's
    idle models of ``spec`` in the run of Dask client ``client`` (:meth:`ModelPool.finish_idle`)
    on a thread, so that a model that takes its ``--timeout`` to end never stalls the worker
    (its heartbeats, other runs' tasks on a shared cluster); the errors of those found out of
    step (their part files removed)."""
    return await asyncio.to_thread(_pool_of(dask_worker).finish_idle, spec, client)


def model_clients(dask_worker: Any = None) -> list[str]:
    """Run on every worker as a run starts: the Dask clients whose runs have models in the
    worker's pool (:meth:`ModelPool.clients`)."""
    return sorted(_pool_of(dask_worker).clients())


def finish_orphaned_models(gone: list[str], ended: bool = False, dask_worker: Any = None) -> None:
    """Run on every worker as a run starts: finish the models of the runs of the Dask
    clients ``gone``, which the scheduler no longer has; or, with ``ended``, as a client's
    run stops (Ctrl-C, SIGTERM), its own (:meth:`ModelPool.finish_orphans`)."""
    _pool_of(dask_worker).finish_orphans(set(gone), ended)


def _pool_of(dask_worker: Any) -> ModelPool:
    pool = dask_worker.plugins.get(PLUGIN_NAME) if dask_worker is not None else None
    return pool if pool is not None else current_pool()


_LOCAL_POOL = ModelPool()


def current_pool() -> ModelPool:
    """The worker's pool, or a process-wide one outside a Dask worker."""
    try:
        worker = get_worker()
    except ValueError:
        return _LOCAL_POOL
    pool = worker.plugins.get(PLUGIN_NAME)
    return pool if pool is not None else _LOCAL_POOL


@dataclass(frozen=True)
class PartitionTask:
    """One partition's work, as sent to a worker (small: no corpus text).

    Attributes:
        run_dir: where the partition's output goes (a path every worker can reach).
        input_path: the plain corpus file (or fsspec URL) the partition indexes.
        corpus_name: the corpus as the user named it (for error messages).
        corpus_format: ``text`` or ``json``.
        partition: the byte range and numbering.
        game, predictor: what to run.
        train: train/clear the model (whole user groups only).
        out_format: ``parquet`` or ``jsonl`` (written as ``.jsonl.gz``).
        user_type: the run's type of users, ``string`` or ``integer``: that of the user
            column of every Parquet part (:data:`lmchallenge.logs.parquet.USER_TYPES`).
        run: the run's identity (its manifest's ``run``): a task of another run in the run
            dir (one whose client was stopped, still running on a worker when another run
            took the directory over) writes nothing there (:func:`evaluate_partition`).
        client: the Dask client of the run (``Client.id``): its models are the run's own,
            finished when a later run starts after the client has gone
            (:func:`finish_orphaned_models`).
        model_files: the files the model's command names at the client, by the word that
            names them (:func:`lmchallenge.model.files.files_as_named`), checked on the
            worker (:func:`check_model_files_here`); None: not checked.
    """

    run_dir: str
    input_path: str
    corpus_name: str
    corpus_format: str
    partition: Partition
    game: GameSpec
    predictor: PredictorSpec
    train: bool
    out_format: str = "parquet"
    user_type: str = "string"
    run: str | None = None
    client: str | None = None
    model_files: dict[str, Any] | None = None

    @property
    def output_path(self) -> str:
        """Where the partition's file goes: ``RUN_DIR/_temporary/part-NNNNN.*`` (moved to
        the top level when the run commits, :mod:`lmchallenge.logs.rundir`)."""
        return os.path.join(self.run_dir, TEMPORARY, part_name(self.partition.index, self.out_format))


def part_name(index: int, out_format: str) -> str:
    """The file name of partition ``index``: ``part-NNNNN.parquet`` or ``part-NNNNN.jsonl.gz``."""
    return f"part-{index:05d}." + ("parquet" if out_format == "parquet" else "jsonl.gz")


@dataclass
class PartitionOutcome:
    """What a finished partition leaves: a summary for the client, a statistics state that
    stays on the worker (it may hold the wr score matrices)."""

    index: int
    rows: int
    characters: int
    elapsed: float
    worker: str
    state: Any = field(repr=False)
    began: float = 0.0
    bytes: int = 0
    made: bool = True

    def summary(self) -> dict[str, Any]:
        """The small, JSON-able part sent to the client (``began``: Unix time the task
        started on its worker; with ``elapsed`` it places the task on a time line; ``bytes``:
        the part file's size, recorded so that a reader can tell it changed; ``made``: the
        task evaluated the partition, rather than read back the file of an earlier one)."""
        return dict(index=self.index, rows=self.rows, characters=self.characters,
                    elapsed=round(self.elapsed, 3), worker=self.worker,
                    began=round(self.began, 3), bytes=self.bytes, made=self.made)


def evaluate_partition(task: PartitionTask) -> PartitionOutcome:
    """Evaluate one partition and write its log atomically (a rerun replaces it):
    :func:`_evaluate_partition`, whose :class:`ModelError` leaves the worker without the
    exception it was raised from (Dask pickles an error's cause with it, and a Python
    model's own exception may not unpickle on the client: its module is on the workers
    only, or its ``__init__`` takes other arguments; the client printed kilobytes of pickle
    bytes instead of the one-line error, which names that exception already)."""
    try:
        return _evaluate_partition(task)
    except ModelError as e:
        error = e
    error.__cause__ = error.__context__ = None
    raise error


def _evaluate_partition(task: PartitionTask) -> PartitionOutcome:
    """Evaluate one partition and write its log atomically (a rerun replaces it).

    If the file is there already, in ``_temporary/`` or, once the run has committed, at the
    top level (Dask reruns a task whose result was lost with its worker, or a worker of a
    killed client finished it), its state is read back instead: a finished partition is never
    computed again.

    Raises:
        ModelError: the model failed (naming user/message/token; the model is discarded).
        InputError: the partition's bytes are malformed.
        RunDirError: this worker cannot write into the run dir.
        ModelFilesError: a file the model names is another file here than at the client.
        LmcError: its log, written, cannot be read back (the file is removed again: a
            ``--resume`` computes the partition anew).
    """
    _check_still_the_run(task)
    existing = finished_part(task.run_dir, os.path.basename(task.output_path))
    if existing is not None:
        try:
            return state_of_existing_part(str(existing), task.partition.index,
                                          task.partition.characters)
        except InputError as e:     # damaged since it was written: made again, not kept failing
            LOG.warning("partition %d: its file cannot be read (%s): computing it again",
                        task.partition.index, e)
            os.remove(existing)
            os.makedirs(os.path.dirname(task.output_path), exist_ok=True)   # a finished run's
    check_writable_here(os.path.dirname(task.output_path))    # before a model starts
    check_model_files_here(task)
    began, started = time.time(), time.monotonic()
    pool = current_pool()
    game = pool.game(task.game)
    messages = read_partition(task.input_path, task.partition, task.corpus_format,
                              name=task.corpus_name)
    with pool.using(task.predictor, task.game.name, task.client) as (model, served):
        rows = write_log(run_game(game, model, messages, train=task.train,
                                  first_message=task.partition.first_message),
                         task.output_path, game=task.game.name, compresslevel=PART_GZIP_LEVEL,
                         user_type=task.user_type)
        served(task.output_path)
    try:
        _check_still_the_run(task)
    except StaleTask:     # written over another run's file maybe: gone, so that run sees it
        with contextlib.suppress(OSError):
            os.remove(task.output_path)
        raise
    # the state column-wise from the file just written (in the page cache): 0.4 us a row of
    # Parquet, 2.8 of .jsonl.gz, against 5.5-6.3 us a datum fed one by one (BENCHMARKS.md,
    # "scaling", CPU per token)
    try:
        state = state_of_log(task.output_path)
    except BaseException:     # a file that cannot be read back is not a finished partition
        with contextlib.suppress(OSError):
            os.remove(task.output_path)
        raise
    pool.freeze_heap_once()
    return PartitionOutcome(index=task.partition.index, rows=rows,
                            characters=task.partition.characters,
                            elapsed=time.monotonic() - started, worker=_worker_name(),
                            state=state, began=began, bytes=os.path.getsize(task.output_path))


class WorkerSetupError(LmcError):
    """A worker that cannot run the partitions as the client set the run up (checked before
    its model starts, so that every partition on it fails alike, at once)."""


class RunDirError(WorkerSetupError):
    """A worker cannot write into the run dir (it is not on storage every worker shares, or
    is read-only or full there)."""


class ModelFilesError(WorkerSetupError):
    """A file the model's command names is another file on a worker than at the client."""


def check_model_files_here(task: "PartitionTask") -> None:
    """Raise :class:`ModelFilesError` if a word of the model's command that names a file at
    the client (``task.model_files``) names a file of another size on this worker (QA: a
    relative model path resolved in the worker's working directory to another model, and
    the run passed, its manifest naming the client's file)."""
    if not task.model_files:
        return
    here = files_as_named(task.predictor.describe(), task.predictor.options)
    other = other_files(task.model_files, here)
    if other:
        word = other[0]
        raise ModelFilesError(
            f"worker {socket.gethostname()} (in {os.getcwd()}): the model's file {word!r} is "
            f"{os.path.abspath(word)} there, {here[word]['bytes']:,} bytes, not the file of "
            f"the client ({task.model_files[word]['bytes']:,} bytes): give the model's file "
            "paths absolute, on storage every worker reaches at the same path")


def check_writable_here(directory: str) -> None:
    """Raise :class:`RunDirError` unless this process can create (and remove) a file in
    ``directory`` (the run dir's ``_temporary/``): a run dir the client can write but a
    worker cannot failed each partition after its model started, each with the name of
    its own temporary file, so that no two were taken for the same error (QA)."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, prefix=WRITE_CHECK)
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):    # (a resume's clean-up took it)
            os.remove(name)
    except OSError as e:
        raise RunDirError(f"worker {socket.gethostname()} cannot write into the run dir "
                          f"({directory}: {e.strerror or e}): --run-dir must be a directory "
                          "every worker can write, at the same path (shared storage)") from None


class StaleTask(Exception):
    """A partition task of a run that no longer holds its run dir (another run took it over)."""


def _check_still_the_run(task: PartitionTask) -> None:
    """Raise :class:`StaleTask` unless the run dir's manifest is still that of the task's run.

    A client stopped by a signal or killed leaves its running tasks to finish on their
    workers; when another run has meanwhile taken the run dir over (a run none of whose
    partitions was done is started anew), their files would pass for that run's."""
    if task.run is None:
        return
    try:
        run = (load_manifest(task.run_dir) or {}).get("run")
    except (OSError, ValueError):
        return      # no manifest to go by: the task's own checks hold
    if run is not None and run != task.run:
        raise StaleTask(f"partition {task.partition.index}: {task.run_dir} now holds another "
                        f"run ({run}, not {task.run}): nothing written")


def state_of_existing_part(path: str, index: int, characters: int) -> PartitionOutcome:
    """The outcome of a partition finished by an earlier run (``--resume``), from its file."""
    began, started = time.time(), time.monotonic()
    state = state_of_log(path)
    return PartitionOutcome(index=index, rows=reduce.rows_of(state), characters=characters,
                            elapsed=time.monotonic() - started, worker=_worker_name(), state=state,
                            began=began, bytes=os.path.getsize(path), made=False)


def _worker_name() -> str:
    try:
        return get_worker().address
    except ValueError:
        return f"{socket.gethostname()}:{os.getpid()}"

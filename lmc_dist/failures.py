"""Failed partitions: one message per distinct error, and when a run stops early.

A model that cannot start (a mistyped command, a model that refuses the game, a missing
weights file) fails every partition alike, each after starting again (and again for each
``--retries``): with 1,000 partitions that is 2,000 starts before the run says what it
already knew.  :class:`StartFailures` tells the run to stop once
:data:`ALIKE_AT_START` partitions have failed alike before their model's first answer, or
alike because a worker cannot write into the run dir, or killed every worker that
evaluated them, while none has succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distributed import KilledWorker

from lmchallenge.errors import InputError, ModelError

from lmc_dist.worker import ModelFilesError, PartitionTask, RunDirError, WorkerSetupError

ALIKE_AT_START = 2
"""Partitions that fail alike before their model's first answer (each at different lines of
the corpus, after its retries) that stop a run: one could be a request that this model
cannot answer; two are the model itself."""


def failure_messages(tasks: list[PartitionTask], errors: dict[int, BaseException]) -> list[str]:
    """One message per distinct error of the failed partitions (``errors`` by partition
    index), naming the first partition it stopped and its lines, and how many more it
    stopped (a model command that does not exist fails every partition the same way)."""
    groups: dict[str, list[int]] = {}
    for index in sorted(errors):
        groups.setdefault(error_kind(errors[index]), []).append(index)
    messages = []
    for indices in groups.values():
        first, rest = indices[0], indices[1:]
        message = _failure_message(tasks[first], errors[first])
        if rest:
            shown = ", ".join(map(str, rest[:10])) + (", ..." if len(rest) > 10 else "")
            message += (f"\n(the same error stopped {len(rest)} more partition"
                        f"{'s' if len(rest) != 1 else ''}: {shown})")
        messages.append(message)
    return messages


def error_kind(error: BaseException) -> str:
    """What makes two partitions' errors the same: the model's reason and stderr tail, or
    the input's name and reason (not where in the corpus it happened), that the workers
    evaluating it died (Dask's text names the task: QA, a crashing Python model gave one
    message per partition), or the error's text."""
    if isinstance(error, ModelError):
        return f"model\0{error.command}\0{error.reason}\0{error.stderr_tail}"
    if isinstance(error, InputError):
        return f"input\0{error.path}\0{error.reason}"
    if isinstance(error, KilledWorker):
        return f"KilledWorker\0{error.allowed_failures}"
    if isinstance(error, OSError) and error.errno is not None:   # not the file it was about:
        return f"{type(error).__name__}\0errno {error.errno}"     # a temporary file's own name
    return f"{type(error).__name__}\0{error}"


def fails_at_start(error: BaseException) -> bool:
    """Whether ``error`` is a model's failure before its first answer: a model process that
    ended (or answered garbage) at its first answer line, or a Python model that could not
    be made (no request: :mod:`lmchallenge.model.spec`); not one stopped from outside.  Or
    a worker set up otherwise than the client (:class:`lmc_dist.worker.WorkerSetupError`:
    it cannot write into the run dir, or the model's files are others there; checked before
    the model starts).  Or every worker that evaluated it died (:class:`KilledWorker`: a
    Python model that crashes its worker's process; the run asks only while no partition
    has succeeded, when two partitions that did so are the model, not their lines: QA, a
    model that crashed on its first request had 60 workers restarted for 15 partitions)."""
    if isinstance(error, (WorkerSetupError, KilledWorker)):
        return True
    if not isinstance(error, ModelError) or error.stopped or error.out_of_step:
        return False
    return error.answer_line == 1 or (error.answer_line is None and error.query is None)


def stop_reason(errors: dict[int, BaseException]) -> str:
    """Why a run that :class:`StartFailures` stopped stopped, for its last line (``errors``
    by partition index)."""
    if any(isinstance(error, RunDirError) for error in errors.values()):
        return "a worker could not write into the run dir"
    if any(isinstance(error, ModelFilesError) for error in errors.values()):
        return "a worker's model files are not the client's"
    if any(isinstance(error, KilledWorker) for error in errors.values()):
        return "the workers evaluating the first partitions died"
    return "the model failed alike as it started"


@dataclass
class StartFailures:
    """The partitions whose model failed before its first answer, by kind of error
    (:func:`error_kind`)."""

    alike: int = ALIKE_AT_START
    seen: dict[str, set[int]] = field(default_factory=dict)

    def stop(self, index: int, error: BaseException) -> bool:
        """Record partition ``index``'s ``error``; True when the run should stop: ``alike``
        partitions have failed with it at their model's start."""
        if not fails_at_start(error):
            return False
        same = self.seen.setdefault(error_kind(error), set())
        same.add(index)
        return len(same) >= self.alike


def _failure_message(task: PartitionTask, error: BaseException) -> str:
    p = task.partition
    where = (f"partition {p.index} (lines {p.first_line}-{p.first_line + p.messages - 1} of "
             f"{task.corpus_name}, first message {p.first_message})")
    if isinstance(error, (ModelError, InputError, WorkerSetupError)):
        return f"{where}: {error}"
    if isinstance(error, KilledWorker):
        return f"{where}: {_killed_workers(task, error)}"
    return f"{where}: {type(error).__name__}: {error}"


def _killed_workers(task: PartitionTask, error: KilledWorker) -> str:
    """What a partition whose every worker died while evaluating it means, and where to
    look: Dask's own message names the task, not the model, and not that a Python model
    shares its worker's process."""
    tried = error.allowed_failures + 1
    said = (f"the worker evaluating it died, {tried} times (on {tried} workers: Dask's "
            f"distributed.scheduler.allowed-failures is {error.allowed_failures}); ")
    if task.predictor.is_python:
        return said + (f"the Python model {task.predictor.spec!r} runs in the worker's own "
                       "process, so a crash in it (a segmentation fault, os._exit, memory "
                       "exhausted) ends the worker: the worker's stderr shows how it ended "
                       "(the Python stack of a fatal signal, or its exit status), and `lmc "
                       "run` on these lines where it happens")
    return said + ("the model runs in a process of its own, so the worker itself was killed: "
                   "out of memory (the kernel's OOM killer, or its nanny's memory limit), "
                   "or from outside; the workers' logs say why")

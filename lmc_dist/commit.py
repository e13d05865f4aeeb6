"""The writer's side of a run directory: one writer (a lock), only its own files, a commit.

The layout and what readers take from it are described in :mod:`lmchallenge.logs.rundir`.  A run:

1. :func:`locked` takes the run dir's lock (``fcntl.flock`` on ``.lmc-dist.lock``, held
   until the run ends; the kernel drops it when the process dies, however it dies), and
   refuses a directory holding files lmc-dist did not write when it has no manifest;
2. :func:`begin` writes ``RUN-NOT-FINISHED.parquet`` (the run is not a log until it commits);
3. workers write each partition into ``_temporary/`` (hidden temporary name, then a rename):
   the file in place is the record that the partition is done;
4. :func:`commit` writes ``_stats.json``, moves the parts to the top level, sets the
   manifest's ``finished`` (the commit point) and removes the marker and ``_temporary/``.

lmc-dist deletes only files whose names it writes (:func:`is_own_leftover`): temporary files
of writes that died half-way, its converted copies, its marker; never a part file, never a
file of another name.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
from collections.abc import Iterator
from typing import Any

from lmchallenge.errors import LmcError
from lmchallenge.logs.files import atomic_path
from lmchallenge.logs.rundir import (LEGACY_UNFINISHED, LOCK, MANIFEST, STATS, TEMPORARY, UNFINISHED,
                                     WRITE_CHECK)

from lmc_dist import manifest as mf
from lmc_dist.partition import INPUT_COPY

_LEFTOVER = re.compile(
    r"\.(part-\d{5}\.(parquet|jsonl\.gz)|_manifest\.json|_stats\.json|\.out-\d{5}\.(parquet|jsonl|jsonl\.gz)"
    rf"|{re.escape(UNFINISHED)})"
    r"\.tmp-(?:[^/]+-)?\d+"               # atomic_path's temporaries (lmchallenge.logs.files:
    # .NAME.tmp-HOST-PID; .NAME.tmp-PID before the host was in it)
    r"|\.out-\d{5}\.(parquet|jsonl|jsonl\.gz)"    # lmchallenge.logs.convert.CONVERTED_PREFIX copies
    rf"|{re.escape(INPUT_COPY)}\.tmp"      # a .gz corpus being decompressed (partition._decompress)
    rf"|{re.escape(WRITE_CHECK)}.+")       # worker.check_writable_here's probe

UNFINISHED_NOTE = (
    "This lmc-dist run has not finished: its finished partitions are in _temporary/ and\n"
    "_manifest.json says which. Finish it with `lmc-dist run ... --resume` (the same command\n"
    "and options), or read what is done with `lmc stats --partial` / `lmc-dist stats --partial`.\n"
    "This file is removed when the run commits; until then reading this directory as Parquet\n"
    "(pandas, Dask, a glob of *.parquet) fails here rather than read a part of the run as if\n"
    "it were all of it.\n")


class RunDirBusy(LmcError):
    """Another process holds the run dir's lock."""


def is_own_leftover(name: str) -> bool:
    """Whether a name in a run dir is a temporary file or copy that lmc-dist writes (and
    may delete when no run is writing it)."""
    return _LEFTOVER.fullmatch(name) is not None


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


@contextlib.contextmanager
def locked(run_dir: str) -> Iterator[None]:
    """Hold the run dir's lock (created with the directory if need be) while the body runs.

    A run that ends having written nothing there (a bad corpus, an unreachable scheduler)
    takes its lock file away again, and the directory if it made it: no empty run dir is
    left behind by a mistyped command.  (A run that wrote anything leaves its files: see
    :func:`begin`.)

    Raises:
        RunDirBusy: another ``lmc-dist run`` holds it (the message names its pid).
        LmcError: the directory cannot be created or written, or it has no manifest and
            holds files that lmc-dist did not write (named).
    """
    made = not os.path.isdir(run_dir)
    fd = _acquire(run_dir)
    refused = False
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            _refuse_foreign(run_dir)
        except LmcError:
            refused = True      # the user's directory: nothing of ours stays in it
            raise
        yield
    finally:
        _remove_if_unused(run_dir, made, refused)  # while holding the lock: see _acquire
        os.close(fd)      # releases the lock


def _acquire(run_dir: str) -> int:
    """An open descriptor of the run dir's lock file, locked (``flock``).  A lock taken on
    a file that its holder has meanwhile removed (:func:`_remove_if_unused`) is no lock:
    it is let go and the lock file at the path taken instead."""
    path = os.path.join(run_dir, LOCK)
    for _ in range(8):
        try:
            os.makedirs(os.path.realpath(run_dir), exist_ok=True)    # a link made before its target
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError as e:   # the directory removed between the two: try again,
            if e.filename != path:      # unless it could not be made (QA: under /proc)
                raise LmcError(f"{run_dir}: cannot write the run dir: {e.strerror}") from None
            continue
        except OSError as e:
            reason = "not a directory" if os.path.exists(run_dir) and not os.path.isdir(run_dir) \
                else e.strerror or e
            raise LmcError(f"{run_dir}: cannot write the run dir: {reason}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            busy = e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
            message = (f"{run_dir} is in use by another lmc-dist run{_holder(fd)}: wait for it "
                       "to end, or use another --run-dir")
            os.close(fd)
            if not busy:
                raise
            raise RunDirBusy(message) from None
        if _is_at(fd, path):
            return fd
        os.close(fd)
    raise LmcError(f"{run_dir}: cannot lock the run dir: its lock file keeps being replaced")


def _is_at(fd: int, path: str) -> bool:
    """True when ``fd`` is the file now at ``path``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _remove_if_unused(run_dir: str, made: bool, refused: bool = False) -> None:
    """Remove the lock file of a run dir that holds nothing else (or that was ``refused``:
    someone else's files) but the marker :func:`begin` wrote, an empty ``_temporary/`` and
    the decompressed copy of a ``.gz`` corpus (these too), and the directory if this run
    ``made`` it (called holding the lock: a run waiting on the removed file sees it gone,
    :func:`_acquire`)."""
    with contextlib.suppress(OSError):
        if not refused and not set(os.listdir(run_dir)) <= {LOCK, UNFINISHED, TEMPORARY, INPUT_COPY}:
            return
        if not refused:     # a run that stopped before it recorded anything
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(temporary_dir(run_dir))    # (only if empty: else OSError, kept)
            for name in (INPUT_COPY, UNFINISHED):   # (INPUT_COPY: a .gz corpus decompressed)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(run_dir, name))
        os.unlink(os.path.join(run_dir, LOCK))
        if made:
            os.rmdir(os.path.realpath(run_dir))     # a link stays: the user made it


def _refuse_foreign(run_dir: str) -> None:
    """Refuse a directory without a manifest that holds files lmc-dist did not write."""
    if os.path.exists(os.path.join(run_dir, MANIFEST)):
        return
    foreign = sorted(name for name in os.listdir(run_dir)
                     if name not in (LOCK, UNFINISHED, LEGACY_UNFINISHED, INPUT_COPY, TEMPORARY)
                     and not is_own_leftover(name))
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):   # parts of no known run
        foreign += sorted(f"{TEMPORARY}/{name}" for name in os.listdir(temporary_dir(run_dir))
                          if not is_own_leftover(name))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise LmcError(f"{run_dir} holds files that lmc-dist did not write ({shown}) and no "
                       f"{MANIFEST}: use a new or empty --run-dir")


def temporary_dir(run_dir: str) -> str:
    """Where workers put the partitions of an unfinished run."""
    return os.path.join(run_dir, TEMPORARY)


def begin(run_dir: str) -> None:
    """Mark the run dir unfinished (before anything else of the run is written: a new run
    does it as soon as it holds the lock, before its corpus is scanned), and make its
    ``_temporary/``; a marker already there is kept (not written and synced again)."""
    marker = os.path.join(run_dir, UNFINISHED)
    if not os.path.isfile(marker):
        with atomic_path(marker) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(UNFINISHED_NOTE)
    os.makedirs(temporary_dir(run_dir), exist_ok=True)


def remove_leftovers(run_dir: str) -> None:
    """Delete lmc-dist's own temporary files and converted copies (a write that died half-way)
    in the run dir and its ``_temporary/``; call it only while holding the lock."""
    for directory in (run_dir, temporary_dir(run_dir)):
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(directory):
                if is_own_leftover(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(directory, name))


def commit(run_dir: str, manifest: dict[str, Any], stats: dict[str, Any]) -> None:
    """Make the finished run a log: ``_stats.json``, the parts moved to the top level, the
    manifest's ``finished`` set (the commit point), then the decompressed copy of a ``.gz``
    corpus (:data:`~lmc_dist.partition.INPUT_COPY`), the empty ``_temporary/`` and last the
    marker removed (a run killed in between is refused by Parquet readers until ``--resume``
    tidies it).

    Args:
        run_dir: the run dir (locked by this process).
        manifest: the run's manifest, every partition done (``finished`` is set here).
        stats: the run's statistics (written as ``_stats.json``).
    """
    import json

    with atomic_path(os.path.join(run_dir, STATS)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(stats, f, sort_keys=True)
            f.write("\n")
    for entry in manifest["partitions"]:
        source = os.path.join(temporary_dir(run_dir), entry["file"])
        if os.path.exists(source):
            os.replace(source, os.path.join(run_dir, entry["file"]))
    manifest["finished"] = manifest.get("finished") or mf.now()   # a resumed finished run keeps its time
    mf.save(run_dir, manifest)
    remove_leftovers(run_dir)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run_dir, INPUT_COPY))    # the workers' copy: the corpus' size
    with contextlib.suppress(FileNotFoundError, OSError):
        os.rmdir(temporary_dir(run_dir))      # only if empty: never a file we did not write
    for note in (UNFINISHED, LEGACY_UNFINISHED):   # last: until it goes, Parquet readers refuse
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run_dir, note))

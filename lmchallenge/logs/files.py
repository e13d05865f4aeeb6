"""Log files on disk: which form a path is, opening it, writing it atomically, and the parts of
an ``lmc-dist`` run directory.

The forms (:func:`log_form`):

* ``-``: standard input / standard output (jsonlines);
* a directory: a run directory of ``lmc-dist`` (``part-NNNNN.parquet`` / ``.jsonl.gz``),
  read as the concatenation of its partitions in order (docs/formats.md, "Parquet");
* ``.parquet``/``.pq``: the Parquet layout (:func:`lmchallenge.logs.parquet.schema_for`);
* ``.jsonl.gz`` / any ``.gz``: gzipped jsonlines;
* anything else: UTF-8 jsonlines, one JSON object per line.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import re
import socket
import stat
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Literal

from lmchallenge.corpus import is_gzip_name, is_special_file, is_url
from lmchallenge.errors import InputError
from lmchallenge.logs import rundir

LogForm = Literal["stdio", "run_dir", "parquet", "jsonl.gz", "jsonl"]


def log_form(path: str) -> LogForm:
    """The form of the log at ``path``: ``stdio`` (``-``), ``run_dir`` (an existing
    directory), or by its name ``parquet``, ``jsonl.gz`` or ``jsonl``.  The one place that
    decides; readers and writers dispatch on it."""
    if path == "-":
        return "stdio"
    if os.path.isdir(path):
        return "run_dir"
    return file_form(path)


def file_form(path: str) -> Literal["parquet", "jsonl.gz", "jsonl"]:
    """The form a log file's name says: ``parquet``, ``jsonl.gz`` (any ``.gz``) or ``jsonl``
    (anything else)."""
    if is_parquet_name(path):
        return "parquet"
    return "jsonl.gz" if is_gzip_name(path) else "jsonl"


def is_parquet_name(path: str) -> bool:
    """True if ``path`` names a Parquet file (``.parquet`` or ``.pq``, in any case)."""
    return path.lower().endswith((".parquet", ".pq"))


def open_text(path: str, mode: str = "rt") -> contextlib.AbstractContextManager[IO[str]]:
    """Open ``path`` as UTF-8 text, gunzipping ``.gz``; ``-`` is stdin/stdout (left open).

    Args:
        path: a file path, or ``-``.
        mode: ``"rt"`` or ``"wt"``.
    Returns:
        A context manager giving a text stream.
    """
    if path == "-":
        stream = sys.stdin if "r" in mode else sys.stdout
        if "r" in mode:
            stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict",
                                      newline="\n") if hasattr(sys.stdin, "buffer") else sys.stdin
        return contextlib.nullcontext(stream)
    if is_gzip_name(path):
        return gzip.open(path, mode, encoding="utf-8", newline="\n" if "r" in mode else None)
    return open(path, mode, encoding="utf-8", newline="\n" if "r" in mode else None)


def run_dir_parts(path: str) -> list[Path]:
    """The partition files of an ``lmc-dist`` run directory, in partition order
    (:func:`lmchallenge.logs.rundir.parts`: an unfinished run is refused unless read
    partially).

    Raises:
        InputError: the directory holds no partition files, or its run has not finished
            (:class:`lmchallenge.logs.rundir.UnfinishedRun`).
    """
    return rundir.parts(path)


@contextlib.contextmanager
def read_errors(path: str) -> Iterator[None]:
    """A context turning the errors of reading ``path`` (missing file, I/O, gzip, UTF-8)
    into :class:`InputError` naming it."""
    try:
        yield
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not UTF-8: {e.reason} at byte {e.start}") from None
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(path, None, f"cannot read: {e}") from None


def check_parquet_name(path: str | os.PathLike, what: str = "a Parquet file's name",
                       instead: str = "use jsonl") -> None:
    """Refuse a Parquet path that is not UTF-8 (bytes the file system's encoding could not
    decode, kept as surrogates): pyarrow opens no other, and failed with a traceback.

    Raises:
        InputError: naming the path and what to do.
    """
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(os.fspath(path), None, f"{what} is not UTF-8, and pyarrow opens no "
                                                f"other Parquet file: rename it, or {instead}") from None


def check_writable(path: str, inputs: Iterable[str | None] = (),
                   run_dir: str | None = None) -> None:
    """Check that a file can be created at ``path`` (its folder made if missing), before any
    work is done for it, and that it is none of the files ``inputs`` (paths; ``-``, None
    and URLs are passed over) that the work reads: the output would replace it; nothing is
    left behind, and the temporaries of ``path`` a killed writer left are removed
    (:func:`remove_stale_temporaries`).  Nor may it be inside ``run_dir`` (the lmc-dist run
    dir the work writes, there or not yet) or inside an lmc-dist run dir that is there (a
    directory above it with a run manifest): ``pandas.read_parquet(RUN_DIR)`` reads every
    file of a run dir as a part of its log (and fails on a file that is not Parquet).

    Raises:
        InputError: naming ``path`` and why it cannot be written (a URL: QA, ``s3://b/x.jsonl``
            was written as the local file ``s3:/b/x.jsonl``; inside a run dir: QA, ``lmc-dist
            --output RUN_DIR/all.parquet`` made ``pandas.read_parquet(RUN_DIR)`` count every
            row twice).
    """
    if is_url(path):
        raise InputError(path, None, "cannot write to a URL: give a local path (or one on a "
                                     "file system mounted here)")
    if path == "-" or written_in_place(path):
        if file_form(os.fspath(path)) == "parquet":
            raise InputError(path, None, "cannot write Parquet here: it is not a regular file "
                                         "(a pipe, a device, or a descriptor such as /dev/stdout); "
                                         "write .jsonl or .jsonl.gz to it")
        return
    if file_form(os.fspath(path)) == "parquet":
        check_parquet_name(path)
    for source in inputs:
        if source and source != "-" and _same_file(source, path):
            raise InputError(path, None, f"cannot write: it is the input {source}, which the "
                                         "output would replace")
        if source and source != "-" and os.path.isdir(source) and _inside(path, source):
            raise InputError(path, None, f"cannot write: it is inside the input directory "
                                         f"{source}, whose part files it could replace: write "
                                         "it elsewhere")
    _check_outside_run_dirs(path, run_dir)
    path = os.path.realpath(path)
    directory = os.path.dirname(path)
    probe = os.path.join(directory, f".{os.path.basename(path)}.probe-{os.getpid()}")
    try:
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Is a directory")
        try:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(20, "a parent is not a directory") from None
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise InputError(path, None, f"cannot write: {e.strerror or e}") from None
    remove_stale_temporaries(path)      # a killed writer's (lmc-dist sweeps its run dir itself)


FULL_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""What a write to a full file system raises, without a file name (:func:`atomic_path` names
its file)."""

DESCRIPTOR = re.compile(r"/dev/(?P<std>stdout|stderr)|/dev/fd/(?P<fd>\d+)|/proc/self/fd/(?P<own>\d+)")
"""Paths that name an open file descriptor of this process (``--output /dev/stdout >> log``):
the log is written through the descriptor itself, where the shell's writes stand."""


def descriptor_of(path: str | os.PathLike) -> int | None:
    """The descriptor ``path`` names (:data:`DESCRIPTOR`, however spelt: ``//dev/stdout``,
    ``/dev/./stdout``, or a symbolic link to one), or None."""
    name = os.fspath(path)
    for _ in range(40):     # symbolic links followed one at a time (the last is /proc magic)
        name = "/" + os.path.normpath(name).lstrip("/") if name.startswith("/") else os.path.normpath(name)
        match = DESCRIPTOR.fullmatch(name)
        if match is not None:
            return {"stdout": 1, "stderr": 2}.get(match["std"]) or int(match["fd"] or match["own"])
        if not os.path.islink(name):
            return None
        name = os.path.join(os.path.dirname(os.path.abspath(name)), os.readlink(name))
    return None


def written_in_place(path: str | os.PathLike) -> bool:
    """Whether ``path`` is written as it is, not through a temporary file renamed into
    place: a path naming a descriptor (:func:`descriptor_of`: ``/dev/stdout`` redirected to
    a file: renaming over that file would lose what the shell's ``>>`` kept), or a pipe,
    device or socket (a FIFO, ``/dev/null``)."""
    return descriptor_of(path) is not None or is_special_file(path)


def open_output(path: str) -> IO[bytes]:
    """Open for writing a path :func:`atomic_path` yielded: a descriptor's path as a copy of
    that descriptor (its offset shared: what the shell or this process writes to it later
    follows the log, as with ``>`` and ``>>``), any other path anew."""
    fd = descriptor_of(path)
    if fd is not None:
        return os.fdopen(os.dup(fd), "wb")
    return open(path, "wb")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it to ``path`` only on success.

    A symbolic link is followed (the file it points to is replaced, the link stays); a path
    :func:`written_in_place` (``/dev/stdout``, a FIFO) is yielded as it is, to be written
    directly, opened with :func:`open_output`.  The temporary's bytes reach the disk
    (``fsync``) before it is renamed, and the rename before this returns: after a power
    cut the path holds the old file or the whole new one, never a renamed empty file.
    """
    in_place = written_in_place(path)
    final = os.fspath(path) if in_place else os.path.realpath(path)
    tmp = final
    if not in_place:
        directory = os.path.dirname(os.path.abspath(final))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f"{_temporary_prefix(final)}{os.getpid()}")
    try:
        yield tmp
        if not in_place:
            _sync(tmp)
            _keep_mode_of(final, tmp)
            os.replace(tmp, final)
            _sync_directory(os.path.dirname(os.path.abspath(final)))
    except OSError as e:    # named by the path the user gave, not the hidden temporary
        if (e.filename == tmp and not in_place) or (e.filename is None and e.errno in FULL_ERRORS):
            raise OSError(e.errno, e.strerror, os.fspath(path)) from None
        raise
    finally:
        if not in_place and os.path.exists(tmp):
            os.unlink(tmp)


def _sync(path: str) -> None:
    """``fsync`` the file at ``path``.

    Raises:
        OSError: its bytes could not be written (EIO, ENOSPC).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_directory(path: str) -> None:
    """``fsync`` the directory at ``path`` (its entries: a rename), where the file system
    lets it be opened and synced (else it keeps its renames as it does)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _keep_mode_of(final: str, tmp: str) -> None:
    """Give ``tmp`` the permissions (and, where this process may, the owner) of the file
    ``final`` it replaces: a log another user may write, or a private one, stays so."""
    try:
        info = os.stat(final)
    except FileNotFoundError:
        return
    os.chmod(tmp, stat.S_IMODE(info.st_mode))
    with contextlib.suppress(PermissionError):
        os.chown(tmp, info.st_uid, info.st_gid)


def _temporary_prefix(final: str) -> str:
    """The name of :func:`atomic_path`'s temporaries of ``final``, less the writer's process
    id: ``.NAME.tmp-HOST-`` (the host, so that a writer on another machine sharing the
    folder is never taken for a dead one of this machine)."""
    host = socket.gethostname().replace(os.sep, "_") or "localhost"
    return f".{os.path.basename(final)}.tmp-{host}-"


def remove_stale_temporaries(final: str) -> list[str]:
    """Remove the temporaries of ``final`` (a resolved path) that a writer on this machine
    left when it was killed (SIGKILL, a power cut: no ``finally`` ran), that is those whose
    process no longer exists; the paths removed.  A temporary of a live process (a run
    writing the same output now) is left alone."""
    directory, prefix = os.path.dirname(final), _temporary_prefix(final)
    removed = []
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        pid = name[len(prefix):]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # another user's process
        return True
    return True


def _check_outside_run_dirs(path: str, run_dir: str | None) -> None:
    """Raise :class:`InputError` if ``path`` is inside ``run_dir`` or inside a run dir
    that is there (:func:`_run_dir_above`)."""
    around = run_dir if run_dir is not None and _inside(path, run_dir) else _run_dir_above(path)
    if around is not None:
        raise InputError(path, None, f"cannot write: it is inside the lmc-dist run dir "
                                     f"{around}, whose every file pandas.read_parquet "
                                     "reads as a part of the run's log: write it elsewhere")


def _run_dir_above(path: str) -> str | None:
    """The nearest directory above ``path`` (links followed) holding a run manifest that
    :func:`lmchallenge.logs.rundir.read_manifest` reads, or None."""
    directory = os.path.dirname(os.path.realpath(path))
    while True:
        if os.path.isfile(os.path.join(directory, rundir.MANIFEST)):
            with contextlib.suppress(InputError):
                if rundir.read_manifest(directory) is not None:
                    return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _inside(path: str, directory: str) -> bool:
    """Whether ``path`` would be a file within ``directory`` (at any depth; links followed)."""
    inner = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    outer = os.path.realpath(directory)
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _same_file(one: str, other: str) -> bool:
    """Whether the paths ``one`` and ``other`` are one existing file."""
    try:
        return os.path.samefile(one, other)
    except (OSError, ValueError):
        return False

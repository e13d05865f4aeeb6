"""The files a model spec names (its weights, its vocabulary), fingerprinted by size and
modification time, so that a resumed evaluation can tell that the model changed under it
(``lmc-dist run --resume``: the finished partitions were made with the old one).

A "file the spec names" is any word of the shell command (as the shell splits it) or any
string value of the ``-o`` options that is the path of an existing regular file that is not
executable (the model's program is left out: a reinstall does not change the model), or of a
Hugging Face model folder (a directory with a ``config.json``: the regular files directly in
it, together).  A file the model writes (a log named on its command line) changes too: callers
warn rather than refuse.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable
from typing import Any, TypedDict


class FileStamp(TypedDict):
    """A file's (or a folder's files') size in bytes and latest modification (ns since the
    epoch)."""

    bytes: int
    modified_ns: int


def named_files(command: str, options: dict[str, Any] | None = None) -> dict[str, FileStamp]:
    """``{absolute path: stamp}`` of the files ``command`` (a shell command or a
    ``module:Class`` spec) and the string values of ``options`` name (module docstring)."""
    return {os.path.abspath(word): stamp for word, stamp in files_as_named(command, options).items()}


def files_as_named(command: str, options: dict[str, Any] | None = None) -> dict[str, FileStamp]:
    """As :func:`named_files`, but by the word that names each file, as written (a relative
    path is a key as it is: ``lmc-dist`` compares what it names on each worker with what it
    names at the client)."""
    try:
        words = shlex.split(command)
    except ValueError:      # unbalanced quotes: the shell will say so
        words = []
    words += _strings(options or {})
    stamps: dict[str, FileStamp] = {}
    for word in words:
        stamp = _stamp(word)
        if stamp is not None:
            stamps[word] = stamp
    return stamps


def other_files(client: dict[str, FileStamp], here: dict[str, FileStamp]) -> list[str]:
    """The words of ``client`` (:func:`files_as_named` at the client) that name a file of
    another size ``here`` (the same, on a worker): another file (a relative path resolved in
    another working directory, another model's copy).  A word that names no file here is
    left to the model (it fails to open it); the times are not compared (a copy keeps the
    bytes, not always the time)."""
    return [word for word, stamp in client.items()
            if word in here and here[word]["bytes"] != stamp["bytes"]]


def changed(before: dict[str, FileStamp], now: dict[str, FileStamp]) -> list[str]:
    """The paths of ``before`` that are gone or whose stamp differs in ``now``."""
    return [path for path, stamp in before.items() if now.get(path) != stamp]


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _stamp(path: str) -> FileStamp | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(info.st_mode):
        if info.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
            return None
        return FileStamp(bytes=info.st_size, modified_ns=info.st_mtime_ns)
    if stat.S_ISDIR(info.st_mode) and os.path.isfile(os.path.join(path, "config.json")):
        files = []
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=True):
                    files.append(entry.stat(follow_symlinks=True))
        if files:
            return FileStamp(bytes=sum(f.st_size for f in files),
                             modified_ns=max(f.st_mtime_ns for f in files))
    return None


__all__ = ["FileStamp", "named_files", "files_as_named", "other_files", "changed"]

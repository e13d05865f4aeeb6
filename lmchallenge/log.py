"""Reading and writing LM Challenge logs: jsonlines (optionally gzipped) and Parquet.

A log is an iterable of dicts, one per token, in the LM Challenge 5.x schema
(``../shared/seeds/001_a51f61792860ca8b.txt``; ``lmchallenge/log.schema``).
On disk it is one of:

* ``.jsonl`` / any other name: UTF-8 jsonlines, one JSON object per line,
  written with sorted keys as LM Challenge 5.x writes them;
* ``.jsonl.gz`` / ``.gz``: the same, gzipped;
* ``.parquet``: the Parquet layout of DESIGN.md (:func:`lmchallenge.parquet.schema_for`);
* a run directory of ``lmc-dist`` (``part-NNNNN.parquet`` / ``part-NNNNN.jsonl.gz``),
  read as the concatenation of its partitions in order;
* ``-``: standard input / standard output (jsonlines).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import json
import json.encoder
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from .exceptions import InputError

Datum = dict[str, Any]

PART_GLOBS = ("part-*.parquet", "part-*.jsonl.gz", "part-*.jsonl")


def is_gzip_name(path: str) -> bool:
    """True if ``path`` names a gzip file (``.gz`` or ``.gzip``)."""
    return path.endswith(".gz") or path.endswith(".gzip")


def is_parquet_name(path: str) -> bool:
    """True if ``path`` names a Parquet file."""
    return path.endswith(".parquet") or path.endswith(".pq")


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
    """The partition files of an ``lmc-dist`` run directory, in partition order.

    Raises:
        InputError: the directory holds no partition files.
    """
    root = Path(path)
    parts: list[Path] = []
    for pattern in PART_GLOBS:
        parts.extend(root.glob(pattern))
    if not parts:
        raise InputError(path, None, "not a log: directory has no part-NNNNN.parquet/.jsonl.gz files")
    return sorted(parts, key=lambda p: p.name)


def parse_jsonlines(lines: Iterable[str], path: str, first_line: int = 1) -> Iterator[tuple[int, Datum]]:
    """``(line number, datum)`` for each non-blank line of a jsonlines log.

    Args:
        lines: the text lines (with or without their newlines).
        path: the file name, for errors.
        first_line: the line number of the first of ``lines`` (1-based).
    Raises:
        InputError: naming ``path`` and the line that is not JSON or not a JSON object.
    """
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            datum = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(path, number, f"invalid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(datum, dict):
            raise InputError(path, number, "a log line must be a JSON object")
        yield number, datum


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
    except (OSError, EOFError) as e:
        raise InputError(path, None, f"cannot read: {e}") from None


def _iter_jsonlines(path: str) -> Iterator[Datum]:
    with read_errors(path), open_text(path) as f:
        for _, datum in parse_jsonlines(f, path):
            yield datum


def load_jsonlines(filename: str) -> Iterator[Datum]:
    """Read a jsonlines log (``.gz`` transparently, ``-`` for stdin) lazily, datum by datum.

    Raises:
        InputError: naming the file and line of invalid JSON or non-UTF-8 bytes.
    """
    return _iter_jsonlines(filename)


def dump_jsonlines(data: Iterable[Datum], filename: str = "-", compresslevel: int = 6) -> None:
    """Write ``data`` as jsonlines (sorted keys, as LM Challenge 5.x) to ``filename``.

    ``.gz`` names are gzipped (at ``compresslevel``); ``-`` is stdout.  A file is written
    to a temporary name next to it and renamed when complete, so a failed run leaves no
    partial log.
    """
    if filename == "-":
        write_jsonlines(data, sys.stdout)
        return
    with atomic_path(filename) as tmp:
        if is_gzip_name(filename):
            with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=compresslevel) as f:
                write_jsonlines(data, f)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                write_jsonlines(data, f)


def _datum_encoder() -> Callable[[Datum], str]:
    """``json.dumps(datum, sort_keys=True)`` as a function made once.

    ``json.dumps`` builds a new C encoder for every call (about a third of its time on a
    log datum); this makes the C encoder of ``json.encoder`` once, with the arguments
    ``JSONEncoder(sort_keys=True)`` gives it, and keeps it only if it writes a sample datum
    exactly as ``json.dumps`` does (else, e.g. without the C module, ``json.dumps`` it is).
    """
    reference = functools.partial(json.dumps, sort_keys=True)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return reference
    options = json.JSONEncoder(sort_keys=True)
    try:
        encode = make(None, options.default, json.encoder.encode_basestring_ascii, None,
                      options.key_separator, options.item_separator, True, False, True)
    except TypeError:  # another Python's private signature
        return reference

    def dumps(datum: Datum) -> str:
        return "".join(encode(datum, 0))

    sample = {"user": "\u00e9\U0001f600\"\t", "message": 1, "token": -2, "character": 3,
              "target": "x", "logp": -1.5e-300, "select": True, "completions": [["a"], []],
              "results": [["b", -0.25, None]], "verbatim": "y"}
    return dumps if dumps(sample) == reference(sample) else reference


dumps_datum = _datum_encoder()
"""One log line (without newline) exactly as LM Challenge 5.x writes it:
``json.dumps(datum, sort_keys=True)``."""


def write_jsonlines(data: Iterable[Datum], stream: IO[str]) -> int:
    """Write ``data`` to an open text stream; returns the number of lines written."""
    n = 0
    buffer: list[str] = []
    for datum in data:
        buffer.append(dumps_datum(datum))
        n += 1
        if len(buffer) >= 512:
            stream.write("\n".join(buffer) + "\n")
            buffer.clear()
    if buffer:
        stream.write("\n".join(buffer) + "\n")
    stream.flush()
    return n


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it to ``path`` only on success."""
    final = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(final))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(final)}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_log(path: str) -> Iterator[Datum]:
    """Read any log form (jsonl, jsonl.gz, parquet, run directory, ``-``) as datum dicts.

    Raises:
        InputError: the path does not exist or is not a readable log.
    """
    if path != "-" and os.path.isdir(path):
        return _iter_parts(run_dir_parts(path))
    if is_parquet_name(path):
        from . import parquet
        return parquet.iter_parquet(path)
    return load_jsonlines(path)


def _iter_parts(parts: list[Path]) -> Iterator[Datum]:
    for part in parts:
        yield from read_log(str(part))


def write_log(data: Iterable[Datum], path: str, game: str | None = None,
              compresslevel: int = 6) -> int:
    """Write a log to ``path`` in the form its name says (``-``, .jsonl, .jsonl.gz, .parquet).

    Args:
        data: log datums.
        path: destination.
        game: ``wc``/``we``/``ce``/``wr`` when known (fixes the Parquet schema of an empty log).
        compresslevel: gzip level of a ``.gz`` destination.
    Returns:
        The number of datums written.
    """
    if is_parquet_name(path):
        from . import parquet
        return parquet.write_parquet(data, path, game=game)
    counted = _Counted(data)
    dump_jsonlines(counted, path, compresslevel=compresslevel)
    return counted.n


class _Counted:
    def __init__(self, data: Iterable[Datum]):
        self._data = data
        self.n = 0

    def __iter__(self) -> Iterator[Datum]:
        for datum in self._data:
            self.n += 1
            yield datum

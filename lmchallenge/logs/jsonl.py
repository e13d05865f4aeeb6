"""Jsonlines logs: one JSON object per line, written with sorted keys as LM Challenge 5.x writes
them (gzipped for ``.gz`` names)."""

from __future__ import annotations

import functools
import gzip
import io
import json
import json.encoder
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO

from lmchallenge.errors import InputError, LmcError, json_problem
from lmchallenge.corpus import BOM, decode_lines, open_binary
from lmchallenge.logs.files import atomic_path, is_gzip_name, open_output, read_errors
from lmchallenge.logs.schema import Datum


def parse_jsonlines(lines: Iterable[str], path: str, first_line: int = 1) -> Iterator[tuple[int, Datum]]:
    """``(line number, datum)`` for each non-blank line of a jsonlines log.

    Args:
        lines: the text lines (with or without their newlines).
        path: the file name, for errors.
        first_line: the line number of the first of ``lines`` (1-based).
    Raises:
        InputError: naming ``path`` and the line that is not JSON or not a JSON object.
    """
    return parse_numbered(enumerate(lines, start=first_line), path)


def parse_numbered(lines: Iterable[tuple[int, str]], path: str) -> Iterator[tuple[int, Datum]]:
    """As :func:`parse_jsonlines`, of ``(line number, text)`` pairs; a byte order mark at the
    start of line 1 is left out, as :func:`lmchallenge.corpus.decode_lines` leaves it out."""
    for number, line in lines:
        if number == 1 and line.startswith(BOM):
            line = line[len(BOM):]
        if not line.strip():
            continue
        try:
            datum = json.loads(line)
        except (ValueError, RecursionError) as e:   # (4,300+ digits; nesting beyond the stack)
            raise InputError(path, number, f"invalid JSON: {json_problem(e)}") from None
        if not isinstance(datum, dict):
            raise InputError(path, number, "a log line must be a JSON object")
        # (only an escape makes one; a substring is found faster than the pattern's alternatives)
        if "\\u" in line and _SURROGATE_ESCAPE.search(line):
            _check_unicode(datum, path, number)
        yield number, datum


_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"                # high, no low after it
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")  # low, no high before
"""A JSON escape of a UTF-16 surrogate that is not half of a pair (``\\ud800``, where
``\\ud83d\\ude00`` is an emoji, as LM Challenge 5.2 writes one): the lines worth a closer
look (an escaped backslash before ``ud800`` matches too; the datum's strings decide)."""


def _check_unicode(datum: Datum, path: str, number: int) -> None:
    """Raise InputError naming the field of ``datum`` that holds a lone surrogate (valid
    JSON, no Unicode text: QA, a UnicodeEncodeError traceback in lmc pretty and lmc diff)."""
    def lone(value: object, where: str) -> str | None:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                return f"field {where or '(datum)'}: holds a lone surrogate \\u{ord(value[e.start]):04x} (not a Unicode character)"
            return None
        items = (value.items() if isinstance(value, dict) else enumerate(value)
                 if isinstance(value, list) else ())
        for key, item in items:
            step = f"[{key}]" if isinstance(key, int) else f"{'.' if where else ''}{key}"
            found = lone(key, where) if isinstance(key, str) else None
            found = found or lone(item, where + step)
            if found:
                return found
        return None

    found = lone(datum, "")
    if found:
        raise InputError(path, number, found)


def _iter_jsonlines(path: str) -> Iterator[Datum]:
    # bytes decoded line by line: a damaged .gz or a byte that is not UTF-8 is named with its
    # line (lmchallenge.corpus.decode_lines), as in a corpus
    with read_errors(path), open_binary(path) as f:
        for _, datum in parse_numbered(decode_lines(f, path), path):
            yield datum


LogFile = str | os.PathLike[str] | IO[str] | IO[bytes]
"""What :func:`load_jsonlines` and :func:`dump_jsonlines` take: a path (``str`` as LM
Challenge 5.x, or a ``pathlib.Path``), ``-``, or an open file (text, or binary: UTF-8)."""


def load_jsonlines(filename: LogFile) -> Iterator[Datum]:
    """Read a jsonlines log (``.gz`` transparently, ``-`` for stdin) lazily, datum by datum.

    Args:
        filename: a path or ``-``; or an open file, read as it is (not decompressed) and
            left open.
    Raises:
        InputError: naming the file and line of invalid JSON or non-UTF-8 bytes.
    """
    if hasattr(filename, "read"):   # (QA: an open file or a Path was an AttributeError)
        return _iter_open_file(filename)    # type: ignore[arg-type]
    return _iter_jsonlines(os.fspath(filename))     # type: ignore[arg-type]


def _iter_open_file(stream: IO[str] | IO[bytes]) -> Iterator[Datum]:
    name = str(getattr(stream, "name", "<stream>"))
    if isinstance(stream, io.TextIOBase):
        lines = enumerate((line.rstrip("\r\n") for line in stream), start=1)
    else:
        lines = decode_lines(stream, name)      # type: ignore[arg-type]
    for _, datum in parse_numbered(lines, name):
        yield datum


def dump_jsonlines(data: Iterable[Datum], filename: LogFile = "-", compresslevel: int = 6) -> None:
    """Write ``data`` as jsonlines (sorted keys, as LM Challenge 5.x) to ``filename``.

    ``.gz`` names are gzipped (at ``compresslevel``); ``-`` is stdout.  A file is written
    to a temporary name next to it and renamed when complete, so a failed run leaves no
    partial log.  An open file (text, or binary: UTF-8 is written) is written at its
    position, not compressed, and left open.
    """
    if hasattr(filename, "write"):
        _write_open_file(data, filename)    # type: ignore[arg-type]
        return
    filename = os.fspath(filename)      # type: ignore[arg-type]
    if filename == "-":
        write_jsonlines(data, sys.stdout)
        return
    with atomic_path(filename) as tmp:
        if is_gzip_name(filename):
            # the gzip header names the file as it will be called (gzip stores the name it
            # is given, less ".gz"), not the temporary one (`gunzip -N` restores that name)
            with open_output(tmp) as raw, \
                    gzip.GzipFile(os.path.basename(filename), "wb", compresslevel, raw) as packed, \
                    io.TextIOWrapper(packed, encoding="utf-8") as f:
                write_jsonlines(data, f)
        else:
            with open_output(tmp) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
                write_jsonlines(data, f)


def _write_open_file(data: Iterable[Datum], stream: IO[str] | IO[bytes]) -> None:
    if isinstance(stream, io.TextIOBase):
        write_jsonlines(data, stream)   # type: ignore[arg-type]
        return
    text = io.TextIOWrapper(stream, encoding="utf-8")   # type: ignore[arg-type]
    try:
        write_jsonlines(data, text)
        text.flush()
    finally:
        text.detach()       # (the caller's file stays open)


def _datum_encoder() -> Callable[[Datum], str]:
    """``json.dumps(datum, sort_keys=True)`` as a function made once.

    ``json.dumps`` builds a new C encoder for every call (about a third of its time on a
    log datum); this makes the C encoder of ``json.encoder`` once, with the arguments
    ``JSONEncoder(sort_keys=True, allow_nan=False)`` gives it, and keeps it only if it writes
    a sample datum exactly as ``json.dumps`` does (else, e.g. without the C module,
    ``json.dumps`` it is).  NaN and infinities are refused (``ValueError``): JSON has no
    such numbers, and a log is JSON.
    """
    reference = functools.partial(json.dumps, sort_keys=True, allow_nan=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return reference
    options = json.JSONEncoder(sort_keys=True)
    try:
        encode = make(None, options.default, json.encoder.encode_basestring_ascii, None,
                      options.key_separator, options.item_separator, True, False, False)
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


class NotJsonError(LmcError, ValueError):
    """A datum holds a number JSON has no form for (NaN, an infinity)."""


def write_jsonlines(data: Iterable[Datum], stream: IO[str]) -> int:
    """Write ``data`` to an open text stream; returns the number of lines written.

    Raises:
        NotJsonError: (a ``ValueError``) a datum holds NaN or an infinity (JSON has no such
            numbers), naming it.
    """
    n = 0
    buffer: list[str] = []
    for datum in data:
        try:
            buffer.append(dumps_datum(datum))
        except ValueError as e:
            shown = repr(datum)
            raise NotJsonError(f"log datum {n + 1} cannot be written as JSON ({e}): "
                             f"{shown[:300] + '...' if len(shown) > 300 else shown}") from None
        n += 1
        if len(buffer) >= 512:
            stream.write("\n".join(buffer) + "\n")
            buffer.clear()
    if buffer:
        stream.write("\n".join(buffer) + "\n")
    stream.flush()
    return n

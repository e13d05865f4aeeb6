"""A jsonlines log (``.jsonl``, ``.jsonl.gz``, ``-`` for stdin) read in blocks of whole lines,
each parsed by Arrow's JSON reader into columns of a fixed schema (:data:`SCHEMA`) where
Arrow reads it exactly as the datum-by-datum reader (:mod:`lmchallenge.logs.jsonl`) would.

Arrow's reader accepts a little less than Python's ``json`` (and a few things more), so a
block has columns only when they are certainly the datums Python would read; otherwise
(another game's keys, such as ``wr``'s ``results``; a null ``select``, ``message``,
``token`` or ``target``; a value of another type; a key twice; a blank line; malformed
JSON) its ``table`` is None and its reader reads it datum by datum, which gives the same
values or the error naming the file and line.  Used by ``lmc stats``
(:mod:`lmchallenge.stats.columnar_jsonl`), ``lmc compare``'s same-data check and ``lmc
convert`` to Parquet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lmchallenge.corpus import not_text, open_binary, whole_line_blocks
from lmchallenge.errors import InputError
from lmchallenge.logs.jsonl import load_jsonlines
from lmchallenge.logs.parquet import user_kind

BLOCK_BYTES = 16 << 20
"""Bytes of whole lines read, parsed and reduced at once (a longer line is one block)."""

SCHEMA = pa.schema([
    ("user", pa.string()), ("message", pa.int64()), ("token", pa.int64()),
    ("character", pa.int64()), ("target", pa.string()), ("select", pa.bool_()),
    ("completions", pa.list_(pa.list_(pa.string()))), ("logp", pa.float64()),
])
"""Every key a ``wc``, ``we`` or ``ce`` log datum may have (the others fall back)."""

INTEGER_USERS = SCHEMA.set(0, pa.field("user", pa.int64()))
""":data:`SCHEMA` for a log whose users are integers (a corpus' ``{"user": 7}``)."""

_PAYLOAD = ("completions", "logp")
_NOT_NULL = ("message", "token", "target")
_PARSE = {users: pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
          for users, schema in (("string", SCHEMA), ("integer", INTEGER_USERS))}
_READ = pa_json.ReadOptions(use_threads=True, block_size=1 << 20)
# what Arrow reads differently from Python's json.loads: two objects on one line, a null
# select (Python: unselected; Arrow: as if missing, selected), a byte-order mark (Arrow
# skips one at the start of each of its blocks).  Searched separately: one regex with
# alternatives would not use the fast search for a literal prefix.
_TWO_OBJECTS = re.compile(rb"\}[ \t\r]*\{")
_NULL_SELECT = re.compile(rb'"select"\s*:\s*null')
_BOM = "\ufeff".encode("utf-8")


class Block(NamedTuple):
    """Whole lines of a log: ``data`` (bytes) starting at line ``first_line`` (1-based),
    and their columns (None where they must be read datum by datum)."""

    first_line: int
    data: bytes
    table: pa.Table | None


def located(path: str) -> None:
    """Read the log ``path`` again line by line, raising its first error with the line it is
    on (:func:`lmchallenge.logs.jsonl.load_jsonlines`); return if none is found that way."""
    for _ in load_jsonlines(path):
        pass


def parsed_blocks(path: str, block_bytes: int) -> Iterator[Block]:
    """The log ``path`` in blocks of about ``block_bytes`` bytes of whole lines, each with
    its columns where Arrow reads them exactly as the datum-by-datum reader would (see the
    module's docstring; otherwise ``table`` is None).

    Raises:
        InputError: the log's first block is not text.
        OSError, EOFError, zlib.error, UnicodeDecodeError: the log cannot be read (a
            missing file, a damaged ``.gz``: :func:`lmchallenge.logs.files.read_errors`
            turns them into InputError).
    """
    users: str | None = None     # the type of user of the first datum, once read
    with open_binary(path) as stream:
        for first_line, data in _blocks(stream, block_bytes, path):
            if users is None:
                users = _fits_schema(data)
            yield Block(first_line, data, _columns(data, users) if users in _PARSE else None)


def _blocks(stream: IO[bytes], block_bytes: int, path: str) -> Iterator[tuple[int, bytes]]:
    """``(first line number, bytes)`` of consecutive runs of whole lines of ``stream``, a
    byte order mark at the start left out (as every other reader does:
    :func:`lmchallenge.corpus.decode_lines`; it was an invalid JSON line 1 here only: QA)."""
    line = 1
    for data in whole_line_blocks(stream.read, block_bytes):
        if line == 1 and data.startswith(_BOM):
            data = data[len(_BOM):]
        why = not_text(data) if line == 1 else None     # said as every reader says it (QA:
        if why:                                          # "not UTF-8" from stdin)
            raise InputError(path, 1, why)
        yield line, data
        line += data.count(b"\n")


def _fits_schema(data: bytes) -> str | None:
    """Whether the first datum of a block has only :data:`SCHEMA` keys (its game is read
    column-wise), and the type of its user: ``string`` (or none), ``integer``, ``no`` (read
    datum by datum; errors are left to that reading), or None (no datum in ``data``)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        line = data[start:] if end < 0 else data[start:end]
        if line.strip():
            try:
                datum = json.loads(line)
            except (ValueError, RecursionError):
                return "no"
            if not (isinstance(datum, dict) and set(datum) <= set(SCHEMA.names)):
                return "no"
            kind = user_kind(datum.get("user"))    # (an int beyond int64: datum by datum)
            return "no" if kind == "wide" else kind or "string"
        start = len(data) if end < 0 else end + 1
    return None


def _read_otherwise(data: bytes) -> bool:
    """Whether Arrow might read ``data`` otherwise than Python's json.loads line by line."""
    return (_TWO_OBJECTS.search(data) is not None or _BOM in data
            or (b'"select"' in data and _NULL_SELECT.search(data) is not None))


def _columns(data: bytes, users: str) -> pa.Table | None:
    """The block's columns, one row per line, with users of type ``users`` (``string`` or
    ``integer``; None if it must be read datum by datum)."""
    if _read_otherwise(data):
        return None
    try:
        table = pa_json.read_json(pa.BufferReader(data), read_options=_READ, parse_options=_PARSE[users])
    except (pa.ArrowException, ValueError):    # malformed, other keys or types, not UTF-8
        return None
    if table.num_rows > data.count(b"\n") + 1:
        return None       # two objects on a line (Python: invalid JSON)
    if any(table.column(c).null_count for c in _NOT_NULL):
        return None       # a datum Python reads otherwise (or rejects)
    if pc.list_flatten(table.column("completions")).null_count:
        return None       # a null list of completions (not an LM Challenge datum)
    for name in _PAYLOAD + ("select",):
        if table.column(name).null_count == table.num_rows:
            table = table.drop_columns([name])
    return table.combine_chunks()

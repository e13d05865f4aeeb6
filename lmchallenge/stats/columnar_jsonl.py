"""Column-wise ``lmc stats`` of jsonlines logs (``.jsonl``, ``.jsonl.gz``, ``-`` for stdin).

:func:`state_of_jsonl` reads the log in blocks of whole lines, parses each block with
Arrow's JSON reader into columns of a fixed schema (:data:`SCHEMA`) and reduces them with
:func:`lmchallenge.stats.columnar.batch_state`, then merges the block states in log order.
The users' column is strings, or integers where the log's first datum has an integer user.
Memory stays bounded by a few blocks.

Arrow's reader accepts a little less than Python's ``json`` (and a few things more), so
a block is reduced column-wise only when its columns are certainly the datums that
:class:`lmchallenge.stats.StatsState` would see; otherwise (another game's keys, such as
``wr``'s ``results``; a null ``select``, ``message``, ``token`` or ``target``; a value of
another type; a blank line; malformed JSON) that block is read datum by datum
(:func:`lmchallenge.stats.state_of_lines`), which gives the same numbers or the error
naming the file and line.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from typing import IO, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lmchallenge.stats import columnar
from lmchallenge.stats import state as stats
from lmchallenge.corpus import not_text, open_binary, whole_line_blocks
from lmchallenge.errors import InputError
from lmchallenge.logs.files import read_errors
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


def state_of_jsonl(path: str, block_bytes: int = BLOCK_BYTES, groups=None) -> stats.StatsState:
    """The :class:`~lmchallenge.stats.StatsState` of a jsonlines log, column-wise.

    Args:
        path: a ``.jsonl`` file, a gzipped one (``.gz``), or ``-`` for stdin.
        block_bytes: about this many bytes are parsed and reduced at once (positive).
        groups: a :class:`lmchallenge.stats.bootstrap.GroupSums` to add the per-group sums to.
    Returns:
        The state of the datum-by-datum loop over the log, exactly.
    Raises:
        InputError: the log cannot be read (missing, not gzip, not UTF-8), or a line is not
            JSON or not an LM Challenge log datum (naming the file and line).
    """
    state = stats.StatsState()
    cache: dict[str, int] = {}
    try:
        with read_errors(path):
            for block in columnar.prefetched(parsed_blocks(path, block_bytes)):
                if block.table is None:
                    text = io.TextIOWrapper(io.BytesIO(block.data), encoding="utf-8", newline="\n")
                    state.merge(stats.state_of_lines(text, path, block.first_line, groups))
                else:
                    for batch in block.table.to_batches():
                        state.merge(columnar.batch_state(batch, cache, groups))
    except InputError as e:
        if e.line is None and path != "-" and os.path.exists(path):
            _located(path)      # read in blocks, a damaged file is named without its line
        raise
    return state


def _located(path: str) -> None:
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

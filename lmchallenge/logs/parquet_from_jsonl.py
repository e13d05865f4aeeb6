"""A jsonlines log written as Parquet column-wise (``lmc convert LOG.jsonl -o LOG.parquet``,
and a run directory of jsonl parts).

The datum-by-datum conversion (:func:`lmchallenge.logs.parquet.write_parquet` over
:func:`lmchallenge.logs.io.read_log`) spends most of its time in Python's ``json`` and in
building each datum.  :func:`write_columns` instead takes the Arrow columns of each block of
the log (:func:`lmchallenge.logs.jsonl_columns.parsed_blocks`: only where Arrow reads the
block exactly as Python's ``json`` would) and writes them, typed as the datum path types
them (:func:`lmchallenge.logs.parquet.schema_for`), in the same row groups.

It answers only for a log it can certainly write so: every block has columns, each datum
has exactly the keys the datum path requires of the game (:func:`_certain`), and its
values are what ``lmc validate`` takes (:func:`_valid`).  Otherwise (a ``wr`` log, a
block Arrow does not read as Python does, a key missing or of another game, a null where
a log has a value, a negative index, a NaN or infinite logp, a completion twice, an empty
log) it writes nothing and returns None, and the caller converts datum by datum, which
writes the same file or refuses the log with its error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lmchallenge.corpus import READ_ERRORS
from lmchallenge.errors import InputError
from lmchallenge.logs.files import atomic_path, written_in_place
from lmchallenge.logs.jsonl_columns import BLOCK_BYTES, Block, parsed_blocks
from lmchallenge.logs.parquet import GroupedWriter, schema_for

GAMES = ("wc", "we", "ce")
"""The games whose logs are written column-wise (``wr``'s results are not Arrow-parsed)."""

PAYLOAD = {"wc": "completions", "we": "logp", "ce": "logp"}
"""The payload column of each of :data:`GAMES` (the other one must be absent)."""

_KEYS = {name: re.compile(rb'"' + name.encode() + rb'"\s*:')
         for name in ("user", "logp", "completions")}
"""A key in a JSON line: a string followed by a colon (inside a JSON string a quote is
escaped, and a string value is followed by ``,``, ``]`` or ``}``, never ``:``)."""


class _NotCertain(Exception):
    """A block that the column-wise path cannot write exactly as the datum path would."""


def write_columns(sources: str | Sequence[str], destination: str, game: str,
                  block_bytes: int = BLOCK_BYTES) -> int | None:
    """Write the jsonlines log ``sources`` to the Parquet file ``destination`` column-wise,
    atomically, as :func:`lmchallenge.logs.parquet.write_parquet` would write its datums.
    Errors are left to the datum path: where the log cannot be read (or the destination
    written) this returns None, and the datum path says what is wrong.

    Args:
        sources: a ``.jsonl`` or ``.jsonl.gz`` file (not ``-`` or a pipe: it may be read
            twice), or several, one log in order (a run directory's parts).
        destination: a ``.parquet`` path that is not written in place (not a FIFO: the file
            appears only if the whole log is written).
        game: the log's game; only :data:`GAMES` are written so.
        block_bytes: about this many bytes of the log are parsed at once.
    Returns:
        The number of rows written, or None where the log is not certainly written as the
        datum path would (nothing is written then; see the module's docstring).
    """
    if game not in GAMES or written_in_place(destination):
        return None
    blocks = itertools.chain.from_iterable(
        parsed_blocks(source, block_bytes)
        for source in ([sources] if isinstance(sources, str) else sources))
    try:
        with atomic_path(destination) as tmp:
            writer: GroupedWriter | None = None
            try:
                for block in blocks:
                    table = _certain(block, game)
                    users = table.schema.field("user").type
                    if writer is None:      # (the users' type: the first datum's)
                        writer = GroupedWriter(tmp, schema_for(
                            game, "integer" if pa.types.is_integer(users) else "string"))
                    elif users != writer.schema.field("user").type:
                        # each file's blocks are typed by its own first datum: a part of
                        # other users (or none) than the first's is the datum path's
                        raise _NotCertain("users of another type than the first file's")
                    _valid(table)
                    writer.add(_typed(table, writer.schema))
                if writer is None or writer.rows == 0:
                    raise _NotCertain("an empty log")    # (its schema: the datum path's)
            finally:
                if writer is not None:
                    writer.close()
            return writer.rows
    except (_NotCertain, InputError, UnicodeDecodeError, pa.ArrowException, *READ_ERRORS):
        return None


def _certain(block: Block, game: str) -> pa.Table:
    """The columns of ``block``, where each of its datums certainly has exactly the keys
    of a ``game`` datum (``select`` optional) and no null where a log has a value.

    Raises:
        _NotCertain: otherwise.
    """
    table = block.table
    if table is None:
        raise _NotCertain("not read column-wise")
    payload = PAYLOAD[game]
    other = "logp" if payload == "completions" else "completions"
    names = set(table.column_names)
    # a missing key and a null are both null in Arrow: the other game's key is absent, and
    # each row holds the nullable keys (user; we/ce's logp) where one of them is null
    if other in names or _KEYS[other].search(block.data):
        raise _NotCertain(f"{other} in a {game} log")
    if table.column("character").null_count:
        raise _NotCertain("a null or missing character")
    if payload == "completions":
        completions = table.column("completions") if "completions" in names else None
        if completions is None or completions.null_count or \
                pc.list_flatten(pc.list_flatten(completions)).null_count:
            raise _NotCertain("null or missing completions")
    elif payload not in names or table.column(payload).null_count:
        _every_row_has(block, "logp")
    if table.column("user").null_count:
        _every_row_has(block, "user")
    return table


def _every_row_has(block: Block, key: str) -> None:
    """Raise _NotCertain unless every row of ``block`` has the key ``key``: as many keys as
    rows (Arrow refuses a line with a key twice, so none lacks it)."""
    assert block.table is not None
    if sum(1 for _ in _KEYS[key].finditer(block.data)) != block.table.num_rows:
        raise _NotCertain(f"a row without {key}")


INDICES = ("message", "token", "character")
"""The columns of indices, integers from 0 (the log schema's ``minimum``)."""


def _valid(table: pa.Table) -> None:
    """Raise _NotCertain unless ``table``'s values are what ``lmc validate`` takes beyond
    their types (which Arrow's reader has held to the log's,
    :data:`lmchallenge.logs.jsonl_columns.SCHEMA`): no negative index (:data:`INDICES`), no
    NaN or infinite ``logp``, and no list of completions with a string twice (the schema's
    ``uniqueItems``; :func:`_repeats`).  The datum path then names the datum that is not, with ``lmc
    validate``'s message."""
    if any(pc.min(table.column(name)).as_py() < 0 for name in INDICES):
        raise _NotCertain("a negative index")
    logp = table.column("logp") if "logp" in table.column_names else None
    if logp is not None and not pc.all(pc.is_finite(logp), min_count=0).as_py():
        raise _NotCertain("a NaN or infinite logp")     # (QA: NaN was written, as a number)
    if "completions" in table.column_names and _repeats(table.column("completions")):
        raise _NotCertain("a completion twice in a list")


def _repeats(completions: pa.ChunkedArray) -> bool:
    """Whether a list of ``completions`` (``list<list<string>>``: a datum's lists, one per
    typed prefix) holds a string twice: in each chunk, each string's dictionary code paired
    with its list's number, sorted, then neighbours compared (the lists come in order, so
    the sort is short work: about 0.5 s for 8.6 million completions, BENCHMARKS.md,
    "convert")."""
    import numpy as np
    for chunk in completions.chunks:
        lists = pc.list_flatten(chunk)
        codes = pc.dictionary_encode(pc.list_flatten(lists))
        keys = pc.list_parent_indices(lists).to_numpy().astype(np.int64)
        keys *= len(codes.dictionary)
        keys += codes.indices.to_numpy()
        keys.sort()
        if np.any(keys[1:] == keys[:-1]):
            return True
    return False


def _typed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns in ``schema``'s order and types (a column it lacks: all null)."""
    rows = table.num_rows
    return pa.Table.from_arrays(
        [table.column(field.name).cast(field.type) if field.name in table.column_names
         else pa.nulls(rows, field.type) for field in schema], schema=schema)

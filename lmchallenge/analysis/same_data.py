"""Whether two logs are of the same data, read column-wise: the fast path of the check of
:func:`lmchallenge.analysis.diff.pairs` that ``lmc compare`` runs before its statistics.

:func:`certainly_same` reads the columns that check looks at (``user``, ``message``,
``token``, ``character``, ``target``, whether a token is selected and, for ``wr``, the typo
and its candidates with their error scores) with Arrow, batch by batch, and compares the two
logs' batches whole (:meth:`pyarrow.ChunkedArray.equals`: values, nulls and types).  It
answers only "certainly the same data" or "not known": wherever a log cannot be read
column-wise exactly as the datum-by-datum reader reads it (a jsonlines block that
:func:`lmchallenge.logs.jsonl_columns.parsed_blocks` leaves to that reader, ``wr``
jsonlines logs, a null list of results, a file that cannot be read) or anything differs,
the caller checks datum by datum, which finds the difference and names it.  So every
message, and every log refused, is that of the datum-by-datum check.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lmchallenge.errors import LmcError
from lmchallenge.logs import parquet
from lmchallenge.logs.files import is_parquet_name, log_form, read_errors, run_dir_parts
from lmchallenge.logs.io import first_datum
from lmchallenge.logs.schema import COMMON_COLUMNS
from lmchallenge.analysis.pretty import detect_game
from lmchallenge.logs.jsonl_columns import BLOCK_BYTES, parsed_blocks

class _NotColumnar(Exception):
    """A part of a log that only the datum-by-datum reader reads as it should be read."""


def certainly_same(baseline: str, log: str) -> bool:
    """True if the logs ``baseline`` and ``log`` are certainly of the same data, as
    :func:`lmchallenge.analysis.diff.pairs` (and for ``wr``, ``lmc compare``'s check of the
    typos) would find them: as many tokens; the same game (of the first datum); in every
    row, the same ``user``, ``message``, ``token``, ``character`` and ``target``, of the
    same types (a missing key as null), and the same selection (``select`` missing or null
    is selected); for a ``wr`` log, the same ``verbatim`` and the same candidates and error
    scores in the same order.

    Args:
        baseline, log: paths of logs (jsonlines, gzipped or not, Parquet, run directories).
    Returns:
        True: the same data.  False: not known (they may differ, or a part of one is not
        read column-wise); check datum by datum.  Never raises for a log it cannot read.
    """
    if not (_rereadable(baseline) and _rereadable(log)):
        return False    # (the datum-by-datum check must be able to read them afterwards)
    try:
        first = first_datum(baseline), first_datum(log)
        game = detect_game(first[0])
        if game != detect_game(first[1]):
            return False
        with contextlib.closing(_tables(baseline, game)) as a, \
                contextlib.closing(_tables(log, game)) as b:
            return _same_rows(a, b)
    except (_NotColumnar, LmcError, pa.ArrowException, OSError, ValueError, TypeError):
        return False


def _rereadable(path: str) -> bool:
    return os.path.isfile(path) or os.path.isdir(path)    # not "-", not a pipe


def _same_rows(a: Iterator[pa.Table], b: Iterator[pa.Table]) -> bool:
    """Whether two streams of non-empty tables (of the same columns) hold the same rows,
    however the rows are cut into tables."""
    x = y = None
    while True:
        x = x if x is not None and x.num_rows else next(a, None)
        y = y if y is not None and y.num_rows else next(b, None)
        if x is None or y is None:
            return x is None and y is None
        rows = min(x.num_rows, y.num_rows)
        if not all(_same_column(x.column(name).slice(0, rows), y.column(name).slice(0, rows))
                   for name in x.column_names):
            return False
        x, y = x.slice(rows), y.slice(rows)


def _same_column(x: pa.ChunkedArray, y: pa.ChunkedArray) -> bool:
    if x.null_count == len(x) and y.null_count == len(y):
        return True     # (a column of nulls may be of any type: a missing key, say)
    return x.type == y.type and x.equals(y)


def _tables(path: str, game: str | None) -> Iterator[pa.Table]:
    """The log's rows as non-empty tables of the compared columns (:func:`_compared`).

    Raises:
        _NotColumnar: a block of a jsonlines log is left to the datum-by-datum reader.
        InputError, pyarrow.ArrowException: the log cannot be read.
    """
    if log_form(path) == "run_dir":
        for part in run_dir_parts(path):
            yield from _tables(str(part), game)
    elif is_parquet_name(path):
        parquet_file = parquet.open_parquet(path)
        parquet.check_columns(parquet_file.schema_arrow, path)
        wanted = COMMON_COLUMNS + ("select",) + (("verbatim", "results") if game == "wr" else ())
        columns = [name for name in wanted if name in parquet_file.schema_arrow.names]
        for batch in parquet_file.iter_batches(batch_size=parquet.ROW_GROUP_ROWS, columns=columns):
            if batch.num_rows:
                yield _compared(pa.Table.from_batches([batch]), game)
    else:
        with read_errors(path):     # (a damaged .gz raises EOFError or zlib.error, say)
            for block in parsed_blocks(path, BLOCK_BYTES):
                if block.table is None:
                    raise _NotColumnar(path)
                if block.table.num_rows:
                    yield _compared(block.table, game)


def _compared(table: pa.Table, game: str | None) -> pa.Table:
    """The columns compared, typed as the datum reader's Python values are (:func:`_plain`):
    ``user``, ``message``, ``token``, ``character``, ``target``, ``selected`` (booleans, no
    nulls); for ``wr``, ``verbatim``, and ``candidates`` and ``errors``, lists of each
    result's first and second fields (:func:`_typos`)."""
    rows = table.num_rows

    def column(name: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(rows)
        return table.column(name).combine_chunks()

    columns = {name: _plain(column(name)) for name in COMMON_COLUMNS}
    select = column("select")
    columns["selected"] = (pa.array(np.ones(rows, dtype=bool)) if pa.types.is_null(select.type)
                           else pc.or_kleene(pc.is_null(select), select))
    if game == "wr":
        columns["verbatim"] = _plain(column("verbatim"))
        columns["candidates"], columns["errors"] = _typos(column("results"))
    return pa.table(columns)


def _plain(array: pa.Array) -> pa.Array:
    """An array typed as its Python values are: no dictionary, no large offsets, every
    integer type as int64 and every floating type as float64."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_integer(array.type):
        return array.cast(pa.int64())
    if pa.types.is_floating(array.type):
        return array.cast(pa.float64())
    return array.cast(pa.string()) if pa.types.is_large_string(array.type) else array


def _typos(results: pa.Array) -> tuple[pa.Array, pa.Array]:
    """``wr`` results (list<struct<candidate, error, lm>>) as a list of candidates and a
    list of error scores per row: the first two fields of each result, by position (as the
    datum reader's ``result[:2]``).

    Raises:
        _NotColumnar: not a list of structs, or a null list or result (the datum reader
            reads them otherwise).
    """
    if not (pa.types.is_list(results.type) and pa.types.is_struct(results.type.value_type)
            and results.type.value_type.num_fields >= 2):
        raise _NotColumnar("results")
    if results.null_count or results.values.null_count:
        raise _NotColumnar("results")
    candidate, error = results.values.flatten()[:2]
    return (pa.ListArray.from_arrays(results.offsets, _plain(candidate)),
            pa.ListArray.from_arrays(results.offsets, _plain(error)))

"""The Parquet form of LM Challenge logs (docs/formats.md, "Parquet").

One row per log datum (token).  Columns, in this order:

=============== ===================================================== ========
column          type                                                  null?
=============== ===================================================== ========
``user``        string, or int64 where the users are integers         yes
``message``     int64 (message index within the user's group)        no
``token``       int64 (token index within the message)               no
``character``   int64 (code-point offset of the token in the message) no
``target``      string                                                no
``select``      bool (null: the datum had no ``select`` key)          yes
=============== ===================================================== ========

followed by the payload of the game (below).  ``user`` holds one type: a log whose users are
integers (a jsonlines corpus' ``{"user": 7}``) has an int64 column, so that it reads back as
the same log; ``1`` and ``"1"``, different users in LM Challenge 5.x, cannot share a Parquet
log, nor can an integer beyond 64 bits be in one (:data:`USER_TYPES`).  The payload:

* ``wc``: ``completions`` list<list<string>> (per typed prefix, the model's
  completions, best first);
* ``we`` / ``ce``: ``logp`` float64 (natural-log probability; null = not scored);
* ``wr``: ``verbatim`` string (the corrupted token) and ``results``
  list<struct<candidate string, error float64, lm float64>> (``lm`` null when
  the model did not score the candidate).

A JSON datum ``{"results": [[c, e, lm], ...]}`` becomes a list of structs and
reads back as the same list of 3-element lists.  Files are written in row
groups of a bounded number of rows and read back batch by batch, so neither
direction holds a whole log in memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import operator
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lmchallenge.errors import DatumError, InputError, LmcError
from lmchallenge.logs.files import atomic_path, check_parquet_name, is_parquet_name, run_dir_parts
from lmchallenge.logs.schema import (COMMON_COLUMNS, GAMES, OPTIONAL_COLUMNS, PAYLOAD_COLUMNS, Datum,
                                      detect_game)


ROW_GROUP_ROWS = 65536
"""Rows per Parquet row group written (and per batch read) by default."""

RESULT_TYPE = pa.struct([
    pa.field("candidate", pa.string()),
    pa.field("error", pa.float64()),
    pa.field("lm", pa.float64()),
])
"""The element type of the ``wr`` ``results`` column."""

USER_TYPES = {"string": pa.string(), "integer": pa.int64()}
"""The Arrow type of the ``user`` column by the type of the log's users (string users, or none
at all: ``string``)."""

_ARROW_TYPES: dict[str, tuple[pa.DataType, bool]] = {
    "user": (pa.string(), True),
    "message": (pa.int64(), False),
    "token": (pa.int64(), False),
    "character": (pa.int64(), False),
    "target": (pa.string(), False),
    "select": (pa.bool_(), True),
    "completions": (pa.list_(pa.list_(pa.string())), False),
    "logp": (pa.float64(), True),
    "verbatim": (pa.string(), False),
    "results": (pa.list_(RESULT_TYPE), False),
}
"""The Arrow type of every log column (:mod:`lmchallenge.logs.schema` names them), and whether
it may be null (``user`` of plain text, ``logp`` of a token the model did not score)."""


def log_column_type(name: str) -> pa.DataType:
    """The Arrow type of the log column ``name`` (KeyError for another name)."""
    return _ARROW_TYPES[name][0]


def _field(name: str) -> pa.Field:
    kind, nullable = _ARROW_TYPES[name]
    return pa.field(name, kind, nullable=nullable)


_COMMON_FIELDS = tuple(_field(name) for name in COMMON_COLUMNS + OPTIONAL_COLUMNS)

_PAYLOAD_FIELDS: dict[str | None, tuple[pa.Field, ...]] = {
    None: (), **{game: tuple(map(_field, names)) for game, names in PAYLOAD_COLUMNS.items()}}

_OPTIONAL_KEYS = frozenset(OPTIONAL_COLUMNS)


# --- schema ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def schema_for(game: str | None, user_type: str = "string") -> pa.Schema:
    """The Arrow schema of a Parquet log of ``game`` (docs/formats.md, "Parquet").

    Args:
        game: ``wc``, ``we``, ``ce`` (same columns as ``we``) or ``wr``; None gives
            the six common columns only (a log without payload).
        user_type: ``string`` or ``integer`` (:data:`USER_TYPES`): the type of the users.
    Returns:
        The schema: ``user``, ``message``, ``token``, ``character``, ``target``,
        ``select``, then the game's payload columns.
    Raises:
        LmcError: ``game`` is not one of the above.
        KeyError: ``user_type`` is not one of the above.
    """
    if game not in _PAYLOAD_FIELDS:
        raise LmcError(f"unknown game {game!r}: expected one of {', '.join(GAMES)}")
    schema = pa.schema(list(_COMMON_FIELDS) + list(_PAYLOAD_FIELDS[game]))
    return schema.set(0, pa.field("user", USER_TYPES[user_type], nullable=True))


def _datum_keys(schema: pa.Schema) -> frozenset[str]:
    """The keys every datum of ``schema`` must have (``select`` is optional)."""
    return frozenset(schema.names) - _OPTIONAL_KEYS


_INT64 = range(-2**63, 2**63)


def user_kind(user: Any) -> str | None:
    """The :data:`USER_TYPES` key of one user, ``wide`` for an integer beyond 64 bits (which
    no Parquet log holds), None for no user or a value of another type."""
    if isinstance(user, str):
        return "string"
    if isinstance(user, int) and not isinstance(user, bool):
        return "integer" if user in _INT64 else "wide"
    return None


def wide_user_message(user: int, jsonl: str = "write the log as jsonl") -> str:
    """Why integer ``user`` (beyond 64 bits) cannot be in a Parquet log; ``jsonl`` says how
    to write jsonl instead."""
    return (f"user {user} is an integer beyond 64 bits, more than the user column of a "
            f"Parquet log holds (int64); {jsonl}, or give the users as strings")


def a_kind(user: str | int) -> str:
    """``an integer`` or ``a string``: what ``user`` is, for messages."""
    return "a string" if isinstance(user, str) else "an integer"


def mixed_users_message(user: Any, other: str, jsonl: str = "write the log as jsonl") -> str:
    """Why ``user`` cannot join a Parquet log whose users are of the other type, as
    ``other`` says (``'user "a" of line 3 is a string'``); ``jsonl`` says how to write jsonl
    instead."""
    return (f"user {user!r} is {a_kind(user)} "
            f"but {other}: the user column of a Parquet log holds one type (1 and \"1\" are "
            f"different users); give every user as a string or every one as an integer, or "
            f"{jsonl}")


@dataclasses.dataclass
class UserTypes:
    """The types of a corpus' users (a json corpus gives each as a string or an integer,
    :mod:`lmchallenge.corpus`), for the type of the Parquet log's user column
    (:data:`USER_TYPES`): ``lmc run`` and ``lmc-dist run`` check a corpus' before the
    model starts.

    Attributes:
        first: per kind (:func:`user_kind`: ``string``,
            ``integer``, ``wide``), the line of its first user and the user.
    """

    first: dict[str, tuple[int, Any]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of_users(cls, first_lines: dict[Any, int]) -> UserTypes:
        """The types of the users ``first_lines`` (each user with the line of its first row,
        in the corpus' order: :attr:`lmchallenge.corpus.UserGroups.users`; None for rows
        without a user)."""
        types = cls()
        for user, line in first_lines.items():
            if user is not None:
                types.first.setdefault(user_kind(user), (int(line), user))
        return types

    @property
    def kind(self) -> str:
        """``integer`` where every user is an integer (at least one), ``mixed`` where
        strings and integers occur, else ``string``."""
        integers = bool({"integer", "wide"} & set(self.first))
        return ("mixed" if "string" in self.first else "integer") if integers else "string"

    def check_parquet(self, name: str, jsonl: str) -> None:
        """Raise InputError (naming ``name`` and the line) if no Parquet user column holds
        these users (an integer beyond 64 bits; strings and integers); ``jsonl`` says how to
        write jsonl instead."""
        if "wide" in self.first:
            line, user = self.first["wide"]
            raise InputError(name, line, wide_user_message(user, jsonl))
        if self.kind != "mixed":
            return
        (line, user), (other_line, other) = sorted(self.first.values(), key=lambda v: -v[0])
        raise InputError(name, line, mixed_users_message(
            user, f"user {other!r} of line {other_line} is {a_kind(other)}", jsonl))


# --- writing --------------------------------------------------------------------------

def write_parquet(data: Iterable[Datum], path: str, game: str | None = None, *,
                  user_type: str | None = None, row_group_rows: int = ROW_GROUP_ROWS) -> int:
    """Write log datums to one Parquet file, atomically, in bounded row groups.

    The layout is that of docs/formats.md, "Parquet" (see :func:`schema_for`).
    Datums are consumed lazily and converted to Arrow :data:`CONVERT_ROWS` at a time: at
    most that many are held as Python objects, a row group's worth as Arrow columns.
    The file is written under a temporary name beside ``path`` and renamed when
    complete: if ``data`` raises, or a datum is rejected, neither ``path`` nor the
    temporary file is left behind (an existing ``path`` is left untouched).

    Args:
        data: LM Challenge 5.x log datums: ``user`` (str, int or None: all users of one
            type), ``message``, ``token``, ``character`` (int), ``target`` (str), optional
            ``select`` (bool), and the payload of one game (``completions``; ``logp``;
            ``verbatim`` + ``results``).
        path: the output file.
        game: ``wc``/``we``/``ce``/``wr``; None to detect it from the first datum
            (:func:`lmchallenge.logs.schema.detect_game`).  It fixes the columns, so an
            empty log with a known game still gets the full schema.
        user_type: ``string`` or ``integer`` (:data:`USER_TYPES`); None to take it from the
            first user in the first row group (``string`` if it has none), so that the
            files of one run agree even where one holds no user.
        row_group_rows: rows per row group (positive).
    Returns:
        The number of datums (rows) written.
    Raises:
        InputError: a datum's keys (``select`` aside) differ from the game's columns,
            e.g. a log mixing games, a value does not fit its column's type, or a user
            is of the other type than the log's (:func:`mixed_users_message`).
        LmcError: ``game`` is unknown.
        ValueError: ``row_group_rows`` is not positive.
    """
    if row_group_rows < 1:
        raise ValueError(f"row_group_rows must be positive, not {row_group_rows}")
    iterator = iter(data)
    first = next(iterator, None)
    if game is None and first is not None:
        game = detect_game(first)
    users = _Users(user_type, path)
    schema_for(game, user_type or "string")   # both known, before any work
    rows = 0
    with atomic_path(path) as tmp:
        writer: pq.ParquetWriter | None = None
        try:
            group: list[pa.RecordBatch] = []
            batches = _record_batches(first, iterator, game, users, path, row_group_rows) \
                if first is not None else iter(())
            for batch, ends_group in batches:
                group.append(batch)
                rows += batch.num_rows
                if ends_group:
                    writer = _write_group(writer, tmp, group, game, users, row_group_rows)
                    group = []
            if group or writer is None:
                writer = _write_group(writer, tmp, group, game, users, row_group_rows)
        finally:
            if writer is not None:
                writer.close()
    return rows


class _Users:
    """The type of a log's users while it is written: given, or fixed by the first user seen
    (or, where the first row group holds none, by its being written: strings).

    Args:
        kind: ``string``, ``integer`` or None (not yet known).
        path: the log, for errors.
    """

    def __init__(self, kind: str | None, path: str):
        self.kind = kind
        self.path = path
        self._why = f"the log's users are {kind}s" if kind else ""   # what fixed the kind

    def check(self, users: Sequence[Any], start: int) -> None:
        """Raise InputError unless every one of ``users`` (the user values of datums
        numbered from ``start``) is None or of the log's kind (fixing it at the first user
        if not yet known)."""
        if self._all_of_kind(users):
            return
        for number, user in enumerate(users, start=start):
            if user is None:
                continue
            kind = user_kind(user)
            if kind is None:
                raise DatumError(self.path, number, f"user {user!r} is a {type(user).__name__}, "
                                                    "not a string or an integer")
            if kind == self.kind:
                continue
            if kind == "wide":
                raise DatumError(self.path, number, wide_user_message(user))
            if self.kind is None:
                self.kind, self._why = kind, f"user {user!r} before it is {a_kind(user)}"
                continue
            raise DatumError(self.path, number, mixed_users_message(user, self._why))

    def _all_of_kind(self, users: Sequence[Any]) -> bool:
        """Whether every one of ``users`` is None or of the log's kind, found by C-level
        loops (False where :meth:`check` must look at them one by one: a kind to fix, a
        user of another type, an integer that may be beyond 64 bits)."""
        types = set(map(type, users))
        if types <= {type(None)}:
            return True
        if self.kind == "string":
            return types <= {str, type(None)}
        if self.kind == "integer" and types <= {int, type(None)}:
            ints = [user for user in users if user is not None] if type(None) in types else users
            return min(ints) in _INT64 and max(ints) in _INT64
        return False

    def fix(self, rows: int) -> str:
        """The kind, fixed now that ``rows`` datums are written (``string`` where no user has
        been seen)."""
        if self.kind is None:
            self.kind = "string"
            self._why = f"the log's first {rows:,} datums, without a user, fixed its user column as strings"
        return self.kind


def _write_group(writer: pq.ParquetWriter | None, tmp: str, group: list[pa.RecordBatch],
                 game: str | None, users: _Users, row_group_rows: int) -> pq.ParquetWriter:
    """Write ``group`` (record batches of one row group) as one row group, opening the writer
    at the first (when the users' type is fixed); the writer."""
    schema = schema_for(game, users.fix(sum(batch.num_rows for batch in group)))
    if writer is None:
        writer = pq.ParquetWriter(tmp, schema, write_page_checksum=True)
    batches = [batch if batch.schema == schema else _retyped_users(batch, schema)
               for batch in group]
    if batches:
        writer.write_table(pa.Table.from_batches(batches, schema=schema),
                           row_group_size=row_group_rows)
    return writer


class GroupedWriter:
    """Tables of one schema written to a Parquet file in row groups of ``row_group_rows``
    rows (the last one shorter), however many rows each table has: the layout of
    :func:`write_parquet`.  ``close`` writes the last row group.

    Args:
        path: the file (written as it is: the caller makes it atomic).
        schema: the tables' schema.
        row_group_rows: rows per row group (positive; None: :data:`ROW_GROUP_ROWS`, read
            when the writer is made).
    Attributes:
        rows: the rows added so far.
    """

    def __init__(self, path: str, schema: pa.Schema, row_group_rows: int | None = None):
        self.schema = schema
        self.rows = 0
        self._group_rows = ROW_GROUP_ROWS if row_group_rows is None else row_group_rows
        self._writer = pq.ParquetWriter(path, schema, write_page_checksum=True)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def add(self, table: pa.Table) -> None:
        """Append ``table`` (of :attr:`schema`), writing every whole row group it completes."""
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= self._group_rows:
            whole = pa.concat_tables(self._pending)
            cut = self._pending_rows - self._pending_rows % self._group_rows
            self._writer.write_table(whole.slice(0, cut), row_group_size=self._group_rows)
            self._pending, self._pending_rows = [whole.slice(cut)], self._pending_rows - cut

    def close(self) -> None:
        """Write the last row group and close the file."""
        if self._pending_rows:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=self._group_rows)
            self._pending, self._pending_rows = [], 0
        self._writer.close()


def _retyped_users(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (converted before the users' type was known: no user) with ``schema``'s user
    column type."""
    assert batch.column(0).null_count == batch.num_rows
    columns = [pa.nulls(batch.num_rows, schema.field(0).type), *batch.columns[1:]]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


CONVERT_ROWS = 512
"""Datums converted to Arrow at a time by :func:`write_parquet`.  Datums held longer survive
into the garbage collector's oldest generation and set off its full passes, which traverse
every live object: holding row groups of datums made those passes a third of the CPU time of
a ``wc`` run writing Parquet (BENCHMARKS.md, "scaling"); 128-4096 measured alike otherwise."""


def _record_batches(first: Datum, rest: Iterator[Datum], game: str | None, users: _Users,
                    path: str, group_rows: int) -> Iterator[tuple[pa.RecordBatch, bool]]:
    """``first`` and ``rest`` as checked record batches of at most :data:`CONVERT_ROWS` rows,
    none straddling a row group (``group_rows`` rows each), with whether it ends one.

    The datums are taken a batch at a time and checked and gathered into columns by C-level
    loops (a key set compared per datum, one ``itemgetter`` call per datum, the columns by
    ``zip``): 6 -> 1.5 us a ``we`` datum on the 2-CPU host (BENCHMARKS.md, "overhead").  Where
    ``rest`` raises, the keys of the datums taken before are checked first, so the first
    fault in the datums' order is the one reported."""
    expected = _datum_keys(schema_for(game))
    datums = itertools.chain((first,), rest)
    start = 1
    while True:
        size = min(CONVERT_ROWS, group_rows - (start - 1) % group_rows)
        chunk: list[Datum] = []
        try:
            chunk.extend(itertools.islice(datums, size))
        except Exception:
            _odd_datums(chunk, expected, start, path)
            raise
        if not chunk:
            return
        odd = _odd_datums(chunk, expected, start, path)
        end = start + len(chunk) - 1
        yield _to_batch(chunk, bool(odd), users, game, path, start), end % group_rows == 0
        start = end + 1


def _odd_datums(datums: Sequence[Datum], expected: frozenset[str], start: int,
                path: str) -> list[int]:
    """Indices of ``datums`` (numbered from ``start``) with keys other than ``expected``,
    after checking them (:func:`_check_keys`): those with an optional key."""
    try:
        odd = list(itertools.compress(itertools.count(), map(
            operator.ne, map(dict.keys, datums), itertools.repeat(expected))))
    except TypeError:      # a datum that is no dict: checked one by one
        odd = list(range(len(datums)))
    for i in odd:
        _check_keys(datums[i], expected, start + i, path)
    return odd


def _check_keys(datum: Datum, expected: frozenset[str], number: int, path: str) -> None:
    """Raise InputError unless ``datum`` has exactly the ``expected`` keys (plus ``select``)."""
    if not isinstance(datum, dict):
        raise DatumError(path, number, f"the datum is a {type(datum).__name__}, not a dict",
                         f"datum {number} is a {type(datum).__name__}, not a dict")
    keys = datum.keys() - _OPTIONAL_KEYS
    if keys == expected:
        return
    missing = sorted(expected - keys)
    extra = sorted(keys - expected)
    detail = (f"does not fit the Parquet columns fixed by the first datum/game (missing "
              f"{missing}, unexpected {extra}); a Parquet log holds datums of one game with the "
              f"keys {sorted(expected)} (plus optional 'select')")
    raise DatumError(path, number, f"the datum {detail}", f"datum {number} {detail}")


def _to_batch(datums: Sequence[Datum], optional: bool, users: _Users, game: str | None,
              path: str, start: int) -> pa.RecordBatch:
    """Columns of ``datums`` (checked; numbered from ``start``; ``optional``: whether any
    has an optional key) as a batch of ``game``'s schema with the users' type (strings
    while no user has been seen)."""
    required = [name for name in schema_for(game).names if name not in _OPTIONAL_KEYS]
    values = dict(zip(required, zip(*map(operator.itemgetter(*required), datums))))
    users.check(values["user"], start)
    schema = schema_for(game, users.kind or "string")
    arrays = [_column(values[field.name], field, path, start) if field.name in values
              else _optional_column(datums, optional, field, path, start)
              for field in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _optional_column(datums: Sequence[Datum], present: bool, field: pa.Field, path: str,
                     start: int) -> pa.Array:
    """The optional column ``field`` of ``datums``: all null unless some datum has the key
    (``present``)."""
    if not present:
        return pa.nulls(len(datums), field.type)
    return _column([datum.get(field.name) for datum in datums], field, path, start)


def _column(values: Sequence[Any], field: pa.Field, path: str, start: int) -> pa.Array:
    """One column's ``values`` (of datums ``start``...) as an Arrow array of ``field``'s
    type, checked for nulls."""
    try:
        if field.name == "results":
            array = _results_array(values)
        else:
            array = pa.array(values, type=field.type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        bad = _first_unfit(values, field)
        if bad is None:
            raise InputError(path, None, f"{_where(values, field, start)}: {e}") from None
        raise DatumError(path, start + bad[0], bad[1],
                         f"{_where(values, field, start)}: {bad[1]}") from None
    if not field.nullable and array.null_count:
        raise InputError(path, None, f"{_where(values, field, start)}: null value in a column "
                                     f"that cannot be null")
    return array


def _first_unfit(values: Sequence[Any], field: pa.Field) -> tuple[int, str] | None:
    """The index of the first of ``values`` that Arrow cannot hold in ``field``'s type, and
    why (``field token: 99999999999999999999 does not fit a Parquet log's int64 column``), or
    None where each fits alone (the column's failure is of them together).  Called only when
    the column failed: one conversion a value."""
    if field.name == "results":
        return None
    for index, value in enumerate(values):
        try:
            pa.array([value], type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            why = (f"{value!r} does not fit a Parquet log's {field.type} column"
                   if isinstance(e, OverflowError) else str(e))
            return index, f"field {field.name}: {why}"
    return None


def _where(values: Sequence[Any], field: pa.Field, start: int) -> str:
    return f"datums {start}-{start + len(values) - 1}, column {field.name!r} ({field.type})"


def _results_array(results: Sequence[Sequence[Sequence[Any]]]) -> pa.ListArray:
    """``wr`` results (per datum a list of ``[candidate, error, lm]``) as list<struct>.

    Raises:
        ValueError / TypeError: a result is not a 3-element sequence.
        pyarrow.ArrowException: a value does not fit its field type.
    """
    offsets = [0]
    candidates: list[Any] = []
    errors: list[Any] = []
    lms: list[Any] = []
    for row in results:
        for candidate, error, lm in row:
            candidates.append(candidate)
            errors.append(error)
            lms.append(lm)
        offsets.append(len(candidates))
    values = pa.StructArray.from_arrays(
        [pa.array(candidates, pa.string()), pa.array(errors, pa.float64()),
         pa.array(lms, pa.float64())],
        fields=list(RESULT_TYPE))
    if values.field(0).null_count or values.field(1).null_count:
        raise ValueError("a result's candidate and error cannot be null")
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values,
                                    type=pa.list_(RESULT_TYPE))


# --- reading --------------------------------------------------------------------------

def iter_parquet(path: str, batch_rows: int = ROW_GROUP_ROWS) -> Iterator[Datum]:
    """Read a Parquet log file back as LM Challenge 5.x datum dicts, batch by batch.

    The inverse of :func:`write_parquet`: ``message``/``token``/``character`` are
    Python ints, a null ``select`` drops the key, ``results`` are lists of
    ``[candidate, error, lm]``.  At most ``batch_rows`` rows are decoded at once.
    Run directories are read by :func:`lmchallenge.logs.io.read_log`, part by part.

    Args:
        path: a Parquet file in the layout of docs/formats.md, "Parquet".
        batch_rows: rows decoded per batch (positive).
    Yields:
        One dict per row, keyed by the file's column names.
    Raises:
        InputError: the file does not exist, is not Parquet, or lacks the common
            log columns (raised when iteration starts).
    """
    parquet_file = open_parquet(path)
    check_columns(parquet_file.schema_arrow, path)
    with unreadable_as_input_error(path):
        for batch in parquet_file.iter_batches(batch_size=batch_rows,
                                               columns=data_columns(parquet_file.schema_arrow)):
            yield from _batch_datums(batch)


_PANDAS_INDEX = re.compile(r"__index_level_\d+__")
"""The name pandas' ``to_parquet`` gives a frame's unnamed index (a filtered frame's row
numbers), which pandas reads back as the index: not a column of the log."""


def data_columns(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` that are the log's: all but an unnamed pandas index (QA:
    ``lmc convert`` of a frame pandas filtered and wrote wrote ``"__index_level_0__"`` into
    every datum, and to Parquet failed on it)."""
    return [name for name in schema.names if not _PANDAS_INDEX.fullmatch(name)]


@contextlib.contextmanager
def unreadable_as_input_error(path: str) -> Iterator[None]:
    """Turn what reading a damaged Parquet file raises (a page whose checksum fails, data
    that does not decode) into InputError naming the file."""
    try:
        yield
    except (OSError, pa.ArrowException, UnicodeDecodeError) as e:
        raise InputError(path, None, f"cannot read the Parquet log: {e}") from None


def read_whole(path: str, schema: pa.Schema | None = None) -> pa.Table:
    """A whole Parquet file as a table (its pages' checksums checked where it has them).

    Raises:
        InputError: the file cannot be read."""
    with unreadable_as_input_error(path):
        return pq.read_table(path, schema=schema, page_checksum_verification=True)


def open_parquet(path: str, read_dictionary: Sequence[str] | None = None) -> pq.ParquetFile:
    """Open ``path`` as a Parquet file, turning I/O and format errors into InputError.

    ``read_dictionary`` names (Parquet column paths) string columns to read as dictionary
    arrays (decoding each distinct string once per row group).  Pages that carry a CRC
    checksum (this project writes them: ``write_page_checksum``) are checked as they are
    read, so a damaged file is an error when read, not numbers that look right."""
    check_parquet_name(path)
    try:
        return pq.ParquetFile(path, read_dictionary=read_dictionary,
                              page_checksum_verification=True)
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None
    except (OSError, pa.ArrowException) as e:
        raise InputError(path, None, f"not a readable Parquet file: {e}") from None


def check_columns(schema: pa.Schema, path: str) -> None:
    """Raise InputError if ``schema`` lacks a required common log column, or holds a log
    column of the wrong kind of type (``message`` as strings, say)."""
    missing = [f.name for f in _COMMON_FIELDS if f.name not in schema.names and f.name != "select"]
    if missing:
        raise InputError(path, None, f"not an LM Challenge log: no column(s) {missing}")
    twice = sorted({name for name in schema.names if schema.names.count(name) > 1})
    if twice:       # (QA: a KeyError traceback in lmc stats, and lmc validate passed it)
        raise InputError(path, None, f"not an LM Challenge log: column(s) {twice} more than once")
    for field in schema:
        if field.name in _ARROW_TYPES and not _type_fits(field.type, field.name):
            expected = "string or int64" if field.name == "user" else _ARROW_TYPES[field.name][0]
            raise InputError(path, None, f"column {field.name!r} is {field.type}, "
                                         f"not {expected} as an LM Challenge log's"
                                         + _FLOAT_USERS_HINT * (field.name == "user" and
                                                                pa.types.is_floating(field.type)))


def _string_or_integer(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_integer(kind)


_KIND_OF_TYPE = {"user": _string_or_integer, "target": pa.types.is_string,
                 "verbatim": pa.types.is_string, "message": pa.types.is_integer,
                 "token": pa.types.is_integer, "character": pa.types.is_integer,
                 "select": pa.types.is_boolean, "logp": pa.types.is_floating,
                 "completions": pa.types.is_list, "results": pa.types.is_list}


def _never(kind: pa.DataType) -> bool:
    return False


_FLOAT_USERS_HINT = (" (pandas holds integer users with some missing, or none at all, as "
                     "floats: `df['user'] = df['user'].astype('Int64')` before writing)")
"""QA: a log read with ``pandas.read_json(lines=True)`` and written back with
``to_parquet`` has a ``double`` user column when its users are missing (plain text)."""


def _type_fits(kind: pa.DataType, name: str) -> bool:
    """Whether a column ``name`` of Arrow type ``kind`` reads as the log's column: the same
    kind of type (any width; large or dictionary-encoded strings; for ``completions`` and
    ``results``, lists of the same elements), or all null where the column may be null."""
    kind = _plain(kind)
    if pa.types.is_null(kind):
        return _ARROW_TYPES[name][1]
    if name in ("completions", "results"):    # (QA: list<string> completions: a traceback)
        return pa.types.is_list(kind) and _elements_fit(_plain(kind.value_type), name)
    return _KIND_OF_TYPE[name](kind)


def _plain(kind: pa.DataType) -> pa.DataType:
    """``kind`` with dictionary encoding, large and view strings, and large lists taken as
    their plain types (the same values to a reader)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_large_string(kind) or getattr(pa.types, "is_string_view", _never)(kind):
        return pa.string()
    if pa.types.is_large_list(kind):
        return pa.list_(kind.value_field)
    return kind


def _elements_fit(element: pa.DataType, name: str) -> bool:
    """Whether the elements of a ``completions`` column (lists of strings) or a ``results``
    column (structs of a string ``candidate`` and numbers ``error`` and ``lm``) are such."""
    if name == "completions":
        return pa.types.is_list(element) and pa.types.is_string(_plain(element.value_type))
    if not pa.types.is_struct(element):
        return False
    fields = {element.field(i).name: _plain(element.field(i).type) for i in range(element.num_fields)}
    number = (pa.types.is_floating, pa.types.is_integer, pa.types.is_null)
    # in this order: the readers take them by position (review: lm, error, candidate passed)
    return (list(fields) == ["candidate", "error", "lm"] and pa.types.is_string(fields["candidate"])
            and all(any(test(fields[key]) for test in number) for key in ("error", "lm")))


def _batch_datums(batch: pa.RecordBatch) -> Iterator[Datum]:
    """The rows of ``batch`` as datum dicts (null ``select`` left out)."""
    names = batch.schema.names
    columns = [_python_values(batch.column(i), name) for i, name in enumerate(names)]
    has_select = "select" in names
    for values in zip(*columns):
        datum = dict(zip(names, values))
        if has_select and datum["select"] is None:
            del datum["select"]
        yield datum


def _python_values(array: pa.Array, name: str) -> list[Any]:
    """An Arrow column as Python values; ``results`` as lists of 3-element lists (a null
    list or triple as None: then the datum is refused by whoever checks it)."""
    if name == "results" and pa.types.is_list(array.type):
        if array.null_count == 0:
            return _results_values(array)
        return [None if row is None else [None if t is None else list(t.values()) for t in row]
                for row in array.to_pylist()]
    return array.to_pylist()


def _results_values(array: pa.ListArray) -> list[list[list[Any]]]:
    """list<struct<candidate, error, lm>> (no null lists) as ``[[c, e, lm], ...]`` per row."""
    offsets = array.offsets.to_pylist()
    base = offsets[0]
    children = array.flatten().flatten()
    triples = [list(t) for t in zip(*(child.to_pylist() for child in children))]
    return [triples[lo - base:hi - base] for lo, hi in zip(offsets, offsets[1:])]


def read_table(path: str, columns: list[str] | None = None) -> pa.Table:
    """A Parquet log, or an ``lmc-dist`` run directory of Parquet parts, as one Arrow table.

    For column-wise statistics.  A run directory's ``part-NNNNN.parquet`` files are
    concatenated in part order (the order of the single-process log).

    Args:
        path: a ``.parquet`` file in the layout of docs/formats.md, "Parquet",
            or a run directory holding ``part-NNNNN.parquet`` files.
        columns: the columns to read (all when None).
    Returns:
        The table: one row per datum, the columns of :func:`schema_for`
        (``select`` null where the datum had none).
    Raises:
        InputError: the path does not exist, is not Parquet, lacks a requested column,
            or the run directory has no parts, holds jsonl parts, or parts whose
            columns differ.
    """
    if os.path.isdir(path):
        parts = run_dir_parts(path)
        tables = [_read_part(part, columns) for part in parts]
        _check_same_columns(tables, parts)
        return pa.concat_tables(tables, promote_options="default")
    return _read_part(Path(path), columns)


def _read_part(part: Path, columns: list[str] | None) -> pa.Table:
    """One Parquet file as a table, with errors as InputError naming the file."""
    name = str(part)
    if not is_parquet_name(name):
        raise InputError(name, None, "not a Parquet log (.parquet): convert it with `lmc convert`")
    parquet_file = open_parquet(name)
    check_columns(parquet_file.schema_arrow, name)
    absent = sorted(set(columns or ()) - set(parquet_file.schema_arrow.names))
    if absent:
        raise InputError(name, None, f"no column(s) {absent} in this log")
    with unreadable_as_input_error(name):
        return parquet_file.read(columns=data_columns(parquet_file.schema_arrow)
                                 if columns is None else columns)


def _check_same_columns(tables: Sequence[pa.Table], parts: Sequence[Path]) -> None:
    """Raise InputError naming the first part whose columns, or type of users, differ from
    the first part's."""
    names = tables[0].schema.names
    users = _user_type(tables[0])
    for table, part in zip(tables, parts):
        if table.schema.names != names:
            raise InputError(str(part), None, f"columns {table.schema.names} differ from "
                                              f"{names} of {parts[0].name}")
        if users is not None and _user_type(table) not in (None, users):
            raise InputError(str(part), None, f"its users are {_user_type(table)}s, those of "
                                              f"{parts[0].name} {users}s: not parts of one run")


def _user_type(table: pa.Table) -> str | None:
    """``string`` or ``integer``: the type of ``table``'s user column (None: not read, or
    all null of Arrow's null type)."""
    if "user" not in table.schema.names:
        return None
    kind = table.schema.field("user").type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return "integer" if pa.types.is_integer(kind) else None if pa.types.is_null(kind) else "string"

"""Column-wise ``lmc stats`` of Parquet logs (a ``.parquet`` file or a run directory of
``part-NNNNN.parquet`` files).

:func:`state_of_parquet` gives exactly the :class:`lmchallenge.stats.StatsState` of the
datum-by-datum loop (``StatsState.update``), but computes each batch (at most one Parquet
row group of one part) with Arrow compute kernels and numpy, then merges the batch states
in log order, so memory stays bounded by one batch (plus the ``wr`` score matrices, which
the datum-by-datum state holds too).

Strings are compared as integer dictionary codes: ``user``, ``target`` and the
``completions`` strings are read from Parquet as dictionary arrays (each distinct string
decoded once per row group), and the targets (and their suffixes, for completion) are
looked up once per distinct target in the completions' dictionary.  The only Python loops
are over batches, over the distinct strings of a batch (their MD5 column hashes), and over
ranks / typed prefixes, each step one numpy operation on all the rows still undecided.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterator
from typing import TypeVar
from queue import Empty, Full, Queue

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lmchallenge.logs import parquet
from lmchallenge.logs.schema import COMMON_COLUMNS, OPTIONAL_COLUMNS
from lmchallenge.stats import outcomes
from lmchallenge.stats import state as stats
from lmchallenge.errors import InputError
from lmchallenge.logs.files import is_parquet_name, run_dir_parts

_BATCH_ROWS = parquet.ROW_GROUP_ROWS
T = TypeVar("T")
_COMBINE = np.uint64(stats.COMBINE)
_INT_FACTOR = np.uint64(stats.INT_FACTOR)
_NULL_HASH = np.uint64(stats.NULL_HASH)
_MASK32 = stats.MASK32
_COMMON = tuple(c for c in COMMON_COLUMNS + OPTIONAL_COLUMNS if c != "character")  # no offsets needed
_PAYLOAD = ("completions", "logp", "results")


def is_columnar(path: str) -> bool:
    """True for a Parquet log file, or a run directory whose part files are all Parquet."""
    if os.path.isdir(path):
        try:
            parts = run_dir_parts(path)
        except InputError:
            return False
        return all(is_parquet_name(p.name) for p in parts)
    return is_parquet_name(path) and os.path.isfile(path)


def state_of_parquet(path: str, batch_rows: int = _BATCH_ROWS, groups=None) -> stats.StatsState:
    """The :class:`~lmchallenge.stats.StatsState` of a Parquet log or run directory.

    Args:
        path: a ``.parquet`` log file, or a run directory of ``part-NNNNN.parquet`` files
            (read in part order).
        batch_rows: at most this many rows are decoded and reduced at once.
        groups: a :class:`lmchallenge.stats.bootstrap.GroupSums` to add the per-group sums to
            (None: none are made).
    Raises:
        InputError: the path is not a readable Parquet log (or a directory holds
            non-Parquet parts).
    """
    state = stats.StatsState()
    cache: dict[str, int] = {}
    for batch in prefetched(_batches(path, batch_rows)):
        state.merge(batch_state(batch, cache, groups))
        if len(cache) > 1_000_000:
            cache.clear()
    return state


# --- reading ----------------------------------------------------------------------------

def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        parts = run_dir_parts(path)
        for part in parts:
            if not is_parquet_name(part.name):
                raise InputError(str(part), None,
                                 "not a Parquet log (.parquet): convert it with `lmc convert`")
        return [str(p) for p in parts]
    if not is_parquet_name(path):
        raise InputError(path, None, "not a Parquet log (.parquet): convert it with `lmc convert`")
    return [path]


def prefetched(batches: Iterator[T], ahead: int = 2) -> Iterator[T]:
    """``batches``, produced by a background thread up to ``ahead`` items in advance (Parquet
    and JSON decoding and Arrow kernels release the GIL, so reading overlaps the reduction);
    memory stays bounded by ``ahead + 1`` items.  An exception of the producer is raised
    in the consumer."""
    done = object()
    queue: Queue = Queue(maxsize=ahead)
    stop = threading.Event()

    def produce() -> None:
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        queue.put(batch, timeout=0.1)
                        break
                    except Full:
                        pass
                if stop.is_set():
                    return
            queue.put(done)
        except BaseException as e:   # handed to the consumer, raised there
            queue.put(e)

    # the reader's context (lmchallenge.logs.rundir.reading_partial) goes with the batches
    thread = threading.Thread(target=contextvars.copy_context().run, args=(produce,),
                              name="parquet-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = queue.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                queue.get(timeout=0.1)
            except Empty:
                pass
        thread.join()


def _string_leaves(parquet_file: pq.ParquetFile) -> list[str]:
    """Parquet paths of the string columns the statistics compare (``user``, ``target``
    and the strings of ``completions``), to be read as dictionary arrays."""
    leaves = []
    for i in range(len(parquet_file.schema)):
        column = parquet_file.schema.column(i)
        if column.physical_type == "BYTE_ARRAY" and (
                column.path in ("user", "target") or column.path.startswith("completions.")):
            leaves.append(column.path)
    return leaves


# Batches are decoded on the prefetch thread while the main thread reduces: on two cores,
# Arrow's own decoding threads would only compete with the reduction (measured: more wall
# time and more page faults); with more cores they have cores of their own.
_DECODE_THREADS = (os.cpu_count() or 1) > 2


def _batches(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    for name in _files(path):
        parquet_file = parquet.open_parquet(name)
        parquet.check_columns(parquet_file.schema_arrow, name)    # (its types as in the file)
        parquet_file = parquet.open_parquet(name, read_dictionary=_string_leaves(parquet_file))
        schema = parquet_file.schema_arrow
        columns = [c for c in _COMMON + _PAYLOAD if c in schema.names]
        rows = 0
        with parquet.unreadable_as_input_error(name):
            # one row group at a time: each has its own dictionaries, and Arrow cannot
            # join nested dictionary columns of two row groups into one batch
            for group in range(parquet_file.num_row_groups):
                for batch in parquet_file.iter_batches(batch_size=batch_rows, row_groups=[group],
                                                       columns=columns, use_threads=_DECODE_THREADS):
                    batch = _typed_nulls(batch)
                    _check_targets(batch, name, rows)
                    rows += batch.num_rows
                    yield batch


def _check_targets(batch: pa.RecordBatch, name: str, before: int) -> None:
    """Raise InputError ``NAME:N: null target in a selected row`` (N counting the file's rows
    from 1, as ``lmc validate`` counts them) for the first such row of ``batch``, whose
    file ``name`` has ``before`` rows before it (QA: the error said ``<parquet>``)."""
    target = batch.column("target")
    if not target.null_count:
        return
    null = _bools(target.is_null())
    if "select" in batch.schema.names:
        select = batch.column("select")
        null &= _bools(pc.or_kleene(pc.is_null(select), select))
    if null.any():
        raise InputError(name, before + int(np.argmax(null)) + 1, "null target in a selected row")


def _typed_nulls(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with each all-null column of Arrow's null type (as pandas writes a column of
    None: ``user`` of plain text, ``select``) given the log column's type."""
    if not any(pa.types.is_null(column.type) for column in batch.columns):
        return batch
    columns = [pa.nulls(len(column), parquet.log_column_type(name))
               if pa.types.is_null(column.type) else column
               for name, column in zip(batch.schema.names, batch.columns)]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


# --- null handling (pc.fill_null would build a pa.scalar, which imports pandas) --------------

_DTYPES = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32,
           pa.int64(): np.int64, pa.uint32(): np.uint32, pa.uint64(): np.uint64,
           pa.float32(): np.float32, pa.float64(): np.float64}


def _arrow(values: np.ndarray) -> pa.Array:
    """An int64 numpy array as an Arrow array (pa.array would import pandas)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _filled(array: pa.Array, value) -> np.ndarray:
    """``array`` as numpy, nulls replaced by ``value``."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    # Array.to_numpy imports pandas (a second of start-up): read the data buffer instead
    dtype = _DTYPES[array.type]
    data = np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset:array.offset + len(array)]
    if not array.null_count:
        return data
    return np.where(_bools(array.is_valid()), data, value)


def _bools(array: pa.Array) -> np.ndarray:
    """A boolean array without nulls as numpy bools (unpacking its bitmap)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    n, offset = len(array), array.offset
    bits = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[offset:offset + n].astype(bool)


def _equal(left: pa.Array, right: pa.Array) -> np.ndarray:
    """Element-wise equality as a numpy bool array (null compares unequal)."""
    equal = pc.equal(left, right)
    if equal.null_count:
        equal = pc.and_kleene(equal, equal.is_valid())
    return _bools(equal)


# --- hashing ----------------------------------------------------------------------------

def _encoded(array: pa.Array) -> pa.DictionaryArray:
    """A string (or already dictionary-encoded) array as a dictionary array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array if pa.types.is_dictionary(array.type) else pc.dictionary_encode(array)


class _Codes:
    """A string (or dictionary) array as integer codes, equal exactly where the strings are
    equal: each the index of the string's first occurrence in :attr:`values` (so duplicates
    in a dictionary do not matter); ``null`` for a null.  Codes are looked up only where
    asked (:meth:`at`), so a large array costs little when few of its strings are compared.

    Args:
        array: strings, plain or dictionary-encoded.
        null: the code of a null string.

    Attributes:
        values: the dictionary (a string array).
    """

    def __init__(self, array: pa.Array, null: int = -1):
        encoded = _encoded(array)
        self.values = encoded.dictionary
        first = np.empty(len(self.values) + 1, dtype=np.int64)
        first[:-1] = _filled(pc.index_in(self.values, value_set=self.values), null)
        first[-1] = null
        self._first = first
        indices = encoded.indices
        # no nulls and no duplicates in the dictionary (the usual case): codes are indices
        self._direct = not indices.null_count and bool(
            np.array_equal(first[:-1], np.arange(len(self.values))))
        if indices.null_count:
            self._indices = _filled(indices, len(self.values))
        else:    # a view of the index buffer
            self._indices = np.frombuffer(indices.buffers()[1], dtype=_DTYPES[indices.type])[
                indices.offset:indices.offset + len(indices)]

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The integer codes at ``positions`` (an integer array; a position past the end
        gives the last string's code, for callers that mask such positions out)."""
        indices = np.take(self._indices, positions, mode="clip")
        return indices if self._direct else self._first[indices]

    def all(self) -> np.ndarray:
        """Every code, in order."""
        return self._first[self._indices]


def _string_hashes(array: pa.Array, cache: dict[str, int]) -> np.ndarray:
    """uint64 column hashes of a string or dictionary array (null: the null hash)."""
    encoded = _encoded(array)
    uniques = encoded.dictionary.to_pylist()
    hashes = np.empty(len(uniques) + 1, dtype=np.uint64)
    for i, value in enumerate(uniques):
        h = cache.get(value)
        if h is None:
            h = cache[value] = stats.string_hash(value)
        hashes[i] = h
    hashes[-1] = _NULL_HASH
    return hashes[_filled(encoded.indices, len(uniques))]


def _int_hashes(array: pa.Array) -> np.ndarray:
    values = _filled(array, 0).astype(np.int64, copy=False).view(np.uint64) * _INT_FACTOR
    if array.null_count:
        values[_bools(array.is_null())] = _NULL_HASH
    return values


def _user_hashes(array: pa.Array, cache: dict[str, int]) -> np.ndarray:
    """uint64 column hashes of the users: strings, or integers (a log of integer users)."""
    if pa.types.is_integer(array.type):
        return _int_hashes(array)
    return _string_hashes(array, cache)


def _row_hashes(batch: pa.RecordBatch, cache: dict[str, int]) -> np.ndarray:
    """uint64 hashes equal to :func:`lmchallenge.stats.state.datum_hash` modulo 2**32."""
    with np.errstate(over="ignore"):
        h = _user_hashes(batch.column("user"), cache)
        h = h * _COMBINE + _int_hashes(batch.column("message"))
        h = h * _COMBINE + _int_hashes(batch.column("token"))
        h = h * _COMBINE + _string_hashes(batch.column("target"), cache)
    return h


def _sum32(hashes: np.ndarray) -> int:
    return int(hashes.sum(dtype=np.uint64)) & _MASK32


# --- runs of users / messages -------------------------------------------------------------

def _runs(batch: pa.RecordBatch) -> tuple[stats.RunCount, stats.RunCount]:
    n = batch.num_rows
    users, messages = stats.RunCount(), stats.RunCount()
    if n == 0:
        return users, messages
    user, message = batch.column("user"), batch.column("message")
    user_codes = _Codes(user).all()
    message_values = _filled(message, 0)
    user_change = user_codes[1:] != user_codes[:-1]
    message_change = user_change | (message_values[1:] != message_values[:-1])
    first_user, last_user = user[0].as_py(), user[n - 1].as_py()
    users.count = 1 + int(user_change.sum())
    users.first, users.last = first_user, last_user
    messages.count = 1 + int(message_change.sum())
    messages.first = (first_user, message[0].as_py())
    messages.last = (last_user, message[n - 1].as_py())
    return users, messages


# --- one batch ------------------------------------------------------------------------------

def batch_state(batch: pa.RecordBatch, cache: dict[str, int], groups=None) -> stats.StatsState:
    """The state of one record batch of log columns.

    Args:
        batch: ``user`` and ``target`` (strings, plain or dictionary-encoded), ``message``
            and ``token`` (integers), optionally ``select`` (bool, null = selected) and the
            payload columns ``completions`` (list<list<string>>), ``logp`` (float64, null =
            not scored), ``results`` (list<struct<candidate, error, lm>>).
        cache: MD5 column hashes of strings already seen (updated).
        groups: a :class:`lmchallenge.stats.bootstrap.GroupSums` to add the batch's per-group
            sums to (None: none are made).
    Raises:
        InputError: a selected row has a null target.
    """
    state = stats.StatsState()
    names = batch.schema.names
    if "select" in names and batch.column("select").false_count:
        select = batch.column("select")
        selected = pc.or_kleene(pc.is_null(select), select)
        total = batch.num_rows
        batch = batch.filter(selected)
        state.skipped = total - batch.num_rows
    n = batch.num_rows
    if n == 0:
        return state
    target = _Targets(batch.column("target"))
    state.tokens = n
    state.characters = int(target.lengths.sum())
    state.users, state.messages = _runs(batch)
    hashes = _row_hashes(batch, cache)
    state.fingerprint = _sum32(hashes)
    per_row: dict[str, np.ndarray] | None = None if groups is None else {}
    if "completions" in names:
        _completions(state, batch.column("completions"), target, per_row)
    if "logp" in names:
        logp = batch.column("logp")
        scored = _bools(logp.is_valid())
        values = _filled(logp, 0.0)[scored].astype(np.float64)
        state.entropy_sum.add_array(-values)
        state.entropy_tokens = int(scored.sum())
        state.entropy_fingerprint = _sum32(hashes[scored])
        if per_row is not None:
            per_row["entropy_sum"] = np.where(scored, -_filled(logp, 0.0), 0.0)
            per_row["entropy_tokens"] = scored
    wr = None
    if "results" in names:
        wr = _results(state, batch.column("results"), batch.column("target"))
    if groups is not None:
        _add_groups(groups, batch, target, per_row, wr)
    return state


def _add_groups(groups, batch: pa.RecordBatch, target: "_Targets", per_row: dict[str, np.ndarray],
                wr: tuple[np.ndarray, np.ndarray] | None) -> None:
    """Add the per-group sums of a batch's selected rows to ``groups`` (a
    :class:`lmchallenge.stats.bootstrap.GroupSums`), from the per-row outcomes of
    :func:`batch_state`."""
    per_row["tokens"] = np.ones(batch.num_rows)
    per_row["characters"] = target.lengths
    per_row["keystrokes"] = target.lengths + 1
    user = _Codes(batch.column("user"))
    groups.add_rows(user.values.to_pylist(), user.all(), _filled(batch.column("message"), 0),
                    per_row, wr)


class _Targets:
    """The ``target`` column of a batch as dictionary codes.

    Attributes:
        codes: per row, the index of its target in ``values`` (int64).
        values: the distinct targets (a string array).
        lengths: per row, the target's length in code points (int64).
    Raises:
        InputError: a target is null.
    """

    def __init__(self, target: pa.Array):
        if target.null_count:
            raise InputError("<parquet>", None, "null target in a selected row")
        codes = _Codes(target)
        self.codes, self.values = codes.all(), codes.values
        self.value_lengths = _filled(pc.utf8_length(self.values), 0).astype(np.int64)
        self.lengths = self.value_lengths[self.codes]

    def codes_in(self, candidates: pa.Array) -> np.ndarray:
        """Per distinct target, its index in the string array ``candidates`` (-1: absent)."""
        return _filled(pc.index_in(self.values, value_set=candidates), -1).astype(np.int64)

    def rests_in(self, candidates: pa.Array, width: int) -> np.ndarray:
        """``table[j, v]``: the index in ``candidates`` of distinct target ``v`` without its
        first ``j`` code points (``target[j:]``, ``""`` for ``j`` past its end), for
        ``j < width``; -1 where absent.  Shape ``(width, len(values))``, int64."""
        # the rests of every target at j = 0 .. longest (where all are ""), found at once
        cut = min(width, int(self.value_lengths.max(initial=0)) + 1)
        rests = pa.chunked_array([pc.utf8_slice_codeunits(self.values, start=j) for j in range(cut)],
                                 type=self.values.type)
        table = np.empty((width, len(self.values)), dtype=np.int64)
        table[:cut] = _filled(pc.index_in(rests, value_set=candidates), -1).reshape(cut, -1)
        table[cut:] = table[cut - 1]      # "" for every target
        return table


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Start offset of each list given the lengths."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def _list_layout(array: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """``(values, parent, position)``: the flattened values of a list array, the row of each
    and its 0-based position within that row's list (null lists count as empty)."""
    lengths = _filled(pc.list_value_length(array), 0).astype(np.int64)
    values = pc.list_flatten(array)
    parent = _filled(pc.list_parent_indices(array), 0).astype(np.int64)
    position = np.arange(len(parent), dtype=np.int64) - _starts(lengths)[parent]
    return values, parent, position


def _layout(lists: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """``(start, length, values)`` of a list array (32-bit offsets): per list, the int32
    offset of its first element in ``values`` (the whole child array) and its length (0 for
    a null list)."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    n = len(lists)
    offsets = np.frombuffer(lists.buffers()[1], dtype=np.int32)[lists.offset:lists.offset + n + 1]
    length = np.diff(offsets)
    if lists.null_count:      # a null list may still span child values
        length[~_bools(lists.is_valid())] = 0
    return offsets[:-1], length, lists.values


def _completions(state: stats.StatsState, completions: pa.Array, target: _Targets,
                 per_row: dict[str, np.ndarray] | None = None) -> None:
    """Next-word prediction and completion counts of a ``list<list<string>>`` column (the
    strings plain or dictionary-encoded), compared with the targets by dictionary codes.

    Rows drop out of the comparison as soon as they are decided (matched, out of
    completions, or a target that no completion string equals), so the work is that of the
    datum-by-datum search, done for all rows at once.  With ``per_row``, the per-row
    outcomes are stored there (``predicted``, ``hitN``, ``srr``, ``completion_*``)."""
    outer_start, outer_len, inner = _layout(completions)
    inner_start, inner_len, strings = _layout(inner)
    if len(strings) == 0:
        return
    codes = _Codes(strings, null=-2)     # never equal to -1 (absent)
    first = outer_len > 0
    wanted = target.codes_in(codes.values)[target.codes]
    rows = np.flatnonzero(first & (wanted >= 0))
    lists = outer_start[rows]
    ranks = _next_word(codes, inner_start[lists], inner_len[lists], wanted[rows])
    found = ranks > 0
    if found.any():
        state.srr.add_array(1.0 / ranks[found].astype(np.float64))
        state.predicted = int(found.sum())
        for n in outcomes.NEXT_WORD_RANKS:
            state.hits[n] = int((found & (ranks <= n)).sum())
    saved = None
    if per_row is not None:
        _per_row_ranks(per_row, rows, ranks, len(outer_len))
        saved = np.full(len(outer_len), -1, dtype=np.int64)
    # prefix 0: the rest of the target is the target, so its rank there decides
    at_start = rows[found & (ranks <= outcomes.COMPLETION_MAX_RANK)]
    rests = target.rests_in(codes.values, int(outer_len.max()))
    decided = np.zeros(len(outer_len), dtype=bool)
    decided[at_start] = True
    rows = np.flatnonzero((outer_len > 1) & ~decided & (rests[1:] >= 0).any(axis=0)[target.codes])
    if saved is not None:
        saved[at_start] = target.lengths[at_start]
    characters, tokens = _completion(codes, rows, outer_start, outer_len, inner_start, inner_len,
                                     rests, target, saved=saved)
    if saved is not None:
        per_row["completion_characters"] = np.maximum(saved, 0)
        per_row["completion_tokens"] = saved >= 0
    state.completion_characters = int(target.lengths[at_start].sum()) + characters
    state.completion_tokens = len(at_start) + tokens


def _per_row_ranks(per_row: dict[str, np.ndarray], rows: np.ndarray, ranks: np.ndarray, n: int) -> None:
    """Next-word outcomes per row of the batch (``rows``: the rows ranked, ``ranks``: their
    1-based rank, 0 = not found)."""
    rank = np.zeros(n, dtype=np.int64)
    rank[rows] = ranks
    found = rank > 0
    per_row["predicted"] = found
    per_row["srr"] = np.where(found, 1.0 / np.maximum(rank, 1), 0.0)
    for k in stats.NEXT_WORD_RANKS:
        per_row[f"hit{k}"] = found & (rank <= k)


def _next_word(codes: _Codes, start: np.ndarray, length: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per list (the strings ``start[i]`` to ``start[i] + length[i]`` of ``codes``), the
    1-based rank of the first string equal to ``wanted[i]``, 0 where none is."""
    ranks = np.zeros(len(start), dtype=np.int64)
    active = np.flatnonzero(length > 0)
    rank = 0
    while len(active):
        hit = codes.at(start[active] + rank) == wanted[active]
        rank += 1
        ranks[active[hit]] = rank
        active = active[~hit]
        active = active[length[active] > rank]
    return ranks


def _completion(codes: _Codes, rows: np.ndarray, outer_start: np.ndarray, outer_len: np.ndarray,
                inner_start: np.ndarray, inner_len: np.ndarray, rests: np.ndarray,
                target: _Targets, prefix: int = 1, saved: np.ndarray | None = None) -> tuple[int, int]:
    """Per row of ``rows``, the first typed prefix ``j >= prefix`` whose completion list has
    the rest of the target (code ``rests[j, target.codes[row]]``, -1 where no string is that
    rest, which no code equals) among its first
    :data:`~lmchallenge.stats.outcomes.COMPLETION_MAX_RANK`: ``(characters saved, rows completed)``;
    with ``saved``, each completed row's characters saved are stored there."""
    characters = tokens = 0
    active = rows
    while len(active):
        rest = rests[prefix][target.codes[active]]
        lists = outer_start[active] + prefix
        start, length = inner_start[lists], inner_len[lists]
        hit = (codes.at(start) == rest) & (length > 0)
        for k in range(1, outcomes.COMPLETION_MAX_RANK):
            hit |= (codes.at(start + k) == rest) & (length > k)
        done = active[hit]
        characters += int(target.lengths[done].sum()) - prefix * len(done)
        if saved is not None:
            saved[done] = target.lengths[done] - prefix
        tokens += len(done)
        prefix += 1
        active = active[~hit]
        active = active[outer_len[active] > prefix]
    return characters, tokens


def _results(state: stats.StatsState, results: pa.Array, target: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Add the batch's ``wr`` score matrices to ``state``; returns them (float32 ``[N, C]``
    error and LM scores, target first)."""
    n = len(results)
    structs, row, _ = _list_layout(results)
    lengths = np.bincount(row, minlength=n) if len(row) else np.zeros(n, dtype=np.int64)
    width = int(lengths.max()) if n else 0
    if len(row):
        candidate = pc.struct_field(structs, "candidate")
        is_target = _equal(candidate, target.take(_arrow(row)))
        order = np.argsort(row * 2 + (~is_target), kind="stable")
        sorted_row = row[order]
        column = np.arange(len(order), dtype=np.int64) - _starts(lengths)[sorted_row]
        error_values = _filled(pc.struct_field(structs, "error"), -np.inf)
        lm_values = _filled(pc.struct_field(structs, "lm"), -np.inf)
    error = np.full((n, width), -np.inf, dtype=np.float32)
    lm = np.full((n, width), -np.inf, dtype=np.float32)
    if len(row):
        error[sorted_row, column] = error_values[order].astype(np.float32)
        lm[sorted_row, column] = lm_values[order].astype(np.float32)
    state.scores.add_matrices(error, lm)
    return error, lm

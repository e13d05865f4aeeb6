"""Column-wise ``lmc stats`` of Parquet logs (a ``.parquet`` file or a run directory of
``part-NNNNN.parquet`` files).

:func:`state_of_parquet` gives exactly the :class:`lmchallenge.stats.StatsState` of the
datum-by-datum loop (``StatsState.update``), but computes each batch (a Parquet row group
of one part) with Arrow compute kernels and numpy, then merges the batch states in log
order, so memory stays bounded by one batch (plus the ``wr`` score matrices, which the
datum-by-datum state holds too).  The only Python loops are over batches and over the
distinct strings of a batch (their MD5 column hashes).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from queue import Empty, Full, Queue

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import parquet, stats
from .exceptions import InputError
from .log import is_parquet_name, run_dir_parts

_BATCH_ROWS = parquet.ROW_GROUP_ROWS
_COMBINE = np.uint64(stats._COMBINE)
_INT_FACTOR = np.uint64(stats._INT_FACTOR)
_NULL_HASH = np.uint64(stats._NULL_HASH)
_MASK32 = stats._MASK32
_COMMON = ("user", "message", "token", "target", "select")
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


def state_of_parquet(path: str, batch_rows: int = _BATCH_ROWS) -> stats.StatsState:
    """The :class:`~lmchallenge.stats.StatsState` of a Parquet log or run directory.

    Args:
        path: a ``.parquet`` log file, or a run directory of ``part-NNNNN.parquet`` files
            (read in part order).
        batch_rows: at most this many rows are decoded and reduced at once.
    Raises:
        InputError: the path is not a readable Parquet log (or a directory holds
            non-Parquet parts).
    """
    state = stats.StatsState()
    cache: dict[str, int] = {}
    for batch in _prefetched(_batches(path, batch_rows)):
        state.merge(_batch_state(batch, cache))
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


def _prefetched(batches: Iterator[pa.RecordBatch], ahead: int = 2) -> Iterator[pa.RecordBatch]:
    """``batches``, decoded by a background thread up to ``ahead`` batches in advance (Parquet
    decoding and Arrow kernels release the GIL, so reading overlaps the reduction); memory
    stays bounded by ``ahead + 1`` batches."""
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

    thread = threading.Thread(target=produce, name="parquet-prefetch", daemon=True)
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


def _batches(path: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    for name in _files(path):
        parquet_file = parquet._open(name)
        schema = parquet_file.schema_arrow
        parquet._check_columns(schema, name)
        columns = [c for c in _COMMON + _PAYLOAD if c in schema.names]
        try:
            yield from parquet_file.iter_batches(batch_size=batch_rows, columns=columns)
        except (OSError, pa.ArrowException) as e:
            raise InputError(name, None, f"cannot read the Parquet log: {e}") from None


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

def _string_hashes(array: pa.Array, cache: dict[str, int]) -> np.ndarray:
    """uint64 column hashes of a string array (null: the null hash)."""
    encoded = pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    uniques = encoded.dictionary.to_pylist()
    hashes = np.empty(len(uniques) + 1, dtype=np.uint64)
    for i, value in enumerate(uniques):
        h = cache.get(value)
        if h is None:
            h = cache[value] = stats.string_hash(value)
        hashes[i] = h
    hashes[-1] = _NULL_HASH
    return hashes[_filled(encoded.indices, len(uniques)).astype(np.int64)]


def _int_hashes(array: pa.Array) -> np.ndarray:
    values = _filled(array, 0).astype(np.int64).astype(np.uint64) * _INT_FACTOR
    if array.null_count:
        values[_bools(array.is_null())] = _NULL_HASH
    return values


def _row_hashes(batch: pa.RecordBatch, cache: dict[str, int]) -> np.ndarray:
    """uint64 hashes equal to :func:`lmchallenge.stats.datum_hash` modulo 2**32."""
    with np.errstate(over="ignore"):
        h = _string_hashes(batch.column("user"), cache)
        h = h * _COMBINE + _int_hashes(batch.column("message"))
        h = h * _COMBINE + _int_hashes(batch.column("token"))
        h = h * _COMBINE + _string_hashes(batch.column("target"), cache)
    return h


def _sum32(hashes: np.ndarray) -> int:
    return int(hashes.sum(dtype=np.uint64)) & _MASK32


# --- runs of users / messages -------------------------------------------------------------

def _codes(array: pa.Array) -> np.ndarray:
    """Integer codes equal where values are equal (null a code of its own)."""
    encoded = pc.dictionary_encode(array)
    return _filled(encoded.indices, -1).astype(np.int64)


def _runs(batch: pa.RecordBatch) -> tuple[stats.RunCount, stats.RunCount]:
    n = batch.num_rows
    users, messages = stats.RunCount(), stats.RunCount()
    if n == 0:
        return users, messages
    user, message = batch.column("user"), batch.column("message")
    user_codes = _codes(user)
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

def _batch_state(batch: pa.RecordBatch, cache: dict[str, int]) -> stats.StatsState:
    state = stats.StatsState()
    names = batch.schema.names
    if "select" in names:
        select = batch.column("select")
        selected = pc.or_kleene(pc.is_null(select), select)
        total = batch.num_rows
        batch = batch.filter(selected)
        state.skipped = total - batch.num_rows
    n = batch.num_rows
    if n == 0:
        return state
    target = batch.column("target")
    if target.null_count:
        raise InputError("<parquet>", None, "null target in a selected row")
    state.tokens = n
    state.characters = int(pc.sum(pc.utf8_length(target)).as_py() or 0)
    state.users, state.messages = _runs(batch)
    hashes = _row_hashes(batch, cache)
    state.fingerprint = _sum32(hashes)
    if "completions" in names:
        _completions(state, batch.column("completions"), target)
    if "logp" in names:
        logp = batch.column("logp")
        scored = _bools(logp.is_valid())
        values = _filled(logp, 0.0)[scored].astype(np.float64)
        state.entropy_sum.add_array(-values)
        state.entropy_tokens = int(scored.sum())
        state.entropy_fingerprint = _sum32(hashes[scored])
    if "results" in names:
        _results(state, batch.column("results"), target)
    return state


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


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each row in a non-decreasing ``rows``."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    return np.flatnonzero(first)


def _ragged(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gather indices of the ranges ``[starts[i], starts[i] + lengths[i])``, concatenated:
    ``(index, owner, position)`` (``owner`` the i of each index, ``position`` its offset)."""
    total = int(lengths.sum())
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    position = np.arange(total, dtype=np.int64) - np.repeat(_starts(lengths), lengths)
    return starts[owner] + position, owner, position


def _completions(state: stats.StatsState, completions: pa.Array, target: pa.Array) -> None:
    outer_len = _filled(pc.list_value_length(completions), 0).astype(np.int64)
    outer_start = _starts(outer_len)
    inner = pc.list_flatten(completions)                    # one list per typed prefix
    n_inner = len(inner)
    if n_inner == 0:
        return
    inner_row = np.repeat(np.arange(len(outer_len), dtype=np.int64), outer_len)
    prefix = np.arange(n_inner, dtype=np.int64) - outer_start[inner_row]
    inner_len = _filled(pc.list_value_length(inner), 0).astype(np.int64)
    inner_start = _starts(inner_len)
    strings = pc.list_flatten(inner)

    # next-word prediction: rank of the target in completions[0], first match
    rows = np.flatnonzero(outer_len > 0)
    first_inner = outer_start[rows]
    index, owner, rank0 = _ragged(inner_start[first_inner], inner_len[first_inner])
    if len(index):
        row_of = rows[owner]
        equal = _equal(strings.take(_arrow(index)), target.take(_arrow(row_of)))
        match = np.flatnonzero(equal)
        firsts = match[_first_per_row(row_of[match])]
        ranks = rank0[firsts] + 1
        if len(ranks):
            state.srr.add_array(1.0 / ranks.astype(np.float64))
            state.predicted = len(ranks)
            for n in stats.NEXT_WORD_RANKS:
                state.hits[n] = int((ranks <= n).sum())

    # completion: the first prefix length j with target[j:] among the first 2 of completions[j]
    completed = np.zeros(n_inner, dtype=bool)   # per typed prefix: a completion matched
    by_length = np.argsort(-outer_len, kind="stable")    # rows with more typed prefixes first
    counts = np.bincount(outer_len, minlength=1)
    having = len(outer_len) - np.cumsum(counts)            # having[j]: rows with > j prefixes
    for j in range(int(outer_len.max(initial=0))):
        lists = outer_start[by_length[:having[j]]] + j
        lists = lists[inner_len[lists] > 0]
        if len(lists) == 0:
            continue
        rest = pc.utf8_slice_codeunits(target.take(_arrow(inner_row[lists])), start=int(j))
        for k in range(stats.COMPLETION_MAX_RANK):
            if k:
                lists_k = np.flatnonzero(inner_len[lists] > k)
                if len(lists_k) == 0:
                    break
                rest_k = rest.take(_arrow(lists_k))
                lists_k = lists[lists_k]
            else:
                lists_k, rest_k = lists, rest
            equal = _equal(strings.take(_arrow(inner_start[lists_k] + k)), rest_k)
            completed[lists_k] |= equal
    matched = np.flatnonzero(completed)                # in (row, prefix) order
    firsts = matched[_first_per_row(inner_row[matched])]
    if len(firsts) == 0:
        return
    rows = inner_row[firsts]
    lengths = _filled(pc.utf8_length(target.take(_arrow(rows))), 0)
    state.completion_characters = int((lengths.astype(np.int64) - prefix[firsts]).sum())
    state.completion_tokens = len(firsts)


def _results(state: stats.StatsState, results: pa.Array, target: pa.Array) -> None:
    n = len(results)
    structs, row, _ = _list_layout(results)
    lengths = np.bincount(row, minlength=n) if len(row) else np.zeros(n, dtype=np.int64)
    width = int(lengths.max()) if n else 0
    if len(row):
        candidate = pc.struct_field(structs, "candidate")
        is_target = _equal(candidate, target.take(_arrow(row)))
        is_target = is_target
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

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
from collections.abc import Iterator
from pathlib import Path

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
    for batch in _batches(path, batch_rows):
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
    indices = encoded.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False)
    return hashes[indices.astype(np.int64)]


def _int_hashes(array: pa.Array) -> np.ndarray:
    values = array.to_numpy(zero_copy_only=False)
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        hashes = values.astype(np.int64, copy=True).astype(np.uint64) * _INT_FACTOR
        hashes[nulls] = _NULL_HASH
        return hashes
    return values.astype(np.int64).astype(np.uint64) * _INT_FACTOR


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
    return encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _runs(batch: pa.RecordBatch) -> tuple[stats.RunCount, stats.RunCount]:
    n = batch.num_rows
    users, messages = stats.RunCount(), stats.RunCount()
    if n == 0:
        return users, messages
    user, message = batch.column("user"), batch.column("message")
    user_codes = _codes(user)
    message_values = message.to_numpy(zero_copy_only=False)
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
        selected = pc.fill_null(batch.column("select"), True)
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
        scored = logp.is_valid().to_numpy(zero_copy_only=False)
        values = logp.to_numpy(zero_copy_only=False)[scored].astype(np.float64)
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
    lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
    lengths = lengths.astype(np.int64)
    values = pc.list_flatten(array)
    parent = pc.list_parent_indices(array).to_numpy(zero_copy_only=False).astype(np.int64)
    position = np.arange(len(parent), dtype=np.int64) - _starts(lengths)[parent]
    return values, parent, position


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each row in a non-decreasing ``rows``."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.ones(len(rows), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    return np.flatnonzero(first)


def _completions(state: stats.StatsState, completions: pa.Array, target: pa.Array) -> None:
    inner, inner_row, prefix = _list_layout(completions)
    strings, string_inner, rank0 = _list_layout(inner)
    string_row = inner_row[string_inner]
    string_prefix = prefix[string_inner]

    # next-word prediction: rank of the target in completions[0], first match
    chosen = np.flatnonzero(string_prefix == 0)
    if len(chosen):
        rows = string_row[chosen]
        equal = pc.equal(strings.take(pa.array(chosen)), target.take(pa.array(rows)))
        match = equal.fill_null(False).to_numpy(zero_copy_only=False)
        matched = chosen[match]
        firsts = matched[_first_per_row(string_row[matched])]
        ranks = rank0[firsts] + 1
        if len(ranks):
            state.srr.add_array(1.0 / ranks.astype(np.float64))
            state.predicted = len(ranks)
            for n in stats.NEXT_WORD_RANKS:
                state.hits[n] = int((ranks <= n).sum())

    # completion: the first prefix length j with target[j:] among the first 2 of completions[j]
    chosen = np.flatnonzero(rank0 < stats.COMPLETION_MAX_RANK)
    if len(chosen) == 0:
        return
    starts = string_prefix[chosen]
    match = np.zeros(len(chosen), dtype=bool)
    order = np.argsort(starts, kind="stable")
    sorted_starts = starts[order]
    bounds = np.flatnonzero(np.diff(sorted_starts)) + 1
    for group in np.split(order, bounds):
        start = int(starts[group[0]])
        entries = chosen[group]
        rest = pc.utf8_slice_codeunits(target.take(pa.array(string_row[entries])), start=start)
        equal = pc.equal(strings.take(pa.array(entries)), rest)
        match[group] = equal.fill_null(False).to_numpy(zero_copy_only=False)
    matched = chosen[match]   # in (row, prefix, rank) order
    firsts = matched[_first_per_row(string_row[matched])]
    if len(firsts) == 0:
        return
    rows = string_row[firsts]
    lengths = pc.utf8_length(target.take(pa.array(rows))).to_numpy(zero_copy_only=False)
    state.completion_characters = int((lengths.astype(np.int64) - string_prefix[firsts]).sum())
    state.completion_tokens = len(firsts)


def _results(state: stats.StatsState, results: pa.Array, target: pa.Array) -> None:
    n = len(results)
    structs, row, _ = _list_layout(results)
    lengths = np.bincount(row, minlength=n) if len(row) else np.zeros(n, dtype=np.int64)
    width = int(lengths.max()) if n else 0
    if len(row):
        candidate = pc.struct_field(structs, "candidate")
        is_target = pc.equal(candidate, target.take(pa.array(row)))
        is_target = is_target.fill_null(False).to_numpy(zero_copy_only=False)
        order = np.argsort(row * 2 + (~is_target), kind="stable")
        sorted_row = row[order]
        column = np.arange(len(order), dtype=np.int64) - _starts(lengths)[sorted_row]
        error_values = pc.struct_field(structs, "error").fill_null(-np.inf).to_numpy(zero_copy_only=False)
        lm_values = pc.struct_field(structs, "lm").fill_null(-np.inf).to_numpy(zero_copy_only=False)
    error = np.full((n, width), -np.inf, dtype=np.float32)
    lm = np.full((n, width), -np.inf, dtype=np.float32)
    if len(row):
        error[sorted_row, column] = error_values[order].astype(np.float32)
        lm[sorted_row, column] = lm_values[order].astype(np.float32)
    state.scores.add_matrices(error, lm)

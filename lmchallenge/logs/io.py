"""Reading and writing a log in any form (:func:`lmchallenge.logs.files.log_form`), datum by
datum: the one dispatch on a log's form."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lmchallenge.logs.files import file_form, log_form, run_dir_parts
from lmchallenge.logs.jsonl import dump_jsonlines, load_jsonlines
from lmchallenge.logs.schema import Datum


def read_log(path: str, batch_rows: int | None = None) -> Iterator[Datum]:
    """Read any log form (jsonl, jsonl.gz, parquet, run directory, ``-``) as datum dicts.

    Args:
        path: the log.
        batch_rows: rows of a Parquet file decoded at once (None: a row group's worth,
            :data:`lmchallenge.logs.parquet.ROW_GROUP_ROWS`).
    Raises:
        InputError: the path does not exist or is not a readable log.
    """
    form = log_form(path)
    if form == "run_dir":
        return _iter_parts(run_dir_parts(path), batch_rows)
    if form == "parquet":
        from lmchallenge.logs import parquet  # imports pyarrow: only for Parquet
        return parquet.iter_parquet(path, batch_rows or parquet.ROW_GROUP_ROWS)
    return load_jsonlines(path)


def first_datum(path: str) -> Datum | None:
    """The first datum of a log (any form :func:`read_log` reads; None for an empty log),
    reading no more of it than that: one row of a Parquet file, not a batch.

    Raises:
        InputError: as :func:`read_log`.
    """
    data = read_log(path, batch_rows=1)
    try:
        return next(data, None)
    finally:
        data.close()    # (its file closed now, not when collected)


def log_argument(log: Any, data: Any, function: str) -> Any:
    """The log given to the analysis function named ``function`` as ``log``, or as ``data``,
    the name LM Challenge 5.x gave that argument (so that its scripts run unchanged).

    Raises:
        TypeError: both or neither given.
    """
    if (log is None) == (data is None):
        raise TypeError(f"{function}() takes the log as log (or data, as in LM Challenge 5.x): "
                        f"{'both' if log is not None else 'neither'} given")
    return data if log is None else log


def _iter_parts(parts: list[Path], batch_rows: int | None = None) -> Iterator[Datum]:
    for part in parts:
        yield from read_log(str(part), batch_rows)


def write_log(data: Iterable[Datum], path: str, game: str | None = None,
              compresslevel: int = 6, user_type: str | None = None) -> int:
    """Write a log to ``path`` in the form its name says (``-``, .jsonl, .jsonl.gz, .parquet).

    Args:
        data: log datums.
        path: destination.
        game: ``wc``/``we``/``ce``/``wr`` when known (fixes the Parquet schema of an empty log).
        compresslevel: gzip level of a ``.gz`` destination.
        user_type: the users' type in a Parquet destination, ``string`` or ``integer`` (None:
            as the first user says; :func:`lmchallenge.logs.parquet.write_parquet`).
    Returns:
        The number of datums written.
    """
    if path != "-" and file_form(path) == "parquet":
        from lmchallenge.logs import parquet  # imports pyarrow: only for Parquet
        return parquet.write_parquet(data, path, game=game, user_type=user_type)
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

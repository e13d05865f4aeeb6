"""``lmc convert``: rewrite a log in another form (jsonl, jsonl.gz, Parquet).

The forms are those of :mod:`lmchallenge.logs.io`: the output form follows the output
name (``.jsonl``, ``.jsonl.gz``/``.gz``, ``.parquet``, ``-`` for jsonlines on
stdout); the input may be any form ``read_log`` reads, a run directory included.
Datums stream from reader to writer (the Parquet writer batches rows), so a large
reference log becomes a ``pandas.read_parquet``-able file without being held in memory; a
jsonl ``wc``/``we``/``ce`` log file (or run directory of jsonl parts) goes to Parquet a
block of Arrow columns at a time (:mod:`lmchallenge.logs.parquet_from_jsonl`), the same file.
A run directory whose partitions are all in a form the output can take as they are is
joined as files (:func:`join_logs`), without reading a datum.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from lmchallenge.corpus import is_stream
from lmchallenge.errors import DatumError, InputError
from lmchallenge.logs.files import (atomic_path, check_writable, is_gzip_name, is_parquet_name,
                                   open_output, run_dir_parts)
from lmchallenge.logs.io import read_log, write_log
from lmchallenge.logs.schema import Datum, detect_game

def _peek(data: Iterable[Datum]) -> tuple[Datum | None, Iterator[Datum]]:
    iterator = iter(data)
    first = next(iterator, None)
    if first is None:
        return None, iter(())
    return first, itertools.chain([first], iterator)


def convert(source: str, destination: str, game: str | None = None) -> int:
    """Copy the log at ``source`` to ``destination``, in the form its name says.

    Args:
        source: a log path of any form (or ``-`` for jsonlines on stdin).
        destination: output path (``.jsonl``, ``.jsonl.gz``, ``.parquet``) or ``-``.
        game: ``wc``/``we``/``ce``/``wr``; when None it is taken from the first datum
            (it fixes the Parquet schema).
    Returns:
        The number of datums written.
    Raises:
        lmchallenge.errors.InputError: the source is missing or not a readable log, a datum
            is one ``lmc validate`` refuses (``FILE:N: field F: ...``; nothing is written),
            or the destination cannot be written (before anything is read).
    """
    # not into a run dir it reads (review: it replaced a part file, then failed); a file
    # converted in place is read whole before it is replaced (atomic_path)
    run_dir = source != "-" and os.path.isdir(source)
    check_writable(destination, (source,) if run_dir else ())
    parts = [str(p) for p in run_dir_parts(source)] if run_dir else [source]
    if run_dir and destination != "-" and all(joins_as_is(part, destination) for part in parts):
        return join_logs(parts, destination, game)      # no datum to read
    # every datum checked as lmc validate checks it, under its file's name (a run dir's
    # part): no log is written that the other commands refuse
    from lmchallenge.logs.check import checked
    users: dict[str, Any] = {}
    numbered = _Numbered()
    first, data = _peek(checked(
        (part, numbered.each(part, _users_of_one_type(read_log(part), part, users)
                             if is_parquet_name(destination) else read_log(part)))
        for part in parts))
    if game is None and first is not None:
        game = detect_game(first)
    if game is not None:
        written = _columns_written(parts, destination, game)
        if written is not None:
            return written
    try:
        return write_log(data, destination, game=game)
    except DatumError as error:
        if error.path != destination:
            raise
        raise numbered.located(error) from None


class _Numbered:
    """Counts the datums of a log's files as they are read, so that a datum the writer
    names by its number in the whole log (:class:`~lmchallenge.errors.DatumError`) is named
    by its file and number in it instead, as ``lmc validate`` names it (QA: ``o.parquet:
    datum 301 does not fit ...`` for line 301 of the log converted)."""

    def __init__(self) -> None:
        self.starts: list[tuple[int, str]] = []    # (datums before the file, its name)
        self.count = 0

    def each(self, name: str, data: Iterable[Datum]) -> Iterator[Datum]:
        """The datums of the file ``name``, counted."""
        self.starts.append((self.count, name))
        for datum in data:
            self.count += 1
            yield datum

    def located(self, error: DatumError) -> InputError:
        """``error`` as an InputError ``FILE:N: detail`` (N counting the file's datums from
        1), or as it is if its datum was not read here."""
        for before, name in reversed(self.starts):
            if before < error.datum <= self.count:
                return InputError(name, error.datum - before, error.detail)
        return error


def _columns_written(sources: Sequence[str], destination: str, game: str) -> int | None:
    """The rows of the jsonl log files ``sources`` (one log, in order: a file, or a run
    directory's parts) written to the Parquet ``destination`` column-wise
    (:func:`lmchallenge.logs.parquet_from_jsonl.write_columns`: 2-3x faster), or None where
    the datum path must write it (another form, standard input, a log not certainly
    written so)."""
    if not is_parquet_name(destination) or any(
            log_form(source) == ".parquet" or is_stream(source) for source in sources):
        return None
    from lmchallenge.logs.parquet_from_jsonl import write_columns
    return write_columns(sources, destination, game)


@contextlib.contextmanager
def _located(sources: Sequence[str], destination: str) -> Iterator[None]:
    """A context in which an error of the Parquet writer, which names ``destination`` and a
    range of datums (``datums 1-26, column 'logp' (double): Could not convert ...``), is
    replaced by ``lmc validate``'s error for the log files ``sources``, naming the bad datum
    by its file and number (``log.jsonl:6: field logp: '-0.89' is not of type 'number',
    'null'``), where that finds one; else a datum the writer named by its number
    (:class:`~lmchallenge.errors.DatumError`) of one source file is named by its line.  The
    sources are read again, on failure only (not standard input, which cannot be)."""
    try:
        yield
    except InputError as error:
        if error.path != destination or any(is_stream(source) for source in sources):
            raise
        from lmchallenge.logs.check import validate_files
        validate_files((source, read_log(source)) for source in sources)
        if isinstance(error, DatumError) and len(sources) == 1:
            raise InputError(sources[0], error.datum, error.detail) from None
        raise


def _users_of_one_type(data: Iterable[Datum], name: str, first: dict[str, Any]
                       ) -> Iterator[Datum]:
    """The datums of the log file ``name``; InputError ``NAME:N: user 'x' is a string but
    user 7 of line 1 is an integer: ...`` (:func:`lmchallenge.logs.parquet.mixed_users_message`;
    an integer beyond 64 bits, :func:`~lmchallenge.logs.parquet.wide_user_message`) for the
    first user a Parquet log's user column cannot hold with the users before it, named by
    its file and line (the Parquet writer names its own datum number: QA).  ``first`` holds
    the first user seen (of this file or one before it in the same log) and where it was."""
    from lmchallenge.logs.parquet import a_kind, mixed_users_message, user_kind, wide_user_message
    for number, datum in enumerate(data, start=1):
        user = datum.get("user") if isinstance(datum, dict) else None
        kind = None if user is None else user_kind(user)
        if kind == "wide":
            raise InputError(name, number, wide_user_message(user))
        if kind is not None:
            if not first:
                first.update(kind=kind, user=user, name=name, number=number)
            elif kind != first["kind"]:
                where = (f"line {first['number']}" if first["name"] == name
                         else f"{first['name']}:{first['number']}")
                raise InputError(name, number, mixed_users_message(
                    user, f"user {first['user']!r} of {where} is {a_kind(first['user'])}"))
        yield datum


NULLABLE = frozenset({"user", "logp", "select"})
"""The fields a log datum may hold null in (docs/formats.md, "Log"; a null ``select`` is
dropped by the Parquet reader); ``results``' LM scores may be null too."""


def _nulls_refused(data: Iterable[Datum], name: str) -> Iterator[Datum]:
    """The datums of ``data``; InputError ``NAME:N: field F: None is not of type ...`` (N
    counting datums from 1, as ``lmc validate`` does) for the first with a null where a
    log has a value (a Parquet column can hold one, jsonl cannot), so that no log is
    written that the other commands refuse.  Only a datum holding a null is checked
    against the schema (:func:`lmchallenge.logs.check.problem`)."""
    for number, datum in enumerate(data, start=1):
        if _holds_null(datum):
            from lmchallenge.logs.check import problem
            reason = problem(datum)
            if reason is not None:
                raise InputError(name, number, reason)
        yield datum


def _holds_null(datum: Datum) -> bool:
    """Whether ``datum`` holds a null outside :data:`NULLABLE`, at its top level or in its
    lists (``completions``, ``results``) and their lists."""
    for key, value in datum.items():
        if value is None:
            if key not in NULLABLE:
                return True
        elif isinstance(value, list):
            checked = 2 if key == "results" else None   # a triple's LM score may be null
            if any(item is None or (isinstance(item, list) and None in item[:checked])
                   for item in value):
                return True
    return False


# --- joining log files ------------------------------------------------------------------------

def log_form(path: str) -> str:
    """The form a log's name says, as :func:`lmchallenge.logs.io.write_log` reads it:
    ``.parquet``, ``.jsonl.gz`` (any ``.gz``) or ``.jsonl`` (anything else)."""
    if is_parquet_name(path):
        return ".parquet"
    return ".jsonl.gz" if is_gzip_name(path) else ".jsonl"


def joins_as_is(source: str, destination: str) -> bool:
    """Whether :func:`join_logs` copies the log file ``source`` into ``destination`` without
    reading its datums (a plain or gzipped jsonl into jsonl, gzip into gzip, Parquet into
    Parquet)."""
    form = log_form(destination)
    if form == ".jsonl":
        return log_form(source) in (".jsonl", ".jsonl.gz")
    return log_form(source) == form


CONVERTED_PREFIX = ".out-"
"""Name prefix of the copies :func:`join_logs` converts (their temporary files, being
written, have one more dot in front)."""


def convert_file(source: str, destination: str, game: str | None) -> None:
    """Write the log file ``source`` again as ``destination``, in the form its name says
    (a datum with a null where a log has a value refused: :func:`_nulls_refused`)."""
    if game is not None and _columns_written([source], destination, game) is not None:
        return
    with _located([source], destination):
        write_log(_nulls_refused(read_log(source), source), destination, game=game)


def convert_each(pairs: Sequence[tuple[str, str]], game: str | None) -> None:
    """Convert every ``(source, destination)`` log file pair, one after the other."""
    for source, destination in pairs:
        convert_file(source, destination, game)


def join_logs(sources: Sequence[str], destination: str, game: str | None = None,
              convert: Callable[[Sequence[tuple[str, str]], str | None], None] = convert_each
              ) -> int:
    """Concatenate the log files ``sources`` (in order) into the file ``destination``, in the
    form its name says, atomically, joining files rather than datums where it can.

    jsonl sources are copied into a plain jsonl destination (``.jsonl.gz`` ones
    decompressed), ``.jsonl.gz`` sources as they are into a ``.gz`` one (gzip members one
    after the other, RFC 1952, 2.2), Parquet sources table by table into a ``.parquet`` one
    (row groups of :data:`lmchallenge.logs.parquet.ROW_GROUP_ROWS` rows).  Sources of another
    form (:func:`joins_as_is`) are first
    converted to the destination's form by ``convert`` (``lmc-dist`` passes one that runs on
    its workers) into ``.out-NNNNN.*`` files (:data:`CONVERTED_PREFIX`) beside them, which
    are deleted afterwards.

    Args:
        sources: ``.jsonl``, ``.jsonl.gz`` or ``.parquet`` log files.
        destination: the output file (not ``-``).
        game: ``wc``/``we``/``ce``/``wr``: the Parquet schema of conversions and of an
            empty log.
        convert: called once with the ``(source, destination)`` pairs to convert, and ``game``.
    Returns:
        The number of datums (rows) written.
    """
    form = log_form(destination)
    if not sources:
        return write_log([], destination, game=game)
    files = list(sources)
    converted = {i: os.path.join(os.path.dirname(os.path.abspath(source)), f"{CONVERTED_PREFIX}{i:05d}{form}")
                 for i, source in enumerate(files) if not joins_as_is(source, destination)}
    try:
        if converted:
            convert([(files[i], copy) for i, copy in converted.items()], game)
        for i, copy in converted.items():
            files[i] = copy
        if form == ".parquet" and _users_differ(files):
            return write_log(itertools.chain.from_iterable(map(read_log, files)), destination,
                             game=game)
        with atomic_path(destination) as tmp:
            if form == ".parquet":
                return _join_parquet(files, tmp)
            return _join_bytes(files, tmp, decompress=form == ".jsonl")
    finally:
        for copy in converted.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(copy)


def _join_bytes(sources: Sequence[str], destination: str, decompress: bool) -> int:
    """Copy ``sources`` one after the other (``.gz`` ones decompressed if ``decompress``,
    else as they are); returns the number of lines."""
    with open_output(destination) as out:
        return sum(_append(source, out, decompress) for source in sources)


def _append(source: str, out, decompress: bool) -> int:
    if is_gzip_name(source) and not decompress:
        with open(source, "rb") as raw:
            shutil.copyfileobj(raw, out, 1 << 20)
        with gzip.open(source, "rb") as part:    # its lines, counted apart
            return sum(block.count(b"\n") for block in iter(lambda: part.read(1 << 20), b""))
    lines = 0
    with (gzip.open if is_gzip_name(source) else open)(source, "rb") as part:
        for block in iter(lambda: part.read(1 << 20), b""):
            out.write(block)
            lines += block.count(b"\n")
    return lines


def _users_differ(sources: Sequence[str]) -> bool:
    """Whether the Parquet files ``sources`` have ``user`` columns of different types: jsonl
    parts converted one by one (a part without users written with strings, one of integer
    users with integers). Joined as files, the first one's type was kept (integer users
    became the strings ``'7'``: review); :func:`join_logs` writes them datum by datum
    instead, as ``lmc run`` writes the whole log (the type of its first user; users of both
    types refused)."""
    import pyarrow.parquet as pq
    return len({pq.read_schema(source).field("user").type for source in sources}) > 1


def _join_parquet(sources: Sequence[str], destination: str) -> int:
    """Copy the Parquet files ``sources`` table by table into one, in row groups of
    ``ROW_GROUP_ROWS``; returns the number of rows."""
    import pyarrow.parquet as pq

    from lmchallenge.logs.parquet import GroupedWriter, read_whole

    writer = GroupedWriter(destination, pq.read_schema(sources[0]))
    try:
        for source in sources:
            writer.add(read_whole(source, writer.schema))
    finally:
        writer.close()
    return writer.rows

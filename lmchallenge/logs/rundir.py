"""Run directories of ``lmc-dist`` as committed records: what readers may take from one.

Layout (the Hadoop/Spark output-committer idea: work in progress where readers do not look,
a success marker at the end; Delta Lake keeps a commit log in the same spirit)::

    RUN_DIR/
      _manifest.json        what the run is (game, model, corpus sha256, options, versions),
                            its partitions (byte range, first line, messages, characters) and
                            each one's state; ``"finished"`` is null until the run commits
      _temporary/           partitions finished by an unfinished run:
        part-NNNNN.parquet  (or ``.jsonl.gz``), each written to a hidden temporary name and
                            renamed into place when whole: a file here *is* the record that
                            its partition is done
      RUN-NOT-FINISHED.parquet
                            a plain-text note, present from the run's start until it commits:
                            every Parquet reader fails on it loudly instead of returning a
                            subset: ``pandas.read_parquet(RUN_DIR)`` (PyArrow reads every name
                            that does not start with ``_`` or ``.``), Dask's ``read_parquet``
                            (every ``*.parquet`` below, ``_temporary/`` included), globs of
                            ``RUN_DIR/*.parquet`` (Polars, DuckDB)
      .lmc-dist.lock        the writer's lock (``fcntl.flock``; held only while a run runs)

Commit, in this order: every partition done -> ``_stats.json`` written -> each part file
renamed from ``_temporary/`` to ``RUN_DIR/`` -> ``_manifest.json`` rewritten with
``"finished"`` set (the commit point) -> the empty ``_temporary/`` and, last, the note
removed.  A finished run dir therefore holds exactly ``part-NNNNN.*``, ``_manifest.json`` and
``_stats.json`` (and the hidden lock file).  A crash anywhere before the commit point leaves
an unfinished run that ``lmc-dist run --resume`` completes without recomputing a finished
partition; one after it leaves a finished run (``--resume`` only tidies).

Readers (every ``lmc`` tool and ``lmc-dist stats``, through :func:`parts`) take a finished
run's parts, in partition order.  An unfinished run is refused with :class:`UnfinishedRun`
(exit 2, "N of M partitions done"), unless reading partially is allowed
(:func:`reading_partial`, the ``--partial`` option), when the finished partitions are read
and :func:`coverage` says how much of the run they are.  A directory without a manifest
(part files made by hand) is read as its ``part-*`` files, as before run dirs had one.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmchallenge.errors import InputError

MANIFEST = "_manifest.json"
STATS = "_stats.json"
TEMPORARY = "_temporary"
UNFINISHED = "RUN-NOT-FINISHED.parquet"
LEGACY_UNFINISHED = "RUN-NOT-FINISHED"
"""The note's name before Dask's reader was taken into account (removed too at commit)."""
LOCK = ".lmc-dist.lock"
WRITE_CHECK = ".write-check-"
"""The start of the name of the file an lmc-dist worker makes (and removes) in ``_temporary``
to check it can write there: a worker killed in between leaves it."""
PART_GLOBS = ("part-*.parquet", "part-*.jsonl.gz", "part-*.jsonl")

_PARTIAL: contextvars.ContextVar[bool] = contextvars.ContextVar("lmc_read_partial", default=False)
_READ_PARTIALLY: contextvars.ContextVar[dict[str, tuple[str, int, int]] | None] = \
    contextvars.ContextVar("lmc_read_partially", default=None)


class UnfinishedRun(InputError):
    """A reader was given the run dir of a run that has not finished (exit 2).

    Attributes:
        done, total: partitions finished, partitions of the run.
    """

    def __init__(self, path: str, done: int, total: int):
        self.done = done
        self.total = total
        InputError.__init__(
            self, path, None,
            f"unfinished lmc-dist run: {done} of {total} partitions done; finish it with "
            "`lmc-dist run ... --resume`, or read the finished partitions with --partial")

    def __reduce__(self):
        return (UnfinishedRun, (self.path, self.done, self.total))


@dataclass(frozen=True)
class RunDir:
    """What a run directory holds, as a reader sees it.

    Attributes:
        path: the directory.
        manifest: its ``_manifest.json`` (None: a directory of part files without one).
        parts: the finished partitions' files, in partition order.
        done: indices of the finished partitions (every partition of a finished run).
    """

    path: str
    manifest: dict[str, Any] | None
    parts: list[Path]
    done: list[int]

    @property
    def finished(self) -> bool:
        return self.manifest is None or bool(self.manifest.get("finished"))

    @property
    def total(self) -> int:
        return len(self.done) if self.manifest is None else len(self.manifest["partitions"])


def read_manifest(path: str) -> dict[str, Any] | None:
    """``path``'s ``_manifest.json`` as a dict, or None when it has none.

    Raises:
        InputError: the manifest is not a JSON object with a ``partitions`` list.
    """
    name = os.path.join(path, MANIFEST)
    try:
        with open(name, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InputError(name, None, f"not a readable run manifest: {e}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("partitions"), list):
        raise InputError(name, None, "not a run manifest (no \"partitions\" list)")
    return manifest


def check_cut(path: str, manifest: dict[str, Any]) -> None:
    """Check that the manifest's partitions are the whole run, in order: indices 0, 1, ...,
    each starting where the one before ends, and their characters the corpus' (a manifest
    that lost an entry gave the statistics of the rest, exit 0: QA).  Fields a manifest does
    not hold (an older lmc-dist's) are not checked.

    Raises:
        InputError: naming the manifest and the first partition out of place.
    """
    name = os.path.join(path, MANIFEST)
    records = manifest["partitions"]
    end = None
    for position, entry in enumerate(records):
        if not isinstance(entry, dict) or entry.get("index", position) != position:
            raise InputError(name, None, f"partition record {position} is not partition "
                                         f"{position}: the manifest was edited")
        start = entry.get("start")
        if isinstance(end, int) and isinstance(start, int) and start != end:
            raise InputError(name, None, f"partition {position} starts at byte {start} of the "
                                         f"corpus, the one before it ends at {end}: the "
                                         "manifest was edited")
        end = entry.get("end")
    total = manifest.get("characters")
    counts = [entry.get("characters") for entry in records]
    if isinstance(total, int) and all(isinstance(count, int) for count in counts) \
            and sum(counts) != total:
        raise InputError(name, None, f"its partitions hold {sum(counts)} characters of the "
                                     f"corpus' {total}: the manifest was edited")


def finished_part(path: str, name: str) -> Path | None:
    """Where the finished partition file ``name`` of run dir ``path`` is (the top level,
    or ``_temporary/`` before the run commits), or None if it is not finished."""
    for place in (Path(path) / name, Path(path) / TEMPORARY / name):
        if place.is_file():
            return place
    return None


def inspect(path: str) -> RunDir:
    """Which partitions of the run dir ``path`` are finished, and where their files are.

    Raises:
        InputError: the manifest is unreadable or its partitions do not make up the run
            (:func:`check_cut`), a finished run lacks a part file or holds one its manifest
            does not list, a part is not the file the manifest records
            (:func:`changed_part`), a directory without a manifest holds no ``part-*``
            files or not a numbered sequence of them (:func:`_numbered_parts`), or it
            holds the unfinished run's marker (a run starting: its manifest follows its
            corpus' scan).
    """
    manifest = read_manifest(path)
    if manifest is None and (Path(path) / UNFINISHED).is_file():
        raise InputError(path, None, "unfinished lmc-dist run: it has not recorded its "
                                     "partitions yet (it is starting, or it stopped while it "
                                     "started: run it again)")
    if manifest is None:
        return RunDir(path, None, _numbered_parts(path), [])
    check_cut(path, manifest)
    if manifest.get("finished"):
        listed = {entry.get("file") for entry in manifest["partitions"]}
        for part in _globbed_parts(path, required=False):
            if part.name not in listed:
                raise InputError(str(part), None, "not a partition of this run (its manifest "
                                                  "does not list it): move it out of the run dir")
    parts: list[Path] = []
    done: list[int] = []
    for index, entry in enumerate(manifest["partitions"]):
        found = finished_part(path, entry["file"])
        if found is not None:
            changed = changed_part(found, entry)
            if changed is not None:
                raise InputError(str(found), None, f"{changed}: delete it and finish the run "
                                                   "with `lmc-dist run ... --resume`")
            parts.append(found)
            done.append(index)
        elif manifest.get("finished"):
            raise InputError(os.path.join(path, entry["file"]), None,
                             "missing: the run's manifest lists it as finished: finish the "
                             "run with `lmc-dist run ... --resume`")
    return RunDir(path, manifest, parts, done)


def changed_part(part: Path, entry: dict[str, Any]) -> str | None:
    """What is wrong if the file ``part`` is not the one its manifest ``entry`` records
    (cut short, edited or swapped after the run): another size in bytes than recorded, or,
    for Parquet, another number of rows; else None (also where nothing is recorded: a run
    dir of an lmc-dist that did not record sizes, whose ``.jsonl.gz`` parts are then not
    checked without reading them)."""
    size, recorded = None, entry.get("bytes")
    if isinstance(recorded, int):
        try:
            size = part.stat().st_size
        except OSError:   # gone: the reader that opens it says so
            return None
        if size != recorded:
            return (f"{size} bytes where the run's manifest records {recorded} (changed after "
                    "it was written)")
    rows = entry.get("rows")
    if not isinstance(rows, int) or part.suffix != ".parquet":
        return None
    import pyarrow.parquet as pq

    try:
        found = pq.ParquetFile(part).metadata.num_rows
    except (OSError, ValueError):   # unreadable: the reader that opens it says how
        return None
    if found == rows:
        return None
    return f"{found} rows where the run's manifest records {rows} (changed after it was written)"


def _numbered_parts(path: str) -> list[Path]:
    """The ``part-*`` files of a directory without a manifest, which must be numbered from
    0 without a gap, one file a number (QA: a copy of a run's parts that lost one read as
    the whole log).

    Raises:
        InputError: there are none, a number is missing or is there twice (as Parquet and
            jsonl).
    """
    parts = _globbed_parts(path)
    numbers = [int(m.group(1)) if (m := re.match(r"part-(\d+)\.", p.name)) else None for p in parts]
    for expected, (part, number) in enumerate(zip(parts, numbers)):
        if number == expected:
            continue
        shown = (f"part-{expected:05d} is missing" if number is None or number > expected
                 else f"part {number} is there twice ({parts[expected - 1].name}, {part.name})")
        raise InputError(path, None, f"its part files are not numbered from part-00000 without a "
                                     f"gap ({shown}) and it has no {MANIFEST} to say what the "
                                     "log is: give the part files themselves to read only those")
    return parts


def _globbed_parts(path: str, required: bool = True) -> list[Path]:
    """The ``part-*`` files at the top of ``path``, by name.

    Raises:
        InputError: there are none (where ``required``)."""
    root = Path(path)
    parts = [p for pattern in PART_GLOBS for p in root.glob(pattern)]
    if not parts and required:
        raise InputError(path, None, "not a log: the directory holds no part-NNNNN.parquet, "
                                     ".jsonl or .jsonl.gz files")
    return sorted(parts, key=lambda p: p.name)


def parts(path: str, partial: bool | None = None) -> list[Path]:
    """The part files a reader takes from the run dir ``path``, in partition order.

    Args:
        path: a run directory.
        partial: read an unfinished run's finished partitions (None: as
            :func:`reading_partial` says; by default no).
    Raises:
        UnfinishedRun: the run has not finished and reading partially is not allowed.
        InputError: no partition is finished yet, or see :func:`inspect`.
    """
    run = inspect(path)
    if run.finished:
        return run.parts
    if not (partial_allowed() if partial is None else partial):
        raise UnfinishedRun(path, len(run.done), run.total)
    if not run.parts:
        raise InputError(path, None, f"unfinished lmc-dist run: 0 of {run.total} partitions "
                                     "done, nothing to read yet")
    read = _READ_PARTIALLY.get()
    if read is not None:    # (one entry per directory, however its path was written)
        read.setdefault(os.path.realpath(path), (path, len(run.done), run.total))
    return run.parts


def coverage(path: str) -> dict[str, Any] | None:
    """What a statistics row of ``path`` adds when ``path`` is an unfinished run dir read
    partially; None for any other log.

    Returns:
        ``{"partial": True, "coverage": {"partitions_done": int, "partitions": int,
        "messages_done": int, "messages": int, "characters_done": int, "characters": int}}``
        (messages and characters of the corpus, as the run's partitions count them).
    """
    if path == "-" or not os.path.isdir(path):
        return None
    run = inspect(path)
    if run.finished:
        return None
    entries = run.manifest["partitions"]
    done = [entries[i] for i in run.done]
    counts: dict[str, int] = {"partitions_done": len(done), "partitions": len(entries)}
    for key in ("messages", "characters"):
        counts[f"{key}_done"] = sum(int(e.get(key) or 0) for e in done)
        counts[key] = sum(int(e.get(key) or 0) for e in entries)
    return {"partial": True, "coverage": counts}


def partial_allowed() -> bool:
    """Whether readers in this context take an unfinished run's finished partitions."""
    return _PARTIAL.get()


@contextlib.contextmanager
def reading_partial(enabled: bool = True) -> Iterator[None]:
    """Within this context (this thread; threads that readers start copy it), readers take
    an unfinished run's finished partitions instead of refusing the run dir, and
    :func:`read_partially` tells which run dirs they read so."""
    token = _PARTIAL.set(enabled)
    read_token = _READ_PARTIALLY.set({})
    try:
        yield
    finally:
        _READ_PARTIALLY.reset(read_token)
        _PARTIAL.reset(token)


def read_partially() -> list[tuple[str, int, int]]:
    """The unfinished run dirs read so far in this :func:`reading_partial` context, as
    ``(path, partitions read, partitions of the run)``, each directory once (none outside
    one)."""
    return list((_READ_PARTIALLY.get() or {}).values())

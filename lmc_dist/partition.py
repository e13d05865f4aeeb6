"""Cutting a corpus into partitions: contiguous byte ranges of whole lines.

One streaming pass over the input (:func:`scan`) validates every line (so bad input stops
the run before any model starts, naming the file and line), numbers messages within their
user groups, and cuts partitions of about a :class:`lmc_dist.sizing.PartitionSize`: a number
of estimated model queries chosen for the cluster (:class:`lmc_dist.sizing.ForCluster`), or
``partition_chars`` characters (below, "characters" stands for either unit):

* without training no message depends on another, so a cut may fall between any two
  messages, even inside a user's group (the partition carries its first message number);
* with training a user's group is never split (a group bigger than ``partition_chars`` is a
  partition of its own);
* towards the end of the corpus partitions get smaller (:func:`taper_limit`: a quarter of
  the characters still to come, down to an eighth of ``partition_chars``), so that the
  workers run out of work together instead of all but one waiting for the last full-size
  partition (guided self-scheduling, Polychronopoulos & Kuck, IEEE Trans. Computers 36(12),
  1987; the divisor is the number of workers the size was chosen for, 4 for
  ``--partition-chars``: either way it is part of the recorded size, so the cut stays a
  function of the corpus and the size, and a ``--resume`` on another cluster finds the same
  partitions).

A ``.gz`` input is first decompressed into the run directory (workers then read byte ranges
of the plain copy; a gzip stream cannot be entered in the middle), then scanned.

The corpus is scanned a block of lines at a time (:data:`BLOCK_BYTES`): a plain-text block's
lines' byte ranges, characters and estimated queries counted with numpy (:func:`_block_lines`),
a json block decoded at once and its rows read one by one (:func:`_json_block`); a partition's
end found by one search of the running sum of its messages' sizes and, when training, of the
users' first messages (:meth:`_Cutter.add_block`).  The same partitions as line by line, at a
quarter of the CPU for plain text and half for json (BENCHMARKS.md, "scaling").  A block that
is not UTF-8 (whose error names its line) is read line by line.  The blocks of a json corpus
of 32 MiB or more are parsed in helper processes, one per CPU (:func:`scan_processes`), and
cut in order here: the same partitions and errors, in a fraction of the time on a machine of
many cores.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import hashlib
import io
import itertools
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import fsspec
import numpy as np

from lmchallenge.corpus import (BOM, EMPTY_GZIP, READ_ERRORS, FileVersion, Message, decode_lines,
                                 UserGroups, file_version, first_non_blank, is_gzip_name,
                                 is_stream, json_row_fields, parse_json_row, whole_line_blocks)
from lmchallenge.corpus import detect_format as corpus_format_of
from lmchallenge.errors import InputError
from lmchallenge.logs.parquet import UserTypes
from lmchallenge.tuning import usable_cpus

from lmc_dist.ordered_map import ordered_map
from lmc_dist.sizing import SAMPLE_BYTES, ForCluster, PartitionSize, QueryCost


INPUT_COPY = "_input.plain"
"""The decompressed copy of a ``.gz`` corpus in the run dir (:func:`scan`), which the workers
read by byte ranges ("_": not data to pyarrow); removed when the run commits
(:func:`lmc_dist.commit.commit`; a ``--resume`` makes it again)."""


@dataclass(frozen=True)
class Partition:
    """A contiguous range of corpus lines evaluated by one task.

    Attributes:
        index: position in the corpus (0-based); names the output ``part-NNNNN``.
        start, end: byte range ``[start, end)`` of the (plain) input.
        first_line: 1-based line number of the first line (for error messages).
        first_message: message number of the first message within its user group.
        messages: number of messages.
        characters: number of characters of the messages' text.
        users: number of user groups that start or continue here.
        queries: estimated model queries (:func:`lmc_dist.sizing.query_cost`; 0 where the
            scan was given no estimator).
    """

    index: int
    start: int
    end: int
    first_line: int
    first_message: int
    messages: int
    characters: int
    users: int
    queries: int = 0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ScanResult:
    """The outcome of :func:`scan`.

    Attributes:
        path: the plain (uncompressed) file the partitions index.
        corpus_format: ``text`` or ``json`` (``auto`` resolved).
        sha256: hex digest of the input file as given.
        partitions: in corpus order.
        messages, characters: totals.
        size: the size the partitions were cut at.
        users: the types of the corpus' users.
        groups: the corpus' user groups (a json corpus'; none for plain text).
        version: the :data:`lmchallenge.corpus.FileVersion` of ``path`` before it was read
            (None for a URL): the run checks that it is the same when its partitions are done.
    """

    path: str
    corpus_format: str
    sha256: str
    partitions: list[Partition]
    messages: int
    characters: int
    size: PartitionSize | None = None
    users: UserTypes = field(default_factory=UserTypes)
    groups: UserGroups = field(default_factory=lambda: UserGroups())
    version: FileVersion | None = None


@dataclass
class _Line:
    start: int
    end: int
    number: int
    message: Message | None  # None for a skipped blank line of a json corpus


def sha256_of(path: str) -> str:
    """The SHA-256 (hex) of the bytes of ``path`` (any fsspec URL)."""
    digest = hashlib.sha256()
    with fsspec.open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _size_of(path: str) -> int | None:
    """Bytes of ``path`` (any fsspec URL), or None where the file system cannot tell."""
    try:
        fs, fs_path = fsspec.core.url_to_fs(path)
        return fs.size(fs_path)
    except (OSError, NotImplementedError, ValueError):
        return None


TAPER_DIVISOR = 4
"""Near the end of the corpus a partition holds at most 1/TAPER_DIVISOR of the characters
still to come."""
TAPER_FLOOR = 8
"""...and at least ``partition_chars / TAPER_FLOOR`` of them."""


def taper_limit(partition_chars: int, remaining_chars: float,
                divisor: int = TAPER_DIVISOR) -> int:
    """The character limit of the partition being filled when about ``remaining_chars``
    characters of the corpus follow its start: ``partition_chars`` until the last
    ``divisor * partition_chars`` characters, then ``1/divisor`` of what remains, never
    below ``partition_chars / TAPER_FLOOR`` (nor 1)."""
    return max(partition_chars // TAPER_FLOOR, 1,
               min(partition_chars, int(remaining_chars // divisor)))


def _decompress(path: str, plain_copy: str) -> None:
    """Write the gunzipped bytes of ``path`` (any fsspec URL) to ``plain_copy``, atomically.

    Decompressing in one bulk copy and then scanning the plain file measured faster than
    scanning the gzip stream while copying it line by line (BENCHMARKS.md, "scaling").
    """
    if _size_of(path) == 0:    # Python's gzip reads no bytes as an empty text
        raise InputError(path, None, EMPTY_GZIP)
    tmp = plain_copy + ".tmp"
    try:
        with fsspec.open(path, "rb") as raw, gzip.GzipFile(fileobj=raw) as source, \
                open(tmp, "wb") as target:
            # read1: each call's bytes are written before the next one can fail, so a
            # damaged file's error can name the line it broke off in
            while chunk := source.read1(1 << 13):
                target.write(chunk)
    except READ_ERRORS as e:
        line = _lines_in(tmp) + 1 if os.path.exists(tmp) else None   # where it broke off
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise InputError(path, line, f"cannot read: {e}") from None
    os.replace(tmp, plain_copy)


def _lines_in(path: str) -> int:
    """The line endings in the file ``path``."""
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def _lines_of(stream: Iterable[bytes], fmt: str, name: str, offset: int = 0,
              first_line: int = 1) -> Iterator[_Line]:
    """The lines of ``stream`` (raw lines, the first at byte ``offset`` of the corpus and
    numbered ``first_line``), validated, with their byte ranges: one
    :func:`lmchallenge.corpus.decode_lines` pass, each raw line's length noted as it goes by."""
    sizes: collections.deque[int] = collections.deque()

    def measured(stream: Iterable[bytes]) -> Iterator[bytes]:
        for data in stream:
            sizes.append(len(data))
            yield data

    for number, text in decode_lines(measured(stream), name, first_line=first_line):
        start = offset
        offset += sizes.popleft()
        yield _Line(start, offset, number, _message(text, name, number, fmt))


BLOCK_BYTES = 8 << 20
"""Bytes of whole lines a corpus is scanned by at once (:func:`_blocks`)."""


@dataclass(frozen=True)
class _Block:
    """A block of whole lines of the corpus, as arrays (int64): its lines, and of them the
    messages (every line of a plain-text corpus; the lines that are not blank of a json one).

    Attributes:
        first_line: the number of its first line.
        start: the byte offset of its first line in the corpus.
        line_ends: per line, the byte offset just after it (its line ending included).
        rows: per message, the index of its line among the block's lines.
        characters: per message, the characters of its text (as :func:`lmchallenge.corpus.
            decode_lines` and :func:`lmchallenge.corpus.parse_json_row` give it: no line
            ending; on line 1 no byte-order mark).
        queries: per message, its text's estimated queries (zeros without an estimate).
        users: per message, its user (json); None for plain text (one user, ``None``).
    """

    first_line: int
    start: int
    line_ends: np.ndarray
    rows: np.ndarray
    characters: np.ndarray
    queries: np.ndarray
    users: list[Any] | None = None

    @property
    def end(self) -> int:
        """The byte offset just after the block."""
        return int(self.line_ends[-1])

    def message_starts(self) -> np.ndarray:
        """Per message, the byte offset of its line."""
        return np.concatenate(([self.start], self.line_ends[:-1]))[self.rows]


def _line_ends(data: np.ndarray) -> np.ndarray:
    """The offsets just after each line of ``data`` (a block's bytes as uint8): after each LF,
    and the block's end where its last line has none."""
    ends = np.flatnonzero(data == 10) + 1
    if not len(ends) or ends[-1] != len(data):     # the last line has no LF
        ends = np.append(ends, len(data))
    return ends


def _block_lines(block: bytes, offset: int, first_line: int,
                 cost: QueryCost | None) -> _Block | None:
    """The lines of ``block`` (whole lines of a plain-text corpus from byte ``offset``, the
    first numbered ``first_line``) counted with numpy: the figures :func:`_lines_of` and
    ``cost`` give line by line, at a few nanoseconds a byte.  None where the block must be
    read line by line: not UTF-8 (the error names the line), or a line ending in more than
    one CR before its LF (its text loses them all).
    """
    ascii_only = block.isascii()
    if not ascii_only:
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            return None
    data = np.frombuffer(block, dtype=np.uint8)
    ends = _line_ends(data)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1]
    lf = data[ends - 1] == 10
    last = ends - 1 - lf                            # the byte before the LF (or the last)
    cr = (last >= starts) & (data[np.maximum(last, 0)] == 13)
    if np.any(cr & (last - 1 >= starts) & (data[np.maximum(last - 1, 0)] == 13)):
        return None
    ending = lf.astype(np.int64) + cr
    if ascii_only:
        characters = ends - starts - ending
    else:
        characters = _per_line(block, _NOT_CONTINUATION, starts) - ending
    if first_line == 1 and block.startswith(BOM.encode("utf-8")):
        characters[0] -= 1
    if cost is None:
        queries = np.zeros_like(characters)
    else:
        counted = np.zeros_like(characters)
        if cost.counted:
            marks = bytes(byte in cost.counted for byte in range(256))
            counted = _per_line(block, marks, starts) - lf * marks[10] - cr * marks[13]
        queries = cost.of_lines(counted, characters)
    return _Block(first_line, offset, ends + offset, np.arange(len(ends)), characters, queries)


_NOT_CONTINUATION = bytes(0 if 0x80 <= byte < 0xC0 else 1 for byte in range(256))
"""1 for a byte that begins a UTF-8 character (a translation table)."""


def _per_line(block: bytes, marks: bytes, starts: np.ndarray) -> np.ndarray:
    """Per line of ``block`` (its lines begin at ``starts``), the sum of ``marks[byte]``
    over its bytes (``marks``: a translation table of 0s and 1s; int64)."""
    return np.add.reduceat(np.frombuffer(block.translate(marks), dtype=np.uint8), starts,
                           dtype=np.int64)


def _json_block(block: bytes, offset: int, first_line: int, name: str,
                cost: QueryCost | None) -> _Block | None:
    """The lines of ``block`` (whole lines of a json corpus from byte ``offset``, the first
    numbered ``first_line``; named ``name`` in errors): one decode of the block, then each
    line that is not blank parsed as :func:`lmchallenge.corpus.parse_json_row` parses it.
    None where the block is not UTF-8 (it is then read line by line, and the error names
    the line).

    Raises:
        InputError: a line that is not a valid row (file and line named).
    """
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    pieces = text.split("\n")
    if text.endswith("\n"):
        pieces.pop()                    # (the empty text after the last LF)
    if first_line == 1 and pieces and pieces[0].startswith(BOM):
        pieces[0] = pieces[0][len(BOM):]
    rows, users, texts = [], [], []
    for row, piece in enumerate(pieces):
        if piece.strip():               # (a blank line belongs to no message)
            user, message, _ = json_row_fields(piece.rstrip("\r"), name, first_line + row)
            rows.append(row)
            users.append(user)
            texts.append(message)
    return _messages_block(first_line, offset, _line_ends(np.frombuffer(block, dtype=np.uint8))
                           + offset, rows, texts, users, cost)


def _messages_block(first_line: int, offset: int, line_ends: np.ndarray, rows: list[int],
                    texts: list[str], users: list[Any] | None, cost: QueryCost | None) -> _Block:
    """A :class:`_Block` of the messages ``texts`` (of ``users``) on the lines ``rows`` of
    a block from byte ``offset``, its lines numbered from ``first_line`` and ending at
    ``line_ends``: their characters and estimated queries counted one text at a time."""
    return _Block(first_line, offset, line_ends, np.array(rows, dtype=np.int64),
                  np.array(list(map(len, texts)), dtype=np.int64),
                  np.array(list(map(cost, texts)) if cost is not None else np.zeros(len(texts)),
                           dtype=np.int64), users)


PARALLEL_SCAN_BYTES = 4 * BLOCK_BYTES
"""A json corpus of at least this many bytes has its blocks parsed in helper processes
(:func:`scan_processes`)."""


def scan_processes(fmt: str, total_bytes: int | None) -> int:
    """Processes to parse the corpus' blocks in (:func:`_blocks`): for a json corpus of at
    least :data:`PARALLEL_SCAN_BYTES`, one per usable CPU, at most one per block; else 0 (in
    this process: a plain-text block is counted with numpy in a few milliseconds, and a
    helper process takes about 0.3 s of CPU to start)."""
    if fmt != "json" or total_bytes is None or total_bytes < PARALLEL_SCAN_BYTES:
        return 0
    return min(usable_cpus(), -(-total_bytes // BLOCK_BYTES))


def _blocks(plain: str, fmt: str, name: str, cost: QueryCost | None,
            processes: int = 0) -> Iterator[_Block]:
    """The lines of the corpus ``plain`` (``text`` or ``json``; named ``name`` in errors), a
    block at a time, in order: each parsed by :func:`_parse_block`, in this process, or with
    ``processes`` > 1 in that many helper processes (:func:`lmc_dist.ordered_map.
    ordered_map`; the same blocks, errors raised at the same place).

    Raises:
        InputError: a line that is not UTF-8 or not a valid row, or the file cannot be read.
    """
    with fsspec.open(plain, "rb") as stream:
        items = ((block, fmt, name, offset, number, cost)
                 for block, offset, number in _raw_blocks(stream, name))
        if processes > 1:
            yield from ordered_map(_parse_block, items, processes)
        else:
            yield from itertools.starmap(_parse_block, items)


def _raw_blocks(stream: Any, name: str) -> Iterator[tuple[bytes, int, int]]:
    """``(block, offset, first_line)``: the blocks of about :data:`BLOCK_BYTES` of whole
    lines of the binary ``stream`` (the corpus ``name``), each with its byte offset and the
    number of its first line.

    Raises:
        InputError: the file cannot be read (the line after the last whole block named).
    """
    offset, number = 0, 1
    blocks = whole_line_blocks(stream.read, BLOCK_BYTES)
    while True:
        try:
            block = next(blocks, None)
        except READ_ERRORS as e:
            raise InputError(name, number, f"cannot read: {e}") from None
        if block is None:
            return
        yield block, offset, number
        offset, number = offset + len(block), number + block.count(b"\n")


def _parse_block(block: bytes, fmt: str, name: str, offset: int, first_line: int,
                 cost: QueryCost | None) -> _Block:
    """The lines of ``block`` (whole lines of the corpus ``name``, in ``fmt``, from byte
    ``offset``, the first numbered ``first_line``): counted at once (:func:`_block_lines`,
    :func:`_json_block`) or, where the block needs it, line by line
    (:func:`_lines_as_block`).

    Raises:
        InputError: a line that is not UTF-8 or not a valid row.
    """
    lines = (_block_lines(block, offset, first_line, cost) if fmt == "text"
             else _json_block(block, offset, first_line, name, cost))
    return lines if lines is not None else _lines_as_block(block, fmt, name, offset,
                                                           first_line, cost)


def _lines_as_block(block: bytes, fmt: str, name: str, offset: int, first_line: int,
                    cost: QueryCost | None) -> _Block:
    """What :func:`_block_lines` or :func:`_json_block` gives, from :func:`_lines_of`: a
    block read line by line (a line that is not UTF-8 raises InputError naming it)."""
    lines = list(_lines_of(io.BytesIO(block), fmt, name, offset, first_line))
    rows = [row for row, line in enumerate(lines) if line.message is not None]
    messages = [lines[row].message for row in rows]
    return _messages_block(first_line, offset,
                           np.array([line.end for line in lines], dtype=np.int64), rows,
                           [m.text for m in messages],
                           [m.user for m in messages] if fmt == "json" else None, cost)


def _message(text: str, name: str, number: int, fmt: str) -> Message | None:
    """The message of line ``number`` (decoded ``text``); None for a blank line of a json corpus."""
    if fmt == "json":
        return parse_json_row(text, name, number) if text.strip() else None
    return Message(user=None, text=text, line=number)


def detect_format(path: str) -> str:
    """``json`` when the first non-blank line is a JSON object with ``text``, else ``text``
    (:func:`lmchallenge.corpus.detect_format`)."""
    with fsspec.open(path, "rb", compression="infer") as f:
        return corpus_format_of(first_non_blank(decode_lines(f, path)))


def scan(path: str, fmt: str, size: int | PartitionSize | ForCluster, train: bool,
         work_dir: str, cost: QueryCost | None = None,
         processes: int | None = None) -> ScanResult:
    """Validate the corpus and cut it into partitions (see the module docstring).

    Args:
        path: corpus path or fsspec URL (``.gz`` is decompressed into ``work_dir`` first).
        fmt: ``auto``, ``text`` or ``json``.
        size: target characters per partition (an int > 0), a recorded size, or a size to
            choose for a cluster from the corpus' estimated queries (needs ``cost``).
        train: never split a user's group.
        work_dir: where a decompressed copy goes.
        cost: the game's estimate of a message's model queries (recorded per partition;
            needed where ``size`` counts queries).
        processes: helper processes to parse the corpus' blocks in (0 or 1: none); None:
            as :func:`scan_processes` chooses for the corpus.
    Raises:
        InputError: a malformed line (file and line named), or an unreadable file.
    """
    if isinstance(size, int):
        size = PartitionSize(unit="characters", limit=size)
    if isinstance(size, PartitionSize) and size.limit <= 0:
        raise ValueError("the partition size must be positive")
    if cost is None and (isinstance(size, ForCluster) or size.unit == "queries"):
        raise ValueError("sizing in queries needs the game's query estimate")
    if is_stream(path):
        raise InputError(path, None, "a pipe or standard input, not a file: lmc-dist reads the "
                                     "corpus by byte ranges on the workers; write it to a file "
                                     "first (lmc run reads pipes)")
    _check_protocol(path)
    before = file_version(path)
    try:
        fmt = detect_format(path) if fmt == "auto" else fmt
        # the file's digest computed beside the scan (hashlib lets go of the GIL): a third
        # of the client's CPU in a json scan with helpers (BENCHMARKS.md, "scaling")
        with ThreadPoolExecutor(1, thread_name_prefix="lmc-dist-sha256") as hashing:
            digest = hashing.submit(sha256_of, path)
            try:
                result = _cut(path, fmt, size, train, work_dir, cost, processes, before)
            finally:    # (a missing corpus is "no such file", whatever the scan said of it)
                sha256 = digest.result()
            return replace(result, sha256=sha256)
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None


def _check_protocol(path: str) -> None:
    """Refuse a URL whose file system fsspec cannot use here: an unknown protocol, or one
    whose package is not installed (QA: ``--input s3://...`` without s3fs ended in
    fsspec's ImportError traceback).

    Raises:
        InputError: ``PATH: cannot read it here: Install s3fs to access S3`` (fsspec's words).
    """
    try:
        fsspec.core.url_to_fs(path)
    except (ImportError, ValueError) as error:    # (ValueError: "Protocol not known: x")
        raise InputError(path, None, f"cannot read it here: {error}") from None


def _cut(path: str, fmt: str, size: PartitionSize | ForCluster, train: bool, work_dir: str,
         cost: QueryCost | None, processes: int | None, before: FileVersion | None
         ) -> ScanResult:
    """:func:`scan` after the format is known: the corpus (decompressed into ``work_dir``
    if it is ``.gz``) read and cut; its ``sha256`` left empty."""
    plain = path
    if is_gzip_name(path):
        plain = os.path.join(work_dir, INPUT_COPY)
        _decompress(path, plain)
    total_bytes = _size_of(plain)
    blocks = _blocks(plain, fmt, path, cost,
                     scan_processes(fmt, total_bytes) if processes is None else processes)
    per_byte, sampled = None, []
    if cost is not None:
        per_byte, sampled = _queries_per_byte(blocks)
        if isinstance(size, ForCluster):
            size = size.resolve(per_byte * (total_bytes or SAMPLE_BYTES))
    cutter = _Cutter(size, train, total_bytes=total_bytes, queries_per_byte=per_byte)
    groups = UserGroups()
    for block in itertools.chain(sampled, blocks):
        cutter.add_block(block)
        if block.users is not None:
            groups.add_all(zip(block.users, (block.rows + block.first_line).tolist()))
    users = UserTypes.of_users(groups.users)    # (each user's first line: one pass over the rows)
    partitions = cutter.finish()
    return ScanResult(path=plain, corpus_format=fmt, sha256="", partitions=partitions,
                      messages=sum(p.messages for p in partitions),
                      characters=sum(p.characters for p in partitions), size=size, users=users,
                      groups=groups, version=before if plain == path else file_version(plain))


def _queries_per_byte(blocks: Iterator[_Block]) -> tuple[float, list[_Block]]:
    """Estimated queries per byte of the corpus' first :data:`SAMPLE_BYTES` (whole lines),
    from its first ``blocks`` (their ``queries`` estimated), and the blocks read for it (the
    scan's first: the corpus is read once)."""
    queries, sampled, read = 0, 0, []
    for block in blocks:
        read.append(block)
        last = min(int(np.searchsorted(block.line_ends, SAMPLE_BYTES, "left")),
                   len(block.line_ends) - 1)       # the line that ends the sample, or the last
        queries += int(block.queries[:int(np.searchsorted(block.rows, last, "right"))].sum())
        sampled = int(block.line_ends[last])
        if sampled >= SAMPLE_BYTES:
            break
    return (queries / sampled if sampled else 0.0), read


class _Cutter:
    """Accumulates lines into partitions, cutting only where allowed.

    Args:
        size: target size per partition (characters or estimated queries) and taper.
        train: never cut inside a user's group.
        total_bytes: size of the input, for the taper at its end (None: no taper).
        queries_per_byte: the corpus' estimated queries per byte (the taper's estimate of
            what is to come before the first partition is closed).
    """

    def __init__(self, size: PartitionSize, train: bool, total_bytes: int | None = None,
                 queries_per_byte: float | None = None):
        self.limit = size.limit
        self.divisor = size.taper_divisor
        self.measure = "queries" if size.unit == "queries" else "characters"
        self.initial_per_byte = queries_per_byte if self.measure == "queries" else 1.0
        self.train = train
        self.total_bytes = total_bytes
        self.partitions: list[Partition] = []
        self._open: dict | None = None
        self._user: object = object()   # user of the previous message (sentinel: none yet)
        self._number = -1               # message number of the previous message in its group
        self._before = 0                # characters or queries before the open partition
        self._limit = size.limit        # limit of the open partition

    def _limit_from(self, offset: int) -> int:
        """The limit of a partition starting at byte ``offset``: the characters (queries)
        still to come are estimated from the bytes still to come, at the characters
        (queries) per byte so far (at the start: one character, an upper bound in UTF-8;
        the sampled queries per byte)."""
        if not self.total_bytes:
            return self.limit
        per_byte = self._before / offset if offset > 0 else self.initial_per_byte
        return taper_limit(self.limit, (self.total_bytes - offset) * per_byte, self.divisor)

    def add_block(self, block: _Block) -> None:
        """Add the lines of ``block``, cutting before the first message that finds the open
        partition full (its size reached) where a cut is allowed (anywhere; when training,
        at a user's first message only), one search of the running sum a partition.  The
        blank lines after a message belong to its partition."""
        n = len(block.rows)
        if n:
            self._add_messages(block, n)
        if self._open is not None:
            self._open["end"] = block.end

    def _add_messages(self, block: _Block, n: int) -> None:
        """Add the ``n`` messages of ``block`` (see :meth:`add_block`)."""
        new_group = self._new_groups(block, n)
        index = np.arange(n)
        group_start = np.maximum.accumulate(np.where(new_group, index, -1))
        numbers = np.where(group_start >= 0, index - group_start, self._number + 1 + index)
        cuts = np.flatnonzero(new_group) if self.train else index   # where a cut may fall
        starts = block.message_starts()
        sums = {key: np.concatenate(([0], np.cumsum(values)))
                for key, values in (("characters", block.characters), ("queries", block.queries))}
        measured = sums[self.measure]
        i = 0
        while i < n:
            if self._open is not None and self._open[self.measure] >= self._limit \
                    and (not self.train or new_group[i]):
                self._open["end"] = int(starts[i])      # (with the blank lines before i)
                self._close()
            if self._open is None:
                start = int(starts[i])
                self._open = dict(start=start, end=start, first_line=block.first_line
                                  + int(block.rows[i]), first_message=int(numbers[i]),
                                  messages=0, characters=0, users=0, queries=0)
                self._limit = self._limit_from(start)
            part = self._open
            full = max(i + 1, int(np.searchsorted(measured, measured[i] + self._limit
                                                  - part[self.measure], "left")))
            cut = int(np.searchsorted(cuts, full, "left"))
            end = min(n, int(cuts[cut]) if cut < len(cuts) else n)
            part["users"] += int(np.count_nonzero(new_group[i:end])) \
                + (part["messages"] == 0 and not new_group[i])
            part["messages"] += end - i
            part["characters"] += int(sums["characters"][end] - sums["characters"][i])
            part["queries"] += int(sums["queries"][end] - sums["queries"][i])
            i = end
        self._number = int(numbers[-1])

    def _new_groups(self, block: _Block, n: int) -> np.ndarray:
        """Per message of ``block``, whether it begins a user's group (a plain-text corpus is
        one group: only its first message does)."""
        if block.users is None:
            new_group = np.zeros(n, dtype=bool)
            new_group[0] = self._number < 0       # (the corpus' first message)
            return new_group
        before = [self._user, *block.users[:-1]]
        self._user = block.users[-1]
        return np.fromiter((user != previous for user, previous in zip(block.users, before)),
                           dtype=bool, count=n)

    def _close(self) -> None:
        assert self._open is not None
        self.partitions.append(Partition(index=len(self.partitions), **self._open))
        self._before += self._open[self.measure]
        self._open = None

    def finish(self) -> list[Partition]:
        if self._open is not None:
            self._close()
        return self.partitions


def read_partition(path: str, partition: Partition, fmt: str,
                   name: str | None = None) -> list[Message]:
    """The messages of ``partition``, read from its byte range of ``path`` (any fsspec URL).

    Raises:
        InputError: a malformed line, or other messages than the scan counted there: the
            file changed since :func:`scan` (truncated, rewritten).
    """
    with fsspec.open(path, "rb") as f:
        f.seek(partition.start)
        data = f.read(partition.end - partition.start)
    name = name or path
    messages = []
    for number, text in decode_lines(io.BytesIO(data), name, first_line=partition.first_line):
        message = _message(text, name, number, fmt)
        if message is not None:
            messages.append(message)
    if len(data) != partition.end - partition.start or len(messages) != partition.messages:
        raise InputError(name, partition.first_line, "changed since this run scanned it: other "
                         "bytes from this line on than the scan found; start the run again in "
                         "a new --run-dir")
    return messages

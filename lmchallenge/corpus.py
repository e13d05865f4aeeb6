"""Reading test corpora: plain text or marked-up jsonlines (LM Challenge 5.x formats).

Formats (docs/formats.md, "Corpus"; docs/architecture.md, invariant 5):

* **text**: one message per line (newline-delimited, UTF-8); every line belongs to one
  group with user ``None``.
* **json**: one JSON object per line, ``{"user"|"userId": ID, "timestamp": N, "text": S}``;
  only ``text`` is required.  Consecutive rows of one user form a group.
* **auto**: json when the first non-blank line parses as a JSON object with a ``text`` key,
  else text.

A UTF-8 byte-order mark at the start of a file is not part of its first line.  ``.gz`` files
are decompressed transparently; ``-`` reads standard input.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import json.scanner
import os
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from lmchallenge.errors import InputError, json_problem

FORMATS = ("auto", "text", "json")

READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a damaged file raises (a truncated or corrupt ``.gz``: ``EOFError``,
``gzip.BadGzipFile``, ``zlib.error``)."""

BOM = "\ufeff"
"""The byte order mark: before a file's first line, not part of its text (docs/formats.md)."""
GZIP_MAGIC = b"\x1f\x8b"
"""The first bytes of a gzip stream (RFC 1952)."""
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
"""The byte order marks a UTF-16 text starts with (little- and big-endian)."""
PARQUET_MAGIC = b"PAR1"
"""The first bytes of a Parquet file."""


@dataclass(frozen=True, slots=True)
class Message:
    """One corpus row.

    Attributes:
        user: the user ID as the row gives it, a string or an integer (``1`` and ``"1"`` are
            different users, as in LM Challenge 5.x), ``None`` for plain text or rows
            without a user.
        text: the message text (no trailing newline).
        timestamp: the row's timestamp (any JSON number), or ``None``.
        line: 1-based line number in the source (for error messages).
    """

    user: str | int | None
    text: str
    timestamp: float | int | None = None
    line: int = 0


@dataclass
class UserGroups:
    """The groups of a corpus (runs of consecutive rows of one user: LM Challenge 5.x's
    grouping, docs/formats.md), and the first row where a user's rows resume after other
    users' rows: a corpus in time order, its users' rows interleaved, makes a group of each
    run of a user's rows, so ``users`` (a statistic that counts groups) counts runs and
    ``--train`` clears the model before each run. Fed row by row (:meth:`add_all`), in order.

    Attributes:
        groups: the groups so far.
        users: the distinct users so far (``None``: rows without a user), each with the
            line of its first row, in the order they first came.
        resumed: the line and user of the first row whose user had a group before, or None.
    """

    groups: int = 0
    users: dict[str | int | None, int] = field(default_factory=dict)
    resumed: tuple[int, str | int | None] | None = None
    _current: Any = field(default=None, repr=False)

    def add_all(self, rows: Iterable[tuple[str | int | None, int]]) -> int:
        """Note ``rows``, each as its user and its line (1-based); returns how many."""
        current, groups, seen, count = self._current, self.groups, self.users, 0
        for user, line in rows:
            count += 1
            if groups and user == current and type(user) is type(current):
                continue
            groups += 1
            current = user
            if user not in seen:
                seen[user] = int(line)
            elif self.resumed is None:
                self.resumed = (int(line), user)
        self._current, self.groups = current, groups
        return count

    def warning(self, name: str) -> str | None:
        """What to say of a corpus (``name``: as messages name it) whose users' rows are
        not each consecutive, or None where they are."""
        if self.resumed is None:
            return None
        line, user = self.resumed
        return (f"{name}:{line}: user {json.dumps(user)} comes back after other users' rows: "
                f"as in LM Challenge 5.x, a group is a run of one user's consecutive rows, so "
                f"the corpus' {len(self.users):,} users make {self.groups:,} groups; lmc stats "
                f"counts each as a user, and --train clears the model before each. For one "
                f"group a user, sort the corpus by user, keeping each user's rows in order")


def not_text(start: bytes) -> str | None:
    """What a file starting with the bytes ``start`` is, if it is a known form that is not
    UTF-8 text (gzip data, UTF-16 text), with what to do about it; else None."""
    if start.startswith(GZIP_MAGIC):
        return "gzip-compressed data, not text: give it as a file named .gz, or decompress it (zcat)"
    if start.startswith(PARQUET_MAGIC):
        return "Parquet data, not text: give it as a file named .parquet"
    if start.startswith(UTF16_BOMS):
        return ("UTF-16 text (it starts with a UTF-16 byte order mark), not UTF-8: convert it "
                "(iconv -f UTF-16 -t UTF-8)")
    return None


def is_gzip_name(path: str) -> bool:
    """True if ``path`` names a gzip file (``.gz`` or ``.gzip``, in any case: QA, ``.GZ``
    was read as text and refused as 'gzip-compressed data: give it as a file named .gz')."""
    return path.lower().endswith((".gz", ".gzip"))


def open_binary(path: str) -> contextlib.AbstractContextManager[BinaryIO]:
    """Open ``path`` for reading bytes, gunzipping ``.gz``/``.gzip``; ``-`` is standard input
    (left open when the context ends).

    Raises:
        OSError: the file cannot be opened (FileNotFoundError when it does not exist).
        InputError: a ``.gz`` file that is empty (:data:`EMPTY_GZIP`).
    """
    if path == "-":
        return contextlib.nullcontext(sys.stdin.buffer)
    if is_gzip_name(path):
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise InputError(path, None, EMPTY_GZIP)
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


EMPTY_GZIP = ("an empty file, not gzip data (gzip -t: unexpected end of file; an empty text "
              "compressed is 20 bytes): a compression that failed?")
"""Why an empty ``.gz`` file is refused: Python's gzip reads it as an empty text, so a run
on it gave an empty log, exit 0 (QA)."""


def is_special_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists and is a pipe (a named FIFO, bash's ``<(...)``,
    ``/dev/stdin``), a character device or a socket: read once, written in place."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def is_stream(path: str) -> bool:
    """Whether ``path`` can be read only once: ``-`` (standard input) or a special file
    (:func:`is_special_file`); a URL, a regular file, a directory or a missing path is not."""
    return path == "-" or (not is_url(path) and is_special_file(path))


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL (``s3://bucket/key``, ``memory://x``: anything with ``://``,
    as fsspec splits a protocol off), not a local path."""
    return "://" in os.fspath(path)


FileVersion = tuple[int, int, int, int]
"""A local file's device, inode, size in bytes and modification time (ns): another version
of it (rewritten, truncated, replaced) has another."""


def file_version(path: str) -> FileVersion | None:
    """The :data:`FileVersion` of the regular local file ``path`` (None for a stream, a URL
    or a missing path)."""
    if path == "-" or is_url(path):
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def check_unchanged(path: str, before: FileVersion | None, messages: int | None = None,
                    read: int | None = None, what: str = "this run",
                    again: str = "run again on a corpus that stays as it is") -> None:
    """Refuse a corpus that changed while ``what`` read it: its :func:`file_version` is not
    ``before`` any more, or ``read`` messages were read where ``messages`` were counted;
    ``again`` says what to do.

    Raises:
        InputError: naming ``path``: the log would be of no one version of the corpus.
    """
    now = file_version(path) if before is not None else None
    if now == before and messages == read:
        return
    how = (f"{messages} messages when it was checked, {read} when it was read"
           if messages != read else "another size or modification time, or replaced")
    raise InputError(path, None, f"changed while {what} read it ({how}): its log would be of "
                                 f"no one version of the corpus; {again}")


def arrived_reader(stream: BinaryIO) -> Callable[[int], bytes]:
    """``stream.read1`` where it has one (a call returns what has arrived: the lines a
    client sent so far, not a buffer filled by waiting for more), else ``stream.read``: the
    ``read`` of :func:`whole_line_blocks` for a protocol stream."""
    return getattr(stream, "read1", None) or stream.read


def whole_line_blocks(read: Callable[[int], bytes], size: int = 1 << 16) -> Iterator[bytes]:
    """Consecutive runs of whole lines (each ending in LF) of a binary stream: one per
    ``read(size)`` call that completed a line, then what follows the last LF, if anything.

    With ``read`` a ``read1`` (what has arrived, in one call) a run is every line received
    so far (the protocol server answers them, then flushes); with a plain ``read``, runs of
    about ``size`` bytes (a line longer than that is one run).
    """
    partial: list[bytes] = []  # read, not yet ended by an LF
    while chunk := read(size):
        end = chunk.rfind(b"\n") + 1
        if not end:
            partial.append(chunk)
            continue
        partial.append(chunk[:end])
        yield b"".join(partial)
        partial = [chunk[end:]] if end < len(chunk) else []
    if partial:
        yield b"".join(partial)


def looks_like_json_row(line: str) -> bool:
    """True if ``line`` is a JSON object with a ``text`` key (the auto-detection rule)."""
    stripped = line.strip()
    if not stripped.startswith("{"):
        return False
    try:
        row = json.loads(stripped)
    except json.JSONDecodeError:
        return False
    except (ValueError, RecursionError):    # JSON, but a value Python does not read (an
        return '"text"' in stripped    # integer of 4,300+ digits, arrays nested past its stack):
                                       # a json corpus, its row reported as bad
    return isinstance(row, dict) and "text" in row


def first_non_blank(lines: Iterable[tuple[int, str]]) -> str | None:
    """The first line of ``lines`` (numbered texts) that is not blank, or None."""
    return next((text for _, text in lines if text.strip()), None)


def detect_format(first: str | None) -> str:
    """``json`` when ``first`` (the first non-blank line of a corpus, or None when there is
    none) is a JSON object with a ``text`` key, else ``text``."""
    return "json" if first is not None and looks_like_json_row(first) else "text"


def decode_lines(stream: Iterable[bytes], path: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of a byte stream, without the line ending
    (and, on line 1, without a byte-order mark).

    Raises:
        InputError: a line is not valid UTF-8, or the stream cannot be read (a corrupt
            ``.gz``: the line where reading failed is named).
    """
    number = first_line - 1
    lines = iter(stream)
    while True:
        try:
            raw = next(lines, None)
        except READ_ERRORS as e:
            raise InputError(path, number + 1, f"cannot read: {e}") from None
        if raw is None:
            return
        number += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            why = not_text(raw) if number == 1 else None
            if why:
                raise InputError(path, number, why) from None
            raise InputError(path, number, f"not valid UTF-8 (byte {e.start} of the line)") from None
        if number == 1 and text.startswith(BOM):
            text = text[1:]
        yield number, text.rstrip("\r\n") if text.endswith("\n") else text.rstrip("\r")


def parse_json_row(text: str, path: str, number: int) -> Message:
    """Parse one marked-up row into a :class:`Message`.

    Raises:
        InputError: invalid JSON, not an object, no string ``text``, or a bad ``user``.
    """
    user, message_text, timestamp = json_row_fields(text, path, number)
    return Message(user=user, text=message_text, timestamp=timestamp, line=number)


JsonRow = tuple["str | int | None", str, "float | int | None"]
"""A marked-up row's user, text and timestamp (as :class:`Message` holds them)."""


def json_row_fields(text: str, path: str, number: int) -> JsonRow:
    """The user, text and timestamp of one marked-up row (line ``number`` of ``path``):
    :func:`parse_json_row` without making a :class:`Message` (a scan of millions of rows
    needs only some of them).

    Raises:
        InputError: as :func:`parse_json_row`.
    """
    row = _json_object(text)
    if row is None:
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InputError(path, number, f"invalid JSON: {json_problem(e)}") from None
    if not isinstance(row, dict):
        raise InputError(path, number, "a marked-up row must be a JSON object")
    if "text" not in row:
        raise InputError(path, number, 'row has no "text"')
    message_text = row["text"]
    if not isinstance(message_text, str):
        raise InputError(path, number, '"text" must be a string')
    user = row["user"] if "user" in row else row.get("userId")
    if isinstance(user, bool) or not (user is None or isinstance(user, (str, int))):
        raise InputError(path, number, '"user"/"userId" must be a string, an integer or null')
    if "\\u" in text:  # only an escape can make a lone surrogate
        _check_unicode(message_text, path, number, "text")
        if isinstance(user, str):
            _check_unicode(user, path, number, "user")
    timestamp = row.get("timestamp")
    if isinstance(timestamp, bool) or not (timestamp is None or isinstance(timestamp, (int, float))):
        raise InputError(path, number, '"timestamp" must be a number')
    return user, message_text, timestamp


_SCAN_VALUE = json.scanner.make_scanner(json.JSONDecoder())
"""The standard decoder's scanner of one JSON value (``scan(text, index) -> (value, end)``;
C code, no state kept between calls): what ``json.loads`` calls, without its wrapping."""
_JSON_SPACE = " \t\n\r"


def _json_object(text: str) -> dict | None:
    """``json.loads(text)`` for the usual row, an object from its first character to its
    end (or to JSON whitespace), at about a third of the cost (BENCHMARKS.md, "scaling",
    2026-11-28 05:40); None for any other text, which ``json.loads`` then reads (or says
    what is wrong with)."""
    if not text.startswith("{"):
        return None
    try:
        row, end = _SCAN_VALUE(text, 0)
    except (StopIteration, ValueError, RecursionError):
        return None
    return None if end < len(text) and text[end:].strip(_JSON_SPACE) else row


def _check_unicode(value: str, path: str, number: int, key: str) -> None:
    """Raise :class:`InputError` if ``value`` holds a lone surrogate (``"\\ud800"`` is valid
    JSON but no Unicode text: it cannot be sent to a model nor written to a log)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(path, number, f'"{key}" holds a lone surrogate \\u{ord(value[e.start]):04x}'
                                       " (not a Unicode character)") from None


def parse_lines(lines: Iterable[tuple[int, str]], path: str, fmt: str) -> Iterator[Message]:
    """Turn numbered lines into messages in format ``text`` or ``json`` (``auto`` detects
    from the first non-blank line).

    Blank lines of a json corpus are skipped; blank lines of a text corpus are empty messages.
    """
    lines = iter(lines)
    if fmt == "auto":
        head: list[tuple[int, str]] = []
        for line in lines:
            head.append(line)
            if line[1].strip():
                break
        fmt = detect_format(first_non_blank(head))
        lines = itertools.chain(head, lines)
    if fmt == "json":
        for number, text in lines:
            if text.strip():
                yield parse_json_row(text, path, number)
    elif fmt == "text":
        for number, text in lines:
            yield Message(user=None, text=text, line=number)
    else:
        raise ValueError(f"unknown corpus format {fmt!r} (expected one of {FORMATS})")


def input_name(path: str) -> str:
    """How messages name the input ``path``: ``<stdin>`` for ``-``, else the path itself."""
    return "<stdin>" if path == "-" else path


def read_corpus(path: str, fmt: str = "auto") -> Iterator[Message]:
    """Read a corpus lazily, message by message.

    Args:
        path: a file (``.gz`` ok) or ``-`` for standard input.
        fmt: ``auto``, ``text`` or ``json``.
    Raises:
        InputError: the file is missing, or a line is malformed (file and line named).
    """
    try:
        opened = open_binary(path)
    except FileNotFoundError:
        raise InputError(path, None, "no such file" + (
            " (a local file or standard input is read here, not a URL: lmc-dist run --input "
            "reads URLs)" if is_url(path) else "")) from None
    except OSError as e:
        raise InputError(path, None, f"cannot open: {e.strerror}") from None
    name = input_name(path)
    with opened as stream:
        yield from parse_lines(decode_lines(stream, name), name, fmt)


def messages_from_data(data: Iterable[str | dict | Message]) -> Iterator[Message]:
    """Messages from Python data (the ``lmc.wc(model, data)`` API).

    ``data`` is an iterable of strings (plain text lines), of dicts (marked-up rows with
    ``text`` and optionally ``user``/``userId``/``timestamp``), or of :class:`Message`.

    Raises:
        InputError: an item is neither (names its index as the "line").
    """
    for index, item in enumerate(data, start=1):
        if isinstance(item, Message):
            yield item
        elif isinstance(item, str):
            yield Message(user=None, text=item, line=index)
        elif isinstance(item, dict):
            yield parse_json_row(json.dumps(item), "<data>", index)
        else:
            raise InputError("<data>", index, f"expected a string or a dict, got {type(item).__name__}")


def read_all(path: str, fmt: str = "auto") -> list[Message]:
    """Read and validate a whole corpus into memory (used for standard input)."""
    return list(read_corpus(path, fmt))

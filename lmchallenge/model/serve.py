"""The model side of the LM Challenge line protocol, for any Python model.

docs/formats.md, "Model protocol": UTF-8 lines, fields separated
by TAB, one command a line:

* ``predict<TAB>CONTEXT[<TAB>CANDIDATE...]`` -> one line ``text<TAB>score<TAB>...``
  (an empty line when there is nothing to say);
* ``train<TAB>TEXT`` and ``clear`` -> no output at all.

:func:`serve` runs that loop for any object with ``predict(context, candidates)``,
``train(text)`` and ``clear()`` (``train``/``clear`` optional).  It never leaves a client
waiting: every ``predict`` gets exactly one answer line, even when the request is malformed
(not UTF-8: a message goes to stderr and the answer is an empty line); an unknown command
only writes to stderr.  A model that raises ends the serving (the exception propagates, as
in LM Challenge 5.2, after a line on stderr naming the request): its process exits and the
client names it, where an empty answer would have been logged as a token it did not score.
Answers are flushed whenever the requests already received are used up (before the loop
waits for more input) and every :data:`FLUSH_EVERY` answers in between, so a client that
sends one request and waits gets its answer at once, while a pipelining client gets its
answers in batches (one system call per batch on either side, not one per answer).
Lines are split on LF only (a CR inside a context is text).  Scores are written with
``repr`` (the shortest text that reads back as the same float).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

from lmchallenge.corpus import arrived_reader, whole_line_blocks
from lmchallenge.tuning import GAME_VARIABLE
from lmchallenge.model.wire import format_answer, parse_request

FLUSH_EVERY = 16
"""Requests answered between flushes while more requests are already waiting."""


def refused_game(refuses: Mapping[str, str]) -> str | None:
    """Why a model served over the protocol does not play the game ``lmc run`` or
    ``lmc-dist`` name in its environment (``LMC_GAME``: docs/formats.md), if ``refuses``
    (:attr:`lmchallenge.model.api.Model.refuses`) names it: ``does not play GAME: WHY``."""
    game = os.environ.get(GAME_VARIABLE)
    return f"does not play {game}: {refuses[game]}" if game in refuses else None


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def handle(model: Any, raw: bytes | str, output: IO[bytes], errors: IO[str]) -> None:
    """Answer one request line (bytes, or text already decoded; with or without its LF) on
    ``output``."""
    if isinstance(raw, str):
        line = raw.rstrip("\n")
    else:
        raw = raw.rstrip(b"\n")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            command = raw.split(b"\t", 1)[0]
            errors.write(f"protocol: request is not valid UTF-8 (byte {e.start}): {raw[:80]!r}\n")
            if command == b"predict":
                output.write(b"\n")
            return
    if not line:
        return  # a blank line asks nothing
    command, text, candidates = parse_request(line)
    if command not in ("predict", "train", "clear"):
        errors.write(f"protocol: unknown command {command[:80]!r}\n")
        return
    method = model.predict if command == "predict" else getattr(model, command, None)
    if method is None:      # (train and clear are optional)
        return
    try:
        if command == "predict":
            output.write(format_answer(method(text, candidates)).encode("utf-8"))
        else:
            method(text) if command == "train" else method()
    except Exception as e:
        # the model's own failure ends the serving, as in LM Challenge 5.2 (its traceback
        # follows): answered with an empty line, it was logged as unscored, exit 0 (QA)
        errors.write(f"protocol: {command} failed on the request {line[:200]!r}: "
                     f"{_describe(e)}\n")
        raise


def serve(model: Any, input_stream: IO | None = None, output_stream: IO | None = None,
          error_stream: IO[str] | None = None) -> None:
    """Serve ``model`` over the line protocol until the input ends.

    Args:
        model: an object with ``predict`` (and optionally ``train``, ``clear``).
        input_stream: binary (or text) stream of requests; default standard input.
        output_stream: binary (or text) stream for answers; default standard output.
        error_stream: text stream for diagnostics; default standard error.
    Raises:
        Exception: what the model's ``predict``, ``train`` or ``clear`` raised (the
            answers before it are written).
    """
    source = _binary(input_stream if input_stream is not None else sys.stdin)
    sink = _binary(output_stream if output_stream is not None else sys.stdout)
    buffered = None
    if isinstance(sink, io.RawIOBase):  # sys.stdout.buffer under python -u: writes may be short
        sink = buffered = io.BufferedWriter(sink)
    errors = error_stream if error_stream is not None else sys.stderr
    answers = io.BytesIO()  # gathered here, written to the sink in one call per flush
    try:
        for block in whole_line_blocks(arrived_reader(source)):
            lines = _lines(block)
            if not lines[-1]:
                lines.pop()  # the block ended with its last line's LF
            for count, raw in enumerate(lines, start=1):
                handle(model, raw, answers, errors)
                if count % FLUSH_EVERY == 0:
                    _flush(answers, sink)
            _flush(answers, sink)  # the requests read so far are answered: flush before waiting
    finally:    # answers gathered before a model's SystemExit or a Ctrl-C are not lost
        with contextlib.suppress(OSError, ValueError):      # (a broken pipe: not ours)
            _flush(answers, sink)
        if buffered is not None:    # let go of the caller's stream without closing it
            with contextlib.suppress(OSError, ValueError):
                buffered.detach()


def _lines(block: bytes) -> list[str] | list[bytes]:
    """The LF-separated lines of ``block``, decoded in one call; as bytes if it is not UTF-8
    (:func:`handle` then names the line that is not)."""
    try:
        return block.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return block.split(b"\n")


def _flush(answers: io.BytesIO, sink: Any) -> None:
    """Write the buffered ``answers`` to ``sink`` in one call and flush it."""
    if answers.tell():
        sink.write(answers.getvalue())
        answers.seek(0)
        answers.truncate()
    sink.flush()


class _TextAdapter:
    """Adapts a text stream (``io.StringIO``) to the bytes ``read1``/``write``/``flush``
    that :func:`serve` uses."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def read1(self, size: int = -1) -> bytes:
        return self._stream.read(size).encode("utf-8")

    def write(self, data: bytes) -> None:
        self._stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self._stream.flush()


def _binary(stream: Any) -> Any:
    """The binary side of ``stream``: its ``buffer`` (``sys.stdin``), an adapter for a text
    stream without one (``io.StringIO``), or the stream itself (already binary)."""
    if hasattr(stream, "buffer"):
        return stream.buffer
    if isinstance(stream, io.TextIOBase):
        return _TextAdapter(stream)
    return stream


__all__ = ["serve", "handle"]

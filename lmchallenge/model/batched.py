"""The line protocol answered in batched calls, for a model with ``predict_batch``.

The server side used by ``lmc-neural serve`` (:func:`serve_batched`, on a pipe) and by its
shared form (:mod:`lmchallenge.model.shared`, on a socket for many clients): the requests
that have arrived are read as one block (:func:`queries_of`), their ``predict`` queries are
cut into calls (:func:`groups`: up to the model's ``predict_batch_size`` scoring queries
with at most :data:`BATCH_CANDIDATES` candidates in all, or one completion search a call),
and each call's answers are written in one go (:func:`answer_lines`).  ``train`` and
``clear`` are read and ignored (the models served this way do not adapt).  Requests that
are not UTF-8 get an empty answer line and a message on the error stream, as in
:mod:`lmchallenge.model.serve`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from lmchallenge.corpus import arrived_reader, whole_line_blocks
from lmchallenge.model.wire import format_answer, parse_request

BATCH_CANDIDATES = 1024
"""Most candidates in the scoring queries of one ``predict_batch`` call (then written and
flushed): ``wr`` queries with 100 candidates each share no passes, so a few at a time keep
the answers flowing within the client's ``--timeout``."""

Query = tuple[str, "list[str] | None"] | None
"""A ``predict`` request's (context, candidates or ``None``), or ``None`` for one that is
not UTF-8 (answered with an empty line)."""


def queries_of(block: bytes, errors: IO[str], name: str = "lmc-neural") -> list[Query]:
    """The ``predict`` queries of ``block`` (whole LF-ended request lines), in order; other
    commands are dropped (``train``, ``clear``; an unknown one with a line on ``errors``,
    which ``name`` starts)."""
    queries: list[Query] = []
    for raw in block.split(b"\n"):
        if not raw:
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            errors.write(f"{name}: request is not valid UTF-8 (byte {e.start}): "
                         f"{raw[:80]!r}\n")
            if raw.split(b"\t", 1)[0] == b"predict":
                queries.append(None)
            continue
        command, text, candidates = parse_request(line)
        if command == "predict":
            queries.append((text, candidates))
        elif command not in ("train", "clear"):
            errors.write(f"{name}: unknown command {command[:80]!r}\n")
    return queries


def groups(queries: list[Query], most: int, candidates: int = BATCH_CANDIDATES) -> list[list[Query]]:
    """Consecutive queries answered together: up to ``most`` scoring queries with up to
    ``candidates`` candidates in all (a query with more alone), or one completion query (a
    search of many passes), so answers flow back steadily."""
    cut: list[list[Query]] = []
    count = 0
    for query in queries:
        searching = query is not None and query[1] is None
        size = len(query[1]) if query is not None and query[1] is not None else 0
        if (not cut or searching or len(cut[-1]) >= most or count + size > candidates
                or (cut[-1][0] is not None and cut[-1][0][1] is None)):
            cut.append([query])
            count = size
        else:
            cut[-1].append(query)
            count += size
    return cut


def answer_lines(model: Any, group: list[Query]) -> list[str]:
    """One answer line (LF-ended) per query of ``group``, from one ``model.predict_batch``
    call over its UTF-8 queries (an empty line for the others).

    Raises:
        Exception: what ``model.predict_batch`` raised.
    """
    valid = [q for q in group if q is not None]
    answers = iter(model.predict_batch(valid) if valid else [])
    return [format_answer(next(answers)) if q is not None else "\n" for q in group]


def serve_batched(model: Any, source: IO[bytes], sink: IO[bytes], errors: IO[str]) -> None:
    """Answer the protocol on binary streams for ``model`` (a
    :class:`~lmchallenge.model.neural.adapter.CausalLM`, or any object with
    ``predict_batch`` and ``predict_batch_size``) until ``source`` ends, writing and
    flushing each call's answers.

    Raises:
        Exception: what ``model.predict_batch`` raised (the answers before it are written).
    """
    for block in _blocks(source):
        for group in groups(queries_of(block, errors), model.predict_batch_size):
            sink.write("".join(answer_lines(model, group)).encode("utf-8"))
            sink.flush()


def _blocks(source: IO[bytes]) -> Iterator[bytes]:
    return whole_line_blocks(arrived_reader(source))


__all__ = ["BATCH_CANDIDATES", "queries_of", "groups", "answer_lines", "serve_batched"]

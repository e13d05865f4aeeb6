"""Answer streams for any model: a :class:`~lmchallenge.model.shell.ShellModel` (pipelined), a
model with ``predict_batch``, or any object with ``predict``/``train``/``clear``
(:class:`InProcessModel`, which checks its answers and names its failures as a shell model's
are named)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from lmchallenge.errors import LmcError, ModelError
from lmchallenge.model.wire import (Clear, Predict, Request, Result, Train, check_result,
                                    encode_request, first_of_each, has_duplicates, plain_scores,
                                    protocol_text)

LOG = logging.getLogger(__name__)

ANSWERS_EVERY = 0.2
"""Seconds a Python model without ``predict_batch`` may spend on a run of predicts before
the answers so far are given on (:meth:`InProcessModel._predict_each`)."""


class Streaming(Protocol):
    def stream(self, requests: Iterable[Request]) -> Iterator[Result]: ...


def session(model: Any, requests: Iterable[Request],
            batch_size: int | None = None) -> Iterator[Result]:
    """Run ``requests`` against ``model``, yielding one answer per :class:`Predict`, in order.

    ``model`` is a :class:`ShellModel` (pipelined), a model with ``predict_batch`` (called
    with up to ``batch_size`` consecutive predicts; default the model's
    ``predict_batch_size`` attribute if it has one, else 64), or any object with
    ``predict``, ``train`` and ``clear`` (duck typing, as LM Challenge 5.x).

    Raises:
        ModelError: the model failed (see :class:`InProcessModel` for Python objects).
    """
    for answers in session_batches(model, requests, batch_size):
        yield from answers


def session_batches(model: Any, requests: Iterable[Request],
                    batch_size: int | None = None) -> Iterator[list[Result]]:
    """As :func:`session`, but the answers come in consecutive non-empty lists (as the
    model produced them: a pipe read, a ``predict_batch`` call, one ``predict``)."""
    if hasattr(model, "stream_batches"):
        yield from model.stream_batches(requests)
        return
    if hasattr(model, "stream"):
        for answer in model.stream(requests):
            yield [answer]
        return
    yield from InProcessModel(model, batch_size=batch_size).stream_batches(requests)


def python_name(model: Any) -> str:
    """``module:Class`` of ``model``'s type, naming an in-process model in messages."""
    kind = type(model)
    return f"{kind.__module__}:{kind.__qualname__}"


class InProcessModel:
    """A Python model called in this process, answering as a shell model does.

    Predicts are drawn up to ``batch_size`` consecutive ones at once (default the model's
    ``predict_batch_size`` attribute if it has one, else 64) and go to ``model.predict_batch``
    if it has one, else to ``model.predict`` one by one; ``train``/``clear`` are called if the
    model has them (after the predicts before them are answered).
    Every other attribute is the model's.

    Its texts are those a shell model reads (:func:`lmchallenge.model.wire.protocol_text`: a
    TAB, LF or CR in a context or candidate is a space), so that a model gives the same log
    in process, over a pipe and in ``lmc-dist``.  Answers are checked as a shell model's
    answer lines are: a score that is a number but not finite is an error; a text given twice
    in one answer keeps its first pair (a warning, once per :class:`InProcessModel`).

    Args:
        model: the Python object.
        name: how messages name it (the ``module:Class`` spec; default the type's name).
        batch_size: most predicts per ``predict_batch`` call (``None``: as above).
        context: the object whose ``__enter__`` returned ``model``, left at :meth:`close`.
        overdue: seconds after which a call still running is warned about, once, naming the
            request (``None``: never).  A Python model cannot be stopped as a shell model is
            killed after its ``--timeout``; the warning says which request it is stuck on.
    Raises:
        ModelError: (from :meth:`stream_batches`) the model raised (its type and message
            are named, the exception is chained), ``predict_batch`` returned a wrong number
            of answers, or an answer has a non-finite score; naming ``name`` and the request.
            An :class:`~lmchallenge.errors.LmcError` the model raises goes through as it is.
    """

    def __init__(self, model: Any, name: str | None = None, batch_size: int | None = None,
                 context: Any = None, overdue: float | None = None):
        self.model = model
        self.context = context
        self.overdue = overdue
        self._calling: tuple[float, str, Any] | None = None     # (started, method, request)
        self._watcher: threading.Thread | None = None
        self.name = name or python_name(model)
        self.batch_size = batch_size or getattr(model, "predict_batch_size", None) or 64
        self._warned_duplicates = False
        self._closed = False

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "model":  # not set yet (unpickling): no recursion
            raise AttributeError(attribute)
        return getattr(self.model, attribute)

    def close(self) -> None:
        """Leave the model's ``context`` (``__exit__`` of the object whose ``__enter__`` made
        it), else close the model if it has ``close`` or ``__exit__``; once (later calls do
        nothing).

        Raises:
            ModelError: that raised (its type and message named; a ModelError of its own as
                it is).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self.context is not None:
                self.context.__exit__(None, None, None)
            elif hasattr(self.model, "close"):
                self.model.close()
            elif hasattr(self.model, "__exit__"):
                self.model.__exit__(None, None, None)
        except LmcError:
            raise
        except (Exception, SystemExit) as e:
            raise ModelError(self.name, f"closing it raised {type(e).__name__}: {e}",
                             stderr_tail=None) from e

    def stream_batches(self, requests: Iterable[Request]) -> Iterator[list[Result]]:
        """Answers to the predicts of ``requests``, in order, in non-empty lists: up to
        ``batch_size`` consecutive predicts are drawn at once and answered by one
        ``predict_batch`` call, or by ``predict`` calls one by one (:meth:`_predict_each`)."""
        batched = hasattr(self.model, "predict_batch")
        pending: list[Predict] = []
        for request in requests:
            if isinstance(request, Predict):
                pending.append(request)
                if len(pending) < self.batch_size:
                    continue
            if pending:
                yield from self._answers(pending, batched)
                pending = []
            if isinstance(request, Train):
                self._call_optional(request, "train", protocol_text(request.text))
            elif isinstance(request, Clear):
                self._call_optional(request, "clear")
        if pending:
            yield from self._answers(pending, batched)

    def _answers(self, predicts: list[Predict], batched: bool) -> Iterator[list[Result]]:
        if batched:
            yield self._predict_batch(predicts)
        else:
            yield from self._predict_each(predicts)

    def _predict_each(self, predicts: list[Predict]) -> Iterator[list[Result]]:
        """The answers of ``model.predict`` to ``predicts``, a call each, given in lists: at
        least every :data:`ANSWERS_EVERY` seconds (a slow model's progress shows as it
        goes), and, when a call fails, those before it first, so that the error names the
        token of the failing request (:func:`lmchallenge.games.runner.run_game`).  Drawn
        and given on a run at a time rather than one by one, they spare the game's loop and
        the generators between it and the model a step a query: 13-16% less CPU a ``we``
        token with the built-in n-gram model (BENCHMARKS.md, "overhead")."""
        answers: list[Result] = []
        since = time.monotonic()
        try:
            for request in predicts:
                answers.append(self._answer(request, self._call(request, "predict",
                                                                *_as_read(request))))
                if time.monotonic() - since >= ANSWERS_EVERY:
                    yield answers
                    answers, since = [], time.monotonic()
        except LmcError:
            if answers:
                yield answers
            raise
        if answers:
            yield answers

    def _predict_batch(self, predicts: list[Predict]) -> list[Result]:
        answers = self._listed(self._call(predicts, "predict_batch",
                                          [_as_read(p) for p in predicts]),
                               "predict_batch", "a list of answers, one per query", predicts)
        if len(answers) != len(predicts):
            raise self._error(f"predict_batch returned {len(answers)} answers for "
                              f"{len(predicts)} queries", predicts)
        return [self._answer(p, answer) for p, answer in zip(predicts, answers)]

    def _call_optional(self, request: Request, method: str, *args: Any) -> None:
        if hasattr(self.model, method):
            self._call(request, method, *args)

    def _call(self, request: Request | Sequence[Predict], method: str, *args: Any) -> Any:
        if self.overdue is not None and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name="lmc-overdue-model")
            self._watcher.start()
        self._calling = (time.monotonic(), method, request)
        try:
            return getattr(self.model, method)(*args)
        except LmcError:
            raise
        except (Exception, SystemExit) as e:   # sys.exit in a model (argparse) is its failure
            raise self._error(f"{method} raised {type(e).__name__}: {e}", request) from e
        finally:
            self._calling = None

    def _watch(self) -> None:
        """Until the model is closed: warn once about each call running past :attr:`overdue`."""
        assert self.overdue is not None
        warned = None
        while not self._closed:
            time.sleep(min(1.0, self.overdue / 4))
            calling = self._calling
            if calling is None or calling is warned or time.monotonic() - calling[0] < self.overdue:
                continue
            warned = calling
            started, method, request = calling
            first = request[0] if isinstance(request, Sequence) else request
            LOG.warning("model %r has been in %s for %.0f s (request %r): a Python model has no "
                        "time limit (--timeout stops a shell model only); Ctrl-C stops the run",
                        self.name, method, time.monotonic() - started,
                        encode_request(first).rstrip("\n")[:ModelError.SHOWN_REQUEST])

    def _answer(self, request: Predict, answer: Iterable[tuple[str, float]]) -> Result:
        result = self._listed(answer, "predict", "(text, score) pairs", request)
        try:
            plain = check_result(result)
        except ValueError as e:
            raise self._error(f"malformed answer {_shorten(repr(result))}: {e}",
                              request) from None
        if not plain:
            result = plain_scores(result)
        if has_duplicates(result):
            if not self._warned_duplicates:
                self._warned_duplicates = True
                LOG.warning("model %r answered a text twice in one answer (%s); the first of "
                            "each is kept (warned once)", self.name, _shorten(repr(result)))
            result = first_of_each(result)
        return result

    def _listed(self, answer: Any, method: str, expected: str,
                requests: Request | Sequence[Predict]) -> list:
        """``answer``, what the model's ``method`` returned for ``requests``, as a list.  A
        lazy iterable (a generator) is run here: what it raises is the model's error, as if
        ``method`` had raised it (QA: a traceback); one that is not iterable is a malformed
        answer (``expected`` says what was)."""
        try:
            items = iter(answer)
        except TypeError:
            raise self._error(f"malformed answer {_shorten(repr(answer))}: expected {expected}, "
                              f"got {type(answer).__name__}", requests) from None
        try:
            return list(items)
        except LmcError:
            raise
        except (Exception, SystemExit) as e:
            raise self._error(f"{method} raised {type(e).__name__}: {e}", requests) from e

    def _error(self, reason: str, requests: Request | Sequence[Predict]) -> ModelError:
        """A :class:`ModelError` naming ``requests`` (the first is the failing one's), with
        no stderr (the model has none of its own)."""
        if not isinstance(requests, Sequence):
            requests = [requests]
        lines = tuple(encode_request(r).rstrip("\n")[:ModelError.SHOWN_REQUEST + 1]
                      for r in requests)
        return ModelError(self.name, reason, query=lines[0] if lines else None,
                          stderr_tail=None, in_flight=lines if len(lines) > 1 else ())


def _as_read(request: Predict) -> tuple[str, Sequence[str] | None]:
    """The context and candidates of ``request`` as a shell model reads them."""
    candidates = request.candidates
    return protocol_text(request.context), \
        None if candidates is None else [protocol_text(c) for c in candidates]


def _shorten(text: str, most: int = 200) -> str:
    return text if len(text) <= most else text[:most] + "..."


__all__ = ["session", "session_batches", "InProcessModel", "python_name"]

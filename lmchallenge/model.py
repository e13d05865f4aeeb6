"""The model API of LM Challenge 5.x and the ways to run a model.

A model answers three requests (``../shared/seeds/001_a51f61792860ca8b.txt``, "Model API"):

* ``predict(context, candidates)``: scored continuations of ``context``; with
  ``candidates=None`` the model proposes its own, otherwise it scores those it can;
* ``train(text)``: adapt to a message after it has been evaluated;
* ``clear()``: forget everything learnt by ``train`` (a new user starts).

:class:`Model`, :class:`WordModel` and :class:`FilteringWordModel` are the base classes of
in-process Python models (same names and semantics as LM Challenge 5.x); :class:`ShellModel`
runs any program speaking the line protocol over pipes, with a bounded window of requests in
flight (DESIGN.md, "Pipelining").  :func:`session` turns a stream of requests into a stream of
answers for any of them.
"""

from __future__ import annotations

import collections
import importlib
import itertools
import logging
import os
import select
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

import regex

from .exceptions import ModelError
from .tokenize import word_tokenizer

Result = list[tuple[str, float]]
"""A model's answer: ``(text, score)`` pairs; bigger score = more likely."""

LOG = logging.getLogger(__name__)


# Requests ------------------------------------------------------------------------------

@dataclass(slots=True)
class Predict:
    """A ``predict`` request: ``context`` (untokenized text) and optional candidates."""

    context: str
    candidates: Sequence[str] | None = None


@dataclass(slots=True)
class Train:
    """A ``train`` request: the text of one message."""

    text: str


@dataclass(frozen=True, slots=True)
class Clear:
    """A ``clear`` request."""


Request = Union[Predict, Train, Clear]


# In-process models ----------------------------------------------------------------------

class Model:
    """Base class of a language model (LM Challenge 5.x API).

    Subclasses implement :meth:`predict`; :meth:`train` and :meth:`clear` default to doing
    nothing.  A model may also offer ``predict_batch(queries)`` (a list of
    ``(context, candidates)`` pairs -> a list of results), which :func:`session` uses to
    score many queries at once.  Models are context managers.
    """

    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        """Continuations of ``context`` with scores.

        Args:
            context: the text before the prediction point; it may end inside a word, in
                which case every returned string is the rest of that word (``"I like bi"``
                -> ``"rds"``).
            candidates: ``None`` to let the model propose continuations, or strings to
                score (those the model cannot score are left out of the answer).
        Returns:
            ``[(continuation, score), ...]``, most likely first.  For the entropy games the
            score must be a log-probability (natural log) normalised over the vocabulary.
        """
        raise NotImplementedError

    def train(self, text: str) -> None:
        """Adapt to ``text`` (one message the current user typed).  Default: nothing."""

    def clear(self) -> None:
        """Forget all that :meth:`train` taught (a new user starts).  Default: nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release resources (processes, files).  Default: nothing."""

    def run_loop(self, input_stream=None, output_stream=None, error_stream=None) -> None:
        """Serve this model over the line protocol (stdin/stdout by default) until EOF."""
        from .models import protocol
        protocol.serve(self, input_stream, output_stream, error_stream)


def split_context(context: str, tokenizer: regex.Pattern) -> tuple[list[str], str]:
    """Split ``context`` into finished word tokens and the prefix of the word being typed.

    The last token is the prefix when it reaches the end of ``context``; otherwise the
    prefix is ``""`` (the context ends with a space or a separator).
    """
    matches = list(tokenizer.finditer(context))
    if matches and matches[-1].end() == len(context):
        return [m.group() for m in matches[:-1]], matches[-1].group()
    return [m.group() for m in matches], ""


class WordModel(Model):
    """A model over whole words: subclasses implement :meth:`predict_word` and :meth:`score_word`.

    The context is split by the word tokenizer (or ``token_pattern``) into previous words
    and the prefix of the current word.
    """

    def __init__(self, token_pattern: str | None = None):
        self._tokenizer = word_tokenizer() if token_pattern is None else regex.compile(token_pattern)

    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        words, prefix = split_context(context, self._tokenizer)
        if candidates is None:
            return self.predict_word(words, prefix)
        return self.score_word(words, [prefix + c for c in candidates])

    def predict_word(self, context: list[str], prefix: str) -> Result:
        """Next words (``prefix == ""``) or completions: ``[(suffix after prefix, score)]``."""
        raise NotImplementedError

    def score_word(self, context: list[str], candidates: list[str]) -> Result:
        """Scores of whole-word ``candidates`` after the words ``context``: ``[(word, score)]``."""
        raise NotImplementedError

    def train(self, text: str) -> None:
        self.train_word(self._tokenizer.findall(text))

    def train_word(self, text: list[str]) -> None:
        """Adapt to a message given as word tokens.  Default: nothing."""


class FilteringWordModel(WordModel):
    """A :class:`WordModel` whose predictions come from a lazy ranked stream of words.

    Subclasses implement :meth:`predict_word_iter` (and :meth:`WordModel.score_word`);
    :meth:`predict_word` keeps the words that extend the typed prefix (strictly longer),
    match ``filter_pattern`` anywhere, and were not seen before, up to ``n_predictions``.
    """

    def __init__(self, n_predictions: int, filter_pattern: str = ".", **args: Any):
        super().__init__(**args)
        self.n_predictions = n_predictions
        self.filter_xp = regex.compile(filter_pattern)

    def predict_word_iter(self, context: list[str]) -> Iterable[tuple[str, float]]:
        """Candidate next words after ``context``, most likely first (duplicates allowed)."""
        raise NotImplementedError

    def predict_word(self, context: list[str], prefix: str) -> Result:
        seen: set[str] = set()
        found: Result = []
        if self.n_predictions <= 0:
            return found
        for word, score in self.predict_word_iter(context):
            if len(word) <= len(prefix) or not word.startswith(prefix):
                continue
            if self.filter_xp.search(word) is None:
                continue
            suffix = word[len(prefix):]
            if suffix in seen:
                continue
            seen.add(suffix)
            found.append((suffix, score))
            if len(found) >= self.n_predictions:
                break
        return found


# Shell models ------------------------------------------------------------------------------

def shell_command(cmd: str, options: dict[str, Any]) -> str:
    """The command line of a shell model: ``cmd``, then ``positional`` options, then
    ``--key value`` for every other option (a key already starting with ``-`` is kept as is)."""
    positional = [shlex.quote(str(p)) for p in options.get("positional", [])]
    named = [f"{key if key.startswith('-') else '--' + key} {shlex.quote(str(value))}"
             for key, value in options.items() if key != "positional"]
    return " ".join([cmd, *positional, *named])


def protocol_text(text: str) -> str:
    """``text`` made safe for one protocol field: TAB, LF and CR become spaces."""
    if "\t" in text or "\n" in text or "\r" in text:
        return text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    return text


def encode_request(request: Request) -> str:
    """One protocol line (with its newline) for ``request``."""
    kind = type(request)
    if kind is Predict:
        if request.candidates is None:
            return "predict\t" + protocol_text(request.context) + "\n"
        return "\t".join(["predict", protocol_text(request.context),
                          *map(protocol_text, request.candidates)]) + "\n"
    if kind is Train:
        return "train\t" + protocol_text(request.text) + "\n"
    return "clear\n"


def parse_answer(line: str) -> Result:
    """Parse ``text<TAB>score<TAB>...`` (without its newline) into pairs.

    Raises:
        ValueError: an odd number of fields or a score that is not a number.
    """
    if not line:
        return []
    fields = line.split("\t")
    if len(fields) % 2:
        raise ValueError(f"expected text<TAB>score pairs, got {len(fields)} fields")
    try:
        return list(zip(fields[0::2], map(float, fields[1::2])))
    except ValueError:
        raise ValueError("a score is not a number") from None


class _StderrTail:
    """Drains a model's stderr in a thread, keeping its last lines (no deadlock on floods)."""

    def __init__(self, stream, keep_lines: int = 40, echo: bool = False):
        self._lines: collections.deque[str] = collections.deque(maxlen=keep_lines)
        self._echo = echo
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            self._lines.append(line[-2000:])
            if self._echo:
                LOG.info("model stderr: %s", line.rstrip("\n"))
        stream.close()

    def text(self, wait: float = 0.0) -> str:
        """The last lines written so far (waits up to ``wait`` s for the stream to close)."""
        if wait:
            self._thread.join(wait)
        return "".join(self._lines)


class ShellModel(Model):
    """A model in a subprocess, spoken to over the line protocol on its stdin/stdout.

    Requests are pipelined: up to ``window`` predict requests are in flight while answers
    are read in order, so the round trip per request disappears (DESIGN.md, "Pipelining").
    The window is topped up once half of it has been answered (not after every answer), so
    the model reads its requests in batches of about ``window / 2`` lines, and a model that
    flushes its answers in batches too (``lmchallenge.models.protocol.serve``) costs both
    processes a few system calls and wake-ups per batch rather than per request.
    One thread multiplexes both pipes with ``select`` (requests are written in large
    batches, answers read in large chunks); stderr is drained by a thread that keeps its
    tail for error messages.

    Args:
        cmd: shell command (run with ``sh -c``).
        options: extra arguments, see :func:`shell_command`.
        timeout: seconds to wait for an answer before the model is declared hung and killed.
        window: most predict requests in flight at once.
    Raises:
        ModelError: the model exits, hangs past ``timeout``, or answers a malformed line.
    """

    def __init__(self, cmd: str, options: dict[str, Any] | None = None,
                 timeout: float = 60.0, window: int = 256, echo_stderr: bool = False):
        self.cmd = shell_command(cmd, options or {})
        self.timeout = timeout
        self.window = max(1, window)
        LOG.debug("starting model: %s", self.cmd)
        self._proc = subprocess.Popen(self.cmd, shell=True, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True, bufsize=0)
        self._in_fd = self._proc.stdin.fileno()
        self._out_fd = self._proc.stdout.fileno()
        os.set_blocking(self._in_fd, False)
        self._stderr = _StderrTail(self._proc.stderr, echo=echo_stderr)
        self._timed_out = False
        self._closed = False

    # -- failure handling
    def _kill(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _failure(self, reason: str, query: str | None) -> ModelError:
        if self._timed_out:
            reason = f"no answer within {self.timeout:g} s (killed)"
        else:
            try:
                code = self._proc.wait(timeout=2)
                if reason == "closed its output":
                    reason = f"exited with code {code}" if code else "exited (code 0) before answering"
            except subprocess.TimeoutExpired:
                pass
        return ModelError(self.cmd, reason, query=query, stderr_tail=self._stderr.text(wait=1.0))

    # -- the Model API, one request at a time
    def predict(self, context: str, candidates: Sequence[str] | None) -> Result:
        return next(self.stream([Predict(context, candidates)]))

    def train(self, text: str) -> None:
        for _ in self.stream([Train(text)]):
            pass

    def clear(self) -> None:
        for _ in self.stream([Clear()]):
            pass

    # -- pipelined streams
    def stream(self, requests: Iterable[Request]) -> Iterator[Result]:
        """Send ``requests`` in order; yield one answer per :class:`Predict`, in order.

        At most ``window`` predicts are unanswered at any time; requests are drawn from the
        iterable lazily, as the window allows.
        """
        for answers in self.stream_batches(requests):
            yield from answers

    def stream_batches(self, requests: Iterable[Request]) -> Iterator[list[Result]]:
        """As :meth:`stream`, but the answers come as lists: those read from the model in
        one go (never empty; fewer generator steps per answer)."""
        requests = iter(requests)
        in_fd, out_fd = self._in_fd, self._out_fd
        sent: list[str] = []   # predict lines sent; the first `answered` have their answer
        answered = 0
        outbox = bytearray()
        inbox = b""
        exhausted = False
        window = self.window
        refill_below = window - max(1, window // 2)  # top up once half the window is answered

        def unanswered() -> str | None:
            return sent[answered].rstrip("\n") if answered < len(sent) else None

        while True:
            in_flight = len(sent) - answered
            if not exhausted and in_flight <= refill_below and len(outbox) < 65536:
                # at most `room` requests, so at most `room` more predicts in flight
                room = min(window - in_flight, 512)
                batch = list(itertools.islice(requests, room))
                exhausted = len(batch) < room
                lines = [encode_request(request) for request in batch]
                sent += [line for request, line in zip(batch, lines) if type(request) is Predict]
                outbox += "".join(lines).encode("utf-8")
            if answered == len(sent) and not outbox:
                if exhausted:
                    return
                continue
            readable, writable, _ = select.select([out_fd] if answered < len(sent) else [],
                                                  [in_fd] if outbox else [], [], self.timeout)
            if not readable and not writable:
                self._timed_out = True
                self._kill()
                raise self._failure("timeout", unanswered())
            if writable:
                try:
                    written = os.write(in_fd, outbox[:1 << 16])
                except BrokenPipeError:
                    raise self._failure("closed its output", unanswered()) from None
                del outbox[:written]
            if readable:
                chunk = os.read(out_fd, 1 << 16)
                if not chunk:
                    raise self._failure("closed its output", unanswered())
                inbox += chunk
                complete = inbox.rfind(b"\n", len(inbox) - len(chunk)) + 1
                if not complete:
                    if len(inbox) > (64 << 20):
                        raise self._failure("answer line longer than 64 MiB", unanswered())
                    continue
                data, inbox = inbox[:complete - 1], inbox[complete:]
                try:
                    lines = data.decode("utf-8").split("\n")
                except UnicodeDecodeError as e:
                    raise self._failure(f"answer is not UTF-8: {e}", unanswered()) from None
                if len(lines) > len(sent) - answered:
                    raise self._failure("answered more lines than it was asked", unanswered())
                answers, error = self._parse_answers(lines, sent, answered)
                if answers:
                    yield answers  # those before a malformed line still belong to their tokens
                if error is not None:
                    raise error
                answered += len(lines)
                if answered > 4096:  # forget answered queries now and then
                    del sent[:answered]
                    answered = 0

    def _parse_answers(self, lines: list[str], sent: list[str],
                       answered: int) -> tuple[list[Result], ModelError | None]:
        """Parse answer ``lines``, the answers to ``sent[answered:]``: all of them and
        ``None``, or those before the first malformed line and the error naming it and its
        query."""
        answers: list[Result] = []
        for line in lines:
            try:
                answers.append(parse_answer(line))
            except ValueError as e:
                query = sent[answered + len(answers)].rstrip("\n")
                return answers, self._failure(f"malformed answer {line[:200]!r}: {e}", query)
        return answers, None

    def close(self) -> None:
        """Close the model's stdin and wait for it to exit (killed after ``timeout``)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self._proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            self._proc.wait()
        self._proc.stdout.close()




# Sessions: answer streams for any model ----------------------------------------------------

class Streaming(Protocol):
    def stream(self, requests: Iterable[Request]) -> Iterator[Result]: ...


def session(model: Any, requests: Iterable[Request], batch_size: int = 64) -> Iterator[Result]:
    """Run ``requests`` against ``model``, yielding one answer per :class:`Predict`, in order.

    ``model`` is a :class:`ShellModel` (pipelined), a model with ``predict_batch`` (called
    with up to ``batch_size`` consecutive predicts), or any object with ``predict``,
    ``train`` and ``clear`` (duck typing, as LM Challenge 5.x).
    """
    for answers in session_batches(model, requests, batch_size):
        yield from answers


def session_batches(model: Any, requests: Iterable[Request],
                    batch_size: int = 64) -> Iterator[list[Result]]:
    """As :func:`session`, but the answers come in consecutive non-empty lists (as the
    model produced them: a pipe read, a ``predict_batch`` call, one ``predict``)."""
    if hasattr(model, "stream_batches"):
        yield from model.stream_batches(requests)
        return
    if hasattr(model, "stream"):
        for answer in model.stream(requests):
            yield [answer]
        return
    if hasattr(model, "predict_batch"):
        yield from _batched(model, requests, batch_size)
        return
    for request in requests:
        if isinstance(request, Predict):
            yield [list(model.predict(request.context, request.candidates))]
        elif isinstance(request, Train):
            _call_optional(model, "train", request.text)
        else:
            _call_optional(model, "clear")


def _call_optional(model: Any, name: str, *args: Any) -> None:
    method = getattr(model, name, None)
    if method is not None:
        method(*args)


def _batched(model: Any, requests: Iterable[Request], batch_size: int) -> Iterator[list[Result]]:
    pending: list[Predict] = []

    def flush() -> Iterator[list[Result]]:
        if pending:
            answers = model.predict_batch([(p.context, p.candidates) for p in pending])
            pending.clear()
            yield [list(answer) for answer in answers]

    for request in requests:
        if isinstance(request, Predict):
            pending.append(request)
            if len(pending) >= batch_size:
                yield from flush()
            continue
        yield from flush()
        if isinstance(request, Train):
            _call_optional(model, "train", request.text)
        else:
            _call_optional(model, "clear")
    yield from flush()


# Predictor specs ----------------------------------------------------------------------------

QUALIFIED_NAME = re.compile(r"^([^: ]+):([^: ]+)$")


def is_python_spec(spec: str) -> bool:
    """True if ``spec`` names a Python class or function as ``module:Name``."""
    return QUALIFIED_NAME.match(spec) is not None


def load_python_object(spec: str) -> Callable[..., Any]:
    """Import ``module.sub:Attr.sub`` and return the attribute.

    Raises:
        ModelError: the module or attribute cannot be found.
    """
    match = QUALIFIED_NAME.match(spec)
    if match is None:
        raise ModelError(spec, "not a module:Name spec")
    try:
        obj: Any = importlib.import_module(match.group(1))
        for attr in match.group(2).split("."):
            obj = getattr(obj, attr)
    except (ImportError, AttributeError) as e:
        raise ModelError(spec, f"cannot load: {e}") from None
    return obj


@dataclass(frozen=True)
class PredictorSpec:
    """How to make a model: a shell command or a ``module:Class`` spec, plus options.

    Attributes:
        spec: the shell command or ``module:Class``.
        options: ``-o/--options`` JSON: keyword arguments of a Python model, or
            command-line arguments of a shell model (:func:`shell_command`).
        timeout: seconds a shell model may take to answer.
        window: predict requests in flight for a shell model.
    """

    spec: str
    options: dict[str, Any] = None  # type: ignore[assignment]
    timeout: float = 60.0
    window: int = 256

    @property
    def is_python(self) -> bool:
        return is_python_spec(self.spec)

    def create(self, echo_stderr: bool = False) -> Any:
        """Start the model (a new process for a shell model)."""
        options = dict(self.options or {})
        if self.is_python:
            return load_python_object(self.spec)(**options)
        return ShellModel(self.spec, options, timeout=self.timeout, window=self.window,
                          echo_stderr=echo_stderr)

    def describe(self) -> str:
        """The command line or spec, for messages and manifests."""
        return self.spec if self.is_python else shell_command(self.spec, dict(self.options or {}))


def close_model(model: Any) -> None:
    """Close ``model`` if it has ``close`` or ``__exit__``."""
    if hasattr(model, "close"):
        model.close()
    elif hasattr(model, "__exit__"):
        model.__exit__(None, None, None)


__all__ = [
    "Model", "WordModel", "FilteringWordModel", "ShellModel", "Predict", "Train", "Clear",
    "Request", "Result", "PredictorSpec", "session", "session_batches", "shell_command", "parse_answer",
    "split_context", "close_model",
]


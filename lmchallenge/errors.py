"""Errors raised by lmchallenge, each naming where the problem is."""

from __future__ import annotations


class LmcError(Exception):
    """Base class of lmchallenge errors; ``lmc`` prints the message and exits with code 2."""


def first_line(error: BaseException) -> str:
    """Another library's error in one line of ours: ``TYPE: the first line of its message``,
    `` (...)`` where more lines follow (transformers' messages run to paragraphs of advice),
    ``TYPE`` alone for an empty message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return f"{type(error).__name__}: {lines[0]}" + (" (...)" if len(lines) > 1 else "")


class InputError(LmcError):
    """Bad input data (a corpus, a log, a vocabulary).

    Attributes:
        path: the file name ("-" or "<stdin>" for standard input).
        line: 1-based line number, or None when the error is not about one line.
        reason: what is wrong.
    """

    def __init__(self, path: str, line: int | None, reason: str):
        self.path = path
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):  # picklable across processes (Dask workers)
        return (InputError, (self.path, self.line, self.reason))


class DatumError(InputError):
    """A datum that a log being written cannot hold (a Parquet log's columns), named by its
    number in the order written, as the writer knows it; whoever knows where the datums came
    from names the datum's own file and line instead (``lmc convert``).

    Attributes:
        path: the log being written.
        datum: 1-based number of the datum among those written.
        detail: what is wrong with it, without its number (``field token: ... does not fit
            a Parquet log's int64 column``).
    """

    def __init__(self, path: str, datum: int, detail: str, message: str | None = None):
        self.datum = datum
        self.detail = detail
        super().__init__(path, None, message or f"datum {datum}: {detail}")

    def __reduce__(self):
        return (DatumError, (self.path, self.datum, self.detail, self.reason))


class ModelError(LmcError):
    """A model process exited, hung, or answered something that is not a result line; or an
    in-process model raised.

    Attributes:
        command: the model's command line (or ``module:Class`` spec).
        query: the request the failing answer belongs to (a protocol line, without its
            newline), or None.
        reason: what went wrong (the same words wherever in the corpus it happened).
        stderr_tail: the last lines the model wrote to stderr ('' if none; None for an
            in-process model, which has no stderr of its own).
        where: the user/message/token being evaluated, if known (None); '' where no token
            is to blame (a model that wrote more answer lines than it was asked).
        in_flight: every request sent and not answered when the model failed, oldest first
            (each cut to :data:`SHOWN_REQUEST` characters); empty when only ``query`` was.
        answer_line: the number of the failing answer line in the model's output (from 1),
            if known.
        stopped: the model process was ended by a signal (or exited with code 130 or 143,
            as a program does on SIGINT or SIGTERM): stopped from outside, not failed.
    """

    SHOWN_REQUEST = 200
    """Characters of a request kept in ``in_flight`` and shown for ``query``."""

    def __init__(self, command: str, reason: str, query: str | None = None,
                 stderr_tail: str | None = "", where: str | None = None,
                 in_flight: tuple[str, ...] = (), answer_line: int | None = None,
                 stopped: bool = False):
        self.command = command
        self.reason = reason
        self.query = query
        self.stderr_tail = stderr_tail
        self.where = where
        self.in_flight = tuple(in_flight)
        self.answer_line = answer_line
        self.stopped = stopped
        super().__init__(self._format())

    def _fields(self) -> dict:
        return dict(command=self.command, reason=self.reason, query=self.query,
                    stderr_tail=self.stderr_tail, where=self.where, in_flight=self.in_flight,
                    answer_line=self.answer_line, stopped=self.stopped)

    def __reduce__(self):  # picklable across processes (Dask workers)
        return (_model_error, (self._fields(),))

    def _format(self) -> str:
        parts = [f"model {self.command!r}: {self.reason}"]
        if self.where:
            parts.append(f"while evaluating {self.where}")
        line = f"answer line {self.answer_line}" if self.answer_line else ""
        if self.query is not None:
            line = f" ({line})" if line else ""
            parts.append(f"request{line}: {_shorten(self.query, self.SHOWN_REQUEST)!r}")
        elif line:
            parts.append(line)
        if len(self.in_flight) > 1:
            parts.append(f"requests in flight: {len(self.in_flight)}, oldest first: "
                         + _shown_requests(self.in_flight))
        if self.stderr_tail:
            parts.append("model stderr (tail):\n" + self.stderr_tail.rstrip("\n"))
        elif self.stderr_tail is not None:
            parts.append("model stderr: (empty)")
        return "\n".join(parts)

    @property
    def out_of_step(self) -> bool:
        """True for a model that wrote more answer lines than it was asked (``where`` is
        ``''``): from its first extra line on, every answer was taken for an earlier
        request's, so none of its answers since it started can be trusted."""
        return self.where == ""

    def with_reason(self, reason: str) -> "ModelError":
        """A copy of this error with another ``reason``."""
        return ModelError(**{**self._fields(), "reason": reason})

    def with_where(self, where: str) -> "ModelError":
        """A copy of this error that also names the user/message/token being evaluated."""
        return ModelError(**{**self._fields(), "where": where})


def _model_error(fields: dict) -> ModelError:
    """A :class:`ModelError` from its fields (unpickling)."""
    return ModelError(**fields)


def _shorten(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most] + "..."


def _shown_requests(requests: tuple[str, ...], ends: int = 3, most: int = 60) -> str:
    """``requests`` on one line: all of them, or the first and last ``ends`` around the
    count of those between; each cut to ``most`` characters."""
    shown = [repr(_shorten(r, most)) for r in requests]
    if len(shown) > 2 * ends + 1:
        shown = shown[:ends] + [f"... ({len(shown) - 2 * ends} more)"] + shown[-ends:]
    return ", ".join(shown)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's time limit, ``kill``, ``timeout``), raised in the main thread
    by the commands' handler (:func:`lmchallenge.cli.options.run_command`) so that it unwinds
    as a Ctrl-C does: the model is stopped, a half-written output removed, ``lmc-dist``'s
    manifest saved.  The command exits with code 143 (128 + SIGTERM), as if killed by it."""


def json_problem(error: ValueError | RecursionError) -> str:
    """What ``json.loads`` found wrong, for a message after ``invalid JSON:``: the decoder's
    reason and column, or, for a number Python will not read (an integer of more than 4,300
    digits, ``sys.get_int_max_str_digits``) or arrays and objects nested deeper than its
    recursion limit (QA: a RecursionError traceback), that."""
    if isinstance(error, RecursionError):
        return "arrays or objects nested too deeply"
    if hasattr(error, "colno"):
        column = error.colno
        if error.lineno > 1:    # a line parsed with its newline, cut short: at its end (QA:
            column = error.doc.find("\n") + 1     # "column 1" where lmc validate said 8)
        return f"{error.msg} (column {column})"
    if "digits" in str(error):
        return "an integer of more than 4,300 digits"
    return str(error)

"""Errors raised by lmchallenge, each naming where the problem is."""

from __future__ import annotations


class LmcError(Exception):
    """Base class of lmchallenge errors; ``lmc`` prints the message and exits with code 2."""


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


class ModelError(LmcError):
    """A model process exited, hung, or answered something that is not a result line.

    Attributes:
        command: the model's command line (or ``module:Class`` spec).
        query: the request being answered (a protocol line, without its newline), or None.
        reason: what went wrong.
        stderr_tail: the last lines the model wrote to stderr ('' if none).
        where: the user/message/token being evaluated, if known.
    """

    def __init__(self, command: str, reason: str, query: str | None = None,
                 stderr_tail: str = "", where: str | None = None):
        self.command = command
        self.reason = reason
        self.query = query
        self.stderr_tail = stderr_tail
        self.where = where
        super().__init__(self._format())

    def __reduce__(self):  # picklable across processes (Dask workers)
        return (ModelError, (self.command, self.reason, self.query, self.stderr_tail, self.where))

    def _format(self) -> str:
        parts = [f"model {self.command!r}: {self.reason}"]
        if self.where:
            parts.append(f"while evaluating {self.where}")
        if self.query is not None:
            shown = self.query if len(self.query) <= 300 else self.query[:300] + "..."
            parts.append(f"last request: {shown!r}")
        if self.stderr_tail:
            parts.append("model stderr (tail):\n" + self.stderr_tail.rstrip("\n"))
        else:
            parts.append("model stderr: (empty)")
        return "\n".join(parts)

    def with_where(self, where: str) -> "ModelError":
        """A copy of this error that also names the user/message/token being evaluated."""
        return ModelError(self.command, self.reason, self.query, self.stderr_tail, where)

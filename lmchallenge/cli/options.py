"""What the commands of ``lmc``, ``lmc-ngram``, ``lmc-neural`` and ``lmc-dist`` share: option
types, verbosity, and the one way a command's errors reach the user
(:func:`run_command`)."""

from __future__ import annotations

import codecs
import errno
import functools
import json
import logging
import math
import os
import re
import signal
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import click

from lmchallenge.corpus import is_gzip_name
from lmchallenge.errors import LmcError, Terminated
from lmchallenge.logs.files import is_parquet_name
from lmchallenge.logs.rundir import read_partially, reading_partial
from lmchallenge.tuning import freeze_heap


def set_verbosity(level: int) -> None:
    """Log to stderr: warnings (0), info (1) or debug (2+).

    Args:
        level: the count of ``-v`` flags (non-negative).
    """
    levels = [logging.WARNING, logging.INFO, logging.DEBUG]
    logging.basicConfig(format="%(levelname)s\t%(message)s", level=levels[min(level, 2)])


class JsonOption(click.ParamType):
    """A JSON value, or the path of a file holding one."""

    name = "json"

    def convert(self, value: Any, param, ctx) -> Any:
        if not isinstance(value, str):
            return value
        if os.path.isfile(value):
            try:
                with open(value, encoding="utf-8") as f:
                    return json.load(f)
            except ValueError as e:
                self.fail(f"{value}: not JSON: {e}", param, ctx)
        try:
            return json.loads(value)
        except ValueError as e:
            hint = " (a log is written with --output, not -o)" if _names_a_log(value) else ""
            self.fail(f"not JSON, nor a file of that name: {e}{hint}", param, ctx)

    def get_metavar(self, param, ctx=None) -> str:
        return "JSON"


def _names_a_log(value: str) -> bool:
    """Whether ``value`` reads as a log's file name (.jsonl, .jsonl.gz, .parquet): what a user
    who took ``lmc run``'s ``-o`` (``--options``, as in LM Challenge 5.x) for ``--output``
    gives it."""
    return value.lower().endswith(".jsonl") or is_gzip_name(value) or is_parquet_name(value)


class FiniteFloatRange(click.FloatRange):
    """A ``click.FloatRange`` that also refuses NaN and the infinities."""

    def convert(self, value: Any, param, ctx) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number", param, ctx)
        return number


MAX_SECONDS = 1e9
"""The longest ``--timeout``/``--start-timeout`` (about 31 years): longer waits overflow the
system's clock arithmetic (QA: ``--timeout 1e10`` ended in an OverflowError)."""


def count(low: int = 0, high: int = sys.maxsize) -> click.IntRange:
    """The type of a count option: an integer from ``low`` to ``high`` (the largest index
    Python takes by default: QA, ``-n 10**31`` ended in an OverflowError traceback)."""
    return click.IntRange(low, high)


def seconds() -> FiniteFloatRange:
    """The type of a timeout option: seconds, more than 0, at most :data:`MAX_SECONDS`."""
    return FiniteFloatRange(0, MAX_SECONDS, min_open=True)


def not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """The callback of a path or command parameter: an empty string (``--input ""``, an unset
    shell variable) is refused.  As a path it would name the current directory once made
    absolute (QA: ``lmc-dist run ... --input ""`` said "/tmp: Is a directory", ``lmc run
    ... --output ""`` "cannot write" there); as a model command it is a shell that exits at
    once.  ``value`` is a string, None, or a tuple of strings (``nargs=-1``).

    Raises:
        click.BadParameter: ``value`` is or holds ``""``.
    """
    if value == "" or isinstance(value, tuple) and "" in value:
        raise click.BadParameter("an empty string", ctx, param)
    return value


def model_options(value: Any) -> dict[str, Any]:
    """``-o/--options`` checked: a JSON object whose ``positional``, if given, is a list.

    Raises:
        click.BadParameter: naming ``--options``.
    """
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--options")
    if not isinstance(value.get("positional", []), list):
        raise click.BadParameter('"positional" must be a JSON list (the arguments before the '
                                 'named ones)', param_hint="--options")
    return value


MAX_FORMAT_DIGITS = 100
"""The widest width and precision of ``-m/--float-format``."""


def html_float_format(value: str) -> str:
    """``-m/--float-format`` of an HTML page: ``value`` if it is a format spec of a float
    (``.4g``).  An ANSI page shows no such numbers and takes any value, as LM Challenge 5.2
    does.

    Raises:
        click.BadParameter: it is not, or its width or precision is more than
            :data:`MAX_FORMAT_DIGITS` (QA: ``.1000000000f`` made a 1 GB string of each number).
    """
    # (the length first: int() refuses a run of more than 4,300 digits)
    if any(len(run) > 3 or int(run) > MAX_FORMAT_DIGITS for run in re.findall(r"\d+", value)):
        raise click.BadParameter(f"{value!r}: a width or precision of at most {MAX_FORMAT_DIGITS}",
                                 param_hint="'-m' / '--float-format'")
    try:
        format(-1.5, value)
    except (ValueError, TypeError) as e:
        raise click.BadParameter(f"{value!r} is not a format of a float ({e})",
                                 param_hint="'-m' / '--float-format'") from None
    return value


def page_options(shown_as: str, interval_help: str) -> Callable[[Callable], Callable]:
    """The options of the commands that show logs token by token (``lmc pretty``, ``lmc
    diff``): ``-v``, ``-c/--challenge``, ``-o ansi|html``, ``-i/--entropy-interval``,
    ``-m/--float-format`` and ``--max-tokens``.

    Args:
        shown_as: the end of ``--challenge``'s help ("Which game to ..."), e.g. "show the log
            as (auto: from its first token)".
        interval_help: the help of ``--entropy-interval``.
    """
    from lmchallenge.analysis.pretty import CHALLENGES, PAGE_TOKENS

    options = [
        click.option("-v", "--verbose", default=0, count=True,
                     help="How much human-readable detail to print to STDERR."),
        click.option("-c", "--challenge", type=click.Choice(CHALLENGES), default="auto",
                     show_default=True, help=f"Which game to {shown_as}."),
        click.option("-o", "--output", type=click.Choice(["ansi", "html"]), default="ansi",
                     show_default=True,
                     help="ANSI colour text, or one self-contained HTML page (works offline)."),
        click.option("-i", "--entropy_interval", "--entropy-interval", "entropy_interval",
                     type=FiniteFloatRange(0, min_open=True), default=10.0, show_default=True,
                     help=interval_help),
        click.option("-m", "--float-format", default=".4g", show_default=True,
                     help="Python format of the numbers shown on the HTML page."),
        click.option("--max-tokens", type=count(), default=PAGE_TOKENS, show_default=True,
                     help="Refuse an HTML page of more tokens (0: no limit): larger pages are "
                          "more than a browser opens."),
    ]

    def decorate(function: Callable) -> Callable:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def window_option(command: Callable) -> Callable:
    """``--window``: predict requests in flight to a shell model (``lmc run``, ``lmc-dist
    run``; its default is :class:`lmchallenge.model.spec.PredictorSpec`'s, not imported here:
    every command imports this module, ``lmc stats`` too, which loads no model code)."""
    return click.option(
        "--window", default=256, show_default=True, type=count(1),
        help="Predict requests in flight to a shell model (a batching model reads about half "
             "of them at a time).")(command)


def start_timeout_option(command: Callable) -> Callable:
    """``--start-timeout``: seconds a shell model may take to give its first answer (``lmc
    run``, ``lmc-dist run``; the default is :data:`lmchallenge.model.spec.START_TIMEOUT`,
    written here for the reason :func:`window_option` gives)."""
    return click.option(
        "--start-timeout", default=600.0, show_default=True, type=seconds(),
        help="Seconds a shell model may take to give its first answer, while it starts "
             "(loading its weights), where more than --timeout.")(command)


def partial_option(command: Callable | None = None, *, says_so: bool = False) -> Callable:
    """The ``--partial`` option of every command that reads logs: an unfinished ``lmc-dist``
    run dir is read as its finished partitions (:mod:`lmchallenge.logs.rundir`) instead of
    being refused, and a warning on stderr names each run dir read so, with its partitions
    read and in all, unless the command's output ``says_so`` itself (``lmc stats``, ``lmc
    convert``).  Put it under ``@click.command`` (``@partial_option`` or
    ``@partial_option(says_so=True)``); ``command`` does not receive the flag."""
    if command is None:
        return functools.partial(partial_option, says_so=says_so)

    @functools.wraps(command)
    def read(*args, partial: bool, **kwargs):
        with reading_partial(partial):
            try:
                return command(*args, **kwargs)
            finally:    # (also when the command fails, or its reader goes away: | head)
                if not says_so:
                    _warn_read_partially()

    return click.option(
        "--partial", is_flag=True,
        help="Read an unfinished lmc-dist run dir's finished partitions instead of refusing "
             "it (lmc stats then says \"partial\": true and the coverage, lmc convert how many "
             "partitions it wrote, the others warn how many they read).")(read)


def _warn_read_partially() -> None:
    read = read_partially()
    if read:
        set_verbosity(0)        # (nothing changes where the command set it)
    for path, done, total in read:
        logging.getLogger(__name__).warning(
            "%s: an unfinished lmc-dist run: read %d of its %d partitions (--partial)",
            path, done, total)


def stdin_once(logs: Sequence[str]) -> None:
    """Refuse standard input given more than once (``-``, or a name of it such as
    ``/dev/stdin`` where it is a pipe): the second read of it found it empty (QA: ``lmc
    stats - -`` printed the statistics of an empty log, exit 0).

    Raises:
        click.UsageError: it was.
    """
    if sum(map(_is_stdin, logs)) > 1:
        raise click.UsageError("standard input (-) can be read once: give it once")


def _is_stdin(path: str) -> bool:
    """Whether ``path`` reads this process' standard input where that can be read only once
    (``-``; ``/dev/stdin``, ``/dev/fd/0`` ... of a pipe, not of a file, which each opening
    reads from its start)."""
    if path == "-":
        return True
    try:
        given, stdin = os.stat(path), os.fstat(0)
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(stdin.st_mode) and os.path.samestat(given, stdin)


def single_log(logs: Sequence[str]) -> str:
    """The one log path of a ``[LOG]...`` argument (``-`` when none is given).

    Raises:
        click.UsageError: more than one log was given.
    """
    if len(logs) > 1:
        raise click.UsageError("give at most one log (or none to read standard input)")
    return logs[0] if logs else "-"


def run_command(command: click.Command, argv: list[str] | None, prog: str,
                hint: str = "") -> None:
    """Run a click command as a program: an :class:`LmcError` (a user's mistake, a failing
    model) becomes ``PROG: error: MESSAGE`` on stderr and exit code 2, never a traceback, and
    so does an ``OSError`` naming a file (an output that cannot be written:
    ``PROG: error: FILE: REASON``); Ctrl-C prints ``PROG: interrupted`` (and ``; HINT``) and
    exits 130, SIGTERM (:class:`lmchallenge.errors.Terminated`, unwinding as Ctrl-C does)
    ``PROG: terminated`` and exits 143; a closed stdout pipe (``| head``) ends quietly with
    exit code 141 (as a process killed by SIGPIPE), and a full disk behind standard output is
    ``PROG: error: cannot write the output: REASON``.  The process is expected to exit when
    this returns: the garbage collector's objects are frozen first
    (:func:`lmchallenge.tuning.freeze_heap`), so the collections at exit do not traverse them
    again.

    Args:
        command: the click group or command.
        argv: the arguments (None: ``sys.argv[1:]``).
        prog: the program name, for messages.
        hint: what to do after an interruption (printed after it), unless the interruption
            carries a ``hint`` attribute of its own (set by the command that knows better).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    _reopen_closed_streams()
    _escape_what_stdout_cannot_encode()
    if threading.current_thread() is threading.main_thread():
        # left in place: the process exits after this (restored, a SIGTERM in between would
        # end in a traceback)
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        # not command.main(): it turns a closed pipe into exit code 1
        with command.make_context(prog, args) as ctx:
            command.invoke(ctx)
        if not sys.stdout.closed:
            sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        freeze_heap()
    except click.exceptions.Exit as e:
        if e.exit_code:
            sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except LmcError as e:
        _fail(prog, str(e))
    except (KeyboardInterrupt, click.exceptions.Abort) as e:
        terminated = isinstance(e, Terminated)
        hint = getattr(e, "hint", None) or hint     # the command's own, where it knows better
        sys.stderr.write(f"{prog}: {'terminated' if terminated else 'interrupted'}"
                         f"{'; ' + hint if hint else ''}\n")
        sys.exit(143 if terminated else 130)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(141)
    except OSError as e:
        if e.filename is None and e.errno not in _WRITE_ERRORS:
            raise
        if e.filename is None:      # standard output (a full disk, a quota; closed)
            _quiet_stdout()
            reason = "standard output is closed" if e.errno == errno.EBADF else e.strerror
            _fail(prog, f"cannot write the output: {reason}")
        _fail(prog, f"{e.filename}: {e.strerror or e}")


def _reopen_closed_streams() -> None:
    """Hold a standard descriptor the shell closed (``>&-``, ``<&-``) with ``/dev/null``:
    Python leaves ``sys.stdout`` None there (a traceback at the first write), and the next
    file or pipe opened would take the descriptor's number (a model's pipe on descriptor 1).
    A closed input reads as empty and what goes to a closed stderr is discarded; standard
    output is held read-only, so that a command with something to write there fails as
    ``cat`` does (``cannot write the output: standard output is closed``, exit 2; QA:
    ``lmc stats LOG >&-`` exited 0, its statistics gone) and one that writes only files
    (``lmc run ... --output LOG``) runs."""
    for fd, name, mode, flags in ((0, "stdin", "r", os.O_RDWR), (1, "stdout", "w", os.O_RDONLY),
                                  (2, "stderr", "w", os.O_RDWR)):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, flags)      # the lowest free descriptor: this one
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


def _escape_what_stdout_cannot_encode() -> None:
    """On a standard output of an encoding that is not UTF-8 (``PYTHONIOENCODING=ascii``;
    the C locale without Python's UTF-8 mode), write what it cannot encode as backslash
    escapes (QA: ``lmc compare``'s Δ ended in a UnicodeEncodeError traceback)."""
    try:
        utf8 = codecs.lookup(sys.stdout.encoding).name.startswith("utf-8")
    except (AttributeError, TypeError, LookupError):    # not a text stream of a known codec
        return
    if not utf8 and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


def raise_terminated(signum: int, frame: Any) -> None:
    """The SIGTERM handler of the commands: raise :class:`lmchallenge.errors.Terminated`."""
    raise Terminated()


_WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EBADF)
"""What a write to a full or failing file system, or to a closed standard output, raises (no
file name for standard output)."""


def _fail(prog: str, message: str) -> None:
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(2)


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that flushing it at exit (after its reader has
    gone) raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


__all__ = ["set_verbosity", "JsonOption", "FiniteFloatRange", "html_float_format", "page_options", "partial_option", "single_log", "run_command"]

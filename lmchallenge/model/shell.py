"""A model that is a program speaking the line protocol over pipes (:class:`ShellModel`).

Requests are sent ahead of the answers with a bounded window (docs/architecture.md,
"Pipelining"); a thread drains the model's stderr, keeping its tail for error messages.
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from lmchallenge.errors import ModelError
from lmchallenge.model.api import Model
from lmchallenge.model.wire import (Clear, Predict, Request, Result, Train, encode_request,
                                    first_non_finite, parse_answer)
from lmchallenge.tuning import model_environment

LOG = logging.getLogger(__name__)


OUTBOX_BYTES = 1 << 20
"""Requests are drawn from the game while fewer than this many bytes wait to be written."""
REFILL_STEP = 32
"""Requests drawn (and encoded) at once while filling the window."""
KEPT_QUERY_CHARS = 1024
"""Characters of each request in flight kept to name it in an error (ModelError shows 300)."""
STOPPED_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)
"""Exit codes of a program that ends on SIGINT or SIGTERM by itself (``lmc`` and its model
commands: 130, 143): the model was stopped from outside, as by the signal."""
LONGEST_WAIT = 86400.0
"""The longest single wait for a model (a longer timeout is waited for in steps of this):
waits of 1e10 s overflow the system's clock arithmetic (QA: an OverflowError)."""
EXIT_NOTICE_SECONDS = 5.0
"""How long a model may take to exit after the end of its input before lmc says that it
waits for it (QA: a model that went on after its input's end held ``lmc run`` a silent
minute, the log already complete)."""
EXIT_CHECK_SECONDS = 0.5
"""How often a model finished (its input closed, its extra output awaited) is checked for
having exited: a child it left running (``server &``) may hold its output open, and the end
of the output, by which an exit is otherwise seen, then never comes.  While answers are
awaited an exit is not taken for the end (a launcher such as ``setsid`` exits while the
model it started answers); a model silent past ``timeout`` that has exited is said to have
exited, not to be late."""


def shell_command(cmd: str, options: dict[str, Any]) -> str:
    """The command line of a shell model: ``cmd``, then ``positional`` options as written
    (the shell expands ``$VAR`` and ``~`` in them, and splits them at spaces, as in LM
    Challenge 5.x: QA), then ``--key value`` for every other option, each value quoted (a
    key already starting with ``-`` is kept as is)."""
    positional = [str(p) for p in options.get("positional", [])]
    named = [f"{key if key.startswith('-') else '--' + key} {shlex.quote(str(value))}"
             for key, value in options.items() if key != "positional"]
    return " ".join([cmd, *positional, *named])


def exec_form(cmd: str) -> str:
    """``exec CMD`` when ``cmd`` is one simple command naming a program on the ``PATH`` (or
    a path to one), else ``cmd``.

    ``sh -c CMD`` keeps the shell waiting for the model (dash does not replace itself by the
    last command), holding the model's pipes open: a model that closes its output would not
    be seen to until it exits.  With ``exec`` the model is the only process holding them,
    and its exit code is its own.  Commands with shell syntax (``;``, ``&&``, ``|``,
    redirections, variable assignments, a newline) run as they are.
    """
    if "\n" in cmd or "`" in cmd:
        return cmd
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: let the shell say so
        return cmd
    if not words or any(word and all(c in lexer.punctuation_chars for c in word) for word in words):
        return cmd
    program = words[0]
    if "=" in program or "$" in program or program == "exec" or shutil.which(program) is None:
        return cmd
    return "exec " + cmd


class _StderrTail:
    """Drains a model's stderr in a thread, keeping its last lines (no deadlock on floods).

    The pipe is read in large chunks (one system call per :data:`CHUNK` bytes, whatever the
    lines), and only the last :data:`KEEP` bytes are kept, so a model may write any amount.
    With ``pass_to`` (a file descriptor: 2 for this process' stderr), each chunk is also
    written there as it comes, as a model that shared its parent's stderr would show it.

    Attributes:
        reads: read system calls made so far (EOF included).
        size: bytes read so far.
    """

    CHUNK = 1 << 16
    KEEP = 1 << 16

    def __init__(self, stream, keep_lines: int = 40, pass_to: int | None = None):
        self._tail = bytearray()
        self.reads = 0
        self.size = 0
        self._keep_lines = keep_lines
        self._pass_to = pass_to
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream) -> None:
        fd = stream.fileno()
        while True:
            chunk = os.read(fd, self.CHUNK)
            self.reads += 1
            if not chunk:
                break
            self.size += len(chunk)
            self._tail += chunk
            if len(self._tail) > 2 * self.KEEP:
                del self._tail[:-self.KEEP]
            if self._pass_to is not None:
                self._pass(chunk)
        stream.close()

    def _pass(self, chunk: bytes) -> None:
        """Write ``chunk`` whole to :attr:`_pass_to`; a destination that fails (closed) is
        given up, the tail still kept."""
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self._pass_to, view):]
        except OSError:
            self._pass_to = None

    def text(self, wait: float = 0.0) -> str:
        """The last lines written so far, each cut to 2000 characters (waits up to ``wait``
        s for the stream to close)."""
        if wait:
            self._thread.join(wait)
        lines = bytes(self._tail[-self.KEEP:]).decode("utf-8", errors="replace").splitlines(True)
        return "".join(line if len(line) <= 2000 else line[-2000:]
                       for line in lines[-self._keep_lines:])


class ShellModel(Model):
    """A model in a subprocess, spoken to over the line protocol on its stdin/stdout.

    Requests are pipelined: up to ``window`` predict requests are in flight while answers
    are read in order, so the round trip per request disappears (docs/architecture.md, "Performance").
    The window is topped up once half of it has been answered (not after every answer), so
    the model reads its requests in batches of about ``window / 2`` lines, and a model that
    flushes its answers in batches too (:func:`lmchallenge.model.serve.serve`) costs both
    processes a few system calls and wake-ups per batch rather than per request.
    One thread multiplexes both pipes with ``select`` (requests are written in large
    batches, answers read in large chunks); stderr is drained by a thread that keeps its
    tail for error messages.

    Args:
        cmd: shell command (run with ``sh -c``).
        options: extra arguments, see :func:`shell_command`.
        timeout: seconds each answer may take (a deadline counted from the answer before
            it, or from its request when nothing else was awaited), before the model is
            declared hung and killed.
        start_timeout: seconds the model's first answer may take instead, when more (its
            start: loading weights; LM Challenge 5.2 waits for ever); None: ``timeout``.
            A model process found exited (its output held open by a process it started)
            with no answer for ``timeout`` seconds is not waited for any longer.
        window: most predict requests in flight at once.
        pass_stderr: also write what the model writes to its stderr to this process' stderr
            as it comes (``lmc run``, as LM Challenge 5.x shows it); its tail is kept for
            error messages either way.
        game: the game the model plays, given to it as ``LMC_GAME`` in its environment
            (:data:`lmchallenge.tuning.GAME_VARIABLE`), so that it can refuse one it cannot play.
    Raises:
        ModelError: the model exits, closes its output, misses an answer's deadline, or
            answers a malformed line (including a score that is not finite); the error names
            the failing answer line, its request, every request in flight and the tail of
            the model's stderr, and the model is killed.  A text answered twice in one
            answer keeps its first score (a warning, once per model).
    """

    def __init__(self, cmd: str, options: dict[str, Any] | None = None,
                 timeout: float = 60.0, window: int = 256, pass_stderr: bool = False,
                 game: str | None = None, start_timeout: float | None = None):
        self.cmd = shell_command(cmd, options or {})
        self.timeout = timeout
        self.start_timeout = max(timeout, start_timeout or timeout)
        self.window = max(1, window)
        LOG.debug("starting model: %s", self.cmd)
        self._proc = subprocess.Popen(exec_form(self.cmd), shell=True, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True, bufsize=0,
                                      env=model_environment(game))
        self._in_fd = self._proc.stdin.fileno()
        self._out_fd = self._proc.stdout.fileno()
        os.set_blocking(self._in_fd, False)
        self._stderr = _StderrTail(self._proc.stderr, pass_to=2 if pass_stderr else None)
        self._answer_lines = 0  # answer lines read over the model's life
        self._warned_duplicates = False
        self._closed = False

    # -- failure handling
    def kill(self) -> None:
        """Kill the model process (and its process group) at once, without waiting."""
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _failure(self, reason: str, in_flight: tuple[str, ...], skip: int = 0,
                 stopped: bool = False) -> ModelError:
        """The error for a model that failed while ``in_flight`` (its unanswered requests,
        oldest first) were sent, the first of them being the request of the failing answer,
        which follows the answer lines read so far and ``skip`` more.  The model is killed
        if it still runs: it is no longer in step with its requests, and its ``close`` must
        not wait for it.  A model that fails before its first answer (a mistyped command, a
        missing file) is not said to have had every request sent so far in flight."""
        if self._proc.poll() is None:
            self.kill()
        answer_line: int | None = self._answer_lines + skip + 1
        if self._answer_lines + skip == 0:
            in_flight = in_flight[:1]
            if not in_flight:   # it ended before a request reached it: no answer was owed
                answer_line = None
        return ModelError(self.cmd, reason, query=in_flight[0] if in_flight else None,
                          stderr_tail=self._stderr.text(wait=1.0),
                          in_flight=in_flight if len(in_flight) > 1 else (),
                          answer_line=answer_line, stopped=stopped)

    def _ended(self, in_flight: tuple[str, ...]) -> ModelError:
        """The error for a model whose output ended (or input closed): its exit code, or,
        if it still runs half a second later, that it is killed; ``stopped`` when a signal
        ended it (or it exited with code 130 or 143, as on SIGINT or SIGTERM)."""
        try:
            code = self._proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return self._failure("closed its output but kept running (killed)", in_flight)
        reason = _exit_reason(code) if code else "exited (code 0) before answering"
        return self._failure(reason, in_flight, stopped=_stopped(code))

    def _duplicates(self, result: Result) -> None:
        if not self._warned_duplicates:
            self._warned_duplicates = True
            LOG.warning("model %r answered a text twice in one answer (%s); the first of each "
                        "is kept (warned once)", self.cmd, _shown_pairs(result))

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
        one go (never empty; fewer generator steps per answer).

        Each answer must arrive within ``timeout`` seconds of the one before it (or of its
        request, when nothing else was awaited); bytes of an unfinished answer line do not
        count.  A model that has nothing to answer must read its input within ``timeout``.
        """
        requests = iter(requests)
        in_fd, out_fd = self._in_fd, self._out_fd
        self._check_nothing_more(b"")   # left from an earlier stream: not these requests' answers
        sent: list[str] = []   # predict lines sent; the first `answered` have their answer
        answered = 0
        outbox = bytearray()
        inbox = b""
        exhausted = False
        window = self.window
        refill_below = window - max(1, window // 2)  # top up once half the window is answered
        deadline = 0.0  # of the awaited answer (or write); 0: the clock starts at the next wait

        def in_flight(skip: int = 0) -> tuple[str, ...]:
            """The requests in flight, less the ``skip`` oldest (answered in this chunk)."""
            return self._in_flight(sent, answered + skip, outbox)

        while True:
            in_flight_count = len(sent) - answered
            if not exhausted and in_flight_count <= refill_below and len(outbox) < 65536:
                # at most `room` requests, so at most `room` more predicts in flight; drawn
                # a few at a time until OUTBOX_BYTES are queued, so that memory is O(line)
                # however long the lines (the contexts of one long message)
                room = min(window - in_flight_count, 512)
                while room and len(outbox) < OUTBOX_BYTES:
                    batch = list(itertools.islice(requests, min(room, REFILL_STEP)))
                    exhausted = len(batch) < min(room, REFILL_STEP)
                    room -= len(batch)
                    lines = [encode_request(request) for request in batch]
                    sent += [line if len(line) <= KEPT_QUERY_CHARS else line[:KEPT_QUERY_CHARS]
                             for request, line in zip(batch, lines) if type(request) is Predict]
                    outbox += "".join(lines).encode("utf-8")
                    if exhausted:
                        break
                if not in_flight_count:
                    deadline = 0.0
            if answered == len(sent) and not outbox:
                if exhausted:
                    self._check_nothing_more(inbox)
                    return
                continue
            now = time.monotonic()
            if not deadline:
                deadline = now + self._allowed()
            elif now > deadline:  # a model trickling bytes is never silent, but late
                raise self._failure(self._late(answered < len(sent), len(inbox)), in_flight())
            # waits of more than `timeout` (for the first answer) look in on the model every
            # `timeout` seconds: one that exited is not waited for until --start-timeout;
            # a day at most (longer waits overflow the clock: a timeout of 1e10 s)
            readable, writable, _ = select.select([out_fd] if answered < len(sent) else [],
                                                  [in_fd] if outbox else [], [],
                                                  min(deadline - now, self.timeout, LONGEST_WAIT))
            if not readable and not writable:
                if self._proc.poll() is not None:   # it exited, and a process it started
                    raise self._ended(in_flight())  # holds its output: that is the cause
                if time.monotonic() < deadline:
                    continue
                raise self._failure(self._late(answered < len(sent), len(inbox)), in_flight())
            if writable:
                try:
                    written = os.write(in_fd, outbox[:1 << 16])
                except BrokenPipeError:
                    raise self._ended(in_flight()) from None
                del outbox[:written]
                if answered == len(sent):
                    deadline = 0.0  # only the writes were awaited, and they moved
            if readable:
                chunk = os.read(out_fd, 1 << 16)
                if not chunk:
                    raise self._ended(in_flight())
                inbox += chunk
                complete = inbox.rfind(b"\n", len(inbox) - len(chunk)) + 1
                if not complete:
                    if len(inbox) > (64 << 20):
                        raise self._failure("answer line longer than 64 MiB", in_flight())
                    continue
                deadline = 0.0
                data, inbox = inbox[:complete - 1], inbox[complete:]
                late = None  # an error after `lines`
                try:
                    lines = data.decode("utf-8").split("\n")
                except UnicodeDecodeError as e:
                    lines, late = self._utf8_lines(data, e, in_flight)
                if len(lines) > len(sent) - answered:
                    # one line too many, said after the lines asked for are parsed: the culprit
                    # may be one of them that is no answer (a model's debugging print), which
                    # puts the answers after it out of step (QA: a well-formed last answer
                    # was named instead)
                    extra = len(sent) - answered
                    lines, late = lines[:extra], self._more_than_asked(lines[extra], extra)
                answers, error = self._parse_answers(lines, in_flight)
                error = error or late
                if answers:
                    yield answers  # those before a malformed line still belong to their tokens
                if error is not None:
                    raise error
                answered += len(lines)
                self._answer_lines += len(lines)
                if answered > 4096:  # forget answered queries now and then
                    del sent[:answered]
                    answered = 0

    def _allowed(self) -> float:
        """Seconds the awaited answer (or write) may take: ``start_timeout`` before the
        model's first answer, ``timeout`` after it."""
        return self.timeout if self._answer_lines else self.start_timeout

    def _late(self, awaiting_answer: bool, partial: int) -> str:
        """Why the model is declared hung (it is killed by :meth:`_failure`)."""
        allowed = self._allowed()
        limit = "" if allowed == self.timeout else " (--start-timeout: its first answer)"
        if not awaiting_answer:
            return f"did not read its input for {allowed:g} s{limit} (killed)"
        got = f"; {partial} bytes of it had come" if partial else ""
        return f"no answer within {allowed:g} s{limit} (killed{got})"

    @staticmethod
    def _in_flight(sent: list[str], answered: int, outbox: bytearray) -> tuple[str, ...]:
        """The predict lines sent and not answered (without the newline, cut for messages);
        those still wholly in ``outbox`` were never written and are left out."""
        unwritten = outbox.count(b"\npredict\t") + outbox.startswith(b"predict\t")
        shown = ModelError.SHOWN_REQUEST
        return tuple(line.rstrip("\n")[:shown + 1]
                     for line in sent[answered:len(sent) - unwritten])

    def _parse_answers(self, lines: list[str], in_flight: Callable[[], tuple[str, ...]]
                       ) -> tuple[list[Result], ModelError | None]:
        """Parse answer ``lines``, the answers to the oldest of ``in_flight()``: all of them
        and ``None``, or those before the first malformed line and the error naming it,
        its number and its query."""
        answers: list[Result] = []
        on_duplicates = None if self._warned_duplicates else self._duplicates
        bad = None
        for line in lines:
            try:
                answers.append(parse_answer(line, on_duplicates, finite=False))
            except ValueError:
                bad = len(answers)
                break
        non_finite = first_non_finite(answers)  # the scores of all lines at once
        if non_finite is not None:
            bad = non_finite
        if bad is None:
            return answers, None
        try:
            parse_answer(lines[bad])
            reason = "malformed"  # not reached: the line was refused above
        except ValueError as e:
            reason = str(e)
        return answers[:bad], self._failure(f"malformed answer {lines[bad][:200]!r}: {reason}",
                                            in_flight(bad), bad)

    def _utf8_lines(self, data: bytes, error: UnicodeDecodeError,
                    in_flight: Callable[[int], tuple[str, ...]]) -> tuple[list[str], ModelError]:
        """The answer lines of ``data`` before the one that is not UTF-8, and the error
        naming that one."""
        start = data.rfind(b"\n", 0, error.start) + 1
        good = data[:start].decode("utf-8").split("\n")[:-1]
        line = data[start:].split(b"\n", 1)[0]
        return good, self._failure(f"answer is not UTF-8 (byte {error.start - start}): "
                                   f"{line[:200]!r}", in_flight(len(good)), len(good))

    def _check_nothing_more(self, inbox: bytes) -> None:
        """Raise if the model has written more than the answers asked for (``inbox``: what was
        read after the last of them; else what is ready to read now, without waiting):
        an extra line would be taken for the answer to the next request."""
        if not inbox and select.select([self._out_fd], [], [], 0)[0]:
            inbox = os.read(self._out_fd, 1 << 16)   # b"": it exited; the next request says so
        if inbox:
            raise self._more_than_asked(_first_line(inbox))

    def _more_than_asked(self, line: str, skip: int = 0) -> ModelError:
        """The error for an answer ``line`` beyond every request sent, ``skip`` lines after
        the answer lines read so far."""
        error = self._failure(f"answered more lines than it was asked: {line[:200]!r}", (), skip)
        error.where = ""   # no token to name: the answers went out of step before this line
        return error

    def finish(self) -> None:
        """End the session after the last answer, checking that the model answered no more
        than it was asked: close its input and read its output to the end (it must exit, or
        close its output, within ``timeout``; a blank line then is an extra answer too: an empty
        answer is a blank line, and the last one of a model out of step by one may be it), then
        :meth:`close`.

        Raises:
            ModelError: it wrote more (its first extra line is named), or exited with a code
                other than 0 or was killed by a signal (not by this method: a model that
                neither exits nor closes its output within ``timeout`` of its input's end is
                killed, with a warning after :data:`EXIT_NOTICE_SECONDS`, and its answers
                stand); its stderr's tail is given.  LM Challenge 5.2 too fails an
                evaluation whose model exits with an error after its last answer.
        """
        if self._closed:
            return
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        notice = self._exit_notice()
        try:
            ended = self._read_to_the_end(time.monotonic() + self.timeout)
        finally:
            notice.cancel()
        if ended and self._proc.returncode:
            raise self._exited_after_answering()

    def _exited_after_answering(self) -> ModelError:
        """The error for a model that exited with a code other than 0 (or was killed by a
        signal) after its last answer."""
        code = self._proc.returncode
        return ModelError(self.cmd, f"{_exit_reason(code)} after its last answer",
                          stderr_tail=self._stderr.text(wait=1.0), stopped=_stopped(code))

    def _exit_notice(self) -> threading.Timer:
        """A started timer that says, if not cancelled within :data:`EXIT_NOTICE_SECONDS`,
        that the model has not exited since its input's end."""
        timer = threading.Timer(
            EXIT_NOTICE_SECONDS, LOG.warning,
            ("model %r has not exited %g s after the end of its input: waiting for it at most "
             "--timeout (%g s), then it is killed (its answers are all in)",
             self.cmd, EXIT_NOTICE_SECONDS, self.timeout))
        timer.daemon = True
        timer.start()
        return timer

    def _read_to_the_end(self, deadline: float) -> bool:
        """Read the output of the model, whose input has ended, to its end, then
        :meth:`close` it, both by ``deadline`` (``time.monotonic()``); whether it exited
        without being killed.

        Raises:
            ModelError: it wrote more than it was asked (the first extra line is named).
        """
        rest = b""
        while len(rest) < (1 << 16):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not select.select([self._out_fd], [], [], min(left, EXIT_CHECK_SECONDS))[0]:
                if self._proc.poll() is not None and not select.select([self._out_fd], [], [], 0)[0]:
                    break   # it exited with nothing more written; a child of it holds its output
                continue
            chunk = os.read(self._out_fd, 1 << 16)
            if not chunk:
                break
            rest += chunk
        if rest:
            raise self._more_than_asked(_first_line(rest))
        return self.close(deadline)

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        """Leave a ``with`` block: :meth:`close` the model.

        Raises:
            ModelError: the block ended without an exception, and the model then exited
                with a code other than 0 or was killed by a signal (not by :meth:`close`),
                as :meth:`finish` says it (LM Challenge 5.2's ShellModel also fails its
                ``with`` block then; QA: the Python API ignored it).  Extra answer lines are
                not looked for here (answers to requests the block left unread may come):
                :meth:`finish` checks them.
        """
        if self.close() and kind is None and self._proc.returncode:
            raise self._exited_after_answering()

    def close(self, deadline: float | None = None) -> bool:
        """Close the model's stdin and wait for it to exit (killed after ``timeout``, or at
        ``deadline``, a ``time.monotonic()`` time); whether it exited (or was killed by a
        signal) without being killed here."""
        if self._closed:
            return False
        self._closed = True
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        ended = True
        try:
            self._proc.wait(timeout=self.timeout if deadline is None
                            else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            ended = False
            self.kill()
            self._proc.wait()
        self._end_children()
        self._proc.stdout.close()
        return ended

    def _end_children(self) -> None:
        """Stop what the model left running in its process group (``server &``: it would
        outlive the run, holding memory or a GPU); a daemon that left the group is its own
        business.  The group's id is not reused while a member lives, so only the model's
        own are signalled."""
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def _stopped(code: int) -> bool:
    """An exit ``code`` (negative: the signal) of a process stopped from outside: a signal,
    or the code a program exits with on SIGINT or SIGTERM."""
    return code < 0 or code in STOPPED_CODES


SHELL_CODES = {126: " (a shell's code for a command it found but could not run: not "
                    "executable?)",
               127: " (a shell's code for a command it did not find)"}
"""What the exit codes a POSIX shell gives a command it cannot run mean (POSIX, "Shell
Command Language", 2.8.2): a model command runs through ``/bin/sh``."""


def _exit_reason(code: int) -> str:
    """How a process that ended with ``code`` (not 0; negative: the signal) ended, in words."""
    if code > 0:
        return f"exited with code {code}" + SHELL_CODES.get(code, "")
    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-code}{name}"


def _first_line(data: bytes) -> str:
    """The first line of ``data``, decoded (bytes that are not UTF-8 replaced)."""
    return data.split(b"\n", 1)[0].decode("utf-8", "replace")


def _shown_pairs(result: Result, most: int = 6) -> str:
    shown = "\t".join(f"{text}\t{score!r}" for text, score in result[:most])
    return repr(shown + ("\t..." if len(result) > most else ""))


__all__ = ["ShellModel", "shell_command"]

"""One model process for many clients: the line protocol on a socket, their requests batched
together.

``lmc-neural serve MODEL --listen ADDRESS`` loads the model once and answers every client
that connects (:func:`serve_shared`); ``lmc-neural connect ADDRESS`` is the model command
that ``lmc run`` or each ``lmc-dist`` worker starts (:func:`relay`: its standard input to
the server, the answers back).  The point is one copy of the model for many workers: on one
GPU, one process whose forward passes hold the rows of every worker's queries, instead of a
process (and a copy of the weights) per worker taking turns on the GPU.

How requests are answered: each connection's reader thread cuts what has arrived into
whole request lines (:func:`lmchallenge.model.batched.queries_of`) and queues them; the
model's thread takes every block queued (from any connection), answers their ``predict``
queries in ``predict_batch`` calls (:func:`lmchallenge.model.batched.groups` over the blocks
in the order they arrived, so a call may hold queries of several clients), and sends each
connection its answers, in its own order.  ``train`` and ``clear`` are ignored: a shared
model does not adapt (one client's training would change another's answers).  A connection
is closed once its requests have ended and been answered.  Answers depend on which queries
share a pass only through rounding (the batched model's own property), so the logs of runs
through a shared server can differ from ``lmc run``'s in the last bits on a GPU.

Addresses: ``HOST:PORT`` (a port number after the last colon; ``[::1]:PORT`` for IPv6) is
TCP, anything else the path of a Unix socket.  There is no authentication: listen on a Unix
socket or on a loopback or trusted network only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import queue
import random
import re
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from lmchallenge.corpus import arrived_reader, whole_line_blocks
from lmchallenge.errors import LmcError
from lmchallenge.model.batched import Query, answer_lines, groups, queries_of

LOG = logging.getLogger(__name__)
_TCP = re.compile(r"^(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^/\[\]]*)):(?P<port>[0-9]+)$")
CONNECT_RETRY = 0.2
"""Seconds between tries while :func:`relay` waits for a server that is not there yet."""

OTHER_CONNECT_TIMEOUT = 5.0
"""Seconds a relay gives a connection to each of its other addresses (its own server not
there): a remote server's handshake, not a wait for one still loading."""

_START_HINT = " (start it with `lmc-neural serve MODEL --listen ADDRESS`)"


@dataclass(frozen=True)
class Address:
    """Where a shared model listens: ``family`` is ``socket.AF_UNIX`` (``where`` a path) or
    ``AF_INET``/``AF_INET6`` (``where`` a (host, port) pair); ``text`` as the user wrote
    it."""
    family: int
    where: Any
    text: str


def address_of(text: str) -> Address:
    """The :class:`Address` that ``text`` names (module docstring).

    Raises:
        LmcError: an empty address, or a port out of 1-65535.
    """
    if not text:
        raise LmcError("the address is empty: give a Unix socket's path or HOST:PORT")
    match = _TCP.match(text)
    if match is None:
        return Address(socket.AF_UNIX, text, text)
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise LmcError(f"{text}: the port must be from 1 to 65535")
    if match["v6"] is not None:
        return Address(socket.AF_INET6, (match["v6"], port), text)
    return Address(socket.AF_INET, (match["host"] or "localhost", port), text)


@contextlib.contextmanager
def listening(address: Address) -> Iterator[socket.socket]:
    """A socket bound to ``address`` while the block runs; then closed, and a Unix
    socket's file removed.  It listens once :func:`serve_shared` starts: until then (the
    model loading) a relay's connection is refused, so it waits for the server, or goes to
    its next address if the load fails.  A Unix socket's path is held for the server's
    life by a lock on ``PATH.lock`` beside it (``flock``; removed at the end): a second
    server on the path is refused at once, and a socket file left there by a dead server
    (a SIGKILL) is replaced; a path that is not a socket is refused.

    Raises:
        LmcError: the address is in use or cannot be bound (the reason given).
    """
    unix = address.family == socket.AF_UNIX
    lock = _lock(address) if unix else None
    try:
        if unix:
            _clear_stale_socket(address)
        sock = socket.socket(address.family, socket.SOCK_STREAM)
        try:
            if not unix:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address.where)
        except (OSError, OverflowError) as e:
            sock.close()
            raise LmcError(f"cannot listen at {address.text}: "
                           f"{getattr(e, 'strerror', None) or e}") from None
        try:
            yield sock
        finally:
            sock.close()
            if unix:
                with contextlib.suppress(OSError):
                    os.remove(address.where)
    finally:
        if lock is not None:
            with contextlib.suppress(OSError):
                os.remove(lock.name)
            lock.close()


def _lock(address: Address) -> IO[bytes]:
    try:
        lock = open(f"{address.where}.lock", "ab")
    except OSError as e:
        raise LmcError(f"cannot listen at {address.text}: {e.strerror}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise LmcError(f"cannot listen at {address.text}: a server is listening there "
                       f"already ({lock.name} is locked)") from None
    return lock


def _clear_stale_socket(address: Address) -> None:
    """Remove a socket file that a dead server left at ``address`` (its lock is held)."""
    if _socket_there(address, f"cannot listen at {address.text}",
                     "it is there and is not a socket"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(address.where)


def _socket_there(address: Address, failing: str, other: str) -> bool:
    """Whether a socket is at the Unix socket path of ``address`` (False: nothing is).

    Raises:
        LmcError: ``FAILING: OTHER`` for something else there; ``FAILING: REASON`` for a
            path that cannot be looked at.
    """
    try:
        mode = os.stat(address.where).st_mode
    except FileNotFoundError:
        return False
    except OSError as e:
        raise LmcError(f"{failing}: {e.strerror}") from None
    if not stat.S_ISSOCK(mode):
        raise LmcError(f"{failing}: {other}")
    return True


UNSENT_LIMIT = 1 << 24
"""Bytes of answers a client may leave unread before the server stops reading its requests
(until it reads them): one client that does not read holds up only itself."""


FAILURE = b"\x00lmc-failed\t"
"""What starts the line a server sends a client before it closes the connection on a
failed query of that client (a line no answer starts: answers are words and scores)."""

FINISH_SECONDS = 5.0
"""How long a stopping server lets its clients take the answers already made."""


class _Client:
    """One connection: its socket, and a thread that sends its answers (so that a client
    slow to read them never holds up the model's thread, nor the other clients)."""

    def __init__(self, sock: socket.socket, number: int, clients: set["_Client"],
                 errors: IO[str], name: str):
        self.sock, self.number = sock, number
        self._clients, self._errors, self._name = clients, errors, name
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._room = threading.Condition()
        self._unsent = 0
        self.gone = False       # sending failed: nothing more is sent
        self.failed = False     # a query of its failed: nothing more is computed
        clients.add(self)
        self._writer = threading.Thread(target=self._write, daemon=True,
                                        name=f"lmc-shared-send-{number}")
        self._writer.start()

    def send(self, text: str) -> None:
        """Queue ``text`` (answer lines) to be sent; never blocks."""
        if self.dropped or not text:
            return
        data = text.encode("utf-8")
        with self._room:
            self._unsent += len(data)
        self._outbox.put(data)

    def end(self) -> None:
        """Its requests have ended: close the connection once what is queued is sent."""
        self._outbox.put(None)

    def fail(self, reason: str) -> None:
        """A query of its failed: send the answers made so far and then ``reason`` (a
        line :data:`FAILURE` starts, which :func:`relay` reports), and close."""
        self.failed = True
        self._outbox.put(FAILURE + reason.replace("\n", " ").encode("utf-8") + b"\n")
        self.end()

    @property
    def dropped(self) -> bool:
        """Whether its queries are no longer computed (it is gone or failed)."""
        return self.gone or self.failed

    def finish(self, deadline: float) -> None:
        """Send what is queued (until ``deadline``, a ``time.monotonic()``), then close."""
        self.end()
        self._writer.join(max(0.0, deadline - time.monotonic()))
        self.close()

    def wait_for_room(self) -> None:
        """Wait while more than :data:`UNSENT_LIMIT` bytes of its answers are unsent."""
        with self._room:
            self._room.wait_for(lambda: self._unsent < UNSENT_LIMIT or self.dropped)

    def _write(self) -> None:
        while (data := self._outbox.get()) is not None:
            if not self.gone:
                try:
                    self.sock.sendall(data)
                except OSError as e:
                    self.gone = True
                    self._errors.write(f"{self._name}: client {self.number} is gone "
                                       f"({e.strerror or e}); its answers are dropped\n")
            with self._room:
                self._unsent -= len(data)
                self._room.notify_all()
        self.close()

    def close(self) -> None:
        """Close the connection (a send or receive in progress ends)."""
        self._clients.discard(self)
        with self._room:
            self.gone = True
            self._room.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


_Block = tuple[_Client, "list[Query] | None"]   # a connection's requests; None: it ended


def serve_shared(model: Any, listener: socket.socket, errors: IO[str],
                 stop: threading.Event | None = None, name: str = "lmc-neural") -> None:
    """Answer every connection to ``listener`` with ``model`` (an object with
    ``predict_batch`` and ``predict_batch_size``, as
    :class:`~lmchallenge.model.neural.adapter.CausalLM`), batching the queries of all of
    them, until ``stop`` is set (checked every 0.2 s) or the process is interrupted.
    Diagnostics go to ``errors``, starting with ``name``.  A call of ``predict_batch``
    that raises is made again for each client's queries apart; a client whose queries
    raise again is sent the reason and its connection is closed (its relay fails with
    it), the others are answered and the server goes on.  The connections still open are
    closed on the way out, after their answers already made (their clients then fail,
    naming the server); ``listener`` is left to the caller.
    """
    blocks: queue.Queue[_Block] = queue.Queue()
    clients: set[_Client] = set()
    listener.listen(socket.SOMAXCONN)   # (bound by listening(): refused until now)
    threading.Thread(target=_accept, args=(listener, blocks, clients, errors, name),
                     daemon=True, name="lmc-shared-accept").start()
    stop = stop or threading.Event()
    try:
        while not stop.is_set():
            try:
                first = blocks.get(timeout=0.2)
            except queue.Empty:
                continue
            _answer(model, _drain(blocks, first), errors, name)
    finally:    # the answers already made are sent (a client held up: for a few seconds)
        deadline = time.monotonic() + FINISH_SECONDS
        for client in list(clients):
            client.finish(deadline)


def _accept(listener: socket.socket, blocks: queue.Queue, clients: set[_Client],
            errors: IO[str], name: str) -> None:
    number = 0
    while True:
        try:
            sock, _ = listener.accept()
        except OSError:     # the listener was closed: the server is stopping
            return
        number += 1
        client = _Client(sock, number, clients, errors, name)
        threading.Thread(target=_read, args=(client, blocks, errors, name), daemon=True,
                         name=f"lmc-shared-client-{number}").start()


def _read(client: _Client, blocks: queue.Queue, errors: IO[str], name: str) -> None:
    """Queue ``client``'s requests block by block, then ``None`` when they end."""
    try:
        for block in whole_line_blocks(client.sock.recv):
            blocks.put((client, queries_of(block, errors, name)))
            client.wait_for_room()
    except OSError:     # reset by the client: its requests have ended
        pass
    finally:
        blocks.put((client, None))


def _drain(blocks: queue.Queue, first: _Block) -> list[_Block]:
    """``first`` and every block queued after it, in order."""
    taken = [first]
    with contextlib.suppress(queue.Empty):
        while True:
            taken.append(blocks.get_nowait())
    return taken


def _answer(model: Any, taken: list[_Block], errors: IO[str], name: str) -> None:
    """Answer the queries of ``taken`` together, send each client its answers in its
    order, then close the clients whose requests have ended."""
    owners: list[_Client] = []
    queries: list[Query] = []
    for client, block in taken:
        if block and not client.dropped:    # (gone or failed: not computed)
            owners += [client] * len(block)
            queries += block
    done = 0
    for group in groups(queries, model.predict_batch_size):
        mine = owners[done:done + len(group)]
        done += len(group)
        try:
            lines = answer_lines(model, group)
        except Exception:   # noqa: BLE001 - each client's queries again, apart
            _answer_apart(model, mine, group, errors, name)
            continue
        _send(mine, lines)
    for client, block in taken:
        if block is None:
            client.end()


def _answer_apart(model: Any, owners: list[_Client], group: list[Query], errors: IO[str],
                  name: str) -> None:
    """Answer ``group`` (a call that failed) one client's queries at a time: a client whose
    queries fail again is sent the reason and closed (as ``lmc-neural serve`` exits on the
    failure of its one client); the others are answered."""
    for client in dict.fromkeys(owners):
        queries = [query for owner, query in zip(owners, group) if owner is client]
        if client.dropped:
            continue
        try:
            client.send("".join(answer_lines(model, queries)))
        except Exception as e:  # noqa: BLE001 - the client is told, the server goes on
            reason = (f"predict_batch failed on a call of {len(queries)} "
                      f"quer{'y' if len(queries) == 1 else 'ies'}, the first "
                      f"{queries[0]!r:.200}: {type(e).__name__}: {e}")
            errors.write(f"{name}: client {client.number}: {reason}; its connection is "
                         "closed\n")
            client.fail(reason)


def _send(owners: list[_Client], lines: list[str]) -> None:
    by_client: dict[_Client, list[str]] = {}
    for client, line in zip(owners, lines):
        by_client.setdefault(client, []).append(line)
    for client, mine in by_client.items():
        client.send("".join(mine))


def in_preference(addresses: list[Address], worker: str | None) -> list[Address]:
    """``addresses`` in the order a relay tries them, the one it is meant to use first:
    with ``worker`` (an ``lmc-dist`` worker's name, :data:`lmchallenge.tuning.WORKER_VARIABLE`)
    numbered (:data:`NUMBERED`: ``7``, ``gpu-7``), ``addresses[N % len(addresses)]`` (the
    embedded cluster's workers 0 to W-1 spread evenly over them), otherwise one at random
    (a ``dask worker``'s default name is its address, whose port says nothing); then the
    others, in their order after it."""
    numbered = NUMBERED.fullmatch(worker or "")
    first = (random.SystemRandom().randrange(len(addresses)) if numbered is None
             else int(numbered.group(1)) % len(addresses))
    return addresses[first:] + addresses[:first]


NUMBERED = re.compile(r"(?:[A-Za-z0-9_.-]*[-_])?([0-9]{1,9})")
"""A worker name that numbers its worker: digits (the embedded cluster's), or a name ending
in ``-`` or ``_`` and digits (``dask worker --name gpu-3``); not an address
(``tcp://10.0.0.5:40100``)."""


def relay(addresses: list[Address], source: IO[bytes], sink: IO[bytes], wait: float) -> None:
    """Send what ``source`` (a binary stream: the model's standard input) holds to the
    server at ``addresses[0]``, and write its answers to ``sink`` (whole lines, flushed as
    they come), until the server has answered everything and closed the connection.  A
    server not there (yet) is tried again every :data:`CONNECT_RETRY` seconds for up to
    ``wait`` seconds; then each of the other ``addresses`` once, in order (servers of the
    same model: one that is down costs its clients the wait, not the run).

    Raises:
        LmcError: no server at any of ``addresses`` (within ``wait`` seconds for the first;
            at once for a path that is not a socket), the server failed one of the
            queries (its reason given), or it closed the connection before every
            ``predict`` request sent had its answer line (it stopped or failed: its own
            output says why).
    """
    address, sock = _connect_first(addresses, wait)
    sent = [0]                  # predict requests sent
    ended = threading.Event()   # every request was sent (set before the server is told)

    def upstream() -> None:
        read = _reader(source)
        with contextlib.suppress(OSError, ValueError):
            for block in whole_line_blocks(read):
                sent[0] += _predicts(block)
                sock.sendall(block)
            ended.set()
            sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, daemon=True, name="lmc-relay-up").start()
    answered, failure = 0, None
    try:
        for block in whole_line_blocks(sock.recv):
            at = block.find(FAILURE)
            if at >= 0:
                block, failure = block[:at], block[at + len(FAILURE):]
            answered += block.count(b"\n")
            sink.write(block)
            sink.flush()
            if failure is not None:
                break
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    if failure is not None:
        raise LmcError(f"the server at {address.text}: "
                       f"{failure.decode('utf-8', 'replace').rstrip()}")
    if not ended.is_set() or answered < sent[0]:
        raise LmcError(f"the server at {address.text} closed the connection with "
                       f"{answered:,} of {sent[0]:,}{'' if ended.is_set() else '+'} predict "
                       "requests answered (it stopped or failed: its own output says why)")


def _reader(source: IO[bytes]) -> Callable[[int], bytes]:
    """A ``read(size)`` of ``source``: of its file descriptor where it has one (a thread
    blocked in it holds no lock of the stream, which would abort the interpreter's exit),
    else its ``read1`` or ``read``."""
    try:
        fd = source.fileno()
    except (AttributeError, OSError, ValueError):
        return arrived_reader(source)
    return functools.partial(os.read, fd)


def _predicts(block: bytes) -> int:
    """The ``predict`` requests among the lines of ``block`` (which starts a line)."""
    first = block.startswith(b"predict\t") or block.startswith(b"predict\n")
    return first + block.count(b"\npredict\t") + block.count(b"\npredict\n")


class _NoServer(LmcError):
    """A connection to an address failed (unlike a path no server can ever listen at): the
    error then says how to start a server."""


def _connect_first(addresses: list[Address], wait: float) -> tuple[Address, socket.socket]:
    """The first of ``addresses`` with a server (the first waited for, the others tried
    once) and the connection to it.

    Raises:
        LmcError: every address's reason, then how to start a server where one could be.
    """
    failures: list[LmcError] = []
    for address in addresses:
        try:
            if not failures:
                return address, _connect(address, wait)
            return address, _connect(address, 0.0, least=OTHER_CONNECT_TIMEOUT)
        except LmcError as e:
            failures.append(e)
    hint = _START_HINT if any(isinstance(e, _NoServer) for e in failures) else ""
    raise LmcError("; ".join(map(str, failures)) + hint) from None


def _connect(address: Address, wait: float, least: float = CONNECT_RETRY) -> socket.socket:
    """A connection to the server at ``address``, tried every :data:`CONNECT_RETRY` seconds
    for up to ``wait`` seconds, each try given at least ``least`` seconds; a warning says
    once that it waits."""
    deadline = time.monotonic() + wait
    said = False
    while True:
        _check_unix_path(address)
        sock = socket.socket(address.family, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(deadline - time.monotonic(), least))
            sock.connect(address.where)
            sock.settimeout(None)
            return sock
        except OSError as e:
            sock.close()
            waiting = e.errno in (errno.ENOENT, errno.ECONNREFUSED)
            if not waiting or time.monotonic() >= deadline:
                raise _NoServer(f"no server at {address.text}"
                                + (f" after {wait:g} s" if waiting and wait else "")
                                + f": {e.strerror or e}") from None
            if not said:    # (QA: a mistyped address was a minute's silence)
                LOG.warning("no server at %s yet (%s): waiting up to %g s for it to listen "
                            "(still loading?)", address.text, e.strerror or e, wait)
                said = True
        time.sleep(CONNECT_RETRY)


def _check_unix_path(address: Address) -> None:
    """Raise :class:`LmcError` at once for a Unix socket's path that no server can ever
    listen at: not a socket, or in a directory that is not there."""
    if address.family != socket.AF_UNIX:
        return
    failing = f"no server at {address.text}"
    if not _socket_there(address, failing, "it is not a socket"):
        parent = os.path.dirname(address.where) or "."
        if not os.path.isdir(parent):
            raise LmcError(f"{failing}: there is no directory {parent}")


__all__ = ["Address", "address_of", "listening", "serve_shared", "in_preference", "relay"]

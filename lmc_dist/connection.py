"""The client's connection to its scheduler: a lost scheduler ends the run at once.

When a client's connection to its scheduler closes, ``distributed`` cancels every future
the client holds, then tries to reconnect for ``distributed.comm.timeouts.connect`` (30 s
by default); a task submitted meanwhile waits out those seconds before it is cancelled in
turn.  A run whose scheduler is gone cannot go on (its workers' results went with it:
``--resume`` finishes it, docs/formats.md), so lmc-dist submits nothing to a client that has
lost its scheduler (:func:`submit`) and reports the loss in one line at once.
"""

from __future__ import annotations

from concurrent.futures import CancelledError
from typing import Any

from distributed import Client, Future


ADDRESS_SCHEMES = ("tcp", "tls", "ws", "wss")
"""The schemes of a scheduler's address that ``--scheduler`` takes (each ``HOST:PORT``)."""


def checked_address(address: str) -> str:
    """``address`` if it can be a Dask scheduler's (``[SCHEME://]HOST:PORT``, ``tcp`` when no
    scheme is given, as ``distributed`` reads it), checked without connecting or resolving
    the host.

    Raises:
        ValueError: it cannot, saying why, with an example of one that can.
    """
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme not in ADDRESS_SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; one of {', '.join(ADDRESS_SCHEMES)}")
        _, port = parse_host_port(location)
        if not 0 < int(port) < 65536:   # (it waited 30 s on one)
            raise ValueError(f"port {port} is not from 1 to 65535")
    except ValueError as e:
        raise ValueError(f"{address!r} is not a Dask scheduler address, SCHEME://HOST:PORT such "
                         f"as tcp://127.0.0.1:8786 ({e})") from None
    return address


TLS_SCHEMES = ("tls", "wss")
"""The schemes of :data:`ADDRESS_SCHEMES` whose connections need the client's certificates."""


def missing_tls(address: str) -> str | None:
    """Why the client cannot open a TLS connection to the scheduler ``address``
    (:data:`TLS_SCHEMES`): Dask's configuration (``distributed.comm.tls.*``) gives it no
    certificates, or ones it cannot read; None where it can, or needs none.  (Without them
    ``distributed`` raised a TypeError, "TLS expects a ssl_context argument", as a traceback:
    QA.)"""
    import os
    import ssl

    import dask
    from distributed.comm.addressing import parse_address

    if parse_address(address)[0] not in TLS_SCHEMES:
        return None
    from distributed.security import Security
    settings = ("distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and "
                "distributed.comm.tls.client.key, e.g. as DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT and "
                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY")
    for key in ("ca-file", "client.cert", "client.key"):
        path = dask.config.get(f"distributed.comm.tls.{key}", None)
        if isinstance(path, str) and "\n" not in path and not os.path.exists(path):
            return (f"distributed.comm.tls.{key} of Dask's configuration is {path}, which does "
                    "not exist")
    try:
        context = Security().get_connection_args("client")["ssl_context"]
    except (OSError, ssl.SSLError, ValueError, TypeError) as e:
        return f"the TLS settings of Dask's configuration ({settings}) cannot be used: {e}"
    if context is None:
        return (f"a {address.split('://')[0]}:// address needs the client's TLS certificates, "
                f"and Dask's configuration gives none: set {settings}")
    return None


def unresolved_host(address: str) -> str | None:
    """Why the host of a scheduler ``address`` (:data:`ADDRESS_SCHEMES`, each HOST:PORT) has
    no network address (its name does not resolve: Dask tried it until its connect timeout,
    30 s, and then said 'Timed out'), or None (it resolves)."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    _, location = parse_address(address)
    host, port = parse_host_port(location)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"its host {host!r} is not found: {e.strerror or e}"
    except (OSError, UnicodeError):     # (let Dask try it, and say what it found)
        return None
    return None


def require_scheduler(client: Client) -> None:
    """Return if ``client`` is connected to its scheduler.

    Raises:
        concurrent.futures.CancelledError: the client has lost its scheduler (its status is
            not ``"running"``: ``"connecting"`` while it tries to reconnect, or closed).
    """
    if client.status != "running":
        raise CancelledError(f"the client lost its scheduler (status {client.status!r})")


def submit(client: Client, function: Any, *args: Any, **kwargs: Any) -> Future:
    """``client.submit(function, *args, **kwargs)`` on a connected client.

    Raises:
        concurrent.futures.CancelledError: the client has lost its scheduler
            (:func:`require_scheduler`).
    """
    require_scheduler(client)
    return client.submit(function, *args, **kwargs)

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

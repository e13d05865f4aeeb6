"""Walks a corpus through a game and a model, producing the log (one datum per token).

Semantics (docs/architecture.md, invariant 5): consecutive messages of one user form a group; with
``train`` the model gets ``clear`` before each group and is trained on each message after
it has been evaluated, all rows sharing a timestamp being evaluated before any of them is
trained on; ``message`` counts from 0 within a group (from ``first_message`` for the first
group, when a partition starts inside a group).

All requests go to the model as one ordered stream, so a shell model is pipelined across
tokens, messages and users, while answers are matched to tokens in order.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from lmchallenge.corpus import Message
from lmchallenge.errors import ModelError
from lmchallenge.model.wire import Clear, Predict, Request, Train
from lmchallenge.model.wire import Result
from lmchallenge.model.session import session_batches
from lmchallenge.tokenize import Token


class Game(Protocol):
    """A challenge game: turns a message into per-token requests, and answers into log payloads."""

    name: str

    def message_queries(self, user: str | None, message: int,
                        text: str) -> Iterator[tuple[Token, list[Predict], Any]]:
        """For each token of ``text``: the token, its (one or more) predict requests, and a
        state handed back to :meth:`payload`."""
        ...

    def payload(self, token: Token, answers: list[Result], state: Any) -> dict[str, Any]:
        """The game's keys of the token's log datum, from the answers to its requests."""
        ...


def user_groups(messages: Iterable[Message]) -> Iterator[tuple[str | None, Iterator[Message]]]:
    """Consecutive messages of one user, as ``(user, messages)``."""
    return itertools.groupby(messages, key=lambda m: m.user)


def training_batches(group: Iterable[Message], train: bool) -> Iterator[list[Message]]:
    """Messages evaluated before the model trains on them: consecutive rows sharing a
    (non-null) timestamp when training, else one message at a time."""
    if not train:
        for message in group:
            yield [message]
        return
    batch: list[Message] = []
    for message in group:
        if batch and (message.timestamp is None or message.timestamp != batch[-1].timestamp):
            yield batch
            batch = []
        batch.append(message)
    if batch:
        yield batch


def run_game(game: Game, model: Any, messages: Iterable[Message], train: bool = False,
             first_message: int = 0) -> Iterator[dict[str, Any]]:
    """Evaluate ``model`` on ``messages`` with ``game``; yield log datums in order.

    Args:
        game: a :class:`Game`.
        model: a model (see :func:`lmchallenge.model.session`).
        messages: corpus messages in corpus order.
        train: train the model after evaluating each message (and clear between users).
        first_message: the message number of the first message (partitions of lmc-dist).
    Yields:
        Log datums ``{"user", "message", "token", "character", "target", ...payload}``.
    Raises:
        ModelError: naming the user, message and token being evaluated.
        InputError: from reading ``messages``.
    """
    pending: collections.deque = collections.deque()

    def requests() -> Iterator[Request]:
        number = first_message
        for user, group in user_groups(messages):
            if train:
                yield Clear()
            for batch in training_batches(group, train):
                for message in batch:
                    for token, predicts, state in game.message_queries(user, number, message.text):
                        pending.append((user, number, token, len(predicts), state))
                        yield from predicts
                    number += 1
                if train:
                    for message in batch:
                        yield Train(message.text)
            number = 0

    answers: list[Result] = []   # answered, not yet given to a token
    try:
        for batch in session_batches(model, requests()):
            answers += batch
            used = 0
            while pending and len(answers) - used >= pending[0][3]:
                user, number, token, expected, state = pending.popleft()
                datum = {"user": user, "message": number, "token": token.token,
                         "character": token.character, "target": token.target}
                datum.update(game.payload(token, answers[used:used + expected], state))
                used += expected
                yield datum
            del answers[:used]
    except ModelError as e:
        if pending and e.where is None:
            # the copy keeps the model's own exception as its cause (docs/formats.md, the
            # Python API: QA found it dropped)
            raise e.with_where(_where(pending, len(answers), len(e.in_flight))) from e.__cause__
        raise


def _where(pending: collections.deque, answered: int, in_flight: int) -> str:
    """The token the failing answer belongs to (the oldest token not fully answered: the
    answers before the failing one were given to their tokens) and, when several requests
    were in flight, the token of the newest of them.

    ``pending`` holds ``(user, message, token, predicts, state)`` per token whose requests
    were drawn, oldest first; ``answered`` of the first token's predicts have their answer.
    """
    def name(entry: tuple) -> str:
        user, number, token, _, _ = entry
        return f"user {user!r}, message {number}, token {token.token} ({token.target!r})"

    where = name(pending[0])
    if in_flight > 1:
        remaining = in_flight + answered
        for entry in pending:
            remaining -= entry[3]
            if remaining <= 0:
                break
        if entry is not pending[0]:
            where += f"; requests in flight up to {name(entry)}"
    return where

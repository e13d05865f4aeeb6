"""What a log is, written once: the games, the columns of a log datum, and which game a datum
belongs to.

A log is a sequence of datums, one per token, each a JSON object in the LM Challenge 5.x
schema (docs/formats.md, "Log"; validated by ``log.schema`` beside this module):

* every datum: ``user`` (string or null), ``message``, ``token``, ``character`` (ints),
  ``target`` (string), optional ``select`` (bool);
* the payload of its game: ``wc`` ``completions``; ``we``/``ce`` ``logp``; ``wr``
  ``verbatim`` and ``results``.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

Datum = dict[str, Any]
"""One log line: a JSON object of the LM Challenge 5.x log schema."""

GAMES = ("wc", "we", "ce", "wr")
"""The games: word completion, word entropy, character entropy, word reranking."""

COMMON_COLUMNS = ("user", "message", "token", "character", "target")
"""Columns of every datum (``user`` may be null), in this order."""

OPTIONAL_COLUMNS = ("select",)
"""Columns a datum may lack (``select`` missing = selected)."""

PAYLOAD_COLUMNS: dict[str, tuple[str, ...]] = {
    "wc": ("completions",),
    "we": ("logp",),
    "ce": ("logp",),
    "wr": ("verbatim", "results"),
}
"""The game-specific columns of each game."""

_PAYLOAD_KEYS = (("wc", "completions"), ("we", "logp"), ("wr", "results"))
"""The key that tells each payload apart (``we`` and ``ce`` share theirs)."""


def payload_games(datum: Datum) -> list[str]:
    """The games whose payload key ``datum`` holds: ``wc`` (``completions``), ``we``
    (``logp``: also ``ce``, which shares its schema), ``wr`` (``results``), in that order."""
    return [game for game, key in _PAYLOAD_KEYS if key in datum]


def detect_game(datum: Datum | None) -> str | None:
    """The game of a datum's payload: ``wc``, ``we`` (``we`` or ``ce``) or ``wr``; None for
    no datum or a datum without payload.  A datum holding the payload keys of several games
    is that of the first in :func:`payload_games`' order."""
    found = payload_games(datum) if datum is not None else []
    return found[0] if found else None


@functools.cache
def json_schema() -> dict[str, Any]:
    """The log schema as a JSON Schema (2020-12) object (``log.schema`` beside this module)."""
    return json.loads(resources.files(__package__).joinpath("log.schema").read_text("utf-8"))


__all__ = ["json_schema", "Datum", "GAMES", "COMMON_COLUMNS", "OPTIONAL_COLUMNS", "PAYLOAD_COLUMNS",
           "payload_games", "detect_game"]

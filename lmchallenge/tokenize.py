"""Tokenizers for the LM Challenge games: words (with emoji) and characters.

The word tokenizer follows LM Challenge 5.x (``lmchallenge.core.common``):
a token is, in order of preference,

1. one emoji (the longest emoji sequence known to the ``emoji`` package),
2. a run of letters, numbers, connector punctuation, dashes, ``'``, ``@``, ``#``,
3. a run of other punctuation and symbols.

Whitespace is never part of a token.  The character tokenizer yields every
Unicode code point, newlines included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import emoji
import regex

WORD_PATTERN_TAIL = r"[\p{L}\p{N}\p{Pc}\p{Pd}'@#]+|[\p{P}\p{S}]+"


ZWJ = "\u200d"
VARIATION_SELECTOR_16 = "\ufe0f"


def emoji_sequences() -> list[str]:
    """The emoji a word token may be, longest first.

    They are the ``emoji`` package's emoji without zero-width-joiner sequences and
    with the emoji presentation selector (U+FE0F) removed: LM Challenge 5.x's emoji
    list predates both, so a ZWJ sequence such as "💇\u200d♀\ufe0f" tokenizes as
    "💇", "♀" there, and so it does here (joiners and selectors are not part of
    any token).
    """
    found = {e.replace(VARIATION_SELECTOR_16, "") for e in emoji.EMOJI_DATA if ZWJ not in e}
    found.discard("")
    return sorted(found, key=lambda e: (-len(e), e))


def _emoji_alternation() -> str:
    """A regex matching one emoji; a leading character class makes non-emoji positions cheap."""
    sequences = emoji_sequences()
    first = "".join(sorted({regex.escape(e[0]) for e in sequences}))
    return "(?=[" + first + "])(?:" + "|".join(regex.escape(e) for e in sequences) + ")"


@lru_cache(maxsize=1)
def word_tokenizer() -> regex.Pattern:
    """The compiled word tokenizer (compiled once per process; it is large)."""
    return regex.compile("(?:" + _emoji_alternation() + ")|" + WORD_PATTERN_TAIL)


@lru_cache(maxsize=1)
def character_tokenizer() -> regex.Pattern:
    """The compiled character tokenizer: any single code point, newlines included."""
    return regex.compile(r".|\n", flags=regex.MULTILINE)


class _LazyPattern:
    """A module attribute that compiles its pattern on first use (keeps imports fast)."""

    def __init__(self, factory):
        self._factory = factory

    def __getattr__(self, name):
        return getattr(self._factory(), name)


WORD_TOKENIZER = _LazyPattern(word_tokenizer)
"""The word tokenizer (a ``regex`` pattern: ``finditer``, ``findall``, ``pattern``, ...)."""

CHARACTER_TOKENIZER = _LazyPattern(character_tokenizer)
"""The character tokenizer (a ``regex`` pattern)."""


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a message.

    Attributes:
        token: index of the token in its message (0-based).
        character: index of the token's first code point in the message (0-based).
        target: the token's text.
    """

    token: int
    character: int
    target: str


def find_tokens(text: str, tokenizer: regex.Pattern) -> Iterator[Token]:
    """Tokenize ``text`` with ``tokenizer``, yielding :class:`Token` records in order."""
    for index, match in enumerate(tokenizer.finditer(text)):
        yield Token(token=index, character=match.start(), target=match.group())


def words(text: str) -> list[str]:
    """The word tokens of ``text`` as strings."""
    return word_tokenizer().findall(text)

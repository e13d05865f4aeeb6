"""``lmc grep``: select the tokens of a log that match a pattern.

Selection is recorded, not applied: every datum gets a boolean ``select`` key
(``True`` when it was selected before, if it had a ``select`` key, and every
pattern matches), so ``lmc stats`` counts the rest as ``skipped`` and
``lmc pretty`` dims them.  ``--keep`` then drops what is not needed.

Pattern grammar (LM Challenge 5.x, ``lmc grep --help`` of ``lmchallenge==5.2``):

=====================  ====================================================
``REGEX``              the target contains a match of REGEX (``regex`` module
                       syntax; REGEX may not start with ``$`` or ``~``)
``~REGEX``             the target contains no match of REGEX
``$nospace``           the target contains no whitespace
``$alpha``             the target contains a letter (``\\p{L}``)
``$alphaonly``         the target contains only letters
``$emoji``             the target contains an emoji
``$alphaemoji``        the target contains a letter or an emoji
``$user=REGEX``        ``str(user)`` matches REGEX completely (a null user is ``None``)
``$message=REGEX``     the message number matches REGEX completely
``$token=REGEX``       the token number matches REGEX completely
``$character=REGEX``   the character offset matches REGEX completely
=====================  ====================================================
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache

import regex

from lmchallenge.errors import InputError, LmcError
from lmchallenge.logs.io import log_argument, read_log
from lmchallenge.tokenize import emoji_sequences
from lmchallenge.logs.schema import Datum

Predicate = Callable[[Datum], bool]

KEEP_CHOICES = ("all", "message", "token")
KEY_PATTERN = regex.compile(r"\$(user|message|token|character)=(.+)", flags=regex.DOTALL)


class PatternError(LmcError, ValueError):
    """A grep pattern that cannot be parsed (unknown ``$name`` or invalid regex)."""


def is_selected(datum: Datum) -> bool:
    """True unless the datum was deselected (``"select": false``).

    A missing ``select`` key means selected (LM Challenge 5.x); so does a null one,
    which is how a Parquet log stores "no selection" for a row.
    """
    return datum.get("select") is not False


@lru_cache(maxsize=1)
def emoji_pattern() -> str:
    """A regex source matching one emoji: every ``emoji`` package sequence, with and
    without emoji presentation selectors (U+FE0F), longest first."""
    import emoji

    found = set(emoji_sequences())
    found.update(e for e in emoji.EMOJI_DATA if e)
    ordered = sorted(found, key=lambda e: (-len(e), e))
    return "(?:" + "|".join(regex.escape(e) for e in ordered) + ")"


def _compile(source: str, pattern: str) -> regex.Pattern:
    try:
        return regex.compile(source)
    except regex.error as e:
        raise PatternError(f"invalid regular expression in pattern {pattern!r}: {e}") from None


def _target_contains(xp: regex.Pattern) -> Predicate:
    return lambda datum: xp.search(datum["target"]) is not None


def _target_lacks(xp: regex.Pattern) -> Predicate:
    return lambda datum: xp.search(datum["target"]) is None


def _key_fullmatches(key: str, xp: regex.Pattern) -> Predicate:
    return lambda datum: xp.fullmatch(str(datum.get(key))) is not None


def parse_pattern(pattern: str) -> Predicate:
    """Parse one pattern of the grammar above into a predicate on datums.

    Args:
        pattern: the pattern text.
    Returns:
        ``predicate(datum) -> bool``.
    Raises:
        PatternError: an unknown ``$`` pattern or an invalid regular expression.
    """
    if pattern.startswith("$"):
        named = {
            "$nospace": lambda: _target_lacks(_compile(r"\s", pattern)),
            "$alpha": lambda: _target_contains(_compile(r"\p{L}", pattern)),
            "$alphaonly": lambda: _target_lacks(_compile(r"[^\p{L}]", pattern)),
            "$emoji": lambda: _target_contains(_compile(emoji_pattern(), pattern)),
            "$alphaemoji": lambda: _target_contains(
                _compile(r"\p{L}|" + emoji_pattern(), pattern)),
        }
        if pattern in named:
            return named[pattern]()
        match = KEY_PATTERN.fullmatch(pattern)
        if match is None:
            raise PatternError(
                f"unrecognized special pattern {pattern!r} (expected one of "
                f"{', '.join(named)}, or $user=|$message=|$token=|$character=REGEX)")
        return _key_fullmatches(match.group(1), _compile(match.group(2), pattern))
    if pattern.startswith("~"):
        return _target_lacks(_compile(pattern[1:], pattern))
    return _target_contains(_compile(pattern, pattern))


def parse_patterns_all(*patterns: str | Sequence[str]) -> Predicate:
    """One predicate that holds when every pattern matches: the patterns given one per
    argument (as in LM Challenge 5.x), or as sequences of patterns, or both.

    Raises:
        PatternError: as ``parse_pattern``.
    """
    flat = [p for group in patterns for p in ([group] if isinstance(group, str) else group)]
    predicates = [parse_pattern(p) for p in flat]
    return lambda datum: all(p(datum) for p in predicates)


def select(data: Iterable[Datum], predicate: Predicate, name: str = "<log>") -> Iterator[Datum]:
    """Copies of ``data`` with ``select`` = previously selected and ``predicate(datum)``.

    The predicate is not evaluated on datums that were already deselected.

    Raises:
        InputError: ``NAME:N: what is wrong`` for a datum the predicate cannot read (no
            ``target``, a target that is not a string: N counts datums from 1, as
            ``lmc validate`` does).
    """
    for number, datum in enumerate(data, start=1):
        try:
            out = dict(datum)
            out["select"] = bool(is_selected(datum) and predicate(datum))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            from lmchallenge.logs.check import problem

            reason = problem(datum) or f"not an LM Challenge log datum ({type(e).__name__}: {e})"
            raise InputError(name, number, reason) from None
        yield out


def keep_all(data: Iterable[Datum]) -> Iterator[Datum]:
    """Every datum."""
    return iter(data)


def keep_message(data: Iterable[Datum]) -> Iterator[Datum]:
    """Every datum of a message (consecutive ``(user, message)``) with a selected token."""
    for _, group in itertools.groupby(data, key=lambda d: (d.get("user"), d.get("message"))):
        tokens = list(group)
        if any(is_selected(d) for d in tokens):
            yield from tokens


def keep_token(data: Iterable[Datum]) -> Iterator[Datum]:
    """Only the selected datums."""
    return (d for d in data if is_selected(d))


KEEPERS: dict[str, Callable[[Iterable[Datum]], Iterator[Datum]]] = {
    "all": keep_all, "message": keep_message, "token": keep_token,
}


def grep(pattern: str, log: Iterable[Datum] | str | None = None, keep: str = "all",
         and_patterns: Sequence[str] = (), *, data: Iterable[Datum] | str | None = None) -> Iterator[Datum]:
    """Select the tokens of ``log`` matching ``pattern`` and every one of ``and_patterns``.

    Args:
        pattern: a pattern of the grammar in this module's docstring.
        log: datums, or a path of any log form ``lmchallenge.logs.io.read_log`` reads.
        data: the same, by LM Challenge 5.x's name for it (give one of the two).
        keep: ``"all"`` (every datum, tagged), ``"message"`` (messages holding a selected
            token) or ``"token"`` (selected datums only).
        and_patterns: more patterns that must all match too.
    Returns:
        A lazy iterator of datum copies, each with a boolean ``select``.
    Raises:
        PatternError: a pattern cannot be parsed (raised before any datum is read).
        ValueError: ``keep`` is not one of ``all``, ``message``, ``token``.
        TypeError: both ``log`` and ``data`` given, or neither.
    """
    log = log_argument(log, data, "grep")
    if keep not in KEEPERS:
        raise ValueError(f"keep must be one of {', '.join(KEEP_CHOICES)}, not {keep!r}")
    predicate = parse_patterns_all(pattern, and_patterns)
    data = read_log(log) if isinstance(log, str) else log
    return KEEPERS[keep](select(data, predicate, log if isinstance(log, str) else "<log>"))

"""Options of the games that ``lmc run`` and ``lmc-dist run`` share (a module apart from
:mod:`lmchallenge.cli.options` so that light commands such as ``lmc stats`` do not import the
games)."""

from __future__ import annotations

from collections.abc import Callable

import click

from lmchallenge.cli.options import FiniteFloatRange, count
from lmchallenge.games.typos import DEFAULT_ERROR_CHARS, DEFAULT_P_ANYKEY, unprintable


def wr_options(function: Callable) -> Callable:
    """The options of the wr game (``lmc run ... wr`` and ``lmc-dist run ... wr``): its
    ``VOCAB`` argument, ``--seed``, ``--num-candidates``, ``--error-chars``, ``--p-anykey``."""
    options = [
        click.argument("vocab", type=click.Path(exists=True, dir_okay=False)),
        click.option("-r", "--seed", default=42, show_default=True,
                     help="Seed of the corruption (with user and message number)."),
        click.option("-n", "--num-candidates", default=100, show_default=True,
                     type=count(), help="Most candidates per word."),
        click.option("--error-chars", default=DEFAULT_ERROR_CHARS, show_default=True,
                     callback=_not_empty,
                     help="Characters a corrupted character is replaced by."),
        click.option("-p", "--p-anykey", default=DEFAULT_P_ANYKEY, show_default=True,
                     type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
                     help="Probability that a character is corrupted."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _not_empty(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--error-chars`` checked: at least one character, none of them whitespace or a
    control character (QA: a TAB was accepted, and typed words holding it went to the model,
    whose protocol separates candidates by TAB and requests by line)."""
    if not value:
        raise click.BadParameter("must name at least one character")
    bad = unprintable(value)
    if bad:
        raise click.BadParameter(f"must not hold whitespace or control characters (a typed "
                                 f"word is one token): {bad!r}")
    return value


__all__ = ["wr_options"]

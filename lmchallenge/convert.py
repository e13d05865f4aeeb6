"""``lmc convert``: rewrite a log in another form (jsonl, jsonl.gz, Parquet).

The forms are those of :mod:`lmchallenge.log`: the output form follows the output
name (``.jsonl``, ``.jsonl.gz``/``.gz``, ``.parquet``, ``-`` for jsonlines on
stdout); the input may be any form ``read_log`` reads, a run directory included.
Datums stream from reader to writer (the Parquet writer batches rows), so a large
reference log becomes a ``pandas.read_parquet``-able file without being held in memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import click

from .log import is_parquet_name, read_log, write_log

Datum = dict[str, Any]

GAMES = ("wc", "we", "ce", "wr")


def detect_game(datum: Datum) -> str | None:
    """The game a datum's payload belongs to: ``wc`` (``completions``), ``we`` (``logp``;
    ``we`` and ``ce`` share a schema) or ``wr`` (``results``); None for no payload."""
    if "completions" in datum:
        return "wc"
    if "logp" in datum:
        return "we"
    if "results" in datum:
        return "wr"
    return None


def _peek(data: Iterable[Datum]) -> tuple[Datum | None, Iterator[Datum]]:
    iterator = iter(data)
    first = next(iterator, None)
    if first is None:
        return None, iter(())
    return first, itertools.chain([first], iterator)


def convert(source: str, destination: str, game: str | None = None) -> int:
    """Copy the log at ``source`` to ``destination``, in the form its name says.

    Args:
        source: a log path of any form (or ``-`` for jsonlines on stdin).
        destination: output path (``.jsonl``, ``.jsonl.gz``, ``.parquet``) or ``-``.
        game: ``wc``/``we``/``ce``/``wr``; when None it is taken from the first datum
            (it fixes the Parquet schema).
    Returns:
        The number of datums written.
    Raises:
        lmchallenge.exceptions.InputError: the source is missing or not a readable log.
    """
    first, data = _peek(read_log(source))
    if game is None and first is not None:
        game = detect_game(first)
    return write_log(data, destination, game=game)


@click.command("convert")
@click.argument("log", default="-", type=click.Path(exists=True, dir_okay=True, allow_dash=True))
@click.option("-o", "--output", "output", required=True, metavar="OUT",
              help="Where to write: a .jsonl, .jsonl.gz or .parquet path, or - for "
                   "jsonlines on standard output.")
@click.option("-g", "--game", type=click.Choice(GAMES), default=None,
              help="The log's game (default: detected from the first token); "
                   "it sets the Parquet columns of an empty log.")
@click.option("-q", "--quiet", is_flag=True, help="Do not report the number of tokens written.")
def cli(log: str, output: str, game: str | None, quiet: bool) -> None:
    """Convert LOG (jsonl, jsonl.gz, parquet or a run directory; default stdin) to OUT,
    in the form OUT's name says (.jsonl, .jsonl.gz, .parquet)."""
    n = convert(log, output, game=game)
    if not quiet and output != "-":
        form = "parquet" if is_parquet_name(output) else "jsonlines"
        click.echo(f"lmc convert: wrote {n} tokens to {output} ({form})", err=True)

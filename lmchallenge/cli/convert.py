"""``lmc convert``: a log rewritten in another form (jsonl, jsonl.gz, Parquet)."""

from __future__ import annotations

import click

from lmchallenge.cli.options import not_empty, partial_option
from lmchallenge.logs.convert import convert
from lmchallenge.logs import rundir
from lmchallenge.logs.files import file_form
from lmchallenge.logs.schema import GAMES

@click.command("convert")
@click.argument("log", default="-", type=click.Path(exists=True, dir_okay=True, allow_dash=True))
@click.option("-o", "--output", "output", required=True, metavar="OUT", callback=not_empty,
              help="Where to write: a .jsonl, .jsonl.gz or .parquet path, or - for "
                   "jsonlines on standard output.")
@click.option("-g", "--game", type=click.Choice(GAMES), default=None,
              help="The log's game (default: detected from the first token); "
                   "it sets the Parquet columns of an empty log.")
@click.option("-q", "--quiet", is_flag=True, help="Do not report the number of tokens written.")
@partial_option(says_so=True)
def cli(log: str, output: str, game: str | None, quiet: bool) -> None:
    """Convert LOG (jsonl, jsonl.gz, parquet or a run directory; default stdin) to OUT,
    in the form OUT's name says (.jsonl, .jsonl.gz, .parquet)."""
    n = convert(log, output, game=game)
    if not quiet and output != "-":
        form = {"parquet": "parquet", "jsonl.gz": "jsonlines, gzip", "jsonl": "jsonlines"}[
            file_form(output)]    # what was written, whatever the name's suffix
        partial = (rundir.coverage(log) or {}).get("coverage")
        note = f"; partial: {partial['partitions_done']} of {partial['partitions']} partitions" if partial else ""
        click.echo(f"lmc convert: wrote {n} tokens to {output} ({form}{note})", err=True)

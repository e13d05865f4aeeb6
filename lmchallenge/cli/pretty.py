"""``lmc pretty``: a log shown token by token (ANSI colour text or one HTML page)."""

from __future__ import annotations

import click

from lmchallenge.analysis.pretty import ansi, html
from lmchallenge.cli.options import html_float_format, page_options, partial_option, single_log


@click.command("pretty")
@click.argument("log", nargs=-1, type=click.Path(exists=True, dir_okay=True, allow_dash=True))
@page_options("show the log as (auto: from its first token)",
              "The -logp range (nats) spread over the five entropy colours (we/ce).")
@partial_option
def cli(log: tuple[str, ...], verbose: int, challenge: str, output: str,
        entropy_interval: float, float_format: str, max_tokens: int) -> None:
    """Show a log (jsonl, jsonl.gz, parquet or a run directory; default stdin) token by
    token, coloured by how well the model did."""
    path = single_log(log)
    if output == "html":
        click.echo(html(path, entropy_interval=entropy_interval, float_format=html_float_format(float_format),
                        challenge=challenge, max_tokens=max_tokens or None))
    else:
        for line in ansi(path, entropy_interval=entropy_interval, challenge=challenge):
            click.echo(line, color=True)

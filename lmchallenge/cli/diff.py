"""``lmc diff``: two logs of the same text compared token by token."""

from __future__ import annotations

import click

from lmchallenge.analysis.diff import ansi, html
from lmchallenge.cli.options import html_float_format, page_options, partial_option, stdin_once


@click.command("diff")
@click.argument("baseline", type=click.Path(exists=True, dir_okay=True, allow_dash=True))
@click.argument("log", type=click.Path(exists=True, dir_okay=True, allow_dash=True))
@page_options("compare the logs as (auto: from the first token)",
              "The logp difference range spread over the entropy colours (we/ce).")
@partial_option
def cli(baseline: str, log: str, verbose: int, challenge: str, output: str,
        entropy_interval: float, float_format: str, max_tokens: int) -> None:
    """Compare LOG with BASELINE, two logs of the same text (any log form), token by token."""
    stdin_once((baseline, log))
    if output == "html":
        click.echo(html(baseline, log, entropy_interval=entropy_interval,
                        float_format=html_float_format(float_format), challenge=challenge,
                        max_tokens=max_tokens or None))
    else:
        for line in ansi(baseline, log, entropy_interval=entropy_interval, challenge=challenge):
            click.echo(line, color=True)

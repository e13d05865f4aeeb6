"""Placeholder: `lmc stats` is being written (see the open issues)."""

import click


@click.command("stats")
def cli() -> None:
    """Not implemented yet."""
    raise click.ClickException("lmc stats is not implemented yet")

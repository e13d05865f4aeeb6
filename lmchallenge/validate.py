"""Placeholder: `lmc validate` is being written (see the open issues)."""

import click


@click.command("validate")
def cli() -> None:
    """Not implemented yet."""
    raise click.ClickException("lmc validate is not implemented yet")

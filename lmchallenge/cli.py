"""The ``lmc`` command: ``run``, ``stats``, ``validate``, ``grep``, ``pretty``, ``diff``, ``convert``."""

from __future__ import annotations

import sys

import click

from . import convert, diff, grep, pretty, run, stats, validate
from .exceptions import LmcError


@click.group()
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """LM Challenge: evaluate predictive language models fairly, and analyse the logs."""


cli.add_command(run.cli, "run")
cli.add_command(stats.cli, "stats")
cli.add_command(validate.cli, "validate")
cli.add_command(grep.cli, "grep")
cli.add_command(pretty.cli, "pretty")
cli.add_command(diff.cli, "diff")
cli.add_command(convert.cli, "convert")


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps :class:`LmcError` to a message on stderr and exit code 2,
    Ctrl-C to exit code 130."""
    try:
        cli.main(args=argv, prog_name="lmc", standalone_mode=False)
    except click.exceptions.Abort:
        sys.stderr.write("lmc: interrupted\n")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except LmcError as e:
        sys.stderr.write(f"lmc: error: {e}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("lmc: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(141)


if __name__ == "__main__":
    main()

"""The ``lmc`` command: ``run``, ``stats``, ``validate``, ``grep``, ``pretty``, ``diff``, ``convert``."""

from __future__ import annotations

import gc
import importlib
import sys

import click

from .exceptions import LmcError

COMMANDS = ("run", "stats", "validate", "grep", "pretty", "diff", "convert")
"""Each ``lmc NAME`` is the ``cli`` command of the module ``lmchallenge.NAME``."""


class LazyGroup(click.Group):
    """A group whose subcommands (``lmchallenge.NAME.cli``) are imported only when used,
    so ``lmc stats`` does not import the games, models or HTML renderers."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return importlib.import_module(f"{__package__}.{cmd_name}").cli


@click.group(cls=LazyGroup)
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """LM Challenge: evaluate predictive language models fairly, and analyse the logs."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps :class:`LmcError` to a message on stderr and exit code 2,
    Ctrl-C to exit code 130.  The process is expected to exit when this returns: the
    garbage collector's objects are frozen (:func:`gc.freeze`) once the command's modules
    are imported, and again at the end."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in COMMANDS:
        # the command's modules live until exit: frozen, they are not traversed by the
        # collector's full passes, which a run's allocations set off
        importlib.import_module(f"{__package__}.{args[0]}")
        gc.freeze()
    try:
        cli.main(args=argv, prog_name="lmc", standalone_mode=False)
        # Exit frees everything by reference counts; frozen, the modules' objects (NumPy's,
        # Arrow's: tens of thousands) are not traversed again by the collections at exit,
        # which took about 20 ms of `lmc stats`.
        gc.freeze()
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

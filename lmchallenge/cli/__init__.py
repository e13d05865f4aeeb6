"""The command-line layer: every click command of the project, over the library.

``lmc`` (:func:`main`) is ``run``, ``stats``, ``validate``, ``grep``, ``pretty``, ``diff``,
``convert`` and ``compare``, each the ``cli`` command of the module ``lmchallenge.cli.NAME``, imported only when
used; :mod:`.ngram` is ``lmc-ngram``; :mod:`.options` holds what they share with ``lmc-dist``.
"""

from __future__ import annotations

import importlib
import sys

from lmchallenge import tuning

tuning.limit_blas_threads()  # before any command module imports NumPy

import click  # noqa: E402

from lmchallenge.cli.options import run_command  # noqa: E402

COMMANDS = ("run", "stats", "validate", "grep", "pretty", "diff", "convert", "compare")
"""Each ``lmc NAME`` is the ``cli`` command of the module ``lmchallenge.cli.NAME``."""


class LazyGroup(click.Group):
    """A group whose subcommands (``lmchallenge.cli.NAME.cli``) are imported only when used,
    so ``lmc stats`` does not import the games, models or HTML renderers."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return importlib.import_module(f"{__name__}.{cmd_name}").cli


@click.group(cls=LazyGroup)
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """LM Challenge: evaluate predictive language models fairly, and analyse the logs."""


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``lmc`` (see :func:`lmchallenge.cli.options.run_command`).  The
    command's modules live until exit: they are imported and frozen
    (:func:`lmchallenge.tuning.freeze_heap`) before it runs, so the collector's full passes,
    which a run's allocations set off, do not traverse them."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in COMMANDS:
        importlib.import_module(f"{__name__}.{args[0]}")
        tuning.freeze_heap()
    run_command(cli, argv, "lmc")


if __name__ == "__main__":
    main()

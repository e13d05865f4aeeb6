"""The ``lmc-dist`` console script.

Importing the command (Dask, distributed, pandas) takes about a second: a Ctrl-C then is
answered like one later, with one line and exit code 130, not an import traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Import :mod:`lmc_dist.cli` and run its :func:`~lmc_dist.cli.main`."""
    try:
        from lmc_dist.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("lmc-dist: interrupted\n")
        sys.exit(130)
    command()

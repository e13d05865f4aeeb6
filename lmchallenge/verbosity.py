"""The ``-v`` option of the ``lmc`` commands: how much Python logging goes to stderr.

A module of its own so that light commands (``lmc stats``) need not import ``lmchallenge.run``.
"""

from __future__ import annotations

import logging


def set_verbosity(level: int) -> None:
    """Log to stderr: warnings (0), info (1) or debug (2+).

    Args:
        level: the count of ``-v`` flags (non-negative).
    """
    levels = [logging.WARNING, logging.INFO, logging.DEBUG]
    logging.basicConfig(format="%(levelname)s\t%(message)s", level=levels[min(level, 2)])

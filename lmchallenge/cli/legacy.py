"""LM Challenge 5.x's module paths that are modules of this project under another name
(``lmchallenge.grep`` is :mod:`lmchallenge.analysis.grep`): :func:`module_path`."""

from __future__ import annotations

import sys
from types import ModuleType


def module_path(name: str, module: ModuleType, command: str) -> None:
    """Called by the module ``name`` (a 5.x path): make it ``module`` (``import
    lmchallenge.grep`` then gives :mod:`lmchallenge.analysis.grep` itself, one module under
    both names), or, run as ``python -m`` (``name`` is ``__main__``), run ``lmc COMMAND``
    with the command line's arguments."""
    if name == "__main__":
        from lmchallenge.cli import main

        main([command, *sys.argv[1:]])
    else:
        sys.modules[name] = module

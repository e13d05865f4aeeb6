"""``python -m lmchallenge.stats`` (LM Challenge 5.x's module path) is ``lmc stats``.

The one upward import of the package (to the command line, :mod:`lmchallenge.cli`), for this
5.x entry point only: pyproject.toml's import contracts name it as their one exception.
"""

import sys

from lmchallenge.cli import main

main(["stats", *sys.argv[1:]])

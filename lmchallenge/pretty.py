"""``lmchallenge.pretty``, LM Challenge 5.x's module path: :mod:`lmchallenge.analysis.pretty`
itself; ``python -m lmchallenge.pretty`` is ``lmc pretty``."""

from lmchallenge.analysis import pretty
from lmchallenge.cli.legacy import module_path

module_path(__name__, pretty, "pretty")

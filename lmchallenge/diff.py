"""``lmchallenge.diff``, LM Challenge 5.x's module path: :mod:`lmchallenge.analysis.diff`
itself; ``python -m lmchallenge.diff`` is ``lmc diff``."""

from lmchallenge.analysis import diff
from lmchallenge.cli.legacy import module_path

module_path(__name__, diff, "diff")

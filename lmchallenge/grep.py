"""``lmchallenge.grep``, LM Challenge 5.x's module path: :mod:`lmchallenge.analysis.grep`
itself; ``python -m lmchallenge.grep`` is ``lmc grep``."""

from lmchallenge.analysis import grep
from lmchallenge.cli.legacy import module_path

module_path(__name__, grep, "grep")

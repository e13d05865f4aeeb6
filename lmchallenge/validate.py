"""``lmchallenge.validate``, LM Challenge 5.x's module path: :mod:`lmchallenge.analysis.validate`
itself; ``python -m lmchallenge.validate`` is ``lmc validate``."""

from lmchallenge.analysis import validate
from lmchallenge.cli.legacy import module_path

module_path(__name__, validate, "validate")

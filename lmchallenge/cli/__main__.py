"""``python -m lmchallenge.cli`` is ``lmc``."""

from lmchallenge.cli import main

main()

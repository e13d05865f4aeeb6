"""``python -m lmchallenge`` is ``lmc``."""

from lmchallenge.cli import main

main()

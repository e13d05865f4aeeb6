"""``python -m lmc_dist`` is ``lmc-dist``."""

from lmc_dist.entry import main

main()

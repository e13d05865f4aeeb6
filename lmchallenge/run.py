"""``lmchallenge.run``, LM Challenge 5.x's module of the games: :func:`wc`, :func:`we`,
:func:`ce`, :func:`wr` (:mod:`lmchallenge.games`); ``python -m lmchallenge.run`` is
``lmc run``."""

from lmchallenge.games import ce, wc, we, wr

__all__ = ["wc", "we", "ce", "wr"]

if __name__ == "__main__":
    import sys

    from lmchallenge.cli import main

    main(["run", *sys.argv[1:]])

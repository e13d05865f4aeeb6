"""Summary statistics of LM Challenge logs: mergeable states (:mod:`.state`), the per-token
rules (:mod:`.outcomes`), the column-wise readers (:mod:`.columnar`, :mod:`.columnar_jsonl`), the
wr mixture fit (:mod:`.reranking`), and text output (:mod:`.output`).

As in LM Challenge 5.x, ``lmchallenge.stats.stats(log)`` gives the statistics of a log's datums,
and ``humanize(stats(log, human=False))`` the same from its raw sums.
"""

from lmchallenge.stats.compute import state_of, state_of_log, stats
from lmchallenge.stats.state import StatsState, humanize, state_of_lines

__all__ = ["stats", "humanize", "state_of", "state_of_log", "state_of_lines", "StatsState"]

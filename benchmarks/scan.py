"""`lmc-dist`'s scan of a plain-text corpus, a block of lines at a time against line by line.

    python benchmarks/scan.py [--lines 1000000] [--text kjv] [--games we,wc,ce] [--rounds 3]
        [--corpus FILE]

The scan (:func:`lmc_dist.partition.scan`: validate every line, estimate its model queries,
cut the partitions for 16 workers) runs on the client before the first partition is given
out.  Each round times it both ways, alternating, in this process: as ``lmc-dist`` runs it
(a block at a time, counted with numpy) and line by line (every block read as a block that
:func:`lmc_dist.partition._block_lines` declines, one that is not UTF-8, is read); both must
cut the same partitions.  Printed per game:
CPU seconds of each (min and median of the rounds) and line by line over blocks.  The
corpus is built as ``benchmarks/scaling.py`` builds it (a 1M-line kjv corpus is 133 MB,
about 20 s to write).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from scaling import build_corpus

from lmc_dist import partition
from lmc_dist.sizing import ForCluster, query_cost
from lmchallenge.games.spec import GameSpec


def timed_scan(corpus: Path, game: str, blocks: bool) -> tuple[float, list]:
    """CPU seconds of one scan for 16 workers, and its partitions."""
    with tempfile.TemporaryDirectory() as work, \
            mock.patch.object(partition, "_block_lines",
                              partition._block_lines if blocks else lambda *_: None):
        start = time.process_time()
        result = partition.scan(str(corpus), "text", ForCluster(16), False, work,
                                cost=query_cost(GameSpec(game)))
        return time.process_time() - start, result.partitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--text", default="kjv", choices=["kjv", "commits", "both"])
    parser.add_argument("--games", default="we,wc,ce")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", type=Path, help="a corpus file to scan (default: built)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        corpus = args.corpus or Path(work) / "corpus.txt"
        if args.corpus is None:
            build_corpus(corpus, args.lines, args.text)
        print(f"corpus: {corpus.stat().st_size / 1e6:.1f} MB", flush=True)
        for game in args.games.split(","):
            times: dict[bool, list[float]] = {True: [], False: []}
            cuts = {}
            for _ in range(args.rounds):
                for blocks in (True, False):
                    seconds, cuts[blocks] = timed_scan(corpus, game, blocks)
                    times[blocks].append(seconds)
            assert cuts[True] == cuts[False], "the two scans cut differently"
            fast, slow = (statistics.median(times[b]) for b in (True, False))
            print(f"{game}: {len(cuts[True])} partitions; CPU s, min / median: blocks "
                  f"{min(times[True]):.2f} / {fast:.2f}, line by line {min(times[False]):.2f} / "
                  f"{slow:.2f}; line by line / blocks {slow / fast:.1f}x (median)", flush=True)


if __name__ == "__main__":
    main()

"""`lmc-dist`'s scan of a corpus, a block of lines at a time against line by line.

    python benchmarks/scan.py [--lines 1000000] [--text kjv] [--games we,wc,ce] [--rounds 3]
        [--json] [--train] [--corpus FILE] [--helpers]

The scan (:func:`lmc_dist.partition.scan`: validate every line, estimate its model queries,
cut the partitions for 16 workers) runs on the client before the first partition is given
out.  Each round times it both ways, alternating, in this process: as ``lmc-dist`` runs it
(a block at a time: :func:`lmc_dist.partition._block_lines` counts a plain-text block with
numpy, :func:`lmc_dist.partition._json_block` reads a json one after one decode) and line by
line (every block read as a block that those decline, one that is not UTF-8, is read); both
must cut the same partitions.  Printed per game:
CPU seconds of each (min and median of the rounds) and line by line over blocks.  The
corpus is built as ``benchmarks/scaling.py`` builds it (a 1M-line kjv corpus is 133 MB,
about 20 s to write); ``--json``: a json corpus of the rails commit messages instead
(:func:`build_json_corpus`), scanned with ``--train`` (a user's rows never split) or not.

``--helpers``: instead, the scan as ``lmc-dist`` runs it (a large json corpus' blocks parsed
in helper processes, :func:`lmc_dist.partition.scan_processes`) against the scan in this
process alone: wall seconds and CPU seconds (this process and its helpers) of each, and
the ratio of their walls; both must cut the same partitions.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from scaling import build_corpus

from lmc_dist import partition
from lmc_dist.partition import detect_format
from lmc_dist.sizing import ForCluster, query_cost
from lmchallenge.games.spec import GameSpec


def build_json_corpus(path: Path, lines: int) -> None:
    """Write ``lines`` rows of ``data/commits/rails.test.sample.jsonl`` (3,118 rows of 200
    users) to ``path``, cycling through it, each cycle's users renamed (``ID-N``) so that every
    run of a user's rows is a user of its own (about 167 MB for 1M rows)."""
    source = Path(__file__).resolve().parents[1] / "data" / "commits" / "rails.test.sample.jsonl"
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    with open(path, "w", encoding="utf-8") as f:
        for n in range(lines):
            cycle, row = divmod(n, len(rows))
            f.write(json.dumps(dict(rows[row], userId=f"{rows[row]['userId']}-{cycle}")) + "\n")


def timed_scan(corpus: Path, game: str, blocks: bool, train: bool) -> tuple[float, list]:
    """CPU seconds of one scan for 16 workers in this process alone, and its partitions."""
    declined = lambda *_: None     # noqa: E731 (every block read line by line)
    with tempfile.TemporaryDirectory() as work, \
            mock.patch.object(partition, "_block_lines",
                              partition._block_lines if blocks else declined), \
            mock.patch.object(partition, "_json_block",
                              partition._json_block if blocks else declined):
        start = time.process_time()
        result = partition.scan(str(corpus), detect_format(str(corpus)), ForCluster(16), train,
                                work, cost=query_cost(GameSpec(game)), processes=0)
        return time.process_time() - start, result.partitions


def _cpu() -> float:
    """CPU seconds of this process and its children that have ended."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def helpers_scan(corpus: Path, game: str, helpers: bool, train: bool) -> tuple[float, float, list]:
    """Wall and CPU seconds of one scan for 16 workers, with the helper processes
    :func:`lmc_dist.partition.scan_processes` chooses or none, and its partitions."""
    with tempfile.TemporaryDirectory() as work:
        wall, cpu = time.perf_counter(), _cpu()
        result = partition.scan(str(corpus), detect_format(str(corpus)), ForCluster(16), train,
                                work, cost=query_cost(GameSpec(game)),
                                processes=None if helpers else 0)
        return time.perf_counter() - wall, _cpu() - cpu, result.partitions


def compare_helpers(corpus: Path, game: str, rounds: int, train: bool) -> None:
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    cuts = {}
    for _ in range(rounds):
        for helpers in (True, False):
            wall, cpu, cuts[helpers] = helpers_scan(corpus, game, helpers, train)
            walls[helpers].append(wall)
            cpus[helpers].append(cpu)
    assert cuts[True] == cuts[False], "the two scans cut differently"
    size = corpus.stat().st_size
    print(f"{game}: {len(cuts[True])} partitions; {partition.scan_processes('json', size)} "
          f"helpers; wall s, min / median: with helpers {min(walls[True]):.2f} / "
          f"{statistics.median(walls[True]):.2f} (CPU {statistics.median(cpus[True]):.2f}), "
          f"alone {min(walls[False]):.2f} / {statistics.median(walls[False]):.2f} "
          f"(CPU {statistics.median(cpus[False]):.2f}); alone / with helpers "
          f"{statistics.median(walls[False]) / statistics.median(walls[True]):.1f}x (median)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--text", default="kjv", choices=["kjv", "commits", "both"])
    parser.add_argument("--games", default="we,wc,ce")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="a json corpus (rails commits)")
    parser.add_argument("--train", action="store_true", help="scan as for --train")
    parser.add_argument("--corpus", type=Path, help="a corpus file to scan (default: built)")
    parser.add_argument("--helpers", action="store_true",
                        help="with helper processes against this process alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        corpus = args.corpus or Path(work) / "corpus.txt"
        if args.corpus is None and args.json:
            build_json_corpus(corpus, args.lines)
        elif args.corpus is None:
            build_corpus(corpus, args.lines, args.text)
        print(f"corpus: {corpus.stat().st_size / 1e6:.1f} MB", flush=True)
        for game in args.games.split(","):
            if args.helpers:
                compare_helpers(corpus, game, args.rounds, args.train)
                continue
            times: dict[bool, list[float]] = {True: [], False: []}
            cuts = {}
            for _ in range(args.rounds):
                for blocks in (True, False):
                    seconds, cuts[blocks] = timed_scan(corpus, game, blocks, args.train)
                    times[blocks].append(seconds)
            assert cuts[True] == cuts[False], "the two scans cut differently"
            fast, slow = (statistics.median(times[b]) for b in (True, False))
            print(f"{game}: {len(cuts[True])} partitions; CPU s, min / median: blocks "
                  f"{min(times[True]):.2f} / {fast:.2f}, line by line {min(times[False]):.2f} / "
                  f"{slow:.2f}; line by line / blocks {slow / fast:.1f}x (median)", flush=True)


if __name__ == "__main__":
    main()

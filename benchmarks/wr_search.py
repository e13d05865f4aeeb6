"""Candidate searches per second of the wr game's search, ours against the reference's.

Both search the same vocabulary (default: data/vocab/american-english.txt, 104k words, in
file order) for the same queries: word tokens drawn from a real corpus (default: the New
Testament, data/kjv/test.txt), each typed by the wr game's sloppy typist (p_anykey 0.1, so
most queries are corrupted and some are not), with the wr game's default of 100
candidates.  Ours (lmchallenge.games.candidates.CandidateSearch) runs in this process; the reference's
(lmchallenge.core.errors.Search of lmchallenge==5.2) runs in its own venv, timed there
around the same query loop; building either index is timed apart.  Each repeat measures
both; the ratio printed is the median over repeats of reference seconds / our seconds.

Both are given the vocabulary as the same ordered list, so ties between equally near words
are broken by vocabulary order in both and the answers can be compared candidate for
candidate (the reference's `lmc wr` itself passes a Python set, whose order depends on the
hash seed); agreement is printed as lists equal and sets equal.

Usage: python benchmarks/wr_search.py [--queries 400] [--repeat 3] [--candidates 100]
                                      [--vocab PATH] [--corpus PATH] [--reference /opt/lmcref]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lmchallenge.games.typos import ErrorModel, read_vocabulary
from lmchallenge.games.candidates import CandidateSearch  # noqa: E402
from lmchallenge.tokenize import words  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
DATA = SHARED if SHARED.is_dir() else REPO / "data"

# Runs in the reference venv: {"vocab", "queries", "n"} on stdin; answers the seconds of
# building the index and of the query loop, and every query's candidates.
REFERENCE_DRIVER = r"""
import json, sys, time
from lmchallenge.core.errors import Search
request = json.load(sys.stdin)
start = time.perf_counter()
search = Search(words=request["vocab"])
built = time.perf_counter()
results = [search(q, request["n"]) for q in request["queries"]]
done = time.perf_counter()
json.dump({"build": built - start, "search": done - built, "results": results}, sys.stdout)
"""


def make_queries(corpus: Path, count: int, seed: int) -> tuple[list[str], list[str]]:
    """``count`` word tokens (letters only) drawn from ``corpus`` and their typed forms."""
    with open(corpus, encoding="utf-8") as f:
        tokens = [t for line in f for t in words(line) if t.isalpha()]
    rng = random.Random(seed)
    targets = [rng.choice(tokens) for _ in range(count)]
    typist = ErrorModel()
    return targets, [typist.corrupt(t, rng) for t in targets]


def ours(vocab: list[str], queries: list[str], n: int, min_seconds: float = 1.0):
    start = time.perf_counter()
    search = CandidateSearch(vocab)
    built = time.perf_counter() - start
    passes, elapsed = 0, 0.0
    while elapsed < min_seconds:  # several passes: one pass is too short to time alone
        start = time.perf_counter()
        results = [search(q, n) for q in queries]
        elapsed += time.perf_counter() - start
        passes += 1
    return built, elapsed / passes, results


def reference(python: Path, vocab: list[str], queries: list[str], n: int):
    out = subprocess.run([str(python), "-I", "-c", REFERENCE_DRIVER], capture_output=True,
                         input=json.dumps({"vocab": vocab, "queries": queries, "n": n}).encode())
    if out.returncode:
        sys.exit(f"reference search failed:\n{out.stderr.decode(errors='replace')}")
    answer = json.loads(out.stdout)
    return answer["build"], answer["search"], answer["results"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--vocab", type=Path, default=DATA / "vocab" / "american-english.txt")
    parser.add_argument("--corpus", type=Path, default=DATA / "kjv" / "test.txt")
    parser.add_argument("--reference", default=os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref"))
    args = parser.parse_args()
    python = Path(args.reference) / "bin" / "python"
    if not python.exists():
        sys.exit(f"no reference python at {python} (--reference or LMC_REFERENCE_VENV)")

    vocab = read_vocabulary(str(args.vocab))
    targets, queries = make_queries(args.corpus, args.queries, args.seed)
    corrupted = sum(t != q for t, q in zip(targets, queries))
    print(f"vocabulary: {args.vocab} ({len(vocab):,} words); queries: {len(queries)} word tokens "
          f"of {args.corpus}, {corrupted} corrupted by the typist (p_anykey 0.1), "
          f"{len(queries) - corrupted} not; {args.candidates} candidates each")
    print(f"{'repeat':>6} {'ours search/s':>14} {'ref search/s':>13} {'ratio':>8} "
          f"{'ours build s':>13} {'ref build s':>12}")
    ratios = []
    for rep in range(1, args.repeat + 1):
        our_build, our_time, our_results = ours(vocab, queries, args.candidates)
        ref_build, ref_time, ref_results = reference(python, vocab, queries, args.candidates)
        ratios.append(ref_time / our_time)
        print(f"{rep:>6} {len(queries) / our_time:>14,.0f} {len(queries) / ref_time:>13,.1f} "
              f"{ratios[-1]:>7.0f}x {our_build:>13.2f} {ref_build:>12.2f}")
    lists = sum(a == b for a, b in zip(our_results, ref_results))
    sets = sum(set(a) == set(b) for a, b in zip(our_results, ref_results))
    print(f"median ratio (reference time / our time): {statistics.median(ratios):.0f}x "
          f"(target >= 50x)")
    print(f"agreement: {lists}/{len(queries)} candidate lists equal, "
          f"{sets}/{len(queries)} candidate sets equal")
    for q, a, b in zip(queries, our_results, ref_results):
        if set(a) != set(b):
            print(f"  first differing query {q!r}: only ours {sorted(set(a) - set(b))[:5]}, "
                  f"only reference's {sorted(set(b) - set(a))[:5]}")
            break
    if sets != len(queries):
        sys.exit(1)


if __name__ == "__main__":
    main()

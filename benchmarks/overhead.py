"""Client overhead of `lmc run` against the reference `lmchallenge==5.2`, with an instant model.

Both evaluate the same corpus slice with benchmarks/instant_model.py (which answers every
request in about a microsecond, batching its writes), so the time measured is the
evaluator's: tokenizing, building queries, the pipe protocol, and writing the log.  Both logs
must be identical.  Prints tokens/s of each and the ratio (ours / reference).

Usage: python benchmarks/overhead.py [--lines N] [--reference /opt/lmcref]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = f"{sys.executable} {REPO / 'benchmarks' / 'instant_model.py'}"
CASES = [("wc", ["wc"]), ("wc --next-word-only", ["wc", "-p"]), ("we", ["we"])]


def timed(argv: list[str], corpus: Path, stdin: bool) -> tuple[float, bytes]:
    start = time.perf_counter()
    with open(corpus, "rb") as f:
        out = subprocess.run(argv if stdin else [*argv, str(corpus)], stdin=f if stdin else None,
                             capture_output=True, check=True).stdout
    return time.perf_counter() - start, out


def kjv_slice(directory: Path, lines: int) -> Path:
    """``directory/slice.txt``: the first ``lines`` lines of data/kjv/test.txt."""
    corpus = directory / "slice.txt"
    with open(REPO / "data" / "kjv" / "test.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(lines)))
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--reference", default=os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ours = str(Path(sys.executable).parent / "lmc")
    ref = str(Path(args.reference) / "bin" / "lmc")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = kjv_slice(Path(tmp), args.lines)
        print(f"corpus: first {args.lines} lines of data/kjv/test.txt; model: instant_model.py; "
              f"best of {args.repeat}")
        print(f"{'game':22} {'tokens':>8} {'ours tok/s':>12} {'ref tok/s':>12} {'ratio':>7}")
        for name, game in CASES:
            best_ours = best_ref = float("inf")
            for _ in range(args.repeat):
                t_ours, log_ours = timed([ours, "run", MODEL, *game], corpus, stdin=False)
                t_ref, log_ref = timed([ref, "run", MODEL, *game], corpus, stdin=True)
                if log_ours != log_ref:
                    sys.exit(f"{name}: the logs differ")
                best_ours, best_ref = min(best_ours, t_ours), min(best_ref, t_ref)
            tokens = log_ours.count(b"\n")
            print(f"{name:22} {tokens:>8} {tokens / best_ours:>12,.0f} {tokens / best_ref:>12,.0f} "
                  f"{best_ref / best_ours:>6.1f}x")


if __name__ == "__main__":
    main()

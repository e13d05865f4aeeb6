"""`lmc run` with a model that floods its stderr, against the reference `lmchallenge==5.2`.

The model (benchmarks/instant_model.py run with ``--stderr-bytes``) answers at once but
writes ``--stderr-kb`` kilobytes of 100-byte lines to its stderr before each answer batch's
every request (240 KB per request by default: the case of issue 11, where our stderr drain
read one byte per system call).  Both evaluate ``we`` on the same corpus slice and must write
the same log; our ``lmc`` keeps the stderr's tail for error messages, the reference lets the
model write to its own stderr (here a pipe read to the end and counted, as ours).  Prints the
wall time of each (best of ``--repeat``), the megabytes the model wrote to stderr, and the
ratio (reference time / ours: above 1, ours is faster).

Usage: python benchmarks/stderr_flood.py [--lines 20] [--stderr-kb 240] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overhead import kjv_slice  # benchmarks/ is on sys.path when this script runs

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "benchmarks" / "instant_model.py"


def timed(argv: list[str], corpus: Path) -> tuple[float, bytes, int]:
    """Wall time, stdout, and bytes written to stderr of one run (stdin: the corpus)."""
    start = time.perf_counter()
    with open(corpus, "rb") as f:
        result = subprocess.run(argv, stdin=f, capture_output=True, check=True)
    return time.perf_counter() - start, result.stdout, len(result.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--stderr-kb", type=int, default=240)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference", default=os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref"))
    args = parser.parse_args()
    ours = str(Path(sys.executable).parent / "lmc")
    ref = str(Path(args.reference) / "bin" / "lmc")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = kjv_slice(Path(tmp), args.lines)
        # our lmc keeps the model's stderr: how much it wrote is counted by the model itself
        tally = Path(tmp) / "stderr-bytes"
        model = (f"{sys.executable} {MODEL} --stderr-bytes {args.stderr_kb * 1000} "
                 f"--tally {tally}")
        best_ours = best_ref = float("inf")
        for _ in range(args.repeat):
            t_ours, log_ours, _ = timed([ours, "run", model, "we"], corpus)
            written = int(tally.read_text())
            t_ref, log_ref, ref_stderr = timed([ref, "run", model, "we"], corpus)
            if log_ours != log_ref:
                sys.exit("the logs differ")
            best_ours, best_ref = min(best_ours, t_ours), min(best_ref, t_ref)
        tokens = log_ours.count(b"\n")
        print(f"corpus: first {args.lines} lines of data/kjv/test.txt, we ({tokens} tokens); "
              f"model: instant_model.py writing {args.stderr_kb} KB to stderr per request "
              f"({written / 1e6:.1f} MB a run; the reference passed on {ref_stderr / 1e6:.1f} MB); "
              f"best of {args.repeat}")
        print(f"{'ours s':>8} {'ref s':>8} {'ratio':>7}")
        print(f"{best_ours:>8.2f} {best_ref:>8.2f} {best_ref / best_ours:>6.2f}x")


if __name__ == "__main__":
    main()

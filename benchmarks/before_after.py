"""Before/after of a change to `lmc`: an old source tree and the installed one run alternately
(so both see the same load), their outputs compared byte for byte.

    git worktree add /tmp/old REV
    python benchmarks/before_after.py --old-tree /tmp/old --repeat 5 [--ngram kjv.lm]

Cases: `lmc run` with the instant model (wc, we, and we writing Parquet) on KJV lines, and
`lmc stats`, `lmc validate` on a ~260k-row log as Parquet and as jsonl, `lmc diff` of the
jsonl log with itself, `lmc compare` of each with itself and `lmc convert` of the jsonl log to
Parquet and to jsonl.gz; with ``--ngram MODEL`` (a file of
`lmc-ngram train`), `lmc run` with that model in process too
(`lmchallenge.model.ngram:NgramModel`: the evaluator and a Python model in one process, as
`lmc-dist --in-process` workers run it; wc, we, and we writing Parquet as `lmc-dist`'s parts
are). ``--only CASE,...`` runs those cases alone. Prints medians and the ratio new/old
(median and best); the outputs (stdout, or the file after ``--output``) must be equal.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MODEL = f"{PYTHON} {REPO / 'benchmarks' / 'instant_model.py'}"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, bytes]:
    """The wall time of ``argv`` and its output: stdout, or the file after ``--output``
    (a ``.gz`` one decompressed)."""
    output = cwd / argv[argv.index("--output") + 1] if "--output" in argv else None
    start = time.perf_counter()
    out = subprocess.run(argv, env={**os.environ, **env}, cwd=cwd, capture_output=True,
                         check=True).stdout
    elapsed = time.perf_counter() - start
    if output is None:
        return elapsed, out
    # (a gzip header holds the time it was written)
    return elapsed, gzip.decompress(output.read_bytes()) if output.suffix == ".gz" else output.read_bytes()


def make_logs(tmp: Path, lines: int) -> tuple[Path, Path, Path]:
    corpus = tmp / "corpus.txt"
    with open(REPO / "data" / "kjv" / "test.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(lines)))
    lmc = [PYTHON, "-m", "lmchallenge.cli"]
    one = tmp / "wc.jsonl"
    subprocess.run([*lmc, "run", "--output", str(one), MODEL, "wc", str(corpus)], check=True, cwd=tmp)
    text = one.read_bytes()
    big = tmp / "big.jsonl"
    big.write_bytes(text * max(1, 300_000 // text.count(b"\n")))
    subprocess.run([*lmc, "convert", str(big), "-o", str(tmp / "big.parquet")], check=True,
                   cwd=tmp, capture_output=True)
    return corpus, big, tmp / "big.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-tree", required=True, help="a checkout of the old revision")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--ngram", type=Path, help="an lmc-ngram model: run it in process too")
    parser.add_argument("--only", help="comma-separated cases to run (default: all)")
    args = parser.parse_args()
    old = {"PYTHONPATH": str(Path(args.old_tree).resolve())}
    lmc = [PYTHON, "-m", "lmchallenge.cli"]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)        # the working directory: neither tree is on sys.path by cwd
        corpus, big, parquet = make_logs(tmp, args.lines)
        cases = {"run wc": [*lmc, "run", MODEL, "wc", str(corpus)],
                 "run we": [*lmc, "run", MODEL, "we", str(corpus)],
                 "run we parquet": [*lmc, "run", MODEL, "we", str(corpus), "--output", "we.parquet"],
                 "stats parquet": [*lmc, "stats", str(parquet)],
                 "stats jsonl": [*lmc, "stats", str(big)],
                 "validate pq": [*lmc, "validate", str(parquet)],
                 "validate jsonl": [*lmc, "validate", str(big)],
                 "diff jsonl": [*lmc, "diff", str(big), str(big)],
                 "compare jsonl": [*lmc, "compare", str(big), str(big)],
                 "compare pq": [*lmc, "compare", str(parquet), str(parquet)],
                 "convert pq": [*lmc, "convert", str(big), "--output", "converted.parquet"],
                 "convert gz": [*lmc, "convert", str(big), "--output", "converted.jsonl.gz"]}
        if args.ngram is not None:
            in_process = ["lmchallenge.model.ngram:NgramModel", "-o",
                          f'{{"model": "{args.ngram.resolve()}"}}']
            cases["ngram we"] = [*lmc, "run", *in_process, "we", str(corpus)]
            cases["ngram wc"] = [*lmc, "run", *in_process, "wc", str(corpus)]
            cases["ngram we pq"] = [*lmc, "run", *in_process, "we", str(corpus), "--output",
                                    "ngram.parquet"]
        if args.only:
            cases = {case: cases[case] for case in args.only.split(",")}
        print(f"{'case':15} {'old':>8} {'new':>8} {'new/old':>8} {'best':>6}")
        for case, argv in cases.items():
            old_times, new_times = [], []
            for _ in range(args.repeat):
                t_old, out_old = timed(argv, old, tmp)
                t_new, out_new = timed(argv, {}, tmp)
                if out_old != out_new:
                    sys.exit(f"{case}: the outputs differ")
                old_times.append(t_old)
                new_times.append(t_new)
            mo, mn = statistics.median(old_times), statistics.median(new_times)
            print(f"{case:15} {mo:7.2f}s {mn:7.2f}s {mn / mo:8.2f} {min(new_times) / min(old_times):6.2f}",
                  flush=True)


if __name__ == "__main__":
    main()

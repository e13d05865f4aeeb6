"""Tokens/s of `lmc-dist run` with 1 and 2 workers against `lmc run`, same model and corpus.

    python benchmarks/scaling.py [--rows 1500] [--game wc] [--partition-chars 20000]

The model is the built-in n-gram model (`lmc-ngram serve`, CPU-bound in its own process),
trained on the King James Old Testament; the corpus is the first ROWS rows of the marked-up
rails commit corpus (`data/commits/rails.test.sample.jsonl`). Every configuration runs in
this same invocation, and the logs are checked to be identical. Printed: tokens/s of each
and the ratios to `lmc run`, plus a projection for 8 and 32 workers from the measured
per-partition costs (Amdahl: the client's serial part — scan, start-up, reduce — stays, the
partition work divides, limited by the largest partition).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(argv: list[str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, check=True, env={
        **os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"})
    return time.perf_counter() - start, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1500)
    parser.add_argument("--game", default="wc")
    parser.add_argument("--partition-chars", type=int, default=20000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lmc-scaling-"))
    try:
        model_file = work / "kjv.lm"
        subprocess.run([str(BIN / "lmc-ngram"), "train", str(REPO / "data/kjv/train.txt.gz"),
                        "-o", str(model_file)], check=True)
        corpus = work / "commits.jsonl"
        with open(REPO / "data/commits/rails.test.sample.jsonl", "rb") as f:
            corpus.write_bytes(b"".join(f.readline() for _ in range(args.rows)))
        model = f"{BIN / 'lmc-ngram'} serve {model_file}"
        single_s, log = run([str(BIN / "lmc"), "run", model, args.game, str(corpus)])
        tokens = log.count(b"\n")
        print(f"lmc run: {tokens} tokens in {single_s:.1f} s = {tokens / single_s:,.0f} tokens/s")
        rates = {}
        for workers in (1, 2):
            run_dir = work / f"run{workers}"
            out = work / f"all{workers}.jsonl"
            seconds, _ = run([str(BIN / "lmc-dist"), "run", model, args.game, "--input", str(corpus),
                              "--run-dir", str(run_dir), "--workers", str(workers),
                              "--partition-chars", str(args.partition_chars), "--output", str(out)])
            assert out.read_bytes() == log, f"{workers} workers: log differs from lmc run"
            rates[workers] = tokens / seconds
            manifest = json.loads((run_dir / "_manifest.json").read_text())
            elapsed = [p["elapsed"] for p in manifest["partitions"]]
            print(f"lmc-dist --workers {workers}: {seconds:.1f} s = {rates[workers]:,.0f} tokens/s, "
                  f"ratio to lmc run {rates[workers] / (tokens / single_s):.2f}x "
                  f"({len(elapsed)} partitions, sum {sum(elapsed):.1f} s, max {max(elapsed):.2f} s)")
            if workers == 1:
                work_s, longest = sum(elapsed), max(elapsed)
                serial_s = max(0.0, seconds - work_s)
        print(f"speed-up 2 vs 1 worker: {rates[2] / rates[1]:.2f}x")
        for n in (8, 32):
            projected = serial_s + max(work_s / n, longest)
            print(f"projection {n} workers: {serial_s:.1f} s serial + {max(work_s / n, longest):.1f} s "
                  f"partition work = {tokens / projected:,.0f} tokens/s "
                  f"({(tokens / projected) / (tokens / single_s):.1f}x lmc run)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

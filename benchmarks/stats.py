"""`lmc stats` speed and peak memory: ours on Parquet and on jsonl vs the reference
`lmchallenge==5.2` on the same jsonl.

Builds an N-row (default 1,000,000) ``wc`` log by repeating the rows of
tests/data/pretty/*.wc.jsonl with shifted message numbers, writes it as jsonl and as
Parquet (``lmchallenge.parquet.write_parquet``) in a temporary directory, and runs
``lmc stats --no-human`` on each under ``/usr/bin/time -v`` (wall time, peak RSS).
The three outputs must agree (numbers to a relative 1e-9).  Prints the ratios against
the targets: >= 20x on Parquet with peak memory < 1 GB, >= 2x on jsonl.

Usage: python benchmarks/stats.py [--rows N] [--reference /opt/lmcref]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lmchallenge.parquet import write_parquet  # noqa: E402


def source_rows() -> list[dict]:
    rows: list[dict] = []
    for path in sorted((REPO / "tests" / "data" / "pretty").glob("*.wc.jsonl")):
        with open(path, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows


def build_log(rows: int):
    base = source_rows()
    shift = 1 + max(d["message"] for d in base)
    for i in range(rows):
        copy, j = divmod(i, len(base))
        datum = dict(base[j])
        datum["message"] = datum["message"] + copy * shift
        yield datum


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stdout) of ``argv``."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{argv} failed:\n{done.stderr[-3000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    return wall, peak_kb / 1024, done.stdout


def close(a, b, path="") -> list[str]:
    """Differences between two parsed outputs (numbers compared to a relative 1e-9)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in one" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += close(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        ok = math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return [] if ok else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reference", default=os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref"))
    args = parser.parse_args()
    ours = str(Path(sys.executable).parent / "lmc")
    ref = str(Path(args.reference) / "bin" / "lmc")
    with tempfile.TemporaryDirectory() as tmp:
        jsonl, pq = Path(tmp) / "log.wc.jsonl", Path(tmp) / "log.wc.parquet"
        with open(jsonl, "w", encoding="utf-8") as f:
            for datum in build_log(args.rows):
                f.write(json.dumps(datum) + "\n")
        write_parquet(build_log(args.rows), str(pq), "wc")
        print(f"log: {args.rows:,} wc rows (tests/data/pretty/*.wc.jsonl repeated); "
              f"jsonl {jsonl.stat().st_size / 2**20:.0f} MiB, parquet {pq.stat().st_size / 2**20:.0f} MiB")
        runs = {
            "ours parquet": [ours, "stats", "--no-human", str(pq)],
            "ours jsonl": [ours, "stats", "--no-human", str(jsonl)],
            "reference jsonl": [ref, "stats", "--no-human", str(jsonl)],
        }
        results = {}
        for name, argv in runs.items():
            wall, peak, out = timed(argv)
            row = json.loads(out.splitlines()[0])
            row.pop("log", None)
            results[name] = (wall, peak, row)
            print(f"{name:16} {wall:8.2f} s  peak {peak:7.0f} MB")
        reference = results["reference jsonl"][2]
        for name in ("ours parquet", "ours jsonl"):
            diffs = close(results[name][2], reference)
            print(f"{name} output vs reference: {'agree (1e-9)' if not diffs else diffs}")
        t_ref = results["reference jsonl"][0]
        r_pq, r_js = t_ref / results["ours parquet"][0], t_ref / results["ours jsonl"][0]
        peak_pq = results["ours parquet"][1]
        print(f"speed-up parquet: {r_pq:.1f}x (target >= 20x, "
              f"{'met' if r_pq >= 20 else 'NOT met'}); peak {peak_pq:.0f} MB "
              f"(target < 1 GB, {'met' if peak_pq < 1000 else 'NOT met'})")
        print(f"speed-up jsonl: {r_js:.1f}x (target >= 2x, {'met' if r_js >= 2 else 'NOT met'})")


if __name__ == "__main__":
    main()

"""`lmc stats` speed and peak memory: ours on Parquet and on jsonl vs the reference
`lmchallenge==5.2` on the same jsonl.

Builds an N-row (default 1,000,000) ``wc`` log by repeating the rows of
tests/data/pretty/*.wc.jsonl with shifted message numbers, writes it as jsonl and as
Parquet (``lmchallenge.logs.parquet.write_parquet``) in a temporary directory, and runs
``lmc stats --no-human`` on each under ``/usr/bin/time -v`` (wall time, user + system
CPU time, peak RSS), ``--repeat`` rounds of the three runs interleaved, so that a shared
machine's load falls on all three alike.  The outputs must agree (numbers to a relative
1e-9).  Prints, per run, the best and the median wall time, the best CPU time and the
largest peak RSS, and the speed-ups (best reference wall time over best wall time, and
the same for medians and for CPU time) against the targets: >= 20x on Parquet with peak
memory < 1 GB, >= 2x on jsonl.  The load average is printed before and after.

Usage: python benchmarks/stats.py [--rows N] [--repeat N] [--reference /opt/lmcref]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lmchallenge.logs.parquet import write_parquet  # noqa: E402


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


def timed(argv: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, user + system CPU seconds, peak RSS in MB, stdout) of ``argv``."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{argv} failed:\n{done.stderr[-3000:]}")

    def field(name: str) -> float:
        return float(re.search(rf"{name}: ([\d.]+)", done.stderr).group(1))

    cpu = field(r"User time \(seconds\)") + field(r"System time \(seconds\)")
    return wall, cpu, field(r"Maximum resident set size \(kbytes\)") / 1024, done.stdout


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


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
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the three runs")
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
        print(f"before: {load()}")
        walls: dict[str, list[float]] = {name: [] for name in runs}
        cpus: dict[str, list[float]] = {name: [] for name in runs}
        peaks: dict[str, list[float]] = {name: [] for name in runs}
        outputs = {}
        for _ in range(args.repeat):
            for name, argv in runs.items():
                wall, cpu, peak, out = timed(argv)
                row = json.loads(out.splitlines()[0])
                row.pop("log", None)
                outputs[name] = row
                walls[name].append(wall)
                cpus[name].append(cpu)
                peaks[name].append(peak)
        print(f"after:  {load()}")
        for name in runs:
            print(f"{name:16} best {min(walls[name]):7.2f} s  median {statistics.median(walls[name]):7.2f} s  "
                  f"cpu {min(cpus[name]):7.2f} s  peak {max(peaks[name]):6.0f} MB  "
                  f"(walls: {', '.join(f'{w:.2f}' for w in walls[name])})")
        reference = outputs["reference jsonl"]
        for name in ("ours parquet", "ours jsonl"):
            diffs = close(outputs[name], reference)
            print(f"{name} output vs reference: {'agree (1e-9)' if not diffs else diffs}")

        def ratios(name: str) -> tuple[float, float, float]:
            ref = "reference jsonl"
            return (min(walls[ref]) / min(walls[name]),
                    statistics.median(walls[ref]) / statistics.median(walls[name]),
                    min(cpus[ref]) / min(cpus[name]))

        r_pq, m_pq, c_pq = ratios("ours parquet")
        r_js, m_js, c_js = ratios("ours jsonl")
        peak_pq = max(peaks["ours parquet"])
        print(f"speed-up parquet: {r_pq:.1f}x best, {m_pq:.1f}x median, {c_pq:.1f}x cpu "
              f"(target >= 20x, {'met' if r_pq >= 20 else 'NOT met'} on best wall); "
              f"peak {peak_pq:.0f} MB (target < 1 GB, {'met' if peak_pq < 1000 else 'NOT met'})")
        print(f"speed-up jsonl: {r_js:.1f}x best, {m_js:.1f}x median, {c_js:.1f}x cpu "
              f"(target >= 2x, {'met' if r_js >= 2 else 'NOT met'} on best wall)")


if __name__ == "__main__":
    main()

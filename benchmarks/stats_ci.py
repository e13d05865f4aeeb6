"""`lmc stats --confidence` (1,000 bootstrap resamples of the groups) against plain
`lmc stats` on the same 1,000,000-row Parquet ``wc`` log (issue 14 target: at most 2x).

The log is that of ``benchmarks/stats.py`` (tests/data/pretty/*.wc.jsonl repeated with
shifted message numbers; no users, so the groups are messages), and, with ``--users N``,
the same rows spread over N users (``user`` = ``u<k>``, each user a contiguous run of
rows), since the cost of resampling grows with the number of groups.  Runs are
interleaved over ``--repeat`` rounds; prints best and median wall times and the ratio of
the best wall times (and checks that the two outputs agree apart from ``"ci"``).

Usage: python benchmarks/stats_ci.py [--rows N] [--users N] [--repeat N] [--resamples N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from lmchallenge.logs.parquet import write_parquet  # noqa: E402
from stats import build_log, load, timed  # noqa: E402  (benchmarks/stats.py)


def with_users(rows: int, users: int):
    per_user = -(-rows // users)
    for i, datum in enumerate(build_log(rows)):
        datum["user"] = f"u{i // per_user}"
        yield datum


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=0, help="spread the rows over N users (0: none)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    lmc = str(Path(sys.executable).parent / "lmc")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.wc.parquet"
        data = with_users(args.rows, args.users) if args.users else build_log(args.rows)
        write_parquet(data, str(log), "wc")
        runs = {"lmc stats": [lmc, "stats", str(log)],
                "--confidence": [lmc, "stats", "--confidence", "0.95", "--resamples", str(args.resamples), str(log)]}
        print(f"log: {args.rows:,} wc rows, {args.users or 'no'} users, parquet {log.stat().st_size / 2**20:.0f} MiB")
        print(f"before: {load()}")
        walls: dict[str, list[float]] = {name: [] for name in runs}
        outputs = {}
        for _ in range(args.repeat):
            for name, argv in runs.items():
                wall, cpu, peak, out = timed(argv)
                walls[name].append(wall)
                outputs[name] = json.loads(out)
        print(f"after:  {load()}")
        ci = outputs["--confidence"].pop("ci")
        print(f"groups resampled: {'messages' if not args.users else 'users'}; intervals of {len(ci)} figures; "
              f"outputs otherwise {'equal' if outputs['--confidence'] == outputs['lmc stats'] else 'DIFFERENT'}")
        for name in runs:
            print(f"{name:14} best {min(walls[name]):6.2f} s  median {statistics.median(walls[name]):6.2f} s  "
                  f"(walls: {', '.join(f'{w:.2f}' for w in walls[name])})")
        ratio = min(walls["--confidence"]) / min(walls["lmc stats"])
        print(f"ratio --confidence / plain: {ratio:.2f}x best wall (target <= 2x: {'met' if ratio <= 2 else 'NOT met'})")


if __name__ == "__main__":
    main()

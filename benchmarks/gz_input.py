"""Partitioning a ``.jsonl.gz`` corpus: decompress to a file first, or partition while reading.

    python benchmarks/gz_input.py [--repeat 5] [CORPUS.gz ...]

Both ways end with the same partitions over a plain copy that workers can seek in (a gzip
stream cannot be entered in the middle):

* ``decompress first`` (what ``lmc_dist.partition.scan`` does): ``gzip`` +
  ``shutil.copyfileobj`` writes the plain copy, then the plain file is read line by line,
  validated and cut (a second pass, over uncompressed bytes);
* ``while reading`` (what ``scan`` did before): one pass iterates the gzip stream line by
  line, writing each line to the plain copy as it validates and cuts it.

Prints the best of ``--repeat`` wall times of each (CPU-bound, single process) and checks the
partitions agree.  Default corpora: the marked-up rails commit corpora in ``data/commits``.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lmc_dist import partition
from lmc_dist.partition import ScanResult

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "data/commits/rails.test.jsonl.gz", REPO / "data/commits/rails.train.jsonl.gz"]
PARTITION_CHARS = 100_000


def gzip_size(path: Path) -> int:
    """The uncompressed size of a one-member gzip file under 4 GiB (its ISIZE trailer,
    RFC 1952), for the taper of the partitions at the end of the corpus."""
    with open(path, "rb") as f:
        f.seek(-4, 2)
        return int.from_bytes(f.read(4), "little")


def while_reading(path: Path, work: Path) -> ScanResult:
    cutter = partition._Cutter(PARTITION_CHARS, False, total_bytes=gzip_size(path))
    plain = work / "_input.plain"
    fmt = partition.detect_format(str(path))
    sha256 = partition._sha256_of(str(path))
    with open(path, "rb") as raw, gzip.GzipFile(fileobj=raw) as stream, open(plain, "wb") as copy:
        offset = 0
        for number, data in enumerate(stream, start=1):
            copy.write(data)
            start, offset = offset, offset + len(data)
            cutter.add(partition._Line(start, offset, number,
                                       partition._parse(data, str(path), number, fmt)))
    parts = cutter.finish()
    return ScanResult(path=str(plain), corpus_format=fmt, sha256=sha256, partitions=parts,
                      messages=sum(p.messages for p in parts),
                      characters=sum(p.characters for p in parts))


def decompress_first(path: Path, work: Path) -> ScanResult:
    return partition.scan(str(path), "auto", PARTITION_CHARS, False, str(work))


def best_of(way: Callable[[Path, Path], ScanResult], path: Path, repeat: int) -> tuple[float, ScanResult]:
    times, result = [], None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="lmc-gz-") as work:
            start = time.perf_counter()
            result = way(path, Path(work))
            times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpora", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for path in args.corpora:
        reading, a = best_of(while_reading, path, args.repeat)
        first, b = best_of(decompress_first, path, args.repeat)
        assert [(p.start, p.end, p.messages) for p in a.partitions] == \
               [(p.start, p.end, p.messages) for p in b.partitions]
        print(f"{path.name}: {a.messages} rows, {a.characters:,} characters, "
              f"{len(a.partitions)} partitions; partition while reading {reading:.3f} s, "
              f"decompress first {first:.3f} s ({first / reading:.2f}x)")


if __name__ == "__main__":
    main()

"""A protocol model that answers instantly (for overhead benchmarks).

It reads whatever requests are available in one system call and answers them all in one
write, so its own cost per request is about a microsecond: what is measured is the client.
predict without candidates -> "the -1, and -2, of -3"; with candidates -> each scored -1.

``--stderr-bytes N`` writes N bytes (100-byte lines) to stderr per predict, before its answer,
and ``--tally FILE`` writes the total stderr bytes to FILE at the end (benchmarks/stderr_flood.py).
"""

import argparse
import os

ANSWER = b"the\t-1.0\tand\t-2.0\tof\t-3.0"


def answer(line: bytes) -> bytes | None:
    if not line.startswith(b"predict"):
        return None  # train / clear: no answer
    parts = line.split(b"\t")
    if len(parts) > 2:
        return b"\t".join(c + b"\t-1.0" for c in parts[2:])
    return ANSWER


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stderr-bytes", type=int, default=0)
    parser.add_argument("--tally", default=None)
    args = parser.parse_args()
    noise = (b"x" * 99 + b"\n") * (args.stderr_bytes // 100) + b"y" * (args.stderr_bytes % 100)
    written = 0
    pending = b""
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        out = [a for a in map(answer, lines) if a is not None]
        if out:
            if noise:
                for _ in out:
                    write_all(2, noise)
                written += len(noise) * len(out)
            write_all(1, b"\n".join(out) + b"\n")
    if args.tally:
        with open(args.tally, "w") as f:
            f.write(str(written))


if __name__ == "__main__":
    main()

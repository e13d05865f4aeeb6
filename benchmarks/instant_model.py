"""A protocol model that answers instantly (for overhead benchmarks).

It reads whatever requests are available in one system call and answers them all in one
write, so its own cost per request is about a microsecond: what is measured is the client.
predict without candidates -> "the -1, and -2, of -3"; with candidates -> each scored -1.
"""

import os

ANSWER = b"the\t-1.0\tand\t-2.0\tof\t-3.0"


def answer(line: bytes) -> bytes | None:
    if not line.startswith(b"predict"):
        return None  # train / clear: no answer
    parts = line.split(b"\t")
    if len(parts) > 2:
        return b"\t".join(c + b"\t-1.0" for c in parts[2:])
    return ANSWER


def main() -> None:
    pending = b""
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        out = [a for a in map(answer, lines) if a is not None]
        if out:
            data = b"\n".join(out) + b"\n"
            while data:
                data = data[os.write(1, data):]


if __name__ == "__main__":
    main()

"""Model CPU per query of `lmc-ngram serve`: an old source tree against this one, on the same
recorded requests (run alternately, so both see the same load; answers compared byte for byte).

    lmc-ngram train data/kjv/train.txt.gz -o /tmp/kjv.lm
    git worktree add /tmp/old REV
    python benchmarks/ngram_model.py --old-tree /tmp/old --model /tmp/kjv.lm [--lines 5000]
        [--games we,wc] [--repeat 5] [--corpus FILE | --emoji-line N [--joined]]

The requests are those `lmc run MODEL GAME` sends for the first ``--lines`` lines of
``--corpus`` (default ``data/kjv/test.txt``), or for one line of ``N`` family emoji spelled
with spaces as LM Challenge 5.x spells them (``--emoji-line``: every space of it may be
inside an emoji, the tokenizer's worst case; with ``--joined``, written without spaces: a
line with no whitespace at all), recorded once through `tee` (a game's requests
do not depend on the answers).  Each replay is `python -m lmchallenge.cli.ngram serve MODEL < requests`, its CPU
(user + system, from the process's rusage: model load included) divided by the requests.
Prints the median microseconds per request of each tree and the ratio new/old.

Each process runs with its tree on ``PYTHONPATH`` and in the temporary directory: ``python -m``
puts the working directory first on ``sys.path``, so run from a checkout it would import that
checkout whatever ``PYTHONPATH`` says (before 2026-11-26 it did: both sides were this tree).
Each side's imported package is checked to be its tree's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVE = [sys.executable, "-m", "lmchallenge.cli.ngram", "serve"]


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree.resolve())}


def check_imports(tree: Path, cwd: Path) -> None:
    """Exit unless a process started as the replays are imports ``lmchallenge`` from ``tree``."""
    found = subprocess.run([sys.executable, "-c", "import lmchallenge; print(lmchallenge.__file__)"],
                           env=env_for(tree), cwd=cwd, capture_output=True, text=True, check=True)
    if not Path(found.stdout.strip()).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"the replay for {tree} imports {found.stdout.strip()}")


def record(tmp: Path, model: Path, game: str, corpus: Path) -> Path:
    """The requests `lmc run` sends the model for ``game`` on ``corpus``."""
    requests = tmp / f"{game}.requests"
    command = f"tee {shlex.quote(str(requests))} | {shlex.join([*SERVE, str(model)])}"
    subprocess.run([sys.executable, "-m", "lmchallenge.cli", "run", command, game, str(corpus)],
                   env=env_for(REPO), cwd=tmp, stdout=subprocess.DEVNULL, check=True)
    return requests


def replay(tree: Path, model: Path, requests: Path) -> tuple[float, bytes]:
    """(CPU-seconds, answers) of one model process from ``tree`` answering ``requests``."""
    with open(requests, "rb") as stdin:
        process = subprocess.Popen([*SERVE, str(model.resolve())], stdin=stdin,
                                   stdout=subprocess.PIPE, env=env_for(tree),
                                   cwd=requests.parent)
        answers = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        sys.exit(f"model from {tree} failed ({status})")
    return usage.ru_utime + usage.ru_stime, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="a lmc-ngram train output")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--games", default="we,wc")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--corpus", type=Path, default=REPO / "data" / "kjv" / "test.txt")
    parser.add_argument("--emoji-line", type=int, metavar="N",
                        help="one line of N family emoji spelled with spaces instead")
    parser.add_argument("--joined", action="store_true",
                        help="--emoji-line without spaces (no whitespace in the line)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lmc-ngram-model-") as tmp:
        compare(args, Path(tmp))


def compare(args: argparse.Namespace, tmp: Path) -> None:
    """Record the requests in ``tmp``, replay them with both trees, print the figures."""
    corpus = tmp / "corpus.txt"
    if args.emoji_line:
        family = "\U0001F468 \u200d \U0001F469 \u200d \U0001F467"
        if args.joined:
            line, spelled = family.replace(" ", "") * args.emoji_line, "written without spaces"
        else:
            line, spelled = " ".join([family] * args.emoji_line), "spelled with spaces"
        corpus.write_text(line + "\n", encoding="utf-8")
        what = f"one line of {args.emoji_line} family emoji {spelled}"
    else:
        with open(args.corpus, "rb") as f:
            corpus.write_bytes(b"".join(f.readline() for _ in range(args.lines)))
        what = f"{args.lines} lines of {args.corpus}"
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {what}")
    for tree in (args.old_tree, REPO):
        check_imports(tree, tmp)
    for game in args.games.split(","):
        requests = record(tmp, args.model.resolve(), game, corpus)
        n = sum(1 for line in open(requests, "rb") if line.startswith(b"predict"))
        times: dict[str, list[float]] = {"old": [], "new": []}
        answers: dict[str, bytes] = {}
        for _ in range(args.repeat):
            for name, tree in (("old", args.old_tree), ("new", REPO)):
                cpu, answers[name] = replay(tree, args.model, requests)
                times[name].append(cpu)
        if answers["old"] != answers["new"]:
            sys.exit(f"{game}: the answers differ")
        old, new = (statistics.median(times[k]) for k in ("old", "new"))
        print(f"{game}: {n:,} requests, answers equal; model CPU per request (median of "
              f"{args.repeat}): old {1e6 * old / n:.1f} us, new {1e6 * new / n:.1f} us, "
              f"new/old {new / old:.2f} (best {min(times['new']) / min(times['old']):.2f})")


if __name__ == "__main__":
    main()

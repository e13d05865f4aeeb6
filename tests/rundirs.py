"""Helpers of the run-dir tests (test_rundir.py, test_faults.py): a corpus whose lines can be
told apart in the model's requests, ``lmc-dist run`` as a user's terminal starts it, and the
count of the toy model's requests per corpus line."""

from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
from pathlib import Path

from conftest import BIN, toy_model_command

WORDS = ("the lord said unto moses and aaron go in peace for they shall see his face "
         "at the gate of the city when the evening comes").split()
LINE_TAG = re.compile(r"^L(\d{4}) ")


def tagged_corpus(path: Path, lines: int, seed: int = 1) -> Path:
    """A plain-text corpus whose line N (from 1) starts with the word ``LNNNN``: every model
    request after a line's first word names its line."""
    rng = random.Random(seed)
    text = "".join(f"L{n:04d} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "\n"
                   for n in range(1, lines + 1))
    path.write_text(text, encoding="utf-8")
    return path


def requests_per_line(count_file: Path) -> collections.Counter:
    """How many requests the toy model (``--count-file``) got naming each corpus line, over
    every model process that wrote ``count_file.PID``."""
    counts: collections.Counter = collections.Counter()
    for name in count_file.parent.glob(count_file.name + ".*"):
        for context in name.read_text(encoding="utf-8").splitlines():
            match = LINE_TAG.match(context)
            if match:
                counts[int(match.group(1))] += 1
    return counts


def run_args(corpus: Path, run_dir: Path, count_file: Path | None = None, delay: float = 0.0,
             game: str = "we", extra: tuple[str, ...] = ()) -> list[str]:
    """argv of ``lmc-dist run`` with the toy model on ``corpus``."""
    model_args = []
    if count_file is not None:
        model_args += ["--count-file", str(count_file)]
    if delay:
        model_args += ["--delay", str(delay)]
    return [str(BIN / "lmc-dist"), "run", toy_model_command(*model_args), game, "--input", str(corpus),
            "--run-dir", str(run_dir), *extra]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(argv: list[str]) -> subprocess.Popen:
    """Start a command as a terminal does: its own process group (a Ctrl-C is
    ``os.killpg(proc.pid, SIGINT)``) and SIGINT not ignored (test runners may start us with
    SIGINT ignored, which children inherit)."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=_default_sigint)


def lmc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "lmc"), *args], capture_output=True, text=True, timeout=300)


def lmc_dist(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "lmc-dist"), *args], capture_output=True, text=True, timeout=300)


def done_parts(run_dir: Path) -> set[int]:
    """Indices of the partitions whose files are in place (top level or ``_temporary/``)."""
    names = [p.name for p in run_dir.glob("part-*")] + [p.name for p in run_dir.glob("_temporary/part-*")]
    return {int(name[5:10]) for name in names}


def partition_lines(run_dir: Path) -> dict[int, range]:
    """The corpus lines (1-based) of each partition, from the manifest."""
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    return {p["index"]: range(p["first_line"], p["first_line"] + p["messages"])
            for p in manifest["partitions"]}


def is_finished(run_dir: Path) -> bool:
    manifest = run_dir / "_manifest.json"
    return manifest.exists() and bool(json.loads(manifest.read_text()).get("finished"))


def worker_pids(client_pid: int) -> list[int]:
    """The embedded cluster's worker processes (multiprocessing children of the client)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if parent == client_pid and b"spawn_main" in cmdline:
            pids.append(int(entry))
    return pids

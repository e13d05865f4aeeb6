"""Tokens/s of `lmc-dist run` with 1 and 2 workers against `lmc run`, same model and corpus.

    python benchmarks/scaling.py [--rows 0] [--repeat 1] [--game wc] [--partition-chars 20000]
                                 [--format jsonl] [--rounds 1]

Model: the built-in n-gram model trained on the King James Old Testament, served by
``lmc-ngram serve`` (``--repeat 1``), or by ``benchmarks/repeat_ngram.py --repeat K``, the same
model computing every prediction K times (a CPU-bound model K times as expensive per query;
same answers).  Corpus: the first ROWS rows (0: all 3,118) of the marked-up rails commit corpus
``data/commits/rails.test.sample.jsonl``.  `lmc run` writes the log to a file; `lmc-dist run`
writes partitions (``--format``) and concatenates them into a log file (``--output``); the
three logs are checked identical.  On a Linux machine shared with other sessions,
``--autogroup-nice -10`` gives every process of the benchmark priority over them (with
sched_autogroup, plain ``nice`` only weighs within a session, and each model process is a
session of its own).

With ``--rounds K`` the three runs are made K times, one after the other in each round, and
the ratios are taken within each round (a shared machine's speed drifts over minutes: a ratio
of runs a minute apart is fairer than one of runs ten minutes apart); the median and the
best of the rounds are printed at the end.  After each round the machine's 2-core ceiling is
measured (:func:`ceiling`: two CPU-bound processes at once against one): on a shared machine
no 2-worker run can beat it.

Printed for each run: wall time, tokens/s, ratio to `lmc run`, and CPU seconds of the whole
process tree split into the model processes' (``/usr/bin/time`` around each model) and the
evaluator's (everything else: game, protocol, log, statistics, Dask, client).  Then a
projection for 8 and 32 workers from the 1-worker run's time line (manifest ``began`` and
``elapsed`` of every partition): start-up (launch to first partition), task overhead (gaps
between consecutive partitions on the worker), the partitions' own times, and the tail (last
partition to exit), scheduling the measured partition times on N workers longest-first; then
the same with the work divided evenly (a corpus with many more partitions than workers), and
the per-token limit (start-up and tail amortised away).  Every projected worker is assumed to
get the CPU a worker had in the measured 1-worker run (its game and its model process each on
a core when they need it).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIME = shutil.which("time", path="/usr/bin")


@dataclass
class Measured:
    """One run: wall seconds, CPU seconds of its process tree and of its model processes."""

    wall: float
    cpu: float
    model_cpu: float
    launched: float
    ended: float


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def model_cpu(path: Path) -> float:
    """Sum of the ``user sys`` lines /usr/bin/time appended for each model process."""
    if not path.exists():
        return float("nan")
    return sum(float(u) + float(s) for u, s in (line.split() for line in path.read_text().split("\n")
                                                 if line.strip()))


def run(argv: list[str], cpu_file: Path, stdout=subprocess.DEVNULL) -> Measured:
    """Run ``argv`` to completion, measuring its wall time and its process tree's CPU."""
    cpu_file.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    before = children_cpu()
    launched = time.time()
    start = time.perf_counter()
    subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, check=True, env=env)
    wall = time.perf_counter() - start
    return Measured(wall=wall, cpu=children_cpu() - before, model_cpu=model_cpu(cpu_file),
                    launched=launched, ended=launched + wall)


def model_command(model_file: Path, repeat: int, cpu_file: Path, autogroup_nice: int | None) -> str:
    """The shell command of the model, wrapped in /usr/bin/time (appending its CPU seconds)."""
    if repeat == 1:
        command = f"{BIN / 'lmc-ngram'} serve {model_file}"
    else:
        command = (f"{sys.executable} {REPO / 'benchmarks' / 'repeat_ngram.py'} {model_file} "
                   f"--repeat {repeat}")
    if TIME is not None:
        command = f"{TIME} -a -o {shlex.quote(str(cpu_file))} -f '%U %S' {command}"
    if autogroup_nice is not None:  # a model is a session of its own: its own autogroup
        command = f"echo {autogroup_nice} > /proc/self/autogroup; exec {command}"
    return command


def set_autogroup_nice(value: int) -> None:
    """Give this session's autogroup (this script, lmc, lmc-dist and its Dask processes) the
    nice ``value``: with sched_autogroup on, plain nice does not weigh against other sessions."""
    with open("/proc/self/autogroup", "w") as f:
        f.write(str(value))


def describe(name: str, m: Measured, tokens: int, base: float | None) -> str:
    rate = tokens / m.wall
    ratio = f", {rate / base:.2f}x lmc run" if base else ""
    other = m.cpu - m.model_cpu
    return (f"{name}: {m.wall:.1f} s = {rate:,.0f} tokens/s{ratio}; CPU {m.cpu:.1f} s = model "
            f"{m.model_cpu:.1f} s ({1e6 * m.model_cpu / tokens:.0f} us/token) + evaluator "
            f"{other:.1f} s ({1e6 * other / tokens:.0f} us/token)")


def longest_first(times: list[float], workers: int) -> float:
    """Makespan of ``times`` scheduled longest-first on ``workers`` identical workers."""
    loads = [0.0] * workers
    heapq.heapify(loads)
    for t in sorted(times, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + t)
    return max(loads)


def timeline(run: Measured, partitions: list[dict]) -> tuple[float, float, float, list[float]]:
    """(start-up, task overhead per partition, tail, partition times) of a 1-worker run."""
    spans = sorted((p["began"], p["began"] + p["elapsed"]) for p in partitions)
    elapsed = [end - begin for begin, end in spans]
    startup = spans[0][0] - run.launched
    tail = run.ended - spans[-1][1]
    gaps = [max(0.0, b[0] - a[1]) for a, b in zip(spans, spans[1:])]
    overhead = sum(gaps) / len(gaps) if gaps else 0.0
    return startup, overhead, tail, elapsed


CEILING_LOOP = "x = 0\nfor i in range({n}):\n    x += i * i % 7\n"


def ceiling(n: int = 10_000_000, repeat: int = 3) -> float:
    """This machine's 2-core ceiling now: the throughput of two CPU-bound Python processes
    running at once over that of one alone, the median of ``repeat`` tries (2.0 on two idle
    cores; less where the cores are shared with other work or are hyperthreads of one)."""
    argv = [sys.executable, "-c", CEILING_LOOP.format(n=n)]
    ratios = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        one = time.perf_counter() - start
        start = time.perf_counter()
        for process in [subprocess.Popen(argv) for _ in range(2)]:
            process.wait()
        ratios.append(2 * one / (time.perf_counter() - start))
    return statistics.median(ratios)


def measure_round(work: Path, model: str, corpus: Path, cpu_file: Path, args: argparse.Namespace
                  ) -> tuple[Measured, int, dict[int, float], tuple[float, float, float, list[float]]]:
    """`lmc run`, then `lmc-dist run` with 1 and 2 workers (each checked against `lmc run`'s
    log): (the `lmc run`, tokens, tokens/s by workers, the 1-worker time line)."""
    single_log = work / "single.jsonl"
    with open(single_log, "wb") as out:
        single = run([str(BIN / "lmc"), "run", model, args.game, str(corpus)], cpu_file, stdout=out)
    log = single_log.read_bytes()
    tokens = log.count(b"\n")
    base = tokens / single.wall
    print(describe(f"lmc run ({tokens} tokens)", single, tokens, None))
    rates, first = {}, None
    for workers in (1, 2):
        run_dir = work / f"run{workers}"
        shutil.rmtree(run_dir, ignore_errors=True)
        out = work / f"all{workers}.jsonl"
        m = run([str(BIN / "lmc-dist"), "run", model, args.game, "--input", str(corpus),
                 "--run-dir", str(run_dir), "--workers", str(workers), "--format", args.format,
                 "--partition-chars", str(args.partition_chars), "--output", str(out)], cpu_file)
        assert out.read_bytes() == log, f"{workers} workers: log differs from lmc run"
        rates[workers] = tokens / m.wall
        partitions = json.loads((run_dir / "_manifest.json").read_text())["partitions"]
        elapsed = [p["elapsed"] for p in partitions]
        print(describe(f"lmc-dist --workers {workers}", m, tokens, base)
              + f"; {len(elapsed)} partitions, sum {sum(elapsed):.1f} s, max {max(elapsed):.2f} s")
        if workers == 1:
            first = timeline(m, partitions)
    return single, tokens, rates, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=0, help="corpus rows (0: all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="predictions computed per query (1: lmc-ngram serve)")
    parser.add_argument("--game", default="wc")
    parser.add_argument("--partition-chars", type=int, default=20000)
    parser.add_argument("--format", default="jsonl", choices=["jsonl", "parquet"])
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of the three runs; ratios are taken within a round")
    parser.add_argument("--autogroup-nice", type=int, default=None, metavar="N",
                        help="on a machine shared with other sessions: run every process of the "
                             "benchmark (models included) with autogroup nice N (Linux, root for N<0)")
    args = parser.parse_args()
    if args.autogroup_nice is not None:
        set_autogroup_nice(args.autogroup_nice)
    work = Path(tempfile.mkdtemp(prefix="lmc-scaling-"))
    try:
        model_file = work / "kjv.lm"
        subprocess.run([str(BIN / "lmc-ngram"), "train", str(REPO / "data/kjv/train.txt.gz"),
                        "-o", str(model_file)], check=True)
        corpus = work / "commits.jsonl"
        with open(REPO / "data/commits/rails.test.sample.jsonl", "rb") as f:
            lines = f.readlines()
        corpus.write_bytes(b"".join(lines[:args.rows] if args.rows else lines))
        cpu_file = work / "model-cpu.txt"
        model = model_command(model_file, args.repeat, cpu_file, args.autogroup_nice)
        print(f"model: {model}\nload average: {os.getloadavg()}")
        # per round: 1 and 2 workers vs lmc run, 2 vs 1 worker, the machine's 2-core ceiling
        ratios: list[tuple[float, float, float, float]] = []
        for round_ in range(args.rounds):
            if args.rounds > 1:
                print(f"round {round_ + 1} (load average {os.getloadavg()[0]:.2f}):")
            single, tokens, rates, first = measure_round(work, model, corpus, cpu_file, args)
            base = tokens / single.wall
            ratios.append((rates[1] / base, rates[2] / base, rates[2] / rates[1], ceiling()))
            print(f"speed-up 2 vs 1 worker: {rates[2] / rates[1]:.2f}x; 2 workers vs lmc run: "
                  f"{rates[2] / base:.2f}x; the machine's 2-core ceiling just after: "
                  f"{ratios[-1][3]:.2f}x (two CPU-bound processes at once vs one)")
        if args.rounds > 1:
            for i, name in enumerate(("1 worker vs lmc run", "2 workers vs lmc run",
                                      "2 vs 1 worker", "2-core ceiling")):
                values = sorted(r[i] for r in ratios)
                print(f"{name}: median {statistics.median(values):.2f}x, best {values[-1]:.2f}x, "
                      f"rounds {', '.join(f'{r[i]:.2f}' for r in ratios)}")
        startup, overhead, tail, elapsed = first   # of the last round
        print(f"1-worker time line: start-up {startup:.2f} s, task overhead {overhead * 1e3:.0f} ms "
              f"per partition, partitions {sum(elapsed):.1f} s (largest {max(elapsed):.2f} s), "
              f"tail {tail:.2f} s")
        total = sum(elapsed) + overhead * len(elapsed)   # the partitions' work, in seconds
        for n in (8, 32):
            busy = longest_first([e + overhead for e in elapsed], n)
            projected = startup + busy + tail
            even = startup + total / n + tail
            print(f"projection {n} workers: {startup:.1f} + {busy:.1f} + {tail:.1f} s = "
                  f"{projected:.1f} s = {tokens / projected:,.0f} tokens/s "
                  f"({tokens / projected / base:.1f}x lmc run); with partitions small enough "
                  f"to divide evenly {even:.1f} s ({single.wall / even:.1f}x); per token, "
                  f"start-up and tail left out, {single.wall / (total / n):.1f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

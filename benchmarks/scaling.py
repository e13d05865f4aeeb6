"""`lmc-dist run` on 1, 2, 4, 8, 16 workers against `lmc run`: wall, CPU, cores busy, speed-up.

    python benchmarks/scaling.py [--games we,wc] [--workers 1,2,4,8,16] [--lines 100000]
        [--wc-lines 20000] [--text kjv|commits|both] [--repeat 1] [--format parquet]
        [--partition-chars N] [--base-lines N] [--check] [--corpus FILE] [--json FILE]
    python benchmarks/scaling.py --build-corpus 1000000 --corpus big.txt   # and stop

Corpus: plain text, one message a line, no ``--train`` (the issue 12 set-up), built from the
shipped real text by cycling through its lines until ``--lines`` (``--text``: ``kjv`` the
King James test then train text, ``commits`` the lines of the rails commit messages, test
then train, ``both`` the two interleaved line by line).  ``--build-corpus N --corpus FILE``
writes an N-line corpus and stops (a 1M-line kjv corpus is about 120 MB; build it on the
machine that runs the benchmark rather than carry it).

Model: the built-in n-gram model trained on the KJV training text, served by
``lmc-ngram serve`` (``--repeat 1``) or by ``benchmarks/repeat_ngram.py --repeat K`` (the same
answers, K times the model's CPU per query), or, with ``--in-process``, called in the
evaluator's process as ``lmchallenge.model.ngram:NgramModel`` (one process per worker, no pipe;
its CPU is then counted as the evaluator's).

Printed per game and run: wall seconds; CPU-seconds of all processes (the process tree's
``RUSAGE_CHILDREN``: client, scheduler, nannies, workers, models) split into the models'
(``/usr/bin/time`` around each model) and the evaluator's (the rest); evaluator microseconds
per token; cores busy (CPU-seconds / wall); speed-up over `lmc run` (its wall / this wall);
and the ratio to the CPU limit: wall / (CPU-seconds of `lmc run` / workers), the issue 12
target being <= 1.25 at 16 workers.  With ``--parallel-runs``, each ``lmc-dist`` run on N > 1
workers is preceded by N ``lmc run`` processes at once, each on 1/N of the corpus's lines:
what the machine's cores give this model with no Dask at all (on 2 shared cores that, and
not 2x, is the ceiling; BENCHMARKS.md, "scaling"), and the ``lmc-dist`` wall is printed over
theirs.  With ``--check`` every `lmc-dist` run also writes
``--output`` and its log must equal `lmc run`'s byte for byte (costs a join per run).

Then the run-time model of BENCHMARKS.md ("scaling", "past one machine"): the costs it needs
measured from these runs (per token of the evaluator and model, per partition on a worker,
start-up, tail), its predictions for the measured worker counts (with the error) and for 64
to 1,024 workers.

On the device machine (16 cores, Python 3.12 with NumPy, pandas, PyArrow, SciPy, click and
tqdm, no network): carry this repository and the wheels it lacks.  Here, in the repository
root::

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \\
        dask distributed emoji jsonschema regex fsspec
    # then delete from .whl what the machine has (numpy, pandas, pyarrow, ...) so one
    # version of each remains; `--wheels .whl` below installs the rest

and run, carrying ``.whl``::

    python3 benchmarks/scaling.py --wheels .whl --lines 100000 --wc-lines 20000

``--wheels DIR`` installs ``DIR/*.whl`` and this repository (no dependencies, no index) into
a target directory and re-executes this script with it on ``PYTHONPATH``, with the commands
``lmc``, ``lmc-dist`` and ``lmc-ngram`` made as small scripts in a ``bin`` beside it.
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import itertools
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
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIME = shutil.which("time", path="/usr/bin")
IN_PROCESS = "lmchallenge.model.ngram:NgramModel"
SCALE_WORKERS = (64, 128, 256, 512, 1024)


@dataclass
class Measured:
    """One run: wall seconds, CPU seconds of its process tree and of its model processes."""

    wall: float
    cpu: float
    model_cpu: float
    launched: float
    ended: float


@dataclass
class Row:
    """A printed result line (also written with ``--json``)."""

    game: str
    run: str
    workers: int
    tokens: int
    wall: float
    cpu: float
    model_cpu: float
    evaluator_us_per_token: float
    cores_busy: float
    speedup: float
    ratio_to_cpu_limit: float
    partitions: int = 0


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def model_cpu(path: Path) -> float:
    """Sum of the ``user sys`` lines /usr/bin/time appended for each model process (0 where
    none ran: an in-process model; NaN where /usr/bin/time is missing)."""
    if not path.exists():
        return 0.0 if TIME is not None else float("nan")
    return sum(float(u) + float(s) for u, s in (line.split() for line in path.read_text().split("\n")
                                                 if line.strip()))


def run(argv: list[str], cpu_file: Path, stdout=subprocess.DEVNULL) -> Measured:
    """Run ``argv`` to completion, measuring its wall time and its process tree's CPU."""
    return run_parallel([argv], cpu_file, stdout)


def run_parallel(argvs: list[list[str]], cpu_file: Path, stdout=subprocess.DEVNULL) -> Measured:
    """Run every command of ``argvs`` at once, to completion: wall time from the first
    launch to the last exit, and the CPU of all their process trees."""
    cpu_file.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    before = children_cpu()
    launched = time.time()
    start = time.perf_counter()
    processes = [subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, env=env)
                 for argv in argvs]
    errors = [p.communicate()[1] for p in processes]
    wall = time.perf_counter() - start
    for argv, stderr, p in zip(argvs, errors, processes):
        if p.returncode != 0:
            sys.exit(f"{shlex.join(argv)} failed:\n{stderr.decode()[-3000:]}")
    return Measured(wall=wall, cpu=children_cpu() - before, model_cpu=model_cpu(cpu_file),
                    launched=launched, ended=launched + wall)


def split_corpus(corpus: Path, parts: int, work: Path) -> list[Path]:
    """``corpus`` cut into ``parts`` files of consecutive lines, as equal in characters as
    whole lines allow."""
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    total = sum(map(len, lines))
    paths, chunk, size = [], [], 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= total * (len(paths) + 1) / parts and len(paths) < parts - 1:
            paths.append(_write_chunk(work / f"{corpus.stem}-{len(paths)}-of-{parts}.txt", chunk))
            chunk = []
    paths.append(_write_chunk(work / f"{corpus.stem}-{len(paths)}-of-{parts}.txt", chunk))
    return paths


def _write_chunk(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(lines), encoding="utf-8")
    return path


def model_command(model_file: Path, repeat: int, cpu_file: Path) -> str:
    """The shell command of the model, wrapped in /usr/bin/time (appending its CPU seconds)."""
    if repeat == 1:
        command = f"{BIN / 'lmc-ngram'} serve {model_file}"
    else:
        command = (f"{sys.executable} {REPO / 'benchmarks' / 'repeat_ngram.py'} {model_file} "
                   f"--repeat {repeat}")
    if TIME is not None:
        command = f"{TIME} -a -o {shlex.quote(str(cpu_file))} -f '%U %S' {command}"
    return command


def in_process_model(model_file: Path) -> list[str]:
    """The built-in n-gram model as a ``module:Class`` spec and its ``-o`` options: `lmc run`
    calls it in its own process, `lmc-dist` in each worker's (no model process, no pipe)."""
    return [IN_PROCESS, "-o", json.dumps({"model": str(model_file)})]


# --- corpus -------------------------------------------------------------------------------

def _text_lines(text: str) -> list[str]:
    """Non-empty lines of the shipped real text (``kjv``, ``commits`` or ``both``)."""
    def kjv() -> list[str]:
        with open(REPO / "data/kjv/test.txt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        with gzip.open(REPO / "data/kjv/train.txt.gz", "rt", encoding="utf-8") as f:
            return lines + f.read().splitlines()

    def commits() -> list[str]:
        lines = []
        for name in ("rails.test.jsonl.gz", "rails.train.jsonl.gz"):
            with gzip.open(REPO / "data/commits" / name, "rt", encoding="utf-8") as f:
                for row in f:
                    lines.extend(json.loads(row)["text"].splitlines())
        return lines

    if text == "kjv":
        chosen = kjv()
    elif text == "commits":
        chosen = commits()
    else:
        chosen = [line for pair in itertools.zip_longest(kjv(), commits()) for line in pair if line]
    return [line for line in chosen if line.strip()]


def build_corpus(path: Path, lines: int, text: str) -> None:
    """Write ``lines`` lines of real text to ``path``, cycling through the shipped text."""
    source = _text_lines(text)
    with open(path, "w", encoding="utf-8") as f:
        for line in itertools.islice(itertools.cycle(source), lines):
            f.write(line + "\n")


# --- runs ---------------------------------------------------------------------------------

def ceiling(processes: int, n: int = 5_000_000, repeat: int = 3) -> float:
    """This machine's ceiling for ``processes`` CPU-bound processes now: their throughput
    running at once over that of one alone, the median of ``repeat`` tries (``processes``
    on idle cores; less where cores are shared or hyperthreads)."""
    argv = [sys.executable, "-c", f"x = 0\nfor i in range({n}):\n    x += i * i % 7\n"]
    ratios = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        one = time.perf_counter() - start
        start = time.perf_counter()
        for process in [subprocess.Popen(argv) for _ in range(processes)]:
            process.wait()
        ratios.append(processes * one / (time.perf_counter() - start))
    return statistics.median(ratios)


def row(game: str, name: str, workers: int, m: Measured, tokens: int, single: Measured | None,
        partitions: int = 0) -> Row:
    base = single or m
    evaluator = m.cpu - m.model_cpu
    return Row(game=game, run=name, workers=workers, tokens=tokens, wall=m.wall, cpu=m.cpu,
               model_cpu=m.model_cpu, evaluator_us_per_token=1e6 * evaluator / tokens,
               cores_busy=m.cpu / m.wall, speedup=base.wall / m.wall,
               ratio_to_cpu_limit=m.wall / (base.cpu / workers), partitions=partitions)


def print_row(r: Row) -> None:
    print(f"  {r.run:<26} {r.wall:8.1f} s {r.cpu:8.1f} CPU-s (model {r.model_cpu:7.1f}, evaluator "
          f"{r.evaluator_us_per_token:5.0f} us/token) {r.cores_busy:5.1f} cores "
          f"{r.speedup:5.2f}x {r.ratio_to_cpu_limit:5.2f} x limit"
          + (f"  {r.partitions} partitions" if r.partitions else ""), flush=True)


def measure_game(game: str, corpus: Path, model: list[str], cpu_file: Path, work: Path,
                 args: argparse.Namespace) -> tuple[list[Row], dict[int, list[dict]], Measured]:
    """`lmc run`, then `lmc-dist run` on each worker count: rows, each run's partitions
    (manifest records) by workers, and the `lmc run` measurement.  With ``--base-lines N``,
    `lmc run` reads the corpus's first N lines only and its wall and CPU are scaled to the
    whole corpus by tokens (the first `lmc-dist` run's count): its cost per token is the same
    over text cycled from the same lines, and the 10-minute device calls can then hold the
    issue's >= 100k-line runs."""
    base_corpus = prefix_corpus(corpus, args.base_lines, work) if args.base_lines else corpus
    single_log = work / f"single-{game}.jsonl"
    with open(single_log, "wb") as out:
        single = run([str(BIN / "lmc"), "run", *model, game, str(base_corpus)], cpu_file,
                     stdout=out)
    with open(single_log, "rb") as f:
        base_tokens = sum(1 for _ in f)
    rows: list[Row] = []
    tokens: int | None = None
    if base_corpus is corpus:
        tokens = base_tokens
        rows.append(row(game, "lmc run", 1, single, tokens, None))
        print(f"{game}: {tokens:,} tokens")
        print_row(rows[0])
    else:
        print(f"{game}: lmc run on the first {args.base_lines:,} lines ({base_tokens:,} tokens): "
              f"{single.wall:.1f} s, {single.cpu:.1f} CPU-s (model {single.model_cpu:.1f}); "
              "scaled by tokens to the whole corpus below", flush=True)
    partitions: dict[int, list[dict]] = {}
    for workers in args.workers:
        parallel = None
        if args.parallel_runs and workers > 1:
            chunks = split_corpus(corpus, workers, work)
            parallel = run_parallel([[str(BIN / "lmc"), "run", *model, game, str(chunk)]
                                     for chunk in chunks], cpu_file)
            for chunk in chunks:
                chunk.unlink()
        run_dir = work / f"run-{game}-{workers}"
        shutil.rmtree(run_dir, ignore_errors=True)
        argv = [str(BIN / "lmc-dist"), "run", model[0], game, *model[1:], "--input", str(corpus),
                "--run-dir", str(run_dir), "--workers", str(workers), "--part-format", args.format]
        if args.partition_chars:
            argv += ["--partition-chars", str(args.partition_chars)]
        out = work / f"all-{game}-{workers}.jsonl"
        if args.check:
            argv += ["--output", str(out)]
        m = run(argv, cpu_file)
        if args.check:
            with open(out, "rb") as a, open(single_log, "rb") as b:
                same = all(x == y for x, y in itertools.zip_longest(a, b))
            assert same, f"{game}, {workers} workers: the log differs from lmc run's"
            out.unlink()
        partitions[workers] = json.loads((run_dir / "_manifest.json").read_text())["partitions"]
        if tokens is None:
            tokens = sum(p["rows"] for p in partitions[workers])
            single = scaled(single, tokens / base_tokens)
            rows.append(row(game, "lmc run", 1, single, tokens, None))
            print(f"{game}: {tokens:,} tokens")
            print_row(rows[0])
        if parallel is not None:
            rows.append(row(game, f"{workers} x lmc run on 1/{workers}", workers, parallel,
                            tokens, single))
            print_row(rows[-1])
        rows.append(row(game, f"lmc-dist --workers {workers}", workers, m, tokens, single,
                        len(partitions[workers])))
        rows[-1].launched, rows[-1].ended = m.launched, m.ended  # type: ignore[attr-defined]
        print_row(rows[-1])
        if parallel is not None:
            print(f"  {'':<26} {m.wall / parallel.wall:8.2f} x the wall of {workers} x lmc run")
        shutil.rmtree(run_dir, ignore_errors=True)
    single_log.unlink()
    return rows, partitions, single


def scaled(m: Measured, factor: float) -> Measured:
    """``m`` as if its work were ``factor`` times as much (wall and CPU in proportion)."""
    return Measured(wall=m.wall * factor, cpu=m.cpu * factor, model_cpu=m.model_cpu * factor,
                    launched=m.launched, ended=m.launched + m.wall * factor)


def prefix_corpus(corpus: Path, lines: int, work: Path) -> Path:
    """The first ``lines`` lines of ``corpus``, as a file in ``work``."""
    path = work / f"{corpus.stem}-first-{lines}.txt"
    with open(corpus, encoding="utf-8") as f:
        path.write_text("".join(itertools.islice(f, lines)), encoding="utf-8")
    return path


# --- the run-time model -------------------------------------------------------------------

@dataclass
class Costs:
    """Measured costs of the run-time model (seconds unless named otherwise).

    startup: launch to the first partition's start (scan, cluster, first model).
    per_partition: a partition's fixed cost on its worker (gap between consecutive
        partitions of one worker plus the intercept of elapsed against tokens).
    per_token: a worker's seconds per token while it has the CPU it needs.
    tail: last partition's end to exit (reduce, manifest, shutdown).
    per_task_scheduler: the scheduler's and client's serial cost per task.
    per_byte_scan: the client's serial scan per corpus byte.
    cores_per_worker: a worker's busy cores (evaluator and model together).
    cpu_growth: the share of the 1-worker CPU per token that each further worker on the same
        machine adds to every worker's (shared caches, memory and SMT siblings, the workers'
        and models' starts); 0 when only the 1-worker run was measured.
    """

    startup: float
    per_partition: float
    per_token: float
    tail: float
    per_task_scheduler: float
    per_byte_scan: float
    cores_per_worker: float = 1.0
    cpu_growth: float = 0.0


SCHEDULER_SECONDS_PER_TASK = 0.002
"""Serial cost of one task at the scheduler and client when not measured (``--task-cost``
measures it): about 2 ms on the idle 2-core machine (BENCHMARKS.md, "scaling")."""


def _noop(i: int) -> int:
    return i


def task_cost(tasks: int = 300) -> tuple[float, float]:
    """Seconds per task of the client's loop as :func:`lmc_dist.job._run_partitions` runs
    it, on an embedded 1-worker cluster with no-op tasks: (bare: submit and completion;
    with the per-partition summary round trip the client makes today)."""
    import dask
    from distributed import Client, LocalCluster, as_completed

    from lmchallenge.tuning import DASK_EMBEDDED_CONFIG

    with dask.config.set(DASK_EMBEDDED_CONFIG):
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    result = []
    with cluster, Client(cluster) as client:
        client.submit(_noop, -1).result()
        for summary in (False, True):
            start = time.perf_counter()
            futures = [client.submit(_noop, i, pure=False) for i in range(tasks)]
            for future in as_completed(futures):
                if summary:
                    client.submit(_noop, future, pure=False).result()
            result.append((time.perf_counter() - start) / tasks)
    return result[0], result[1]


def fit_costs(rows: list[Row], partitions: dict[int, list[dict]], corpus_bytes: int,
              scan_seconds: float, per_task: float = SCHEDULER_SECONDS_PER_TASK) -> Costs:
    """The costs, from the 1-worker run (the least contended) of one game: per partition
    the mean gap between consecutive partitions, per token the partitions' time over their
    tokens (the first partition's one-off costs, imports and the model's start, included),
    cores per worker the run's CPU over its wall time (evaluator and model together); and
    the CPU growth per further worker from the next smallest run, where there is one (its
    CPU over the 1-worker run's, the same corpus: that run is fitted, not checked)."""
    one = next(r for r in rows if r.workers == 1 and r.run.startswith("lmc-dist"))
    more = sorted((r for r in rows if r.workers > 1 and r.run.startswith("lmc-dist")),
                  key=lambda r: r.workers)
    growth = max(0.0, (more[0].cpu / one.cpu - 1) / (more[0].workers - 1)) if more else 0.0
    parts = sorted(partitions[1], key=lambda p: p["began"])
    spans = [(p["began"], p["began"] + p["elapsed"]) for p in parts]
    gaps = [max(0.0, b[0] - a[1]) for a, b in zip(spans, spans[1:])]
    return Costs(startup=spans[0][0] - one.launched,  # type: ignore[attr-defined]
                 per_partition=statistics.mean(gaps) if gaps else 0.0,
                 per_token=sum(p["elapsed"] for p in parts) / sum(p["rows"] for p in parts),
                 tail=one.ended - spans[-1][1],  # type: ignore[attr-defined]
                 per_task_scheduler=per_task,
                 per_byte_scan=scan_seconds / corpus_bytes, cores_per_worker=one.cpu / one.wall,
                 cpu_growth=growth)


def predict(costs: Costs, tokens: int, corpus_bytes: int, partitions: int, workers: int,
            sizes: list[int] | None = None, measured_bytes: int = 0,
            cores: float | None = None) -> float:
    """Predicted wall seconds on ``workers`` workers (see BENCHMARKS.md, "past one
    machine"): start-up (with the scan's share for the corpus), the partitions scheduled
    longest-first on the workers (each its fixed cost plus its tokens' time), or the
    scheduler's serial task cost if larger, and the tail.  ``cores``: the one machine's CPUs
    (the workers share them, and contend as ``cpu_growth`` says), or None: machines of
    ``os.cpu_count()`` CPUs, each with that many workers at most, enough for all."""
    if sizes is None:
        sizes = [tokens // partitions] * partitions
    # workers needing more cores than the machine has share them (None: each has its own)
    slowdown = max(1.0, workers * costs.cores_per_worker / cores) if cores else 1.0
    per_machine = min(workers, int(cores or os.cpu_count() or 1))
    contention = 1 + costs.cpu_growth * (per_machine - 1)
    times = [costs.per_partition + costs.per_token * slowdown * contention * n for n in sizes]
    loads = [0.0] * workers
    heapq.heapify(loads)
    for t in times:  # in corpus order, as the client submits them
        heapq.heappush(loads, heapq.heappop(loads) + t)
    busy = max(max(loads), costs.per_task_scheduler * len(sizes))
    scan_growth = costs.per_byte_scan * max(0, corpus_bytes - measured_bytes)
    return costs.startup + scan_growth + busy + costs.tail


def model_report(game: str, rows: list[Row], partitions: dict[int, list[dict]], costs: Costs,
                 corpus_bytes: int) -> None:
    tokens = rows[0].tokens
    print(f"{game}: run-time model: start-up {costs.startup:.2f} s, {costs.per_partition * 1e3:.0f} ms "
          f"per partition, {costs.per_token * 1e6:.1f} us per token per worker, tail "
          f"{costs.tail:.2f} s, {costs.per_task_scheduler * 1e3:.1f} ms per task at the scheduler, "
          f"scan {costs.per_byte_scan * 1e9:.1f} ns per byte, {costs.cores_per_worker:.2f} cores "
          f"per worker, CPU per token +{100 * costs.cpu_growth:.1f}% per further worker on the "
          f"machine")
    fitted = min((r.workers for r in rows if r.workers > 1 and r.run.startswith("lmc-dist")),
                 default=None)     # the run the CPU growth was fitted on (0 if it fell)
    for r in rows[1:]:
        if not r.run.startswith("lmc-dist"):
            continue
        sizes = [p["rows"] for p in partitions[r.workers]]
        p = predict(costs, tokens, corpus_bytes, len(sizes), r.workers, sizes, corpus_bytes,
                    cores=os.cpu_count())
        role = "fitted" if r.workers in (1, fitted) else "error"
        print(f"  {r.workers:>5} workers: predicted {p:7.1f} s, measured {r.wall:7.1f} s "
              f"({role} {100 * (p - r.wall) / r.wall:+.0f}%)")
    for workers in SCALE_WORKERS:
        for scale in (1, 10, 100):
            n = max(6 * workers, 1)
            p = predict(costs, tokens * scale, corpus_bytes * scale, n, workers,
                        measured_bytes=corpus_bytes)
            print(f"  {workers:>5} workers, {scale:>3}x this corpus ({n} partitions): {p:8.1f} s "
                  f"= {rows[0].wall * scale / p:6.1f}x lmc run")


# --- set-up -------------------------------------------------------------------------------

def reexec_with_wheels(wheels: Path) -> None:
    """Install ``wheels/*.whl`` into a target directory and run the script that was started
    (``sys.argv[0]``: this one, or one that imports this) again with them and this
    repository importable and the commands in a ``bin`` beside them.  The target directory
    is ``$LMC_WHEELS_SITE`` where set (installed once, then reused by later scripts:
    ``benchmarks/device_checks.sh``), else a new temporary one."""
    site = Path(os.environ.get("LMC_WHEELS_SITE") or tempfile.mkdtemp(prefix="lmc-site-"))
    found = sorted(wheels.glob("*.whl"))
    if found and not (site / "installed").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--no-compile", "--no-cache-dir", "--upgrade", "--target",
                        str(site / "lib"), *map(str, found)], check=True)
        # compiled once here, not by the first measured run's workers at once
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site / "lib"),
                        str(REPO / "lmchallenge"), str(REPO / "lmc_dist")],
                       stdout=subprocess.DEVNULL, check=False)
        (site / "installed").write_text("\n".join(w.name for w in found) + "\n")
    bin_dir = site / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, target in (("lmc", "lmchallenge.cli:main"), ("lmc-dist", "lmc_dist.cli:main"),
                         ("lmc-ngram", "lmchallenge.cli.ngram:main"),
                         ("lmc-neural", "lmchallenge.cli.neural:main")):
        module, function = target.split(":")
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\n"
                          f"if __name__ == '__main__':\n    sys.exit({function}())\n")
        script.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site / "lib"), str(REPO)]),
           "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "LMC_SCALING_BIN": str(bin_dir)}
    argv = [a for a in sys.argv[1:]]
    i = argv.index("--wheels")
    del argv[i:i + 2]
    os.execve(sys.executable, [sys.executable, os.path.abspath(sys.argv[0]), *argv], env)


def main() -> None:
    global BIN
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", default="we,wc", help="comma-separated games")
    parser.add_argument("--workers", default="1,2,4,8,16",
                        type=lambda s: [int(w) for w in s.split(",")])
    parser.add_argument("--lines", type=int, default=100_000, help="corpus lines for we")
    parser.add_argument("--wc-lines", type=int, default=None,
                        help="corpus lines for wc (default: --lines / 5; wc asks ~4x the queries)")
    parser.add_argument("--text", default="kjv", choices=["kjv", "commits", "both"])
    parser.add_argument("--corpus", type=Path, default=None,
                        help="use (or with --build-corpus, write) this corpus")
    parser.add_argument("--build-corpus", type=int, default=None, metavar="N",
                        help="write an N-line corpus to --corpus and stop")
    parser.add_argument("--repeat", type=int, default=1,
                        help="predictions computed per query (1: lmc-ngram serve)")
    parser.add_argument("--in-process", action="store_true",
                        help=f"the model as {IN_PROCESS} in the evaluator's process "
                             "(not with --repeat)")
    parser.add_argument("--partition-chars", type=int, default=None,
                        help="pass --partition-chars (default: lmc-dist's choice for the cluster)")
    parser.add_argument("--format", default="parquet", choices=["jsonl", "parquet"])
    parser.add_argument("--base-lines", type=int, default=None, metavar="N",
                        help="lmc run on the first N lines only, scaled to the corpus by tokens "
                             "(its fixed start too: N in the thousands)")
    parser.add_argument("--check", action="store_true",
                        help="also write --output and compare it with lmc run's log")
    parser.add_argument("--ceiling", action="store_true",
                        help="measure the machine's ceiling for the largest worker count first")
    parser.add_argument("--parallel-runs", action="store_true",
                        help="before each lmc-dist run on N > 1 workers, N lmc runs at once on "
                             "1/N of the corpus each (what the cores give this model without Dask)")
    parser.add_argument("--task-cost", action="store_true",
                        help="measure the client's and scheduler's serial cost per task first")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                        help="install DIR/*.whl and this repository first (device machine)")
    args = parser.parse_args()
    if args.in_process and args.repeat != 1:
        parser.error("--in-process runs the built-in model itself: not with --repeat")
    if args.check and args.base_lines:
        parser.error("--check compares whole logs: it cannot go with --base-lines")
    if args.wheels is not None:
        reexec_with_wheels(args.wheels)
    if os.environ.get("LMC_SCALING_BIN"):
        BIN = Path(os.environ["LMC_SCALING_BIN"])
    if args.build_corpus:
        build_corpus(args.corpus, args.build_corpus, args.text)
        return
    work = Path(tempfile.mkdtemp(prefix="lmc-scaling-"))
    try:
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()}, "
              f"Python {sys.version.split()[0]}")
        if args.ceiling:
            n = max(args.workers)
            print(f"ceiling for {n} CPU-bound processes: {ceiling(n):.2f}x one", flush=True)
        per_task = SCHEDULER_SECONDS_PER_TASK
        if args.task_cost:
            bare, with_summary = task_cost()
            per_task = with_summary
            print(f"serial cost per task: {bare * 1e3:.1f} ms bare, {with_summary * 1e3:.1f} ms with "
                  "the client's summary round trip (used below)", flush=True)
        model_file = work / "kjv.lm"
        subprocess.run([str(BIN / "lmc-ngram"), "train", str(REPO / "data/kjv/train.txt.gz"),
                        "-o", str(model_file)], check=True)
        cpu_file = work / "model-cpu.txt"
        model = (in_process_model(model_file) if args.in_process
                 else [model_command(model_file, args.repeat, cpu_file)])
        all_rows: list[Row] = []
        for game in args.games.split(","):
            lines = args.lines if game != "wc" else (args.wc_lines or max(1, args.lines // 5))
            corpus = args.corpus or work / f"corpus-{lines}.txt"
            if args.corpus is None and not corpus.exists():
                build_corpus(corpus, lines, args.text)
            from lmc_dist.partition import scan
            from lmc_dist.sizing import ForCluster, query_cost
            from lmchallenge.games.spec import GameSpec
            start = time.perf_counter()    # the scan alone, its modules imported
            scanned = scan(str(corpus), "text", ForCluster(1), False, str(work),
                           cost=query_cost(GameSpec(game)))
            scan_seconds = time.perf_counter() - start
            size = corpus.stat().st_size
            print(f"corpus: {corpus} ({lines:,} lines, {size / 1e6:.1f} MB; scan {scan_seconds:.2f} s, "
                  f"{scanned.size.estimated_queries:,} estimated {game} queries)", flush=True)
            rows, partitions, _ = measure_game(game, corpus, model, cpu_file, work, args)
            all_rows += rows
            if 1 in partitions:
                model_report(game, rows, partitions,
                             fit_costs(rows, partitions, size, scan_seconds, per_task), size)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in all_rows], indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

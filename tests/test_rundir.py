"""Run dirs as committed records (issue 11, "What must hold" 2-5): readers refuse an
unfinished run (or read it with --partial, saying so), pandas never reads a subset, nothing
finished is recomputed, one writer at a time, files lmc-dist did not write are refused and
kept, failures are quiet and precise.  Real ``lmc``/``lmc-dist`` processes, a real embedded
cluster, a real model process."""

from __future__ import annotations

import gzip
import json
import re
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from conftest import BIN, PYTHON, toy_model_command
from rundirs import (done_parts, lmc, lmc_dist, partition_lines, requests_per_line, run_args,
                     start, tagged_corpus)
from test_dist import concatenated, lmc_run

LINES = 60
CRASH_LINE = 31
RUN_OPTIONS = ("--workers", "1", "--partition-chars", "300", "--retries", "0", "--no-progress")
# a model process that fails cannot be checked any more for answers out of step: the partitions
# it answered before are removed, and one retry makes them again in the same run
CRASH_RUN_OPTIONS = ("--workers", "1", "--partition-chars", "300", "--retries", "1",
                     "--no-progress")


def _lmc_run(corpus: Path, count_file: Path | None = None, game: str = "we") -> bytes:
    model = toy_model_command(*(["--count-file", str(count_file)] if count_file else []))
    return subprocess.run([str(BIN / "lmc"), "run", model, game, str(corpus)], check=True,
                          capture_output=True, timeout=300).stdout


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory):
    """A run whose model crashes on one line: every other partition is done, the run is not.

    Returns:
        (corpus, run dir, crash flag file, the run's argv, requests count file, failed partition).
    """
    tmp = tmp_path_factory.mktemp("unfinished")
    corpus = tagged_corpus(tmp / "corpus.txt", LINES)
    flag = tmp / "crash"
    flag.write_text("")
    run_dir = tmp / "run"
    counts = tmp / "requests"
    model = toy_model_command("--count-file", str(counts), "--crash-if-exists", str(flag),
                              "--crash-word", f"L{CRASH_LINE:04d}")
    argv = [str(BIN / "lmc-dist"), "run", model, "we", "--input", str(corpus), "--run-dir",
            str(run_dir), *CRASH_RUN_OPTIONS]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = partition_lines(run_dir)
    failed = next(i for i, r in lines.items() if CRASH_LINE in r)
    first, last = lines[failed][0], lines[failed][-1]
    # one message: the partition, its lines, the model's error; then the summary line
    assert result.stderr.startswith(
        f"lmc-dist: error: partition {failed} (lines {first}-{last} of {corpus}, first message "
        f"{first - 1}): model {model!r}: exited with code 3")
    assert f"toy model: crashing on 'L{CRASH_LINE:04d}'" in result.stderr
    assert result.stderr.endswith(f"lmc-dist: error: 1 of {len(lines)} partitions failed; the others are in "
                                  f"{run_dir}: fix the cause and rerun with --resume\n")
    assert "Traceback" not in result.stderr and "Compute Failed" not in result.stderr
    return corpus, run_dir, flag, argv, counts, failed


def _refusal(run_dir: Path, done: int, total: int) -> str:
    return (f"{run_dir}: unfinished lmc-dist run: {done} of {total} partitions done; finish it "
            "with `lmc-dist run ... --resume`, or read the finished partitions with --partial\n")


READERS = [["stats"], ["validate"], ["pretty"], ["grep", "lord"], ["convert", "-o", "{out}"],
           ["diff", "{reference}"]]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r[0])
def test_every_reader_refuses_an_unfinished_run(unfinished, tmp_path, reader):
    corpus, run_dir, *_ = unfinished
    total = len(partition_lines(run_dir))
    reference = tmp_path / "ref.jsonl"
    reference.write_bytes(_lmc_run(corpus))
    out = tmp_path / "out.jsonl"
    args = [a.format(out=out, reference=reference) for a in reader]
    if reader[0] == "diff":        # diff BASELINE LOG: the run dir as the log
        args = ["diff", str(reference), str(run_dir)]
    else:
        args = args[:1] + ([args[1]] if reader[0] == "grep" else []) + [str(run_dir)] + \
            (args[1:] if reader[0] == "convert" else [])
    result = lmc(*args)
    assert result.returncode == 2
    assert result.stderr == "lmc: error: " + _refusal(run_dir, total - 1, total)
    assert result.stdout == ""
    assert not out.exists()


@pytest.mark.parametrize("reader", [["validate"], ["pretty"], ["grep", "L0001"], ["diff"],
                                    ["compare"]], ids=lambda r: r[0])
def test_every_reader_says_it_read_partially(unfinished, tmp_path, reader):
    """With --partial, a reader whose output does not say so itself warns, once, that it read
    an unfinished run and how much of it (QA of the last session: pretty, grep, diff and
    compare printed a partial run's figures as if it were whole)."""
    corpus, run_dir, *_ = unfinished
    total = len(partition_lines(run_dir))
    reference = tmp_path / "ref.jsonl"
    reference.write_bytes(_lmc_run(corpus))
    # (diff and compare refuse a partial run against the whole log: not the same data; the
    # directory written two ways is warned about once)
    logs = [str(run_dir), f"{run_dir}/"][:2 if reader[0] in ("diff", "compare") else 1]
    result = lmc(reader[0], "--partial", *reader[1:], *logs)
    assert result.returncode == 0, result.stderr
    assert result.stdout or reader[0] == "validate"
    warning = (f"WARNING\t{run_dir}: an unfinished lmc-dist run: read {total - 1} of its {total} "
               f"partitions (--partial)\n")
    assert result.stderr.count(warning) == 1, result.stderr
    # a finished log read with --partial: nothing to say
    plain = lmc(reader[0], "--partial", *reader[1:], *([str(reference)] * len(logs)))
    assert "unfinished" not in plain.stderr, plain.stderr


def test_lmc_dist_stats_refuses_an_unfinished_run(unfinished):
    _, run_dir, *_ = unfinished
    total = len(partition_lines(run_dir))
    result = lmc_dist("stats", str(run_dir))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "lmc-dist: error: " + _refusal(run_dir, total - 1, total)


def test_partial_reads_what_is_done_and_says_so(unfinished, tmp_path):
    corpus, run_dir, _, _, _, failed = unfinished
    lines = partition_lines(run_dir)
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    done_rows = sum(pd.read_parquet(p).shape[0] for p in sorted((run_dir / "_temporary").glob("part-*")))
    coverage = {"partitions": len(lines), "partitions_done": len(lines) - 1,
                "messages": LINES, "messages_done": LINES - len(lines[failed]),
                "characters": manifest["characters"],
                "characters_done": manifest["characters"] - manifest["partitions"][failed]["characters"]}
    stats = json.loads(lmc("stats", "--partial", str(run_dir)).stdout)
    assert stats["partial"] is True and stats["coverage"] == coverage
    assert stats["tokens_per_user"] == done_rows
    # every form of lmc stats says so (with --confidence, --derived, --signature or --by the
    # rows had neither "partial" nor "coverage")
    for options in (["--confidence", "0.9", "--resamples", "50"], ["--derived"], ["--signature"],
                    ["--by", "message-length"]):
        rows = [json.loads(line) for line in
                lmc("stats", "--partial", *options, str(run_dir)).stdout.splitlines()]
        assert rows and all(row["partial"] is True and row["coverage"] == coverage for row in rows), options
    csv_rows = lmc("stats", "--partial", "--derived", "-o", "csv", str(run_dir)).stdout.splitlines()
    assert "coverage.partitions_done" in csv_rows[0].split(",")
    dist = lmc_dist("stats", "--partial", str(run_dir))
    assert dist.returncode == 0, dist.stderr
    dist_stats = json.loads(dist.stdout)
    assert dist_stats == {k: v for k, v in stats.items() if k != "log"}
    out = tmp_path / "partial.jsonl"
    converted = lmc("convert", "--partial", str(run_dir), "-o", str(out))
    assert converted.returncode == 0, converted.stderr
    assert len(out.read_text().splitlines()) == done_rows
    assert converted.stderr == (f"lmc convert: wrote {done_rows} tokens to {out} (jsonlines; partial: "
                                f"{len(lines) - 1} of {len(lines)} partitions)\n")
    assert lmc("validate", "--partial", str(run_dir)).returncode == 0


def test_parquet_readers_never_read_an_unfinished_run_as_a_whole(unfinished):
    import glob

    import dask.dataframe as dd

    _, run_dir, *_ = unfinished
    with pytest.raises(pa.ArrowInvalid, match="RUN-NOT-FINISHED"):
        pd.read_parquet(run_dir)
    with pytest.raises(Exception, match="RUN-NOT-FINISHED"):   # it reads _temporary/ too
        len(dd.read_parquet(run_dir))
    with pytest.raises(pa.ArrowInvalid, match="RUN-NOT-FINISHED"):   # Polars, DuckDB: a glob
        pd.concat(pd.read_parquet(p) for p in sorted(glob.glob(f"{run_dir}/*.parquet")))


def test_resume_recomputes_only_the_unfinished_partition(unfinished, tmp_path):
    """... and keeps the files of other names that a user put in the run dir."""
    corpus, run_dir0, flag, argv, counts, failed = unfinished
    run_dir = tmp_path / "run"
    shutil.copytree(run_dir0, run_dir)
    argv = [str(run_dir) if a == str(run_dir0) else a for a in argv]
    user_files = {run_dir / name: name for name in ("part-1-notes.txt", "part-00000.parquet.bak",
                                                    "notes.txt", "_temporary/mine.txt")}
    for path, text in user_files.items():
        path.write_text(text)
    before = requests_per_line(counts)
    flag.unlink()
    try:
        resumed = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=300)
    finally:
        flag.write_text("")
    assert resumed.returncode == 0, resumed.stderr
    after = requests_per_line(counts)
    reference_counts = tmp_path / "ref-requests"
    expected_log = _lmc_run(corpus, reference_counts)
    expected = requests_per_line(reference_counts)
    lines = partition_lines(run_dir)
    for index, span in lines.items():
        for line in span:
            added = after[line] - before[line]
            assert added == (expected[line] if index == failed else 0), (index, line)
    # the finished run reads as before run dirs were records: parts, manifest, stats (and
    # the user's files, which lmc-dist never deletes)
    assert {path: path.read_text() for path in user_files} == user_files
    assert sorted(os.listdir(run_dir)) == sorted(
        [".lmc-dist.lock", "_manifest.json", "_stats.json", "_temporary", "notes.txt",
         "part-00000.parquet.bak", "part-1-notes.txt"] + [f"part-{i:05d}.parquet" for i in lines])
    assert os.listdir(run_dir / "_temporary") == ["mine.txt"]
    for path in user_files:             # pyarrow would read them as Parquet
        path.unlink()
    frame = pd.read_parquet(run_dir)
    assert len(frame) == len(expected_log.splitlines())
    out = tmp_path / "run.jsonl"
    assert lmc("convert", str(run_dir), "-o", str(out)).returncode == 0
    assert out.read_bytes() == expected_log
    assert "partial" not in json.loads(lmc("stats", "--partial", str(run_dir)).stdout)


def test_a_directory_of_user_files_is_refused_and_kept(tmp_path):
    corpus = tagged_corpus(tmp_path / "corpus.txt", 5)
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "part-1-notes.txt").write_text("my notes\n")
    (run_dir / "part-00000.parquet.bak").write_bytes(b"backup")
    result = subprocess.run(run_args(corpus, run_dir, extra=RUN_OPTIONS), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr == (f"lmc-dist: error: {run_dir} holds files that lmc-dist did not write "
                             "(part-00000.parquet.bak, part-1-notes.txt) and no _manifest.json: "
                             "use a new or empty --run-dir\n")
    assert (run_dir / "part-1-notes.txt").read_text() == "my notes\n"
    assert (run_dir / "part-00000.parquet.bak").read_bytes() == b"backup"
    assert sorted(p.name for p in run_dir.iterdir()) == ["part-00000.parquet.bak",
                                                         "part-1-notes.txt"]   # no lock left


def test_the_temporaries_of_a_run_killed_before_its_manifest_are_its_own(tmp_path):
    """A run killed while it wrote its unfinished-run note or decompressed a .gz corpus
    (before any manifest) left temporaries that the next run took for someone else's
    files: the run dir was refused for good (QA: 'holds files that lmc-dist did not write
    (_input.plain.tmp)'). They are lmc-dist's own, and removed."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 5)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    left = [".RUN-NOT-FINISHED.parquet.tmp-vm-4242", "_input.plain.tmp",
            "_temporary/.write-check-k2x9"]     # a worker's probe (worker.check_writable_here)
    (run_dir / "_temporary").mkdir()
    for name in left:
        (run_dir / name).write_bytes(b"half")
    result = subprocess.run(run_args(corpus, run_dir, extra=RUN_OPTIONS), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert not {".RUN-NOT-FINISHED.parquet.tmp-vm-4242", "_input.plain.tmp",
                "_temporary"} & set(os.listdir(run_dir))
    assert json.loads((run_dir / "_manifest.json").read_text())["finished"]


def test_a_model_that_cannot_start_stops_the_run_after_two_partitions(tmp_path):
    """A mistyped model command fails every partition alike as the model starts: the run
    stops after two (it started the model for every partition, twice with --retries 1), and
    the same command mended runs in the same run dir, without --resume (nothing is kept)."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 30)
    run_dir = tmp_path / "run"
    argv = [str(BIN / "lmc-dist"), "run", "no-such-model-command", "we", "--input", str(corpus),
            "--run-dir", str(run_dir), "--workers", "1", "--partition-chars", "300", "--no-progress"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    total = len(partition_lines(run_dir))
    assert total > 5
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("lmc-dist: error: partition 0 (lines 1-")
    assert "model 'no-such-model-command': exited with code 127" in lines[0]
    assert "no-such-model-command: not found" in result.stderr
    assert lines[-2] == "(the same error stopped 1 more partition: 1)"
    assert lines[-1] == (f"lmc-dist: error: the model failed alike as it started, so the run "
                         f"stopped: 2 partitions failed, {total - 2} were not run and none is kept "
                         f"in {run_dir}: fix the cause and run again (the next run there does not "
                         "stop so)")
    assert len(lines) <= 8 and "Compute Failed" not in result.stderr
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert [p["state"] for p in manifest["partitions"]] == ["failed", "failed"] + ["pending"] * (total - 2)
    assert manifest["stopped_early"] is True
    # the same again: the next run does not stop so (a model failing on what the first
    # requests hold would never get further), then stops early again after it
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.splitlines()[-1] == (
        f"lmc-dist: error: all {total} partitions failed (none is kept in {run_dir}): fix the "
        "cause and run again")
    assert "stopped_early" not in json.loads((run_dir / "_manifest.json").read_text())
    mended = subprocess.run([*argv[:2], toy_model_command(), *argv[3:]], capture_output=True,
                            text=True, timeout=300)
    assert mended.returncode == 0, mended.stderr
    assert mended.stderr.startswith(f"WARNING\t{run_dir} holds a run none of whose partitions is "
                                    "done: starting it anew\n")
    assert concatenated(run_dir) == lmc_run(["we"], corpus)


def test_failing_as_the_model_starts_after_a_partition_succeeded_does_not_stop_the_run(tmp_path):
    """A batching model reads many requests before it answers: failing on what two
    partitions' first requests hold looks like a model that cannot start, but one that
    finished a partition can start (the run stopped for good: every rerun stopped alike)."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 40)
    run_dir = tmp_path / "run"
    args = ["we", "--input", str(corpus), "--run-dir", str(run_dir), "--workers", "1",
            "--partition-chars", "300", "--retries", "0", "--no-progress"]
    subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), *args], check=True,
                   capture_output=True, timeout=300)
    lines = partition_lines(run_dir)
    assert len(lines) >= 6
    shutil.rmtree(run_dir)
    poison = [f"L{lines[i][0]:04d}" for i in (2, 3, 4)]     # the first words of 2, 3 and 4
    model = tmp_path / "poisoned.py"       # exits at a request for a poisoned word
    model.write_text("import sys\n"
                     f"for line in sys.stdin:\n    if line.rstrip('\\n').split('\\t')[-1] in {poison!r}:\n"
                     "        sys.exit(3)\n"
                     "    print('\\t'.join(f'{w}\\t-1.0' for w in line.rstrip('\\n').split('\\t')[2:]), flush=True)\n")
    result = subprocess.run([str(BIN / "lmc-dist"), "run", f"{PYTHON} {model}", *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "the run stopped" not in result.stderr
    # 2 failed in the process that had answered 0 and 1 (so they are made again: failed
    # here); 3 and 4 failed as their fresh processes started; the rest were made
    assert result.stderr.splitlines()[-1] == (
        f"lmc-dist: error: 5 of {len(lines)} partitions failed; the others are in {run_dir}: "
        "fix the cause and rerun with --resume")
    states = [p["state"] for p in json.loads((run_dir / "_manifest.json").read_text())["partitions"]]
    assert states == ["failed"] * 5 + ["done"] * (len(lines) - 5)


def test_one_partition_failing_as_its_model_starts_does_not_stop_the_run(tmp_path):
    """A model that fails on the first request it is sent (a fresh process) in one partition
    only is not a model that cannot start: the other partitions are made."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 30)
    run_dir = tmp_path / "run"
    wrapper = tmp_path / "first-request.sh"     # fails if its first request is L0001's
    wrapper.write_text('IFS= read -r first\ncase "$first" in *L0001*) echo "no L0001" >&2; '
                       'exit 3;; esac\n{ printf "%s\\n" "$first"; cat; } | '
                       f'{toy_model_command()}\n')
    model = f"sh {wrapper}"     # (a retry would pass: the next process starts elsewhere)
    result = subprocess.run([str(BIN / "lmc-dist"), "run", model, "we", "--input", str(corpus),
                             "--run-dir", str(run_dir), "--workers", "1", "--partition-chars",
                             "300", "--retries", "0", "--no-progress"],
                            capture_output=True, text=True, timeout=300)
    total = len(partition_lines(run_dir))
    assert result.returncode == 2
    assert "request (answer line 1): 'predict\\t\\tL0001'" in result.stderr
    assert result.stderr.endswith(f"lmc-dist: error: 1 of {total} partitions failed; the others "
                                  f"are in {run_dir}: fix the cause and rerun with --resume\n")


def _wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_manifest_is_current_when_the_next_file_appears(tmp_path):
    """On a one-thread worker, a partition is in the manifest before the next one's file
    appears (its summary does not wait behind the next partition)."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 40)
    run_dir = tmp_path / "run"
    proc = start(run_args(corpus, run_dir, delay=0.004, extra=RUN_OPTIONS))
    try:
        _wait_for(lambda: len(done_parts(run_dir)) >= 2 or proc.poll() is not None)
        manifest = json.loads((run_dir / "_manifest.json").read_text())
        first = min(done_parts(run_dir))
        assert manifest["partitions"][first]["state"] == "done"
        assert manifest["partitions"][first]["rows"] > 0
    finally:
        proc.communicate(timeout=300)
    assert proc.returncode == 0


@pytest.mark.slow    # test_faults.py's fast client-sigint trial checks the same in the default suite
def test_ctrl_c_is_one_line_and_readers_refuse(tmp_path):
    corpus = tagged_corpus(tmp_path / "corpus.txt", 60)
    run_dir = tmp_path / "run"
    proc = start(run_args(corpus, run_dir, delay=0.004, extra=("--workers", "2", "--partition-chars",
                                                                "300", "--no-progress")))
    _wait_for(lambda: len(done_parts(run_dir)) >= 1)
    os.killpg(proc.pid, signal.SIGINT)            # what a terminal sends on Ctrl-C
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130
    assert err.decode() == "lmc-dist: interrupted; finished partitions are kept: rerun with --resume\n"
    refused = lmc("stats", str(run_dir))
    assert refused.returncode == 2 and "partitions done" in refused.stderr


def test_a_second_run_on_a_run_dir_in_use_stops_at_once(tmp_path):
    corpus = tagged_corpus(tmp_path / "corpus.txt", 60)
    run_dir = tmp_path / "run"
    first = start(run_args(corpus, run_dir, delay=0.004, extra=RUN_OPTIONS))
    try:
        _wait_for(lambda: (run_dir / "_manifest.json").exists())
        second = subprocess.run(run_args(corpus, run_dir, game="ce", extra=RUN_OPTIONS),
                                capture_output=True, text=True, timeout=300)
    finally:
        first.communicate(timeout=300)
    assert second.returncode == 2
    assert second.stderr == (f"lmc-dist: error: {run_dir} is in use by another lmc-dist run "
                             f"(pid {first.pid}): wait for it to end, or use another --run-dir\n")
    assert first.returncode == 0
    assert json.loads((run_dir / "_manifest.json").read_text())["game"] == "we"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_two_concurrent_runs_never_both_succeed(tmp_path, seed):
    """Two runs (we and ce) on one run dir, the second started at a random moment: never both
    exit 0, and the one that does printed the statistics the run dir holds."""
    rng = random.Random(seed)
    corpus = tagged_corpus(tmp_path / "corpus.txt", 40)
    run_dir = tmp_path / "run"
    extra = ("--workers", "1", "--partition-chars", "400", "--no-progress")
    games = ["we", "ce"]
    rng.shuffle(games)
    first = start(run_args(corpus, run_dir, game=games[0], extra=extra))
    time.sleep(rng.uniform(0.0, 3.0))
    second = start(run_args(corpus, run_dir, game=games[1], extra=extra))
    outs = [p.communicate(timeout=300) for p in (first, second)]
    codes = [first.returncode, second.returncode]
    assert codes.count(0) <= 1, [o[1].decode() for o in outs]
    for code, (out, err), game in zip(codes, outs, games):
        if code == 0:
            manifest = json.loads((run_dir / "_manifest.json").read_text())
            assert manifest["game"] == game
            assert json.loads(out) == json.loads((run_dir / "_stats.json").read_text())
        else:
            assert code == 2
            assert "is in use by another lmc-dist run" in err.decode() \
                or "already holds a" in err.decode(), err.decode()


def test_a_partition_rerun_after_the_commit_reads_its_file(tmp_path):
    """Dask reruns a task whose result a killed worker held, also between the commit and the
    cluster's close: the partition's file is then at the top level, and the rerun reads it
    back (the model is never started: here it would fail) and writes nothing."""
    from dataclasses import fields

    from lmchallenge.games.spec import GameSpec
    from lmchallenge.model.spec import PredictorSpec
    from lmc_dist.partition import Partition
    from lmc_dist.worker import PartitionTask, evaluate_partition

    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    done = subprocess.run(run_args(corpus, run_dir, extra=RUN_OPTIONS), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    entry = manifest["partitions"][0]
    partition = Partition(**{f.name: entry[f.name] for f in fields(Partition) if f.name in entry})
    task = PartitionTask(run_dir=str(run_dir), input_path=str(corpus), corpus_name=str(corpus),
                         corpus_format="text", partition=partition, game=GameSpec("we"),
                         predictor=PredictorSpec("false"), train=False)
    outcome = evaluate_partition(task)
    assert (outcome.index, outcome.rows) == (0, entry["rows"])
    assert not (run_dir / "_temporary").exists()


def test_a_summary_whose_worker_lost_it_is_read_from_the_part_file(tmp_path):
    """The client asks a finished partition's summary of the worker holding it; where that
    worker has lost it (died on another partition), the summary came from a task depending
    on it, which Dask ran again on the workers and lost with them again while they kept dying
    (QA: a KilledWorker traceback).  Now it is read from the part file the task wrote."""
    from dataclasses import fields

    from distributed import Client, LocalCluster

    from lmchallenge.games.spec import GameSpec
    from lmchallenge.model.spec import PredictorSpec
    from lmc_dist.job import summary_now
    from lmc_dist.partition import Partition
    from lmc_dist.worker import PartitionTask, evaluate_partition

    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    done = subprocess.run(run_args(corpus, run_dir, extra=RUN_OPTIONS), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    entry = json.loads((run_dir / "_manifest.json").read_text())["partitions"][0]
    partition = Partition(**{f.name: entry[f.name] for f in fields(Partition) if f.name in entry})
    task = PartitionTask(run_dir=str(run_dir), input_path=str(corpus), corpus_name=str(corpus),
                         corpus_format="text", partition=partition, game=GameSpec("we"),
                         predictor=PredictorSpec("false"), train=False)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        future = client.submit(evaluate_partition, task, pure=False)
        future.result()
        assert summary_now(client, future, task, entry)["worker"] is not None   # (held)
        client.run(lambda dask_worker: dask_worker.data.__delitem__(future.key))  # lost
        summary = summary_now(client, future, task, entry)
        assert (summary["rows"], summary["bytes"], summary["made"]) == (entry["rows"],
                                                                         entry["bytes"], False)
        assert (summary["elapsed"], summary["began"], summary["worker"]) == (None, None, None)
        assert summary_now(client, future, task, dict(entry, state="todo"))["made"] is True


def test_a_task_of_another_run_writes_nothing_in_the_run_dir(tmp_path):
    """A client stopped by a signal leaves its running tasks to finish on their workers; a
    run that took the run dir over meanwhile (started anew: none of the first run's
    partitions was done) exited 0 with the first run's wc rows in its we log.  Tasks carry
    their run's identity: one of another run writes nothing, whether it starts after the
    takeover or finishes after it (its file, perhaps written over the new run's, removed)."""
    import threading
    from dataclasses import fields, replace

    from lmchallenge.games.spec import GameSpec
    from lmchallenge.model.spec import PredictorSpec
    from lmc_dist.partition import Partition
    from lmc_dist.worker import PartitionTask, StaleTask, evaluate_partition

    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    made = subprocess.run(run_args(corpus, run_dir, extra=RUN_OPTIONS), capture_output=True, timeout=300)
    assert made.returncode == 0, made.stderr.decode()
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert len(manifest["run"]) == 32
    entry = manifest["partitions"][0]
    partition = Partition(**{f.name: entry[f.name] for f in fields(Partition) if f.name in entry})
    (run_dir / "_temporary").mkdir()
    committed = run_dir / entry["file"]
    kept = committed.rename(tmp_path / "kept")      # so that the partition is computed
    task = PartitionTask(run_dir=str(run_dir), input_path=str(corpus), corpus_name=str(corpus),
                         corpus_format="text", partition=partition, game=GameSpec("wc"),
                         predictor=PredictorSpec(toy_model_command("--delay", "0.05")), train=False,
                         run="another run")
    with pytest.raises(StaleTask, match="now holds another run"):
        evaluate_partition(task)
    assert not Path(task.output_path).exists()
    # one that finishes after the takeover
    running = replace(task, run=manifest["run"])
    failed: list[BaseException] = []
    thread = threading.Thread(target=lambda: failed.extend(_raised(evaluate_partition, running)))
    thread.start()
    time.sleep(0.5)
    (run_dir / "_manifest.json").write_text(json.dumps(dict(manifest, run="taken over")))
    thread.join(120)
    assert [type(e) for e in failed] == [StaleTask] and not Path(task.output_path).exists()
    # and a --resume of the same run takes what its own killed client's tasks made
    (run_dir / "_manifest.json").write_text(json.dumps(manifest))
    kept.rename(committed)
    assert evaluate_partition(replace(running, game=GameSpec("we"))).rows == entry["rows"]


def test_a_part_file_in_a_run_dir_started_anew_is_not_taken_for_the_new_run_s(tmp_path):
    """A run dir whose run has no partition done is started anew; a part file in place then
    (one written late by a task of the run before, of another game) was taken as the new
    run's partition, which passed for complete with the other game's rows."""
    small, large = tagged_corpus(tmp_path / "small.txt", 4), tagged_corpus(tmp_path / "large.txt", 30)
    run_dir = tmp_path / "run"
    failed = subprocess.run([str(BIN / "lmc-dist"), "run", "no-such-model-command", "we", "--input",
                             str(small), "--run-dir", str(run_dir), *RUN_OPTIONS],
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2 and len(partition_lines(run_dir)) < 4
    other = tmp_path / "other"
    made = subprocess.run(run_args(large, other, game="wc", extra=RUN_OPTIONS), capture_output=True,
                          text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    (run_dir / "_temporary").mkdir(exist_ok=True)
    shutil.copy(other / "part-00005.parquet", run_dir / "_temporary" / "part-00005.parquet")
    again = subprocess.run(run_args(large, run_dir, extra=RUN_OPTIONS), capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "holds a run none of whose partitions is done: starting it anew" in again.stderr
    assert f"{run_dir / '_temporary' / 'part-00005.parquet'}: of an earlier run in the run dir, not " \
           "this one's: removed" in again.stderr
    assert concatenated(run_dir) == lmc_run(["we"], large)


def _raised(function, *args) -> list[BaseException]:
    try:
        function(*args)
    except BaseException as e:  # noqa: BLE001 - reported to the test's thread
        return [e]
    return []


def test_a_run_killed_after_its_commit_point_is_tidied_by_resume(tmp_path):
    """Killed between the manifest's "finished" (the commit point) and the removal of the note
    and _temporary/: lmc's readers take the run as finished, pandas still refuses it, and
    ``--resume`` tidies up without changing the run (its finish time included)."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    argv = run_args(corpus, run_dir, extra=RUN_OPTIONS)
    assert subprocess.run(argv, capture_output=True, timeout=300).returncode == 0
    finished = json.loads((run_dir / "_manifest.json").read_text())["finished"]
    stats = json.loads(lmc("stats", str(run_dir)).stdout)
    (run_dir / "RUN-NOT-FINISHED.parquet").write_text("left by a run killed after its commit point\n")
    (run_dir / "_temporary").mkdir()
    assert json.loads(lmc("stats", str(run_dir)).stdout) == stats
    with pytest.raises(Exception, match="RUN-NOT-FINISHED"):
        pd.read_parquet(run_dir)
    resumed = subprocess.run(argv + ["--resume"], capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("part-")) == \
        [".lmc-dist.lock", "_manifest.json", "_stats.json"]
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert manifest["finished"] == finished
    assert len(pd.read_parquet(run_dir)) == sum(p["rows"] for p in manifest["partitions"]) > 0


def test_a_run_that_writes_nothing_leaves_no_run_dir(tmp_path):
    """A mistyped corpus (or an unreachable scheduler) stops the run before it writes
    anything: the run dir it made is gone again, an existing one is left as it was."""
    made = tmp_path / "new"
    failed = lmc_dist("run", toy_model_command(), "we", "--input", str(tmp_path / "nope.txt"),
                      "--run-dir", str(made), "--no-progress")
    assert failed.returncode == 2 and "nope.txt: no such file" in failed.stderr
    assert not made.exists()
    failed = lmc_dist("run", toy_model_command(), "we", "--input", "nosuchproto://nope.txt",
                      "--run-dir", str(made), "--no-progress")
    assert (failed.returncode, failed.stderr) == (2, "lmc-dist: error: nosuchproto://nope.txt: "
                                                     "cannot read it here: Protocol not known: "
                                                     "nosuchproto\n")
    assert not made.exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    again = lmc_dist("run", toy_model_command(), "we", "--input", str(tmp_path / "nope.txt"),
                     "--run-dir", str(existing), "--no-progress")
    assert again.returncode == 2 and list(existing.iterdir()) == []
    bad = tmp_path / "bad.txt"      # found while the corpus is scanned: the run had begun
    bad.write_bytes(b"fine\n\xff not UTF-8\n")
    packed = tmp_path / "bad.txt.gz"    # (decompressed into the run dir first: review)
    packed.write_bytes(gzip.compress(bad.read_bytes()))
    for corpus in (bad, packed):
        for run_dir in (made, existing):
            scanned = lmc_dist("run", toy_model_command(), "we", "--input", str(corpus),
                               "--run-dir", str(run_dir), "--workers", "1", "--no-progress")
            assert scanned.returncode == 2
            assert scanned.stderr == (f"lmc-dist: error: {corpus}:2: not valid UTF-8 (byte 0 "
                                      "of the line)\n")
        assert not made.exists() and list(existing.iterdir()) == []


def test_a_run_dir_is_marked_unfinished_from_the_run_s_start(tmp_path):
    """Before the corpus is scanned and the cluster reached (seconds for a large corpus, up
    to Dask's connect timeout for a --scheduler), the run dir held only the hidden lock:
    ``pandas.read_parquet`` read it as an empty log and ``lmc stats`` said 'not a log'.  The
    unfinished-run marker is there from the start; a run that fails there takes it away."""
    run_dir = tmp_path / "run"
    corpus = tagged_corpus(tmp_path / "corpus.txt", 5)
    argv = [str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input", str(corpus),
            "--run-dir", str(run_dir), "--scheduler", "tcp://127.0.0.1:9", "--no-progress"]
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "6s"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (run_dir / "RUN-NOT-FINISHED.parquet").exists() and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(os.listdir(run_dir)) == [".lmc-dist.lock", "RUN-NOT-FINISHED.parquet",
                                               "_temporary"]
        refused = lmc("stats", str(run_dir))
        with pytest.raises(Exception, match="RUN-NOT-FINISHED.parquet"):
            pd.read_parquet(run_dir)
        assert proc.poll() is None, "the run ended before it could be read"
    finally:
        _, stderr = proc.communicate(timeout=120)
    assert refused.returncode == 2
    assert refused.stderr == (f"lmc: error: {run_dir}: unfinished lmc-dist run: it has not "
                              "recorded its partitions yet (it is starting, or it stopped while "
                              "it started: run it again)\n")
    assert proc.returncode == 2 and "cannot reach the Dask scheduler" in stderr.decode()
    assert not run_dir.exists()


def test_a_run_dir_given_as_a_link_to_a_directory_not_yet_made(tmp_path):
    """``--run-dir`` naming a symbolic link whose target does not exist yet makes the target,
    as ``lmc run --output`` through such a link does (it said "cannot write the run dir: File
    exists"); a run that writes nothing takes the target away again and keeps the link."""
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "runs" / "first")
    failed = lmc_dist("run", toy_model_command(), "we", "--input", str(tmp_path / "nope.txt"),
                      "--run-dir", str(link), "--no-progress")
    assert failed.returncode == 2 and "nope.txt: no such file" in failed.stderr
    assert link.is_symlink() and not (tmp_path / "runs" / "first").exists()
    corpus = tagged_corpus(tmp_path / "corpus.txt", 5)
    result = subprocess.run(run_args(corpus, link, extra=RUN_OPTIONS), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and (tmp_path / "runs" / "first" / "_manifest.json").is_file()
    assert concatenated(link) == lmc_run(["we"], corpus)


def test_a_lock_on_a_removed_lock_file_is_taken_again(tmp_path, monkeypatch):
    """A run that opened the lock file just before its holder removed it (and the holder's
    directory) gets the lock on that file once the holder ends: it must not count, or two
    runs would write at once. ``_acquire`` sees the file is no longer at the path and locks
    the one there."""
    import fcntl

    from lmc_dist import commit
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = run_dir / ".lmc-dist.lock"
    lock.write_text("")
    stale = os.open(lock, os.O_RDWR)
    lock.unlink()                       # the holder removed it, then let go of its lock
    real_open, opened = os.open, []

    def first_the_stale_one(path, flags, mode=0o777):
        opened.append(path)
        return stale if len(opened) == 1 else real_open(path, flags, mode)

    monkeypatch.setattr(commit.os, "open", first_the_stale_one)
    fd = commit._acquire(str(run_dir))
    monkeypatch.setattr(commit.os, "open", real_open)
    assert len(opened) == 2 and os.path.samestat(os.fstat(fd), os.stat(lock))  # the new file
    other = os.open(lock, os.O_RDWR)
    with pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)   # the lock at the path is held
    for descriptor in (other, fd):
        os.close(descriptor)


def test_a_partition_whose_file_cannot_be_read_back_leaves_no_file(tmp_path, monkeypatch):
    """A part file is a finished partition to every reader and to ``--resume``: if its
    statistics cannot be read back, it must not stay (it would be skipped for ever)."""
    from lmchallenge.errors import InputError
    from lmchallenge.games.spec import GameSpec
    from lmchallenge.model.spec import PredictorSpec
    from lmc_dist import worker
    from lmc_dist.partition import scan

    corpus = tagged_corpus(tmp_path / "corpus.txt", 5)
    run_dir = tmp_path / "run"
    (run_dir / "_temporary").mkdir(parents=True)
    partition = scan(str(corpus), "text", 10_000, False, str(tmp_path)).partitions[0]
    task = worker.PartitionTask(run_dir=str(run_dir), input_path=str(corpus),
                                corpus_name=str(corpus), corpus_format="text",
                                partition=partition, game=GameSpec("we"),
                                predictor=PredictorSpec(toy_model_command()), train=False)

    def unreadable(path):
        raise InputError(path, 1, "cannot be read back")

    monkeypatch.setattr(worker, "state_of_log", unreadable)
    with pytest.raises(InputError, match="cannot be read back"):
        worker.evaluate_partition(task)
    assert not os.path.exists(task.output_path) and list((run_dir / "_temporary").iterdir()) == []
    monkeypatch.undo()
    outcome = worker.evaluate_partition(task)     # computed anew, as --resume would
    assert outcome.rows > 0 and os.path.exists(task.output_path)
    worker.current_pool().close_all()


def finished_run(tmp_path: Path) -> tuple[list[str], Path, str]:
    """A finished run of 20 lines: its argv, run dir and ``lmc stats`` output."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    argv = run_args(corpus, run_dir, extra=RUN_OPTIONS)
    assert subprocess.run(argv, capture_output=True, timeout=300).returncode == 0
    return argv, run_dir, lmc("stats", str(run_dir)).stdout


@pytest.mark.parametrize("damage, sizes", [
    ("truncated", "recorded"), ("emptied", "not recorded"),
    pytest.param("truncated", "not recorded", marks=pytest.mark.slow),
    pytest.param("emptied", "recorded", marks=pytest.mark.slow)])
def test_resume_makes_again_a_finished_part_that_cannot_be_read(tmp_path, damage, sizes):
    """A part file damaged after the run (a disk error, a copy cut short) failed every
    ``--resume`` with "fix the cause": it is computed again, with a warning (where the
    manifest records no sizes, an older lmc-dist's, the worker finds it unreadable)."""
    argv, run_dir, before = finished_run(tmp_path)
    part = run_dir / "part-00002.parquet"
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    recorded = manifest["partitions"][2]["bytes"]
    rows = [p["rows"] for p in manifest["partitions"]]
    if sizes == "not recorded":
        for entry in manifest["partitions"]:
            del entry["bytes"]
        (run_dir / "_manifest.json").write_text(json.dumps(manifest))
    size = 100 if damage == "truncated" else 0
    with open(part, "r+b") as f:
        f.truncate(size)
    assert lmc("stats", str(run_dir)).returncode == 2
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    if sizes == "recorded":
        assert (f"WARNING\t{part}: {size} bytes where the run's manifest records {recorded} "
                "(changed after it was written): computing it again\n") in resumed.stderr
    else:
        assert "partition 2: its file cannot be read (" in resumed.stderr
        assert "): computing it again" in resumed.stderr
    # made again by this invocation, not kept (QA: "0 tokens ..., 0 partitions")
    assert re.search(rf"^lmc-dist: {rows[2]:,} tokens in [0-9.]+ s \([0-9,]+ tokens/s\) on 1 "
                     rf"worker, 1 partition; {sum(rows) - rows[2]:,} tokens in {len(rows) - 1} "
                     r"partitions were done before", resumed.stderr, re.M), resumed.stderr
    assert lmc("stats", str(run_dir)).stdout == before
    assert sorted(p.name for p in run_dir.iterdir() if p.name != ".lmc-dist.lock") == sorted(
        ["_manifest.json", "_stats.json", *(f"part-{i:05d}.parquet" for i in range(len(
            json.loads((run_dir / "_manifest.json").read_text())["partitions"])))])


def test_resume_warns_when_a_file_the_model_names_changed(tmp_path):
    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    weights = tmp_path / "weights.bin"     # named on the command line (the toy model writes
    weights.write_bytes(b"v1")             # its count file beside it, not to it)
    run_dir = tmp_path / "run"
    argv = run_args(corpus, run_dir, count_file=weights, extra=RUN_OPTIONS)
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    recorded = json.loads((run_dir / "_manifest.json").read_text())["predictor_files"]
    assert recorded[str(weights)] == {"bytes": 2, "modified_ns": weights.stat().st_mtime_ns}
    same = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert same.returncode == 0 and "changed since this run began" not in same.stderr
    weights.write_bytes(b"v2, retrained")
    changed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert changed.returncode == 0, changed.stderr
    assert (f"WARNING\t{weights} changed since this run began (another size or modification "
            "time): its finished partitions were made with the file as it was; if the model is "
            "not the same, use a new --run-dir\n") in changed.stderr
    assert json.loads((run_dir / "_manifest.json").read_text())["predictor_files"] == recorded


def test_the_files_a_model_names_are_its_data_not_its_program(tmp_path):
    from lmchallenge.model.files import named_files

    weights, program, folder = tmp_path / "m.lm", tmp_path / "serve", tmp_path / "hf"
    weights.write_bytes(b"12345")
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "plain-dir").mkdir()
    found = named_files(f"{program} serve '{weights}' --cache {tmp_path / 'plain-dir'} --nope",
                        {"model": str(folder), "nested": {"vocab": [str(weights)]}})
    assert set(found) == {str(weights), str(folder)}
    assert found[str(weights)]["bytes"] == 5 and found[str(folder)]["bytes"] == 12
    assert named_files("unbalanced 'quote") == {}


def test_resume_of_a_run_dir_that_does_not_exist_is_refused(tmp_path):
    corpus = tagged_corpus(tmp_path / "corpus.txt", 5)
    run_dir = tmp_path / "typo"
    result = subprocess.run([*run_args(corpus, run_dir, extra=RUN_OPTIONS), "--resume"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr == (f"lmc-dist: error: {run_dir}: no such run dir to resume (without "
                             "--resume, lmc-dist run starts a run there)\n")
    assert not run_dir.exists()


def test_a_part_deleted_after_the_run_is_refused_then_made_again(tmp_path):
    """A finished run's part deleted: every reader refuses the run dir, saying what to do
    (QA: it said only that the part was missing), and --resume makes it again."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    argv = run_args(corpus, run_dir, extra=RUN_OPTIONS)
    assert subprocess.run(argv, capture_output=True, timeout=300).returncode == 0
    before = lmc("stats", str(run_dir)).stdout
    part = run_dir / json.loads((run_dir / "_manifest.json").read_text())["partitions"][1]["file"]
    part.unlink()
    refused = lmc("stats", str(run_dir))
    assert (refused.returncode, refused.stderr) == (2, (
        f"lmc: error: {part}: missing: the run's manifest lists it as finished: finish the run "
        "with `lmc-dist run ... --resume`\n"))
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert part.exists() and lmc("stats", str(run_dir)).stdout == before


@pytest.mark.parametrize("form", ["parquet", "jsonl", pytest.param("parquet, sizes not recorded",
                                                                   marks=pytest.mark.slow)])
def test_a_part_changed_after_the_run_is_refused_then_made_again(tmp_path, form):
    """A part cut short (still a valid file) or edited after the run: its size is not the
    one recorded (a .jsonl.gz part with a line taken out and compressed again gave other
    statistics, exit 0); a manifest of an lmc-dist that did not record sizes still has the
    Parquet part's rows checked."""
    import gzip

    import pyarrow.parquet as pq

    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir = tmp_path / "run"
    jsonl = form == "jsonl"
    argv = run_args(corpus, run_dir, extra=RUN_OPTIONS + (("--part-format", "jsonl") if jsonl
                                                         else ()))
    assert subprocess.run(argv, capture_output=True, timeout=300).returncode == 0
    before = lmc("stats", str(run_dir)).stdout
    manifest_path = run_dir / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    entry = manifest["partitions"][1]
    part = run_dir / entry["file"]
    assert entry["bytes"] == part.stat().st_size
    if jsonl:
        lines = gzip.decompress(part.read_bytes()).splitlines(keepends=True)
        part.write_bytes(gzip.compress(b"".join(lines[:-1])))
    else:
        pq.write_table(pq.read_table(part).slice(0, 1), part)     # still a valid Parquet file
    if form == "parquet, sizes not recorded":
        for record in manifest["partitions"]:
            del record["bytes"]
        manifest_path.write_text(json.dumps(manifest))
        why = f"1 rows where the run's manifest records {entry['rows']}"
    else:
        why = f"{part.stat().st_size} bytes where the run's manifest records {entry['bytes']}"
    refused = lmc("stats", str(run_dir))
    assert refused.returncode == 2
    assert refused.stderr == (f"lmc: error: {part}: {why} (changed after it was written): "
                              "delete it and finish the run with `lmc-dist run ... --resume`\n")
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.startswith(f"WARNING\t{part}: {why} (changed after it was written): "
                                     "computing it again\n")
    assert lmc("stats", str(run_dir)).stdout == before


@pytest.mark.parametrize("edit, why", [
    ("drop the third", "partition record 2 is not partition 2: the manifest was edited"),
    ("drop the last", "its partitions hold {kept} characters of the corpus' {total}: the "
                      "manifest was edited"),
    ("drop all", "its partitions hold 0 characters of the corpus' {total}: the manifest was "
                 "edited"),
    ("move a start", "partition 1 starts at byte {moved} of the corpus, the one before it ends "
                     "at {end}: the manifest was edited")])
def test_a_manifest_that_lost_a_partition_is_refused(tmp_path, edit, why):
    """A manifest that lost a partition's record gave the statistics of the others, exit 0
    (QA): the records must be the partitions 0, 1, ... of the whole corpus."""
    _, run_dir, _ = finished_run(tmp_path)
    path = run_dir / "_manifest.json"
    manifest = json.loads(path.read_text())
    records = manifest["partitions"]
    total = manifest["characters"]
    end = records[0]["end"]
    if edit == "drop the third":
        del records[2]
    elif edit == "drop the last":
        del records[-1]
    elif edit == "drop all":
        records.clear()
    else:
        records[1]["start"] += 1
    path.write_text(json.dumps(manifest))
    for reader in (lmc, lmc_dist):
        refused = reader("stats", str(run_dir))
        assert refused.returncode == 2
        assert refused.stderr.endswith(f"error: {path}: " + why.format(
            kept=sum(r["characters"] for r in records), total=total, moved=end + 1, end=end)
            + "\n"), refused.stderr


def test_a_part_file_the_manifest_does_not_list_is_refused(tmp_path):
    """A part file left in a finished run dir (a copy, another run's) was skipped by lmc's
    readers and read by pandas': both cannot be right, so lmc says which file it is."""
    _, run_dir, before = finished_run(tmp_path)
    stray = run_dir / "part-00099.parquet"
    shutil.copy(run_dir / "part-00001.parquet", stray)
    refused = lmc("stats", str(run_dir))
    assert (refused.returncode, refused.stderr) == (
        2, f"lmc: error: {stray}: not a partition of this run (its manifest does not list it): "
           "move it out of the run dir\n")
    stray.unlink()
    assert lmc("stats", str(run_dir)).stdout == before


def test_a_directory_of_parts_without_a_manifest_must_hold_every_number(tmp_path):
    """QA: a copy of a run's part files that lost one (no manifest to say what the log is)
    was read as the whole log, exit 0.  The parts themselves may still be given."""
    _, run_dir, before = finished_run(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    for part in run_dir.glob("part-*"):
        shutil.copy(part, copy / part.name)
    assert lmc("stats", str(copy)).stdout.replace(str(copy), str(run_dir)) == before
    (copy / "part-00001.parquet").unlink()
    refused = lmc("stats", str(copy))
    assert (refused.returncode, refused.stderr) == (
        2, f"lmc: error: {copy}: its part files are not numbered from part-00000 without a gap "
           "(part-00001 is missing) and it has no _manifest.json to say what the log is: give the "
           "part files themselves to read only those\n")
    named = lmc("stats", *sorted(map(str, copy.glob("part-*"))))
    assert named.returncode == 0, named.stderr


def test_a_resume_counts_only_what_it_made_in_its_rate(tmp_path):
    argv, run_dir, _ = finished_run(tmp_path)
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    rows = [p["rows"] for p in manifest["partitions"]]
    first = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert re.search(rf"^lmc-dist: 0 tokens in [0-9.]+ s \(0 tokens/s\) on 1 worker, 0 partitions; "
                     rf"{sum(rows):,} tokens in {len(rows)} partitions were done before "
                     rf"\(--resume\): {sum(rows):,} tokens in all; run dir ", first.stderr, re.M)
    timings = [{k: p[k] for k in ("began", "elapsed", "worker")} for p in manifest["partitions"]]
    assert timings == [{k: p[k] for k in ("began", "elapsed", "worker")} for p in json.loads(
        (run_dir / "_manifest.json").read_text())["partitions"]]     # not the reading back's
    (run_dir / manifest["partitions"][1]["file"]).unlink()     # one partition to make again
    with open(run_dir / "_manifest.json", "w") as f:
        manifest["finished"] = None
        json.dump(manifest, f)
    again = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert re.search(rf"^lmc-dist: {rows[1]:,} tokens in [0-9.]+ s \([0-9,]+ tokens/s\) on 1 "
                     rf"worker, 1 partition; {sum(rows) - rows[1]:,} tokens in {len(rows) - 1} "
                     rf"partitions were done before \(--resume\): {sum(rows):,} tokens in all",
                     again.stderr, re.M)
    # a part file in place that the manifest did not record as done (an interrupted run): it
    # was done before, with its rows, not made by this invocation (QA: counted in its rate)
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    manifest["finished"] = None
    manifest["partitions"][0] = {k: v for k, v in manifest["partitions"][0].items()
                                 if k not in ("rows", "bytes")} | {"state": "pending"}
    (run_dir / "_manifest.json").write_text(json.dumps(manifest))
    third = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    assert re.search(rf"^lmc-dist: 0 tokens in [0-9.]+ s \(0 tokens/s\) on 1 worker, 0 partitions; "
                     rf"{sum(rows):,} tokens in {len(rows)} partitions were done before ",
                     third.stderr, re.M), third.stderr


@pytest.mark.parametrize("change", [": >", "echo 'L9999 one more line' >>"])
def test_a_corpus_changed_under_lmc_dist_is_never_committed(tmp_path, change):
    """Truncated while the partitions are read, the partitions read after it failed to see
    their lines and were committed empty (exit 0, a log of part of the corpus); appended to,
    every partition reads its bytes as scanned, and the run commits nothing either."""
    from test_run import _changing_model

    corpus = tagged_corpus(tmp_path / "corpus.txt", 40)
    run_dir = tmp_path / "run"
    result = subprocess.run([str(BIN / "lmc-dist"), "run", _changing_model(tmp_path, corpus, change),
                             "we", "--input", str(corpus), "--run-dir", str(run_dir), "--workers",
                             "1", "--partition-chars", "300", "--retries", "0", "--no-progress",
                             "--output", str(tmp_path / "log.jsonl")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    if change == ": >":
        assert re.search(r"^lmc-dist: error: partition \d+ \(lines (\d+)-\d+ of .*\): "
                         + re.escape(str(corpus)) + r":\1: changed since this run scanned it: "
                         "other bytes from this line on than the scan found; start the run again "
                         "in a new --run-dir$", result.stderr, re.M), result.stderr
    else:
        assert result.stderr == (f"lmc-dist: error: {corpus}: changed while lmc-dist read it "
                                 "(another size or modification time, or replaced): its log would "
                                 "be of no one version of the corpus; if only its modification "
                                 "time changed (a touch), --resume finishes the run (it checks the "
                                 "corpus' content), else start again in a new --run-dir\n")
    assert not (run_dir / "_stats.json").exists() and not (tmp_path / "log.jsonl").exists()
    assert lmc("stats", str(run_dir)).returncode == 2


def test_a_run_stopped_after_its_commit_says_it_is_complete(tmp_path):
    """SIGTERM (a batch scheduler's time limit) after the commit, here while --output waits
    for a reader: the run is complete, and the last line said to rerun with --resume."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 20)
    run_dir, fifo = tmp_path / "run", tmp_path / "log.jsonl"
    os.mkfifo(fifo)      # nobody reads it: writing --output waits there, after the commit
    proc = start(run_args(corpus, run_dir, extra=("--workers", "1", "--no-progress",
                                                  "--output", str(fifo))))
    deadline = time.monotonic() + 120
    while not (run_dir / "_stats.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert err.decode().endswith(
        f"lmc-dist: terminated; the run had committed: it is complete in {run_dir} (statistics "
        f"in _stats.json); if {fifo} is not there, write it with `lmc convert {run_dir} -o "
        f"{fifo}`\n"), err.decode()
    assert lmc("stats", str(run_dir)).returncode == 0


def test_the_manifest_is_saved_as_partitions_end_within_a_tenth_of_the_time(tmp_path, monkeypatch):
    # QA: with 5,500 partitions the whole manifest, saved each time a partition ended, took
    # the client all its time (the run never ended; the manifest trailed by thousands)
    from lmc_dist import manifest as mf
    manifest = {"game": "we", "run": "r", "partitions": [
        {"index": i, "state": "pending", "file": f"part-{i:05d}.parquet"} for i in range(3)]}
    assert json.loads(mf.text(manifest)) == manifest
    assert json.loads(mf.text({"partitions": []})) == {"partitions": []}
    clock = [100.0]
    saved = []

    def slow_save(run_dir, m):        # each save takes 1 s of the clock
        clock[0] += 1.0
        saved.append(json.loads(mf.text(m)))

    monkeypatch.setattr(mf.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(mf, "save", slow_save)
    saver = mf.Saver(str(tmp_path))
    for i in range(3):
        manifest["partitions"][i]["state"] = "done"
        saver.changed(manifest)       # the first saved at once; the next 9 s later at the soonest
        clock[0] += 2.0
    assert len(saved) == 1 and saver.pending
    clock[0] += 5.0                   # 10 s after the first save ended
    saver.changed(manifest)
    assert len(saved) == 2 and not saver.pending
    assert saved[-1] == manifest
    manifest["finished"] = "now"
    saver.changed(manifest)
    saver.flush(manifest)
    assert saved[-1] == manifest and len(saved) == 3
    saver.flush(manifest)             # nothing pending: no save
    assert len(saved) == 3


def test_the_summary_line_writes_its_counts_with_thousands_separators():
    """As its rate was (QA: "25985 tokens in 6.5 s (3,990 tokens/s)")."""
    from lmc_dist.job import RunReport

    fresh = RunReport(stats={}, tokens=25985, seconds=6.5, workers=2, partitions=11)
    assert fresh.summary_line() == ("lmc-dist: 25,985 tokens in 6.5 s (3,998 tokens/s) on 2 "
                                    "workers, 11 partitions")
    resumed = RunReport(stats={}, tokens=1234567, seconds=2.0, workers=1, partitions=12,
                        kept_partitions=11, kept_tokens=1230000)
    assert resumed.summary_line() == (
        "lmc-dist: 4,567 tokens in 2.0 s (2,284 tokens/s) on 1 worker, 1 partition; 1,230,000 "
        "tokens in 11 partitions were done before (--resume): 1,234,567 tokens in all")

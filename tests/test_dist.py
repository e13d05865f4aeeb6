"""lmc-dist on a real Dask cluster: a `dask scheduler` and `dask worker` processes on 127.0.0.1.

The invariant under test (docs/architecture.md, invariant 2): for a deterministic model the concatenated log is
identical line for line to `lmc run` on the same input, whatever the number of workers and
the partition size, with a worker killed mid-run, and after `--resume`.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from conftest import BIN, DATA, PYTHON, environment_of, free_port, toy_model_command
from lmc_dist.resources import format_resources, parse_resources


class Cluster:
    """A scheduler and N single-threaded workers (no nanny, so SIGKILL really kills one)."""

    def __init__(self, workers: int, tmp: Path, worker_args: dict[int, list[str]] | None = None):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.scheduler = self._start([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--dashboard-address", ":0",
                                      "--no-show"], "scheduler")
        self.workers = [self.start_worker(i, (worker_args or {}).get(i, [])) for i in range(workers)]
        self.wait_for(workers)

    def _start(self, argv: list[str], name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                env={**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"})

    def start_worker(self, i: int, extra: list[str] = ()) -> subprocess.Popen:
        return self._start([str(BIN / "dask"), "worker", self.address, "--nthreads", "1",
                            "--no-nanny", "--host", "127.0.0.1", "--no-dashboard",
                            "--name", f"w{i}-{time.monotonic_ns()}", *extra], f"worker{i}")

    def wait_for(self, n: int) -> None:
        from distributed import Client
        if n == 0:      # the scheduler alone: up once it takes a client
            with Client(self.address, timeout=30):
                return
        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(n, timeout=60)

    def close(self) -> None:
        """The workers first, then the scheduler: a worker told to stop by SIGTERM and by its
        scheduler's closing at once may hang in Dask's shutdown (seen once, 20 s here)."""
        for group in (self.workers, [self.scheduler]):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@contextlib.contextmanager
def cluster(workers: int, tmp: Path, worker_args: dict[int, list[str]] | None = None):
    c = Cluster(workers, tmp, worker_args)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    with cluster(2, tmp_path_factory.mktemp("cluster2")) as c:
        yield c


def first_lines(corpus: Path, n: int, path: Path) -> Path:
    """``path``, holding the first ``n`` lines of ``corpus``."""
    with open(corpus, "rb") as f:
        path.write_bytes(b"".join(f.readline() for _ in range(n)))
    return path


def lmc_run(game_args: list[str], corpus: Path, extra: list[str] = ()) -> bytes:
    return subprocess.run([str(BIN / "lmc"), "run", *extra, toy_model_command(), *game_args, str(corpus)],
                          capture_output=True, check=True, timeout=300).stdout


def lmc_dist(args: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / "lmc-dist"), *args], capture_output=True, timeout=300, **kw)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr.decode())
    return result


def concatenated(run_dir: Path) -> bytes:
    out = run_dir.parent / (run_dir.name + ".jsonl")
    subprocess.run([str(BIN / "lmc"), "convert", str(run_dir), "-o", str(out)], check=True,
                   capture_output=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def commits(tmp_path_factory) -> Path:
    """400 rows of the rails commit corpus: many users, some heavy."""
    path = tmp_path_factory.mktemp("corpus") / "commits.jsonl"
    with open(DATA / "commits" / "rails.test.sample.jsonl", "rb") as f:
        path.write_bytes(b"".join(f.readline() for _ in range(400)))
    return path


@pytest.mark.parametrize("partition_chars, out_format", [(500, "parquet"), (4000, "parquet"),
                                                        (10**9, "parquet"), (4000, "jsonl")])
def test_embedded_cluster_matches_lmc_run(tmp_path, commits, partition_chars, out_format):
    expected = lmc_run(["wc", "-p"], commits)
    run_dir = tmp_path / "run"
    result = lmc_dist(["run", toy_model_command(), "wc", "-p", "--input", str(commits),
                       "--run-dir", str(run_dir), "--workers", "2", "--part-format", out_format,
                       "--partition-chars", str(partition_chars), "--output", str(tmp_path / "all.jsonl")])
    assert (tmp_path / "all.jsonl").read_bytes() == expected
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert all(p["state"] == "done" for p in manifest["partitions"])
    # each partition is placed on a time line: began (Unix time on its worker) + elapsed
    assert all(0 < p["began"] - time.time() + 600 < 600 and p["elapsed"] >= 0
               for p in manifest["partitions"])
    parts = sorted(run_dir.glob("part-*." + ("parquet" if out_format == "parquet" else "jsonl.gz")))
    assert len(parts) == len(manifest["partitions"])
    if partition_chars == 500:
        assert len(parts) > 20
    # _stats.json equals `lmc stats` on the concatenated log, and is what the command printed
    stats = json.loads((run_dir / "_stats.json").read_text())
    assert json.loads(result.stdout) == stats
    lmc_stats = json.loads(subprocess.run([str(BIN / "lmc"), "stats", str(tmp_path / "all.jsonl")],
                                          capture_output=True, check=True).stdout)
    lmc_stats.pop("log")
    assert stats == lmc_stats
    assert "tokens/s" in result.stderr.decode()


@pytest.mark.parametrize("args", [["we", "--train"], ["wc"]])
def test_the_built_in_model_in_the_workers_processes_writes_lmc_run_s_log(tmp_path, two_workers,
                                                                          args):
    """The built-in n-gram as ``module:Class`` (README: one process per worker, no pipe) gives
    the log `lmc run` writes with it served over the protocol (its answers, its training)."""
    commits = tmp_path / "commits.jsonl"    # every 8th row: 79 users
    with open(DATA / "commits" / "rails.test.sample.jsonl", "rb") as f:
        commits.write_bytes(b"".join(f.readlines()[::8]))
    model = tmp_path / "kjv.lm"
    subprocess.run([str(BIN / "lmc-ngram"), "train", str(DATA / "kjv" / "test.sample.txt"),
                    "-o", str(model)], check=True, capture_output=True, timeout=120)
    game, *flags = args
    expected = subprocess.run([str(BIN / "lmc"), "run", *flags, f"{BIN / 'lmc-ngram'} serve {model}",
                               game, str(commits)], capture_output=True, check=True, timeout=300).stdout
    lmc_dist(["run", "lmchallenge.model.ngram:NgramModel", game, *flags, "-o",
              json.dumps({"model": str(model)}), "--input", str(commits), "--run-dir",
              str(tmp_path / "run"), "--scheduler", two_workers.address, "--partition-chars", "2000",
              "--output", str(tmp_path / "all.jsonl")])
    manifest = json.loads((tmp_path / "run" / "_manifest.json").read_text())
    assert len(manifest["partitions"]) > 2
    assert (tmp_path / "all.jsonl").read_bytes() == expected
    assert len(expected.splitlines()) > 1000


def test_a_resume_with_other_options_of_a_python_model_is_refused(tmp_path):
    """A Python model's -o options were not part of the run's identity: a --resume with
    another model file or another top made one log of two models that passed for one (QA)."""
    model = tmp_path / "kjv.lm"
    subprocess.run([str(BIN / "lmc-ngram"), "train", str(DATA / "kjv" / "test.sample.txt"),
                    "-o", str(model)], check=True, capture_output=True, timeout=120)
    (tmp_path / "c.txt").write_text("in the beginning god created\n")
    run = ["run", "lmchallenge.model.ngram:NgramModel", "wc", "--input", str(tmp_path / "c.txt"),
           "--run-dir", str(tmp_path / "run"), "--workers", "1", "-o"]
    lmc_dist(run + [json.dumps({"model": str(model)})])
    manifest = json.loads((tmp_path / "run" / "_manifest.json").read_text())
    assert manifest["predictor_options"] == {"model": str(model)}
    other = lmc_dist(run + [json.dumps({"model": str(model), "top": 2}), "--resume"], check=False)
    assert other.returncode == 2
    assert other.stderr.decode().startswith(
        "lmc-dist: error: cannot resume: the model's -o options differ from the run in this "
        "directory (predictor_options {'model': ")
    lmc_dist(run + [json.dumps({"model": str(model)}), "--resume"])   # the same: resumed


def test_wr_s_word_list_is_read_before_any_work_and_a_resume_with_another_is_refused(tmp_path):
    """The wr vocabulary was recorded by its path only: a --resume after the list changed
    made one log of two candidate sets, exit 0; and a list that is not UTF-8 failed at every
    partition once the cluster and the models had started, blamed on the corpus (QA)."""
    (tmp_path / "c.txt").write_text("in the beginning god created the heaven\n" * 3)
    words = (DATA / "vocab" / "american-english.no-possessive.txt").read_bytes().splitlines(True)
    vocab = tmp_path / "words.txt"
    vocab.write_bytes(b"".join(words[:3000]) + b"caf\xff\n")
    run = ["run", "lmc-ngram serve " + str(DATA / "nonexistent.lm"), "wr", str(vocab), "--input",
           str(tmp_path / "c.txt"), "--run-dir", str(tmp_path / "run"), "--workers", "1"]
    bad = lmc_dist(run, check=False)
    assert (bad.returncode, bad.stderr.decode()) == (
        2, f"lmc-dist: error: {vocab}:3001: not valid UTF-8 (byte 3 of the line)\n")
    assert not (tmp_path / "run").exists()
    model = tmp_path / "kjv.lm"
    subprocess.run([str(BIN / "lmc-ngram"), "train", str(DATA / "kjv" / "test.sample.txt"),
                    "-o", str(model)], check=True, capture_output=True, timeout=120)
    run[1] = f"{BIN / 'lmc-ngram'} serve {model}"
    vocab.write_bytes(b"".join(words[:3000]))
    lmc_dist(run)
    manifest = json.loads((tmp_path / "run" / "_manifest.json").read_text())
    assert manifest["vocabulary_sha256"] == hashlib.sha256(vocab.read_bytes()).hexdigest()
    vocab.write_bytes(b"".join(words[:1000]))    # the same path, other words
    other = lmc_dist(run + ["--resume"], check=False)
    assert other.returncode == 2
    assert other.stderr.decode().startswith(
        "lmc-dist: error: cannot resume: the vocabulary (its contents) differs from the run in "
        "this directory (vocabulary_sha256 '")
    vocab.write_bytes(b"".join(words[:3000]))
    lmc_dist(run + ["--resume"])   # the same list: resumed


def test_a_run_dir_of_an_lmc_dist_without_predictor_options_resumes():
    from lmc_dist.manifest import check_resumable
    old = {"game": "we", "predictor": "m:M", "partitions": []}
    check_resumable(old, {**old, "predictor_options": {"top": 2}})
    with pytest.raises(Exception, match=r"-o options differ from the run in this directory "
                                         r"\(predictor_options \{\} there, \{'top': 2\} now\)"):
        check_resumable({**old, "predictor_options": {}}, {**old, "predictor_options": {"top": 2}})


def test_a_resume_that_differs_says_what_in_a_users_words():
    """It said the manifest's key alone (`corpus_sha256 differs`); now what the user changed
    too (`the corpus (its contents) differs ... (corpus_sha256 'a' there, 'b' now)`)."""
    from lmc_dist.manifest import IDENTITY_DIFFERS, IDENTITY_KEYS, check_resumable
    assert set(IDENTITY_DIFFERS) == set(IDENTITY_KEYS)
    old = {key: "a" for key in IDENTITY_KEYS} | {"partitions": []}
    for key in IDENTITY_KEYS:
        with pytest.raises(Exception) as caught:
            check_resumable(old, {**old, key: "b"})
        assert str(caught.value) == (f"cannot resume: {IDENTITY_DIFFERS[key]} from the run in "
                                     f"this directory ({key} 'a' there, 'b' now); use a new "
                                     "--run-dir")


def test_what_a_python_model_prints_on_the_embedded_cluster_is_not_in_the_statistics(tmp_path):
    """The embedded cluster's workers wrote to the client's standard output: the statistics
    lmc-dist prints there came mixed with a model's prints (QA)."""
    (tmp_path / "printer.py").write_text(
        "class Printer:\n"
        "    def predict(self, context, candidates):\n"
        "        print('predicting', context, flush=True)\n        return [(c, -1.0) for c in candidates]\n")
    (tmp_path / "c.txt").write_text("in the beginning\n")
    result = lmc_dist(["run", "printer:Printer", "we", "--input", "c.txt", "--run-dir", "run",
                       "--workers", "1"], cwd=tmp_path)
    assert json.loads(result.stdout) == json.loads((tmp_path / "run" / "_stats.json").read_text())
    assert "predicting in the " in result.stderr.decode()


def test_a_python_model_s_exception_that_does_not_unpickle_is_one_line(tmp_path):
    """Dask sent the model's own exception with the error, and the client could not unpickle
    it (here its __init__ takes two arguments; or its module is on the workers only): kilobytes
    of pickle bytes and a traceback instead of the error (QA)."""
    (tmp_path / "errmodel.py").write_text(
        "class MyErr(Exception):\n"
        "    def __init__(self, a, b):\n        super().__init__(f'custom {a} {b}')\n"
        "class Unpicklable:\n"
        "    def predict(self, context, candidates):\n        raise MyErr(1, 2)\n")
    (tmp_path / "c.txt").write_text("in the beginning\n")
    result = lmc_dist(["run", "errmodel:Unpicklable", "we", "--input", "c.txt", "--run-dir", "run",
                       "--workers", "1", "--retries", "0"], check=False, cwd=tmp_path)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "Traceback" not in err and "\\x80" not in err and len(err) < 2000, err
    assert "model 'errmodel:Unpicklable': predict raised MyErr: custom 1 2" in err


def test_a_python_model_that_crashes_its_workers_is_named_with_its_partition(tmp_path):
    """QA: a segmentation fault in a Python model (it runs in the worker's process) gave
    Dask's KilledWorker text ("Inspecting worker logs is often a good next step ...") and
    the scheduler's own ERROR line; now the partition's lines, that the workers died and
    why they may have, once, and each crash's Python stack with the model's frame."""
    (tmp_path / "crashing.py").write_text(
        "import ctypes\n"
        "class Crashing:\n"
        "    def predict(self, context, candidates):\n"
        "        if 'of' in context:\n"
        "            ctypes.string_at(0)\n"
        "        return [(c, -1.0) for c in candidates]\n")
    (tmp_path / "c.txt").write_text("in the beginning\n" * 20 + "the book of it\n")
    result = lmc_dist(["run", "crashing:Crashing", "we", "--input", "c.txt", "--run-dir", "run",
                       "--workers", "1", "--partition-chars", "200", "--no-progress"],
                      check=False, cwd=tmp_path)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert re.search(r"^lmc-dist: error: partition \d+ \(lines \d+-21 of c\.txt, first message "
                     r"\d+\): the worker evaluating it died, 4 times \(on 4 workers: Dask's "
                     r"distributed\.scheduler\.allowed-failures is 3\); the Python model "
                     r"'crashing:Crashing' runs in the worker's own process, so a crash in it ",
                     err, re.M), err
    assert err.count('crashing.py", line 5 in predict\n') == 4, err
    assert "KilledWorker" not in err and "marked as failed" not in err, err
    assert re.search(r"^lmc-dist: error: 1 of \d+ partitions failed", err, re.M), err


def test_a_python_model_that_crashes_at_once_stops_the_run(tmp_path):
    """QA: a Python model that ended its worker's process at its first request had every
    partition kill 4 workers (60 restarts for 15 partitions) and said so once per partition;
    now two partitions whose workers all died, before any succeeded, stop the run, said once."""
    (tmp_path / "ending.py").write_text(
        "import os\n"
        "class Ending:\n"
        "    def predict(self, context, candidates):\n"
        "        os._exit(3)\n")
    (tmp_path / "c.txt").write_text("in the beginning was the word\n" * 40)
    result = lmc_dist(["run", "ending:Ending", "we", "--input", "c.txt", "--run-dir", "run",
                       "--workers", "2", "--partition-chars", "100", "--no-progress"],
                      check=False, cwd=tmp_path)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    said = err.splitlines()     # only lmc-dist's lines: not the scheduler's broadcast to a
    assert len(said) == 3, err  # dead worker, nor a worker restarted as the cluster closes
    assert re.fullmatch(r"lmc-dist: error: partition \d+ \(lines .*\): the worker evaluating it "
                        r"died, 4 times .* the Python model 'ending:Ending' runs in the worker's "
                        r"own process, .*", said[0]), err
    assert re.fullmatch(r"\(the same error stopped 1 more partition: \d+\)", said[1]), err
    assert re.fullmatch(r"lmc-dist: error: the workers evaluating the first partitions died, so "
                        r"the run stopped: 2 partitions failed, \d+ were not run and none is kept "
                        r"in run: fix the cause and run again \(the next run there does not stop "
                        r"so\)", said[2]), err
    manifest = json.loads((tmp_path / "run" / "_manifest.json").read_text())
    states = [p["state"] for p in manifest["partitions"]]
    assert states.count("failed") == 2 and "done" not in states, states


@pytest.mark.parametrize("workers, partition_chars, args", [
    (1, 3000, ["wc"]),
    (2, 3000, ["we", "--train"]),
    (2, 700, ["ce"]),
])
def test_scheduler_cluster_matches_lmc_run(tmp_path, commits, two_workers, workers,
                                           partition_chars, args):
    game, *flags = args
    expected = lmc_run([game], commits, extra=flags)
    run_dir = tmp_path / "run"
    lmc_dist(["run", toy_model_command(), game, *flags, "--input", str(commits), "--run-dir",
              str(run_dir), "--scheduler", two_workers.address, "--partition-chars",
              str(partition_chars), "--part-format", "jsonl"])
    assert concatenated(run_dir) == expected


def test_a_relative_model_path_naming_another_file_on_the_workers_is_refused(tmp_path, two_workers):
    """QA: workers in another working directory resolved the model's relative path to another
    model there; the run passed with its numbers, its manifest naming the client's file."""
    corpus = first_lines(DATA / "kjv" / "test.sample.txt", 40, tmp_path / "c.txt")
    ngram = str(BIN / "lmc-ngram")
    for where, lines in ((tmp_path, 40), (two_workers.tmp, 20)):    # the client's, the workers'
        subprocess.run([ngram, "train", str(first_lines(corpus, lines, where / "t.txt")), "-o",
                        str(where / "m.lm")], check=True, capture_output=True, timeout=120)
    args = ["run", f"{ngram} serve m.lm", "we", "--input", "c.txt", "--scheduler",
            two_workers.address, "--retries", "0"]
    try:
        result = lmc_dist([*args, "--run-dir", "run"], check=False, cwd=tmp_path)
        assert result.returncode == 2 and result.stdout == b""
        size = (two_workers.tmp / "m.lm").stat().st_size
        assert (f"): the model's file 'm.lm' is {two_workers.tmp / 'm.lm'} there, {size:,} bytes, "
                f"not the file of the client ({(tmp_path / 'm.lm').stat().st_size:,} bytes): give "
                "the model's file paths absolute, on storage every worker reaches at the same "
                "path\n") in result.stderr.decode()
        assert not list((tmp_path / "run").glob("part-*"))
        # the same file there (a copy): the run is the client's
        shutil.copy(tmp_path / "m.lm", two_workers.tmp / "m.lm")
        lmc_dist([*args, "--run-dir", "again"], cwd=tmp_path)
        expected = subprocess.run([str(BIN / "lmc"), "run", f"{ngram} serve {tmp_path / 'm.lm'}",
                                   "we", str(corpus)], capture_output=True, check=True).stdout
        assert concatenated(tmp_path / "again") == expected
    finally:
        (two_workers.tmp / "m.lm").unlink()


def test_plain_text_gz_is_split_between_messages(tmp_path, two_workers):
    corpus = tmp_path / "kjv.txt.gz"
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus.write_bytes(gzip.compress(b"".join(f.readline() for _ in range(300))))
    expected = lmc_run(["we"], corpus)
    run_dir = tmp_path / "run"
    # a relative run dir and output (QA: the workers, in another working directory, were given
    # the parts' relative paths to convert for --output, which failed after the run committed)
    lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir", "run",
              "--scheduler", two_workers.address, "--partition-chars", "5000",
              "--output", "all.jsonl"], cwd=tmp_path)
    assert (tmp_path / "all.jsonl").read_bytes() == expected
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert len(manifest["partitions"]) > 3
    assert [p["first_message"] for p in manifest["partitions"]][:2] == [0, manifest["partitions"][0]["messages"]]
    assert concatenated(run_dir) == expected
    # the decompressed copy the workers read is gone with the run's end: no corpus-sized file
    assert not (run_dir / "_input.plain").exists()
    frame = pd.read_parquet(run_dir)
    assert len(frame) == expected.count(b"\n")
    assert str(frame["message"].dtype) == "int64" and str(frame["logp"].dtype) == "float64"
    assert frame["user"].isna().all()


def test_wr_stats_match_lmc_run(tmp_path, commits, two_workers):
    vocab = str(DATA / "vocab" / "american-english.txt")
    commits = first_lines(commits, 80, tmp_path / "commits80.jsonl")   # wr is the costly game
    expected = lmc_run(["wr", vocab], commits)
    (tmp_path / "all.jsonl").write_bytes(expected)
    run_dir = tmp_path / "run"
    lmc_dist(["run", toy_model_command(), "wr", vocab, "--input", str(commits), "--run-dir",
              str(run_dir), "--scheduler", two_workers.address, "--partition-chars", "1500"])
    assert concatenated(run_dir) == expected
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert len(manifest["partitions"]) >= 3      # (the fit's state merged across partitions)
    ours = json.loads((run_dir / "_stats.json").read_text())
    single = json.loads(subprocess.run([str(BIN / "lmc"), "stats", str(tmp_path / "all.jsonl")],
                                       capture_output=True, check=True).stdout)
    single.pop("log")
    assert ours == single


def done_partitions(run_dir: Path) -> int:
    """The partitions ``run_dir``'s manifest records as done (0 before it is written)."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        return sum(p["state"] == "done" for p in
                   json.loads((run_dir / "_manifest.json").read_text())["partitions"])
    return 0


def wait_for_done(run_dir: Path, n: int, proc: subprocess.Popen) -> int:
    """Wait until ``run_dir`` has ``n`` partitions done (failing if ``proc``, its run, ends
    first or 120 s pass); the number done."""
    deadline = time.monotonic() + 120
    while done_partitions(run_dir) < n:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1].decode()
        time.sleep(0.02)
    return done_partitions(run_dir)


def models_of(marker: str) -> list[int]:
    """The process ids of toy models whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
    return found


def test_runs_sharing_a_scheduler_never_stop_each_other_s_models(tmp_path, commits, two_workers):
    """A run's start registered the workers' model pool anew, which stopped the models of
    a run going on: its partitions failed, the model "killed by signal 9"."""
    expected = lmc_run(["wc"], commits)
    first_dir, gate = tmp_path / "first", tmp_path / "gate"
    gate.touch()        # a model of the first run stops mid-partition until the second is over
    first = subprocess.Popen([str(BIN / "lmc-dist"), "run",
                              toy_model_command("--pause-while-exists", str(gate), "--after", "2000"),
                              "wc", "--input", str(commits), "--run-dir", str(first_dir),
                              "--scheduler", two_workers.address, "--partition-chars", "1500",
                              "--retries", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not Path(f"{gate}.paused").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read().decode()
        time.sleep(0.05)
    lmc_dist(["run", toy_model_command(), "we", "--input", str(first_lines(commits, 30, tmp_path / "c.jsonl")),
              "--run-dir", str(tmp_path / "second"), "--scheduler", two_workers.address])
    assert first.poll() is None         # the second run was over while the first went on
    gate.unlink()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()
    assert b"signal" not in err
    assert concatenated(first_dir) == expected


def test_the_models_of_a_killed_client_are_finished_when_the_next_run_starts(tmp_path, commits,
                                                                             two_workers):
    marker = "--delay 0.00051"
    first = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command(*marker.split()),
                              "wc", "--input", str(commits), "--run-dir", str(tmp_path / "first"),
                              "--scheduler", two_workers.address, "--partition-chars", "1500"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_done(tmp_path / "first", 1, first)
    first.kill()
    first.wait()
    assert models_of(marker)        # left running by the killed client's tasks
    lmc_dist(["run", toy_model_command(), "we", "--input", str(first_lines(commits, 30, tmp_path / "c.jsonl")),
              "--run-dir", str(tmp_path / "second"), "--scheduler", two_workers.address])
    deadline = time.monotonic() + 60
    while models_of(marker) and time.monotonic() < deadline:  # a task running on finishes first
        time.sleep(0.1)
    assert not models_of(marker)


def test_the_models_of_an_interrupted_run_are_finished_without_another_run(tmp_path, commits,
                                                                            two_workers):
    # QA: after Ctrl-C on a shared cluster each worker kept an idle model process (75 MB; a
    # GPU model's memory) until the next run started
    marker = "--delay 0.00052"
    first = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command(*marker.split()),
                              "wc", "--input", str(commits), "--run-dir", str(tmp_path / "first"),
                              "--scheduler", two_workers.address, "--partition-chars", "1500",
                              "--no-progress"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_done(tmp_path / "first", 1, first)
    assert models_of(marker)
    os.killpg(first.pid, signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err.decode()
    deadline = time.monotonic() + 60
    while models_of(marker) and time.monotonic() < deadline:  # a task running on finishes first
        time.sleep(0.1)
    assert not models_of(marker)


def _can_unshare_mounts() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare_mounts(), reason="needs unshare -m (root) for a worker's read-only view")
def test_a_run_dir_a_worker_cannot_write_is_said_once_and_stops_the_run(tmp_path, commits):
    # QA: a run dir read-only on the workers failed every partition after its model started,
    # one message each (each naming its own temporary file), and all were tried and retried
    shared = tmp_path / "shared"
    shared.mkdir()
    with cluster(0, tmp_path) as c:
        mount = (f"mount --bind {shlex.quote(str(shared))} {shlex.quote(str(shared))} && "
                 f"mount -o remount,ro,bind {shlex.quote(str(shared))}")
        worker = shlex.join([str(BIN / "dask"), "worker", c.address, "--nthreads", "1", "--no-nanny",
                             "--host", "127.0.0.1", "--no-dashboard"])
        c.workers.append(c._start(["unshare", "-m", "sh", "-c", f"{mount} && exec {worker}"], "worker-ro"))
        c.wait_for(1)
        run_dir = shared / "run"
        counts = tmp_path / "requests"
        result = lmc_dist(["run", toy_model_command("--count-file", str(counts)), "we", "--input",
                           str(commits), "--run-dir", str(run_dir), "--scheduler", c.address,
                           "--partition-chars", "1500", "--no-progress"], check=False)
    err = result.stderr.decode()
    lines = [line for line in err.splitlines() if not line.startswith("WARNING\tdask dashboard")]
    total = len(json.loads((run_dir / "_manifest.json").read_text())["partitions"])
    assert result.returncode == 2 and total > 3, err
    assert lines[0].startswith("lmc-dist: error: partition 0 (lines 1-")
    assert lines[0].endswith(f"cannot write into the run dir ({run_dir}/_temporary: Read-only file "
                             "system): --run-dir must be a directory every worker can write, at "
                             "the same path (shared storage)")
    assert lines[1:] == ["(the same error stopped 1 more partition: 1)",
                         f"lmc-dist: error: a worker could not write into the run dir, so the run "
                         f"stopped: 2 partitions failed, {total - 2} were not run and none is kept in "
                         f"{run_dir}: fix the cause and run again (the next run there does not stop so)"]
    assert not counts.exists()      # checked before any model started


def test_errors_of_a_file_are_alike_whatever_the_temporary_file_named():
    from lmc_dist.failures import error_kind, fails_at_start
    from lmc_dist.worker import RunDirError, check_writable_here
    full = [OSError(28, f"Failed to write '/runs/x/_temporary/.part-0000{i}.parquet.tmp-vm-{i}'")
            for i in range(2)]
    assert error_kind(full[0]) == error_kind(full[1]) != error_kind(OSError(5, "I/O error"))
    blocked = Path(__file__)        # a file, not a directory: nothing can be made under it
    with pytest.raises(RunDirError, match=r"cannot write into the run dir \(.*/_temporary: Not a "
                                          r"directory\): --run-dir must be a directory every worker"):
        check_writable_here(str(blocked / "_temporary"))
    try:
        check_writable_here(str(blocked / "_temporary"))
    except RunDirError as e:
        assert fails_at_start(e)


def test_a_run_starting_while_orphans_are_looked_for_is_never_taken_for_gone():
    """The workers' clients are asked for before the scheduler's (QA: a client that
    connected between the scheduler's answer and the workers' was taken for gone, and its
    model finished after each of its tasks)."""
    from lmc_dist import pool, worker
    calls = []

    class Recording:
        def run(self, function, *args, on_error="raise"):
            calls.append((function.__name__, args))
            return {"w1": ["killed", "going-on"], "w2": ["starting"]} \
                if function is worker.model_clients else {"w1": [], "w2": []}

        def run_on_scheduler(self, function):
            calls.append(("scheduler", ()))
            return ["going-on", "starting", "new"]

    pool.finish_orphans(Recording(), SimpleNamespace(scheduler="tcp://127.0.0.1:1"))
    assert calls == [("model_clients", ()), ("scheduler", ()), ("finish_orphaned_models", (["killed"],))]


@pytest.mark.parametrize("ended", [False, True])
def test_a_task_of_a_stopped_run_that_starts_after_its_release_finishes_its_model(ended):
    """CI: after Ctrl-C, a task the scheduler had handed out before its cancellation started
    after the run had released its models, took the client for alive again, and left its
    model idle on the worker until the next run.  A client that said it ended stays so; one
    only found gone (it may have been cut off a while) is taken back by its next task."""
    from lmchallenge.model.spec import PredictorSpec
    from lmc_dist.worker import ModelPool
    pool = ModelPool()
    pool.finish_orphans({"stopped"}, ended=ended)
    with pool.using(PredictorSpec(toy_model_command()), "we", "stopped") as (model, _):
        assert model.predict("The", ["book"])
    assert pool.clients() == (set() if ended else {"stopped"})
    assert model._proc.poll() is not None if ended else model._proc.poll() is None
    pool.close_all()


def test_a_run_s_end_finishes_its_models_off_the_worker_s_event_loop():
    """Finishing a model may take its --timeout (one that does not exit when its input ends):
    the worker's event loop (heartbeats, other runs' tasks on a shared cluster) goes on
    meanwhile, and the errors found come back to the run."""
    import asyncio
    from lmc_dist import worker
    release = threading.Event()
    asked = []

    class Pool:
        def finish_idle(self, spec, client):
            asked.append((spec, client))
            release.wait(10)
            return ["out of step"]

    async def a_run_s_end():
        finishing = asyncio.ensure_future(worker.finish_models(
            "spec", "client-1", dask_worker=SimpleNamespace(plugins={worker.PLUGIN_NAME: Pool()})))
        await asyncio.sleep(0.2)     # the loop runs other work while the model is finished
        assert asked == [("spec", "client-1")] and not finishing.done()
        release.set()
        return await finishing

    assert asyncio.run(a_run_s_end()) == ["out of step"]


@pytest.mark.slow
def test_worker_killed_mid_run(tmp_path, commits):
    expected = lmc_run(["wc", "-p"], commits)
    run_dir = tmp_path / "run"
    with cluster(2, tmp_path) as c:
        proc = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command("--delay", "0.001"),
                                 "wc", "-p", "--input", str(commits), "--run-dir", str(run_dir),
                                 "--scheduler", c.address, "--partition-chars", "1500"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        done = wait_for_done(run_dir, 2, proc)
        os.kill(c.workers[0].pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        manifest = json.loads((run_dir / "_manifest.json").read_text())
        assert len({p["worker"] for p in manifest["partitions"]}) == 2
        assert 2 <= done < len(manifest["partitions"]) - 2    # killed mid-run
    assert concatenated(run_dir) == expected
    assert not [p for p in run_dir.iterdir() if ".tmp" in p.name]


def test_model_crash_then_resume(tmp_path, two_workers):
    corpus = tmp_path / "kjv.txt"
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(60)))
    flag = tmp_path / "crash"
    flag.write_text("")
    model = toy_model_command("--crash-if-exists", str(flag), "--crash-word", "Zara")
    run_dir = tmp_path / "run"
    args = ["run", model, "we", "--input", str(corpus), "--run-dir", str(run_dir),
            "--scheduler", two_workers.address, "--partition-chars", "600", "--retries", "1"]
    failed = lmc_dist(args, check=False)
    err = failed.stderr.decode()
    assert failed.returncode == 2
    assert "partitions failed" in err and "--resume" in err
    assert "exited with code 3" in err and "toy model: crashing on 'Zara'" in err
    assert "while evaluating user None, message 2, token" in err
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    states = [p["state"] for p in manifest["partitions"]]
    assert "failed" in states and "done" in states
    assert not (run_dir / "_stats.json").exists()
    flag.unlink()
    lmc_dist(args + ["--resume"])
    assert concatenated(run_dir) == lmc_run(["we"], corpus)
    again = lmc_dist(args, check=False)
    # finished: nothing to --resume (QA: it said to, and --resume printed 0 tokens)
    assert again.returncode == 2 and again.stderr.decode().endswith(
        f"lmc-dist: error: {run_dir} already holds a finished run (its statistics are in "
        "_stats.json): give a new --run-dir\n")


@pytest.mark.slow
def test_scheduler_lost_mid_run_is_one_line_then_resume_on_a_new_cluster(tmp_path):
    """The scheduler killed while partitions run: one error line at once (not a trace after
    Dask's 30-second reconnection attempt), the finished partitions recorded; --resume on a
    new cluster finishes the run with lmc run's log."""
    corpus = tmp_path / "kjv.txt"
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(90)))
    run_dir = tmp_path / "run"
    model = toy_model_command("--delay", "0.003")
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with cluster(1, tmp_path / "first") as c:
        args = ["run", model, "we", "--input", str(corpus), "--run-dir", str(run_dir),
                "--partition-chars", "300", "--no-progress"]
        proc = subprocess.Popen([str(BIN / "lmc-dist"), *args, "--scheduler", c.address],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not list((run_dir / "_temporary").glob("part-*")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no partition finished"
            time.sleep(0.02)
        c.scheduler.kill()
        started = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - started
    err = err.decode()
    lines = [line for line in err.splitlines() if not line.startswith("WARNING\tdask dashboard")]
    assert proc.returncode == 2, err
    assert len(lines) == 1 and lines[0].startswith(
        f"lmc-dist: error: lost the Dask cluster at {c.address} during the run; "), err
    assert lines[0].endswith(f"partitions are done and kept in {run_dir}: run again with --resume "
                             "when the cluster is back"), err
    assert took < 20, f"reported after {took:.0f} s"
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    kept = list((run_dir / "_temporary").glob("part-*"))   # the worker may finish one more
    said = int(lines[0].split("during the run; ")[1].split(" of ")[0])
    assert f"; {said} of {len(manifest['partitions'])} partitions are done" in lines[0]
    assert 0 < said <= len(kept) < len(manifest["partitions"])
    assert not (run_dir / "_stats.json").exists()
    with cluster(1, tmp_path / "second") as c2:
        lmc_dist(args + ["--scheduler", c2.address, "--resume"])
    assert concatenated(run_dir) == lmc_run(["we"], corpus)


LOSE_THE_SCHEDULER_AT = """
import os, signal, sys, time
from lmc_dist import cli, job

where, pid = sys.argv[1], int(sys.argv[2])
owner = job.reduce if where == "global_stats" else job
real = getattr(owner, where)

def killing_first(*args, **kwargs):
    client = args[0] if where == "global_stats" else args[4]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while client.status == "running":
        assert time.monotonic() < deadline, "the client did not see its scheduler go"
        time.sleep(0.01)
    began = time.monotonic()
    try:
        return real(*args, **kwargs)
    finally:   # not after Dask's 30-second attempt to reconnect
        assert time.monotonic() - began < 10, f"{where} waited {time.monotonic() - began:.0f} s"

setattr(owner, where, killing_first)
cli.main(sys.argv[3:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["global_stats", "write_output"])
def test_scheduler_lost_after_the_last_partition_is_one_line(tmp_path, where):
    """The scheduler killed after every partition is done: while the statistics are reduced
    (then --resume on a new cluster commits the run), or while --output is written (the run
    is committed; `lmc convert`, as the message says, writes the log)."""
    corpus = tmp_path / "kjv.txt"
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(40)))
    run_dir, output = tmp_path / "run", tmp_path / "whole.jsonl"
    args = ["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir", str(run_dir),
            "--partition-chars", "600", "--no-progress", "--output", str(output)]
    (tmp_path / "first").mkdir()
    with cluster(1, tmp_path / "first") as c:
        result = subprocess.run([str(PYTHON), "-c", LOSE_THE_SCHEDULER_AT, where, str(c.scheduler.pid),
                                 *args, "--scheduler", c.address], capture_output=True, timeout=120)
    err = result.stderr.decode()
    lines = [line for line in err.splitlines() if not line.startswith("WARNING\tdask dashboard")]
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    n = len(manifest["partitions"])
    assert n > 2 and all(p["state"] == "done" for p in manifest["partitions"])
    assert result.returncode == 2 and not output.exists(), err
    expected = lmc_run(["we"], corpus)
    if where == "global_stats":
        assert lines == [f"lmc-dist: error: lost the Dask cluster at {c.address} after all {n} "
                         f"partitions were done, before the statistics; they are kept in {run_dir}: "
                         "run again with --resume when the cluster is back"], err
        assert not manifest["finished"] and not (run_dir / "_stats.json").exists()
        (tmp_path / "second").mkdir()
        with cluster(1, tmp_path / "second") as c2:
            lmc_dist(args + ["--scheduler", c2.address, "--resume"])
        assert output.read_bytes() == expected
    else:
        assert lines == [f"lmc-dist: error: lost the Dask cluster at {c.address} while writing "
                         f"{output}; the run in {run_dir} is complete (statistics in _stats.json): "
                         "write the log with "
                         f"`lmc convert {run_dir} -o {output}`"], err
        assert manifest["finished"] and (run_dir / "_stats.json").exists()
        subprocess.run([str(BIN / "lmc"), "convert", str(run_dir), "-o", str(output)], check=True)
        assert output.read_bytes() == expected
    whole = json.loads(subprocess.run([str(BIN / "lmc"), "stats", str(output)], capture_output=True,
                                      check=True).stdout)
    whole.pop("log")
    assert json.loads((run_dir / "_stats.json").read_text()) == whole


def test_bad_corpus_stops_before_any_model(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "a"}\n{"user": "x"}\n')
    result = lmc_dist(["run", toy_model_command(), "wc", "--input", str(corpus), "--run-dir",
                       str(tmp_path / "run"), "--workers", "1"], check=False)
    assert result.returncode == 2
    assert f'{corpus}:2: row has no "text"' in result.stderr.decode()
    assert not list((tmp_path / "run").glob("part-*"))


def test_a_corpus_without_a_token_is_said_to_give_an_empty_log(tmp_path):
    """As lmc run says it (QA: lmc-dist gave its zero statistics in silence, as if the model
    had been evaluated); the run is complete, exit 0, as lmc run's."""
    empty, blank = tmp_path / "empty.txt", tmp_path / "blank.txt"
    empty.write_bytes(b"")
    blank.write_bytes(b"\n  \n\t\n")
    for corpus, said in ((empty, "it holds no message"),
                         (blank, "none of its 3 messages has a token to evaluate")):
        run_dir = tmp_path / f"run-{corpus.stem}"
        result = lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus),
                           "--run-dir", str(run_dir), "--workers", "1"])
        lines = result.stderr.decode().splitlines()
        assert lines[0] == f"WARNING\t{corpus}: {said}: the log is empty"
        assert lines[1].startswith("lmc-dist: 0 tokens in ")
        assert json.loads((run_dir / "_stats.json").read_text())["users"] == 0


def integer_users(commits: Path, path: Path, rows: int = 150, string_from: int | None = None) -> Path:
    """The first ``rows`` rows of ``commits`` with users numbered (as strings from row
    ``string_from`` on)."""
    numbers: dict[str, int] = {}
    with open(commits, encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
        for i, line in zip(range(rows), f):
            row = json.loads(line)
            user = numbers.setdefault(row.pop("userId"), len(numbers))
            row["user"] = str(user) if string_from is not None and i >= string_from else user
            out.write(json.dumps(row) + "\n")
    return path


def test_integer_users_are_integers_in_the_parquet_parts(tmp_path, commits):
    """{"user": 7} is logged as 7 by lmc run: the parts hold it as int64 and the run's log and
    statistics (fingerprint included) are lmc run's."""
    corpus = integer_users(commits, tmp_path / "int.jsonl")
    expected = lmc_run(["we"], corpus)
    run_dir = tmp_path / "run"
    result = lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                       str(run_dir), "--workers", "2", "--partition-chars", "2000"])
    assert concatenated(run_dir) == expected
    frame = pd.read_parquet(run_dir)
    assert frame["user"].dtype == "int64" and frame["user"].iloc[0] == 0
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert manifest["user_type"] == "integer" and len(manifest["partitions"]) > 2
    (tmp_path / "all.jsonl").write_bytes(expected)
    lmc_stats = json.loads(subprocess.run([str(BIN / "lmc"), "stats", str(tmp_path / "all.jsonl")],
                                          capture_output=True, check=True).stdout)
    lmc_stats.pop("log")
    assert json.loads(result.stdout) == lmc_stats


def test_users_of_both_types_stop_a_parquet_run_before_any_model(tmp_path, commits):
    corpus = integer_users(commits, tmp_path / "mixed.jsonl", rows=40, string_from=30)
    result = lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                       str(tmp_path / "run"), "--workers", "1"], check=False)
    assert result.returncode == 2
    user = json.loads(corpus.read_text().splitlines()[30])["user"]
    assert (f"{corpus}:31: user {user!r} is a string but user 0 of line 1 is an integer: the user "
            f"column of a Parquet log holds one type") in result.stderr.decode()
    assert "--part-format jsonl" in result.stderr.decode()
    assert not (tmp_path / "run").exists()
    # as jsonl parts the users keep their types, and the log is lmc run's
    lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
              str(tmp_path / "run"), "--workers", "1", "--part-format", "jsonl"])
    assert concatenated(tmp_path / "run") == lmc_run(["we"], corpus)


@pytest.mark.parametrize("users, args, said", [
    ([7, 2**70], [], "user 1180591620717411303424 is an integer beyond 64 bits, more than the user column "
                     "of a Parquet log holds (int64); write the parts as jsonl (--part-format jsonl), or give "
                     "the users as strings"),
    ([7, "7"], ["--part-format", "jsonl", "--output", "all.parquet"],
     "user '7' is a string but user 7 of line 1 is an integer: the user column of a Parquet log holds one "
     "type (1 and \"1\" are different users); give every user as a string or every one as an integer, or "
     "write --output as .jsonl or .jsonl.gz"),
])
def test_users_no_parquet_log_holds_stop_the_run_before_any_model(tmp_path, users, args, said):
    """Checked on the scan, before the run: a user beyond int64 in Parquet parts (was a raw
    OverflowError in its partition, retried, and a run dir that could never finish), and
    users of both types for a Parquet --output of jsonl parts (was an error after the run)."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"user": u, "text": "in the beginning"}) + "\n" for u in users))
    result = lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                       str(tmp_path / "run"), "--workers", "1", *args], check=False, cwd=tmp_path)
    assert (result.returncode, result.stderr.decode()) == (2, f"lmc-dist: error: {corpus}:2: {said}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_the_corpus_is_scanned_while_the_cluster_starts(tmp_path, monkeypatch):
    """The scan does not wait for the cluster, nor the cluster for the scan: each of the two
    (stand-ins around the real scan) waits until the other has begun, which only a scan
    running beside the cluster's start lets both do."""
    import threading

    from lmc_dist import job as job_module
    from lmc_dist.spec import DistJob
    from lmchallenge.games.spec import GameSpec
    from lmchallenge.model.spec import PredictorSpec

    connecting, scanned = threading.Event(), threading.Event()
    real_scan = job_module.scan

    def scan(*args, **kwargs):
        assert connecting.wait(10), "the scan waited for the cluster"
        result = real_scan(*args, **kwargs)
        scanned.set()
        return result

    @contextlib.contextmanager
    def connect(job):
        connecting.set()
        assert scanned.wait(10), "the cluster waited for the scan"
        yield "the client"

    monkeypatch.setattr(job_module, "scan", scan)
    monkeypatch.setattr(job_module, "connect", connect)
    corpus = tmp_path / "c.txt"
    corpus.write_text("one message\ntwo\nthree\n")
    job = DistJob(predictor=PredictorSpec(toy_model_command()), game=GameSpec("we"),
                             input=str(corpus), run_dir=str(tmp_path / "run"), workers=1)
    with job_module.scanned_while_connecting(job, None) as (client, result):
        assert client == "the client"
        assert (result.messages, result.characters) == (3, 19)


def _embedded_settings() -> dict:
    """The worker's settings of EMBEDDED_CONFIG (those for the nanny's environment as the
    worker's environment has them)."""
    import dask
    from lmc_dist.cluster import EMBEDDED_CONFIG
    environment = "distributed.nanny.pre-spawn-environ."
    return {key: os.environ.get(key[len(environment):]) if key.startswith(environment)
            else dask.config.get(key) for key in EMBEDDED_CONFIG}


def test_embedded_cluster_workers_run_with_its_quiet_settings():
    """The worker processes of the embedded cluster see EMBEDDED_CONFIG (less background CPU
    beside the models), and the settings do not leak into the calling process."""
    from types import SimpleNamespace

    import dask
    from lmc_dist.cluster import EMBEDDED_CONFIG, connect
    with connect(SimpleNamespace(scheduler=None, workers=1, resources=None)) as client:
        seen = client.run(_embedded_settings)
    assert list(seen.values()) == [EMBEDDED_CONFIG]
    assert dask.config.get("distributed.worker.memory.monitor-interval") == "100ms"


def test_a_scheduler_is_asked_its_size_on_the_run_s_one_connection(tmp_path, commits, two_workers):
    """Without --workers the partitions are sized for the scheduler's workers (about 6 a
    worker, lmc_dist.sizing), asked on the one client connection the run makes."""
    log = Path(two_workers.tmp) / "scheduler.log"
    before = log.read_text()
    run_dir = tmp_path / "run"
    lmc_dist(["run", toy_model_command(), "we", "--input", str(commits), "--run-dir", str(run_dir),
              "--scheduler", two_workers.address])
    connections = log.read_text()[len(before):].count("Receive client connection")
    assert connections == 1
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert manifest["partition_size"]["workers"] == 2
    assert concatenated(run_dir) == lmc_run(["we"], commits)


def test_workers_freeze_their_heap_after_a_partition(tmp_path, commits, two_workers):
    """After its first partition a worker's objects (modules, Dask, game data) sit in the
    collector's permanent generation, so that full passes set off by the games' allocations
    do not traverse them (ModelPool.freeze_heap_once)."""
    import gc

    from distributed import Client
    lmc_dist(["run", toy_model_command(), "wc", "-p", "--input", str(commits), "--run-dir",
              str(tmp_path / "run"), "--scheduler", two_workers.address, "--partition-chars", "2000"])
    manifest = json.loads((tmp_path / "run" / "_manifest.json").read_text())
    with Client(two_workers.address) as client:
        frozen = client.run(gc.get_freeze_count)
    ran = {p["worker"] for p in manifest["partitions"]}
    assert ran and ran <= set(frozen)
    assert all(frozen[worker] > 10_000 for worker in ran)


def test_partitions_needing_a_resource_run_only_on_the_workers_declaring_it(tmp_path, commits):
    """``--resources GPU=1``: of two workers, only the one started with ``--resources GPU=1``
    runs partitions (the manifest names the worker of each); the log is lmc run's."""
    expected = lmc_run(["wc", "-p"], commits)
    with cluster(2, tmp_path, {0: ["--resources", "GPU=1"]}) as c:
        from distributed import Client
        with Client(c.address, timeout=30) as client:
            workers = client.scheduler_info()["workers"]
        gpu = [address for address, info in workers.items() if info.get("resources") == {"GPU": 1}]
        assert len(gpu) == 1
        run_dir = tmp_path / "run"
        lmc_dist(["run", toy_model_command(), "wc", "-p", "--input", str(commits), "--run-dir", str(run_dir),
                  "--scheduler", c.address, "--resources", "GPU=1", "--partition-chars", "2000"])
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert len(manifest["partitions"]) > 3
    assert {p["worker"] for p in manifest["partitions"]} == set(gpu)
    assert concatenated(run_dir) == expected


def test_a_resource_no_worker_declares_is_a_clean_error(two_workers, tmp_path, commits):
    result = lmc_dist(["run", toy_model_command(), "we", "--input", str(commits), "--run-dir",
                       str(tmp_path / "run"), "--scheduler", two_workers.address, "--resources", "GPU=1"],
                      check=False)
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"lmc-dist: error: no worker of the Dask cluster at {two_workers.address} declares the resources "
        "GPU=1 that --resources asks for (2 workers); start workers with "
        "`dask worker SCHEDULER --resources \"GPU=1\"`\n")
    assert not (tmp_path / "run" / "_manifest.json").exists()     # nothing to resume: a plain rerun


def test_the_embedded_cluster_declares_the_resources(tmp_path, commits):
    expected = lmc_run(["we"], commits)
    run_dir = tmp_path / "run"
    lmc_dist(["run", toy_model_command(), "we", "--input", str(commits), "--run-dir", str(run_dir),
              "--workers", "2", "--resources", "GPU=1", "--partition-chars", "4000"])
    assert concatenated(run_dir) == expected


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs to leave one out")
def test_the_embedded_cluster_has_a_worker_per_cpu_the_run_may_use(tmp_path, commits):
    """QA: under ``taskset -c 0`` (or a container's CPU quota) the embedded cluster started a
    worker per CPU of the machine, each with its model, on the one CPU allowed."""
    one = min(os.sched_getaffinity(0))
    result = lmc_dist(["run", toy_model_command(), "we", "--input", str(commits),
                       "--run-dir", str(tmp_path / "run"), "--partition-chars", "4000"],
                      preexec_fn=lambda: os.sched_setaffinity(0, {one}))
    err = result.stderr.decode()
    assert re.search(r" on 1 worker, \d+ partitions;", err), err
    assert concatenated(tmp_path / "run") == lmc_run(["we"], commits)


@pytest.mark.parametrize("text, message", [
    ("GPU", "'GPU' is not NAME=AMOUNT with a positive AMOUNT (e.g. GPU=1)"),
    ("GPU=0", "'GPU=0' is not NAME=AMOUNT with a positive AMOUNT (e.g. GPU=1)"),
    ("GPU=1,GPU=2", "GPU is given twice"),
])
def test_bad_resources_are_a_usage_error(tmp_path, commits, text, message):
    result = lmc_dist(["run", toy_model_command(), "we", "--input", str(commits), "--run-dir",
                       str(tmp_path / "run"), "--resources", text], check=False)
    assert result.returncode == 2
    assert f"Invalid value for '--resources': {message}" in result.stderr.decode()
    assert not (tmp_path / "run").exists()


def test_resources_parse_as_dask_writes_them():
    assert parse_resources("GPU=1, MEMORY=8e9") == {"GPU": 1.0, "MEMORY": 8e9}
    assert format_resources({"GPU": 1.0, "MEMORY": 8e9}) == "GPU=1 MEMORY=8e+09"


PAIRS_MODEL = """import sys
pending = 0
for line in sys.stdin:
    if line.startswith("predict"):
        pending += 1
        if pending == 2:  # answers requests two at a time
            sys.stdout.write("x\\t-1.0\\n" * 2)
            sys.stdout.flush()
            pending = 0
"""


@pytest.mark.slow
def test_the_window_reaches_the_workers_models(tmp_path):
    """--window: a model that answers two requests at a time waits for ever with 1 in flight."""
    (tmp_path / "pairs.py").write_text(PAIRS_MODEL)
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c d\n")
    args = ["run", f"{PYTHON} {tmp_path / 'pairs.py'}", "we", "--input", str(corpus),
            "--workers", "1", "--timeout", "3", "--start-timeout", "3", "--retries", "0",
            "--no-progress"]
    hung = lmc_dist(args + ["--run-dir", str(tmp_path / "one"), "--window", "1"], check=False)
    assert hung.returncode == 2
    assert "no answer within 3 s" in hung.stderr.decode()
    lmc_dist(args + ["--run-dir", str(tmp_path / "two"), "--window", "2"])
    assert concatenated(tmp_path / "two").count(b"\n") == 4


def test_the_models_of_workers_compute_on_one_thread(tmp_path):
    """A model process in a worker, embedded or started by ``dask worker`` (with its nanny,
    the default), gets the one-thread settings Dask's nanny gives every worker
    (``distributed.nanny.pre-spawn-environ``), which torch and the BLAS libraries read: one
    core per worker's model (docs/neural.md, deploy/README.md)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n")
    with cluster(1, tmp_path, {0: ["--nanny"]}) as nannied:
        for where, extra in (("embedded", ["--workers", "1"]),
                             ("scheduler", ["--scheduler", nannied.address])):
            seen = model_environments(tmp_path / where, corpus, extra)
            assert seen, where
            for env in seen:
                assert (env.get("OMP_NUM_THREADS"), env.get("MKL_NUM_THREADS"),
                        env.get("OPENBLAS_NUM_THREADS")) == ("1", "1", "1"), where


def model_environments(directory: Path, corpus: Path, extra: list[str]) -> list[dict[str, str]]:
    """The environment of each model process an ``lmc-dist run`` of ``we`` started."""
    directory.mkdir()
    model = f"sh -c 'env > {directory}/$$.env; exec {toy_model_command()}'"
    lmc_dist(["run", model, "we", "--input", str(corpus), "--run-dir", str(directory / "run"),
              "--no-progress", *extra])
    return [environment_of(path) for path in directory.glob("*.env")]


@pytest.mark.slow
def test_a_scheduler_without_workers_is_said_and_the_run_goes_on_when_one_comes(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"".join((DATA / "kjv" / "test.sample.txt").read_bytes()
                                .splitlines(keepends=True)[:20]))
    with cluster(0, tmp_path) as c:
        proc = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command(), "we",
                                 "--input", str(corpus), "--run-dir", str(tmp_path / "rd"),
                                 "--scheduler", c.address, "--workers", "1", "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        deadline = threading.Timer(60, proc.kill)   # no warning: the run would wait for ever
        deadline.start()
        for line in proc.stderr:          # the warning comes after about 5 s without workers
            lines.append(line)
            if "no Dask worker" in line:
                break
        deadline.cancel()
        assert lines and lines[-1] == (f"WARNING\tno Dask worker is connected to the Dask cluster at "
                             f"{c.address}: the run waits for one (`dask worker {c.address}`)\n")
        c.workers.append(c.start_worker(0))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out)["entropy"]["hit"] > 0


@pytest.mark.slow
def test_a_scheduler_that_stops_answering_is_said_and_the_run_goes_on_when_it_answers(tmp_path):
    """A scheduler stopped mid-run (SIGSTOP: its connections stay open, as when its host is
    swapped out or cut off) left the client waiting in silence; after Dask's connect timeout
    it is said, and again when it answers."""
    corpus = first_lines(DATA / "kjv" / "test.sample.txt", 40, tmp_path / "c.txt")
    with cluster(1, tmp_path) as c:
        proc = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command("--delay", "0.01"),
                                 "we", "--input", str(corpus), "--run-dir", str(tmp_path / "rd"),
                                 "--scheduler", c.address, "--partition-chars", "300",
                                 "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"})
        deadline = threading.Timer(90, proc.kill)   # no warning: the run would wait for ever
        deadline.start()
        lines = []
        for line in proc.stderr:      # said as the partitions are given out
            lines.append(line)
            if "dask dashboard" in line:
                break
        time.sleep(1)
        c.scheduler.send_signal(signal.SIGSTOP)
        try:
            for line in proc.stderr:       # about 3-8 s after the stop
                lines.append(line)
                if "no answer" in line:
                    break
            deadline.cancel()
        finally:
            c.scheduler.send_signal(signal.SIGCONT)
        assert lines and lines[-1] == (
            f"WARNING\tno answer from the Dask scheduler at {c.address} for 3 s (Dask's "
            "distributed.comm.timeouts.connect): the run waits for it (a stopped or overloaded "
            "scheduler, or the network to it); Ctrl-C stops the run, and --resume finishes it\n")
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert re.search(rf"^WARNING\tthe Dask scheduler at {re.escape(c.address)} answers again, "
                     r"after \d+ s$", err, re.M), err
    assert json.loads(out)["entropy"]["hit"] > 0


@pytest.mark.slow
def test_a_worker_that_joins_during_the_run_is_counted_in_its_summary(tmp_path):
    """QA: a worker started after the run had begun took partitions, and the summary said
    'on 1 worker'."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"".join((DATA / "kjv" / "test.sample.txt").read_bytes()
                                .splitlines(keepends=True)[:60]))
    with cluster(1, tmp_path) as c:
        proc = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command("--delay", "0.02"),
                                 "we", "--input", str(corpus), "--run-dir", str(tmp_path / "rd"),
                                 "--scheduler", c.address, "--partition-chars", "300",
                                 "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not (tmp_path / "rd" / "_manifest.json").exists() and proc.poll() is None:
            time.sleep(0.1)
        c.workers.append(c.start_worker(1))
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    manifest = json.loads((tmp_path / "rd" / "_manifest.json").read_text())
    workers = {p["worker"] for p in manifest["partitions"]}
    assert len(workers) == 2, "the second worker took no partition: start it sooner"
    assert f" on 2 workers, {len(manifest['partitions'])} partitions;" in err, err
    assert "no Dask worker" not in err, err     # the watch counts them (every 5 s)


@pytest.mark.slow
def test_losing_the_workers_with_the_resources_asked_for_is_said(tmp_path):
    """A run with --resources GPU=1 whose only GPU worker is lost waited in silence (the
    watch counted every worker); it says so, and goes on when one comes."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"".join((DATA / "kjv" / "test.sample.txt").read_bytes()
                                .splitlines(keepends=True)[:60]))
    with cluster(2, tmp_path, {1: ["--resources", "GPU=1"]}) as c:
        proc = subprocess.Popen([str(BIN / "lmc-dist"), "run", toy_model_command("--delay", "0.02"), "we",
                                 "--input", str(corpus), "--run-dir", str(tmp_path / "rd"),
                                 "--scheduler", c.address, "--resources", "GPU=1",
                                 "--partition-chars", "300", "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        c.workers[1].kill()
        lines = []
        deadline = threading.Timer(90, proc.kill)
        deadline.start()
        for line in proc.stderr:
            lines.append(line)
            if "no Dask worker" in line:
                break
        deadline.cancel()
        assert lines and lines[-1] == (
            "WARNING\tno Dask worker declaring the resources GPU=1 that --resources asks for is "
            f"connected to the Dask cluster at {c.address} (1 other workers): the run waits for "
            f"one (`dask worker {c.address} --resources \"GPU=1\"`)\n")
        c.workers.append(c.start_worker(2, ["--resources", "GPU=1"]))
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err


@pytest.mark.slow
def test_a_worker_without_the_package_is_one_line_naming_what_it_needs(tmp_path):
    """A worker started from an environment without lmchallenge-dist: a traceback ending in
    Exception: ModuleNotFoundError(...) (exit 1)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\n")
    with cluster(0, tmp_path) as c:
        code = ("import sys; sys.modules['lmc_dist'] = None; sys.argv[0] = 'dask-worker'; "
                "from distributed.cli.dask_worker import main; main()")
        c.workers.append(c._start([str(PYTHON), "-c", code, c.address, "--nthreads", "1", "--no-nanny",
                                   "--host", "127.0.0.1", "--no-dashboard"], "bare"))
        c.wait_for(1)
        results = [lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                             str(tmp_path / f"rd{i}"), "--scheduler", c.address, "--no-progress"],
                            check=False)
                   for i in range(2)]    # the second finds the pool registered already
    for result in results:
        assert result.returncode == 2 and b"Traceback" not in result.stderr
        assert result.stderr.decode().startswith(
            f"lmc-dist: error: a worker of the Dask cluster at {c.address} cannot set the run up "
            "(Exception: ModuleNotFoundError(")
        assert result.stderr.decode().endswith("every worker needs lmchallenge-dist installed, the "
                                               "same version as here (deploy/README.md)\n")


@pytest.mark.slow
def test_a_server_that_is_not_a_scheduler_is_said_not_waited_for(tmp_path):
    """--scheduler at a port whose server does not speak Dask (the dashboard's) waited for
    ever: Dask bounds the connection, not the handshake."""
    import socketserver

    class Silent(socketserver.BaseRequestHandler):
        def handle(self):
            time.sleep(60)

    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\n")
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Silent) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        address = f"tcp://127.0.0.1:{server.server_address[1]}"
        started = time.monotonic()
        result = lmc_dist(["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                           str(tmp_path / "rd"), "--scheduler", address, "--no-progress"], check=False,
                          env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2"})
        server.shutdown()
    assert time.monotonic() - started < 40
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"lmc-dist: error: no Dask scheduler answered at {address} within 11 s (a server listens "
        "there, but does not speak Dask's protocol, such as the dashboard's port, or is too busy "
        "to answer)\n")
    assert not (tmp_path / "rd").exists()


@pytest.mark.parametrize("misbehaviour, said", [
    (["--at-exit", "goodbye"], "answered more lines than it was asked: 'goodbye'"),
    (["--mode", "twice", "--after", "5"], "answered more lines than it was asked: "),
])
def test_partitions_of_a_model_out_of_step_are_never_kept(tmp_path, two_workers, misbehaviour,
                                                         said):
    """A model process that writes an extra answer line shifts every later answer onto the
    wrong request, and lmc-dist keeps a process across partitions: the line may be read only
    in a later partition or when the process is finished at the end of the run.  No partition
    such a process answered is kept, the run is not committed, and --resume makes them again
    (the log then equals lmc run's)."""
    corpus = tmp_path / "kjv.txt"
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(60)))
    flag = tmp_path / "misbehave"
    flag.write_text("")
    model = toy_model_command(*misbehaviour, "--misbehave-if-exists", str(flag))
    run_dir = tmp_path / "run"
    args = ["run", model, "we", "--input", str(corpus), "--run-dir", str(run_dir),
            "--scheduler", two_workers.address, "--partition-chars", "600", "--retries", "0"]
    failed = lmc_dist(args, check=False)
    err = failed.stderr.decode()
    assert failed.returncode == 2, err
    assert said in err and "Traceback" not in err
    assert not (run_dir / "_stats.json").exists()
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    done = sum(p["state"] == "done" for p in manifest["partitions"])
    assert "partitions failed" in err
    assert ("fix the cause and rerun with --resume" if done else "fix the cause and run again") in err
    expected = lmc_run(["we"], corpus).splitlines(keepends=True)
    kept = 0
    for entry in manifest["partitions"]:
        part = run_dir / "_temporary" / entry["file"]
        assert part.exists() == (entry["state"] == "done"), entry
        if part.exists():     # a partition kept is one a model in step answered
            kept += 1
            out = tmp_path / f"{entry['index']}.jsonl"
            subprocess.run([str(BIN / "lmc"), "convert", str(part), "-o", str(out)], check=True)
            rows = out.read_bytes().splitlines(keepends=True)
            first = sum(p["rows"] for p in manifest["partitions"][:entry["index"]])
            assert rows == expected[first:first + len(rows)]
    assert kept < len(manifest["partitions"])
    flag.unlink()
    lmc_dist(args + ["--resume"])
    assert concatenated(run_dir) == b"".join(expected)


@pytest.mark.parametrize("retries", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_a_model_that_exits_with_an_error_when_finished_keeps_none_of_its_partitions(
        tmp_path, retries):
    """As lmc run fails when its model exits with an error after its last answer, lmc-dist
    fails the run, with the model's stderr, whatever the retries (each new process fails at
    its end too); what those processes answered is removed, and --resume with the model
    mended makes it again."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord is\nmy shepherd\nI shall not want\n")
    flag = tmp_path / "failing"
    flag.write_text("")
    model = toy_model_command("--exit-code", "3", "--misbehave-if-exists", str(flag))
    run_dir = tmp_path / "run"
    args = ["run", model, "we", "--input", str(corpus), "--run-dir", str(run_dir), "--workers",
            "1", "--partition-chars", "12", "--retries", str(retries)]
    result = lmc_dist(args, check=False)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert ("exited with code 3 after its last answer; and a model process that fails keeps "
            "none of its answers: the partitions it answered before are removed, to be made "
            "again (part-00000.parquet, part-00001.parquet, part-00002.parquet)") in err
    assert "saving state failed" in err and "Traceback" not in err
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    assert [p["state"] for p in manifest["partitions"]] == ["failed"] * 3
    assert not list((run_dir / "_temporary").glob("part-*"))
    assert not (run_dir / "_stats.json").exists()
    flag.unlink()
    lmc_dist(args + ["--resume"])
    expected = subprocess.run([str(BIN / "lmc"), "run", model, "we", str(corpus)],
                              capture_output=True, check=True, timeout=60).stdout
    assert concatenated(run_dir) == expected


COPY_THEN_EXIT = """\
import os, sys
flag = sys.argv[1]
misbehave = os.path.exists(flag)
if misbehave:
    os.remove(flag)          # only the first process misbehaves
for line in sys.stdin:
    if not line.startswith("predict"):
        continue
    candidates = line.rstrip("\\n").split("\\t")[2:]
    if misbehave and candidates == ["DIE"]:
        sys.exit(3)
    answer = "\\t".join(f"{c}\\t{-float(len(c))}" for c in candidates) + "\\n"
    sys.stdout.write(answer * (2 if misbehave and candidates == ["COPY"] else 1))
    sys.stdout.flush()
"""


@pytest.mark.parametrize("retries", [0, 1])
def test_a_model_that_fails_after_going_out_of_step_loses_what_it_answered(tmp_path, retries):
    """A model writes an answer twice, so its partition ends one line early and looks whole,
    then exits in the next partition: the process cannot be finished (checked) any more, so
    the partitions it answered are not kept.  With a retry they are made again in the same
    run (fresh processes are in step here): the log equals lmc run's; without, the run fails
    and --resume makes them."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("x COPY DIE\ny z\n")
    script = tmp_path / "copy_then_exit.py"
    script.write_text(COPY_THEN_EXIT)
    flag = tmp_path / "misbehave"
    model = f"{PYTHON} {script} {flag}"
    expected = subprocess.run([str(BIN / "lmc"), "run", model, "we", str(corpus)],
                              capture_output=True, check=True, timeout=60).stdout
    flag.write_text("")
    run_dir = tmp_path / "run"
    args = ["run", model, "we", "--input", str(corpus), "--run-dir", str(run_dir), "--workers",
            "1", "--partition-chars", "5", "--retries", str(retries)]
    result = lmc_dist(args, check=False)
    err = result.stderr.decode()
    if retries:
        assert result.returncode == 0, err
    else:
        assert result.returncode == 2, err
        assert "exited with code 3; and a model process that fails keeps none of its answers" in err
        assert "partition 0 (lines 1-1 of" in err and "the partition's file is gone" in err
        manifest = json.loads((run_dir / "_manifest.json").read_text())
        assert [p["state"] for p in manifest["partitions"]] == ["failed", "failed"]
        assert not list((run_dir / "_temporary").glob("part-*"))
        lmc_dist(args + ["--resume"])
    assert concatenated(run_dir) == expected

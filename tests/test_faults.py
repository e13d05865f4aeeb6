"""Fault injection for ``lmc-dist run`` (issue 11, "How it is checked"): a Ctrl-C (SIGINT to
the client's process group, as a terminal sends it), SIGTERM (to the client alone, as
``kill``, ``timeout`` or a job scheduler's time limit sends it) or SIGKILL to the client, or
SIGKILL to one of its workers, at a random moment; then ``--resume``.  Every trial must end with a log
identical to ``lmc run``'s and equal statistics; while the run is unfinished readers refuse
it; and no partition finished before the fault is computed again (the toy model counts its
requests per corpus line)."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from distributed import LocalCluster
from distributed.comm.core import CommClosedError

from lmchallenge.errors import LmcError
from lmchallenge.games.spec import GameSpec
from lmchallenge.model.spec import PredictorSpec
from lmc_dist.pool import register_model_pool
from lmc_dist.quiet import HEARTBEAT_FAILED, ClosingHeartbeat, SyncCancelRace, quiet_worker
from lmc_dist.spec import DistJob
from lmc_dist.worker import PLUGIN_NAME

from conftest import BIN, toy_model_command
from rundirs import (done_parts, is_finished, lmc, partition_lines, requests_per_line, run_args,
                     start, tagged_corpus, worker_pids)

LINES = 90
PARTITION_CHARS = "300"
DELAY = 0.003          # seconds per request: a run lasts a few seconds
INTERRUPTED = "lmc-dist: interrupted; finished partitions are kept: rerun with --resume\n"
SIGNALS = {"client-sigint": (signal.SIGINT, 130, "interrupted"),
           "client-sigterm": (signal.SIGTERM, 143, "terminated")}
"""Per fault kind: the signal, the exit code of a clean stop, and the word its line says."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus, ``lmc run``'s log, its statistics, and its requests per line."""
    tmp = tmp_path_factory.mktemp("faults")
    corpus = tagged_corpus(tmp / "corpus.txt", LINES)
    counts = tmp / "ref-requests"
    log = tmp / "ref.jsonl"
    log.write_bytes(subprocess.run([str(BIN / "lmc"), "run", toy_model_command("--count-file", str(counts)),
                                    "we", str(corpus)], check=True, capture_output=True, timeout=300).stdout)
    stats = json.loads(lmc("stats", str(log)).stdout)
    del stats["log"]
    return corpus, log.read_bytes(), stats, requests_per_line(counts)


def _wait(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _inject(proc: subprocess.Popen, kind: str, run_dir: Path) -> set[int]:
    """Deliver the fault; return the partitions whose files were in place before it."""
    if kind == "worker-kill":
        pids = worker_pids(proc.pid)
        if not pids:                       # the cluster is not up yet, or already gone
            return done_parts(run_dir)
        before = done_parts(run_dir)
        os.kill(random.Random(proc.pid).choice(pids), signal.SIGKILL)
        return before
    before = done_parts(run_dir)
    if kind == "client-sigint":
        os.killpg(proc.pid, signal.SIGINT)
    elif kind == "client-sigterm":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.kill(proc.pid, signal.SIGKILL)
    return before


def trial(tmp_path: Path, reference, kind: str, parts: int, after: float) -> None:
    """One run, faulted ``after`` seconds after ``parts`` partitions are in place (or after
    its start, for ``parts`` 0), then resumed and checked."""
    corpus, expected_log, expected_stats, expected_requests = reference
    run_dir = tmp_path / "run"
    counts = tmp_path / "requests"
    argv = run_args(corpus, run_dir, counts, DELAY, extra=("--workers", "2", "--partition-chars",
                                                           PARTITION_CHARS, "--no-progress"))
    proc = start(argv)
    _wait(lambda: proc.poll() is not None or (parts == 0 or len(done_parts(run_dir)) >= parts))
    time.sleep(after)
    finished_before = _inject(proc, kind, run_dir) if proc.poll() is None else None
    _, err = proc.communicate(timeout=300)
    err = err.decode()
    print(f"{kind} {after:.2f} s after {parts} partitions: exit {proc.returncode}, done before the fault: "
          f"{sorted(finished_before) if finished_before is not None else 'run over'}")
    if finished_before is None or proc.returncode == 0:
        assert proc.returncode == 0, err
    elif kind in SIGNALS and is_finished(run_dir):   # the run was committed: one line
        number, code, word = SIGNALS[kind]
        assert proc.returncode in (code, -number) and err.count("\n") == 1, err
        assert err == (f"lmc-dist: {word}; the run had committed: it is complete in {run_dir} "
                       "(statistics in _stats.json)\n") or (
            err.startswith("lmc-dist: ") and " tokens in " in err), err
    elif kind in SIGNALS:   # during imports: one line too (a Ctrl-C); before Python is up: none
        number, code, word = SIGNALS[kind]
        begun = (run_dir / "_manifest.json").exists()
        assert (proc.returncode, err.lstrip("\n")) in [
            (code, INTERRUPTED.replace("interrupted", word) if begun
             else f"lmc-dist: {word}; no run was begun\n"), (code, f"lmc-dist: {word}\n"),
            (-number, "")], err
    elif kind == "client-kill":
        assert proc.returncode == -signal.SIGKILL
    else:                           # a worker killed as the cluster starts: a clean message
        assert proc.returncode == 2, err
        assert err.startswith(("lmc-dist: error: the embedded Dask cluster did not start (",
                               "lmc-dist: error: the embedded Dask cluster lost workers as the run started (")), err
    if not is_finished(run_dir) and (run_dir / "_manifest.json").exists():
        refused = lmc("stats", str(run_dir))
        total = len(partition_lines(run_dir))
        assert refused.returncode == 2
        assert "partitions done" in refused.stderr and f" of {total} " in refused.stderr
        with pytest.raises(Exception, match="RUN-NOT-FINISHED"):
            pd.read_parquet(run_dir)
    # killed after the commit point (the manifest's "finished") but before the tidying: the run
    # is finished for lmc's readers, and pandas still refuses it (RUN-NOT-FINISHED) until
    # --resume tidies up
    untidy = (run_dir / "RUN-NOT-FINISHED.parquet").exists() or (run_dir / "_temporary").exists()
    if is_finished(run_dir) and untidy:
        stats = json.loads(lmc("stats", str(run_dir)).stdout)
        del stats["log"]
        assert stats == expected_stats
        with pytest.raises(Exception, match="RUN-NOT-FINISHED"):
            pd.read_parquet(run_dir)
    if not is_finished(run_dir) or untidy:
        resumed = subprocess.run(argv + (["--resume"] if (run_dir / "_manifest.json").exists() else []),
                                 capture_output=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr.decode()

    out = run_dir.parent / "run.jsonl"
    subprocess.run([str(BIN / "lmc"), "convert", str(run_dir), "-o", str(out)], check=True,
                   capture_output=True)
    assert out.read_bytes() == expected_log
    stats = json.loads(lmc("stats", str(run_dir)).stdout)
    del stats["log"]
    assert stats == expected_stats
    assert sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("part-")) == \
        [".lmc-dist.lock", "_manifest.json", "_stats.json"]

    requests = requests_per_line(counts)
    lines = partition_lines(run_dir)
    for index in finished_before or ():
        for line in lines[index]:
            assert requests[line] == expected_requests[line], \
                f"partition {index} (line {line}) finished before the fault and was computed again"
    for line, n in expected_requests.items():
        assert requests[line] >= n


@pytest.mark.parametrize("kind", ["client-sigint",
                                  # the default suite has SIGTERM at the cluster's start below
                                  pytest.param("client-kill", marks=pytest.mark.slow),
                                  pytest.param("client-sigterm", marks=pytest.mark.slow)])
def test_fault_then_resume(tmp_path, reference, kind):
    trial(tmp_path, reference, kind, 2, 0.05)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_random_fault_then_resume(tmp_path, reference, seed):
    """Faults at random moments: before the cluster is up (0 partitions, up to 3 s) or while
    partitions finish (after 1 to 10 of them, up to 0.5 s later)."""
    rng = random.Random(seed)
    kind = rng.choice(["client-sigint", "client-sigterm", "client-kill", "worker-kill"])
    parts = rng.choice([0, *range(1, 11)])
    trial(tmp_path, reference, kind, parts, rng.uniform(0.0, 3.0 if parts == 0 else 0.5))


def _name_error_from(filename: str, function: str) -> logging.LogRecord:
    namespace: dict = {}
    exec(compile(f"def {function}():\n    return future\n", filename, "exec"), namespace)
    try:
        namespace[function]()
    except NameError:
        return logging.LogRecord("tornado.application", logging.ERROR, filename, 1,
                                 "Exception in callback", None, sys.exc_info())
    raise AssertionError("no NameError")


def test_the_sync_cancel_race_record_is_dropped_and_no_other():
    """A Ctrl-C as ``distributed.utils.sync`` starts a call: the loop logs sync's ``cancel``
    failing with a NameError (CI saw it before lmc-dist's one line); only that record goes."""
    race = SyncCancelRace()
    assert not race.filter(_name_error_from("/venv/site-packages/distributed/utils.py", "cancel"))
    assert race.filter(_name_error_from("/venv/site-packages/distributed/utils.py", "wait"))
    assert race.filter(_name_error_from("/home/me/model.py", "cancel"))
    assert race.filter(logging.LogRecord("tornado.application", logging.ERROR, "x", 1, "plain", None, None))


def _heartbeat_record(error: BaseException, message: str = HEARTBEAT_FAILED) -> logging.LogRecord:
    try:
        raise error
    except BaseException:  # noqa: BLE001 - a record with its exc_info, as logger.exception makes
        return logging.LogRecord("distributed.worker", logging.ERROR, "worker.py", 1206, message, None,
                                 sys.exc_info())


def test_a_heartbeat_cut_off_by_the_workers_close_is_dropped_and_no_other():
    """CI saw a worker's "Failed to communicate with scheduler during heartbeat." with a trace
    (CommClosedError: ConnectionPool closing) as the embedded cluster closed.  Checked on a
    real worker: while it runs, a failed heartbeat is logged; once it is closed, not."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        worker = next(iter(cluster.workers.values()))
        closing = ClosingHeartbeat(worker)
        refused = _heartbeat_record(OSError("Timed out trying to connect to tcp://127.0.0.1:1"))
        assert closing.filter(refused)
        assert not closing.filter(_heartbeat_record(CommClosedError("ConnectionPool closing.")))
    assert worker.status.name == "closed"
    assert not closing.filter(refused)
    assert closing.filter(_heartbeat_record(OSError("x"), "Unexpected exception during heartbeat. Closing worker."))
    assert ClosingHeartbeat().filter(refused)


def test_quiet_worker_installs_one_heartbeat_filter_per_worker():
    logger = logging.getLogger("distributed.worker")
    before = list(logger.filters)
    try:
        quiet_worker(None)
        quiet_worker(None)
        assert sum(isinstance(f, ClosingHeartbeat) for f in logger.filters) == 1
        assert not logger.filter(_heartbeat_record(CommClosedError("ConnectionPool closing.")))
    finally:
        logger.filters[:] = before


def test_the_records_of_a_lost_scheduler_are_dropped_and_no_other():
    """What the client logs as lmc-dist closes it after losing the scheduler (seen in
    tests/test_dist.py's scheduler-lost test) is dropped; other records of those loggers stay."""
    import asyncio

    from lmc_dist.quiet import RECONNECT_FAILED, LostScheduler

    def record(name: str, level: int, message: str, error: BaseException | None = None,
               args: tuple = ()) -> logging.LogRecord:
        try:
            if error is not None:
                raise error
        except BaseException:  # noqa: BLE001 - a record with its exc_info
            return logging.LogRecord(name, level, "client.py", 1, message, args, sys.exc_info())
        return logging.LogRecord(name, level, "client.py", 1, message, args, None)

    lost = LostScheduler()
    assert not lost.filter(record("distributed.client", logging.ERROR, "", asyncio.CancelledError()))
    assert not lost.filter(record("distributed.client", logging.ERROR, RECONNECT_FAILED, args=(30.0,)))
    assert not lost.filter(record("distributed.batched", logging.INFO, "Batched Comm Closed %r",
                                  CommClosedError(), args=("<TCP>",)))
    assert lost.filter(record("distributed.batched", logging.WARNING, "something else"))
    assert lost.filter(record("distributed.client", logging.ERROR, "", OSError("refused")))
    assert lost.filter(record("distributed.client", logging.WARNING, "Couldn't gather keys"))


def test_the_scan_thread_never_takes_a_ctrl_c_from_the_main_thread():
    """Started with SIGINT blocked (the main thread's mask unchanged): the kernel hands a
    Ctrl-C during the cluster's start to the main thread, where it is kept pending."""
    from lmc_dist.job import in_background

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    masks = in_background(lambda: signal.pthread_sigmask(signal.SIG_BLOCK, set())).result()
    assert signal.SIGINT in masks
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
    assert signal.SIGINT not in before
    with pytest.raises(ZeroDivisionError):
        in_background(lambda: 1 / 0).result()


class _FlakyClient:
    """A client whose first plugin broadcasts fail as when a worker is killed meanwhile."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls: list[str] = []

    def register_plugin(self, plugin, name):
        self.calls.append(f"register {name}")
        if self.failures:
            self.failures -= 1
            raise CommClosedError("in <TCP (closed) ConnectionPool.register_worker_plugin>: Stream is closed")

    def wait_for_workers(self, n, timeout):
        self.calls.append(f"wait {n}")


def _job(tmp_path: Path) -> DistJob:
    return DistJob(predictor=PredictorSpec(toy_model_command()), game=GameSpec("we"),
                   input=str(tmp_path / "c.txt"), run_dir=str(tmp_path / "run"), workers=2)


def test_a_worker_lost_during_plugin_registration_is_waited_for(tmp_path):
    client = _FlakyClient(failures=1)
    register_model_pool(client, _job(tmp_path))
    assert client.calls == [f"register {PLUGIN_NAME}", "wait 2", f"register {PLUGIN_NAME}"]


def test_plugin_registration_failing_twice_is_a_clean_error(tmp_path):
    with pytest.raises(LmcError, match=r"^the embedded Dask cluster lost workers as the run started "
                                       r"\(in <TCP \(closed\) .*Stream is closed\); run again \(with --resume"):
        register_model_pool(_FlakyClient(failures=2), _job(tmp_path))


@pytest.mark.parametrize("after", [0.3, 0.6])
def test_a_sigint_while_the_embedded_cluster_starts_is_never_lost(tmp_path, after):
    """``timeout -s INT`` (SIGINT to the client alone) as the cluster starts: the run used to
    go on to the end (multiprocessing's resource tracker unblocked SIGINT while it was
    ignored)."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 300)
    proc = start(run_args(corpus, tmp_path / "run", delay=0.01,
                          extra=("--workers", "2", "--no-progress")))
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err.decode()


def test_a_sigterm_while_the_embedded_cluster_starts_stops_it_cleanly(tmp_path):
    """SIGTERM to the client as its workers start (they are being spawned): noted while the
    cluster starts and raised after, so the client stops it and exits with one line and code
    143, leaving no worker behind (was: the client died at once, its workers left to notice)."""
    corpus = tagged_corpus(tmp_path / "corpus.txt", 300)
    proc = start(run_args(corpus, tmp_path / "run", delay=0.01,
                          extra=("--workers", "2", "--no-progress")))
    _wait(lambda: proc.poll() is not None or worker_pids(proc.pid), timeout=60)
    workers = worker_pids(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err.decode()
    # stopped before its manifest was written (as the cluster starts, almost always): no run
    # to resume, and the message does not tell to resume one
    begun = (tmp_path / "run" / "_manifest.json").exists()
    assert err.decode() == (INTERRUPTED.replace("interrupted", "terminated") if begun
                            else "lmc-dist: terminated; no run was begun\n")
    _wait(lambda: not any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in workers), timeout=30)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (not a zombie left for its parent to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_scheduler_s_record_of_an_lmc_task_s_dead_workers_is_dropped_and_no_other():
    """The embedded cluster's scheduler (in lmc-dist's process) logged "Task lmc-part-... marked
    as failed because 4 workers died ..." above lmc-dist's own message for that partition."""
    from lmc_dist.quiet import WORKERS_DIED, OwnKilledWorkers

    def record(message: str, *args) -> logging.LogRecord:
        return logging.LogRecord("distributed.scheduler", logging.ERROR, "scheduler.py", 1,
                                 message, args, None)

    own = OwnKilledWorkers()
    assert not own.filter(record(WORKERS_DIED, "lmc-part-00001-b1b98748", 4))
    assert own.filter(record(WORKERS_DIED, "other-task-1", 4))
    assert own.filter(record("Task %s marked as failed because it timed out", "lmc-part-1"))


@pytest.mark.parametrize("spec, why", [
    ("crashing:Crashing", "the Python model 'crashing:Crashing' runs in the worker's own process, "
                          "so a crash in it (a segmentation fault, os._exit, memory exhausted) "
                          "ends the worker: the worker's stderr shows how it ended (the Python "
                          "stack of a fatal signal, or its exit status), and `lmc run` on these "
                          "lines where it happens"),
    ("lmc-ngram serve kjv.lm", "the model runs in a process of its own, so the worker itself "
                               "was killed: out of memory (the kernel's OOM killer, or its "
                               "nanny's memory limit), or from outside; the workers' logs say why"),
])
def test_a_partition_whose_workers_all_died_says_what_may_have_killed_them(spec, why):
    from types import SimpleNamespace

    from distributed import KilledWorker

    from lmc_dist.failures import failure_messages
    from lmc_dist.partition import Partition
    from lmc_dist.worker import PartitionTask

    task = PartitionTask(run_dir="run", input_path="/data/c.txt", corpus_name="c.txt",
                         corpus_format="text", game=GameSpec("we"), predictor=PredictorSpec(spec),
                         train=False, partition=Partition(index=3, start=0, end=10, first_line=40,
                                                          first_message=39, messages=5,
                                                          characters=10, users=1))
    died = KilledWorker("lmc-part-00003-abc", SimpleNamespace(address="tcp://127.0.0.1:1"), 2)
    said = ("partition 3 (lines 40-44 of c.txt, first message 39): the worker evaluating it "
            "died, 3 times (on 3 workers: Dask's distributed.scheduler.allowed-failures is 2); "
            + why)
    assert failure_messages([None, None, None, task], {3: died}) == [said]
    # partitions whose workers died are said once (QA: a crashing model, one line each)
    others = {i: KilledWorker(f"lmc-part-{i:05d}-abc", SimpleNamespace(address="tcp://h:1"), 2)
              for i in (5, 9)}
    assert failure_messages([task] * 10, {3: died, **others}) == [
        said + "\n(the same error stopped 2 more partitions: 5, 9)"]

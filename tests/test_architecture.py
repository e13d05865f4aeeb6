"""The architecture of docs/architecture.md, checked: layers (import-linter's contracts in
pyproject.toml), no import circles, click only in the command-line modules, process tuning that
takes effect, and the LM Challenge 5.x Python API."""

from __future__ import annotations

import json
import os
import subprocess

import grimp
import pytest

from conftest import BIN, PYTHON, REPO, environment_of, lmc_command, toy_model_command


def test_import_linter_contracts_are_kept():
    result = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in graph.modules:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_circles():
    graph = grimp.build_graph("lmchallenge", "lmc_dist")
    # a package's __init__ re-exporting its modules is not a circle of concepts
    for package in ("lmchallenge", "lmchallenge.stats", "lmchallenge.games"):
        for imported in list(graph.find_modules_directly_imported_by(package)):
            graph.remove_import(importer=package, imported=imported)
    assert _cycles(graph) == []


def test_blas_is_limited_to_one_thread_in_lmc_stats(tmp_path):
    """lmc sets the BLAS thread count before NumPy is imported (lmchallenge.tuning), so the
    limit holds in the process that computes the statistics."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys, json\n"
        "from lmchallenge import cli\n"
        "from lmchallenge.stats import columnar  # noqa: F401  (NumPy, pyarrow)\n"
        "import threadpoolctl\n"
        "import pyarrow\n"
        "pools = threadpoolctl.threadpool_info()\n"
        "print(json.dumps([p['num_threads'] for p in pools if p['user_api'] == 'blas']))\n"
        "print(pyarrow.cpu_count())\n")
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run([PYTHON, str(probe)], capture_output=True, text=True, env=env,
                            check=True)
    blas, arrow = result.stdout.splitlines()
    threads = json.loads(blas)
    assert threads and set(threads) == {1}, threads
    # Arrow's thread pool (the jsonl decoding of lmc stats) keeps its default size
    control = subprocess.run([PYTHON, "-c", "import pyarrow; print(pyarrow.cpu_count())"],
                             capture_output=True, text=True, env=env, check=True)
    assert int(arrow) == int(control.stdout), (arrow, control.stdout)


def test_blas_threads_unlimited_without_lmc(tmp_path):
    """The control: NumPy imported without lmchallenge.cli gets its default pool, so the test
    above shows the effect of lmchallenge.tuning (where the machine has more than one core)."""
    import os
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS starts one thread anyway")
    result = subprocess.run(
        [PYTHON, "-c", "import numpy, threadpoolctl, json; print(json.dumps("
         "[p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas']))"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=True)
    assert max(json.loads(result.stdout)) > 1


def test_a_model_process_gets_the_users_thread_settings_not_lmcs(tmp_path):
    """lmc's own one-thread BLAS limit stays in lmc: the model process ``lmc run`` starts
    has the environment it would have alone (torch reads ``MKL_NUM_THREADS``: a neural model
    computed on one core), while a variable the user set is passed on."""
    record = tmp_path / "env.txt"
    model = f"sh -c 'env > {record}; exec {toy_model_command()}'"
    base = {"PATH": os.environ["PATH"]}

    def seen(env: dict) -> dict:
        subprocess.run([*lmc_command(), "run", model, "we"], input="a b c\n", text=True,
                       env=env, capture_output=True, check=True)
        return environment_of(record)

    alone = seen(base)
    assert "MKL_NUM_THREADS" not in alone and "OPENBLAS_NUM_THREADS" not in alone
    # lmc's own marker stays in lmc; the game is told to the model (docs/formats.md)
    assert [name for name in alone if name.startswith("LMC_")] == ["LMC_GAME"]
    assert alone["LMC_GAME"] == "we"
    chosen = seen({**base, "MKL_NUM_THREADS": "3"})
    assert chosen["MKL_NUM_THREADS"] == "3" and "OPENBLAS_NUM_THREADS" not in chosen


def test_only_a_processs_own_limits_are_lifted(monkeypatch):
    """``own_limits``: what this process's lmc set, not a parent's (an lmc-dist worker's
    model keeps one thread: one model process per core)."""
    from lmchallenge import tuning
    for name in (*tuning.BLAS_THREAD_VARIABLES, tuning.LIMITED_BY):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    tuning.limit_blas_threads()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "4"
    assert tuning.own_limits() == ["OPENBLAS_NUM_THREADS"]
    env = tuning.model_environment()
    assert "OPENBLAS_NUM_THREADS" not in env and env["MKL_NUM_THREADS"] == "4"
    assert tuning.LIMITED_BY not in env
    monkeypatch.setenv(tuning.LIMITED_BY, f"{os.getppid()}:OPENBLAS_NUM_THREADS")  # a parent's
    assert tuning.own_limits() == [] and tuning.model_environment()["OPENBLAS_NUM_THREADS"] == "1"


PUBLIC_5X = ["wc", "we", "ce", "wr", "Model", "WordModel", "FilteringWordModel",
             "load_jsonlines", "dump_jsonlines", "stats", "validate", "grep", "pretty", "diff"]


def test_the_5x_python_api_names():
    import lmchallenge as lmc

    for name in PUBLIC_5X:
        assert hasattr(lmc, name), name
    assert callable(lmc.stats.stats)
    assert callable(lmc.grep.grep)
    assert callable(lmc.validate.validate)
    assert callable(lmc.pretty.ansi) and callable(lmc.diff.ansi)


def test_the_5x_python_api_runs_end_to_end(tmp_path):
    """The README example of LM Challenge 5.x, in this package."""
    import lmchallenge as lmc

    class Unigram(lmc.WordModel):
        def predict_word(self, context, prefix):
            words = ["the", "potato", "one", "two", "three"]
            return [(w, -float(i)) for i, w in enumerate(words) if w.startswith(prefix)]

        def score_word(self, context, candidates):
            return [(c, -1.0) for c in candidates]

    log = list(lmc.wc(Unigram(), ["one potato two potato three"]))
    assert [d["target"] for d in log] == ["one", "potato", "two", "potato", "three"]
    stats = lmc.stats.stats(log)
    assert stats["prediction"]["hit1"] == 0.0 and stats["prediction"]["hit3"] == 0.6
    path = tmp_path / "log.jsonl"
    lmc.dump_jsonlines(log, str(path))
    assert list(lmc.load_jsonlines(str(path))) == log
    assert lmc.validate.validate(log) == len(log)
    selected = list(lmc.grep.grep("^p", log))
    assert [d["select"] for d in selected] == [False, True, False, True, False]


def test_click_is_not_imported_by_the_library():
    code = ("import sys, lmchallenge as lmc; from lmchallenge.stats import compute, columnar; "
            "from lmchallenge.analysis import pretty, diff, grep, validate; "
            "from lmchallenge.games import job; from lmchallenge.model import spec, ngram; "
            "print('click' in sys.modules)")  # (lmc_dist imports dask, which imports click)
    result = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"

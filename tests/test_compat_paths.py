"""LM Challenge 5.x's module paths and `python -m` entry points: a 5.2 user's imports and
commands work here (they were ModuleNotFoundErrors)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import toy_model_command


def test_the_5_x_module_paths_are_the_project_s_objects():
    import lmchallenge as lmc
    from lmchallenge.core.model import FilteringWordModel, Model, ShellModel, WordModel
    from lmchallenge.run import ce, wc, we, wr
    import lmchallenge.analysis.diff
    import lmchallenge.analysis.grep
    import lmchallenge.analysis.pretty
    import lmchallenge.analysis.validate
    import lmchallenge.diff
    import lmchallenge.grep
    import lmchallenge.pretty
    import lmchallenge.validate

    assert (Model, WordModel, FilteringWordModel, ShellModel) == (
        lmc.Model, lmc.WordModel, lmc.FilteringWordModel, lmc.ShellModel)
    assert (wc, we, ce, wr) == (lmc.wc, lmc.we, lmc.ce, lmc.wr)
    assert lmc.core.model.Model is Model and lmc.run.wc is wc
    for name in ("grep", "pretty", "diff", "validate"):
        module = getattr(lmchallenge.analysis, name)
        assert sys.modules[f"lmchallenge.{name}"] is module and getattr(lmc, name) is module
    assert {"core", "run"} <= set(lmc.__all__)


def test_python_m_runs_the_commands():
    model = toy_model_command()
    run = subprocess.run([sys.executable, "-m", "lmchallenge.run", model, "we"],
                         input=b"in the beginning\n", capture_output=True, check=True, timeout=120)
    stats = subprocess.run([sys.executable, "-m", "lmchallenge", "stats"], input=run.stdout,
                           capture_output=True, check=True, timeout=120)
    assert json.loads(stats.stdout)["entropy"]["hit"] == 1.0
    # 5.x's `python -m lmchallenge.stats` (a package here: QA found it did not run)
    module = subprocess.run([sys.executable, "-m", "lmchallenge.stats"], input=run.stdout,
                            capture_output=True, check=True, timeout=120)
    assert (module.stdout, module.stderr) == (stats.stdout, b"")
    kept = subprocess.run([sys.executable, "-m", "lmchallenge.grep", "^in$"], input=run.stdout,
                          capture_output=True, check=True, timeout=120)
    assert [json.loads(line)["select"] for line in kept.stdout.splitlines()] == [True, False, False]

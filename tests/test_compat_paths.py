"""LM Challenge 5.x's module paths and `python -m` entry points: a 5.2 user's imports and
commands work here (they were ModuleNotFoundErrors)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

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


def test_5_x_core_common_and_core_names_are_there():
    """QA: 5.2's sample model reads lmc.core.common.WORD_TOKENIZER (AttributeError here);
    5.2's lmchallenge.core has the model classes and the helpers as attributes."""
    code = ("import lmchallenge as lmc\n"
            "print(lmc.core.common.WORD_TOKENIZER is lmc.WORD_TOKENIZER, lmc.core.Model is lmc.Model,"
            " lmc.core.model.ShellModel is lmc.ShellModel, lmc.core.load_jsonlines is lmc.load_jsonlines)\n"
            "from lmchallenge.core.common import rank, flatten_keys, is_selected, CHARACTER_TOKENIZER\n"
            "print(rank('abc', 'c'), rank('abc', 'c', 2), flatten_keys({'a': {'b': 1}, 'c': 2}, '/'),"
            " is_selected({'select': False}), CHARACTER_TOKENIZER.findall('ab'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout == "True True True True\n3 None {'a/b': 1, 'c': 2} False ['a', 'b']\n", result.stderr


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


def test_5_x_scripts_calls_of_humanize_grep_pretty_and_wr_run_unchanged(caplog):
    # QA: stats.humanize was missing; grep(data=...), pretty.ansi(data=...) and
    # parse_patterns_all(*patterns) were TypeErrors; an error_config key 5.x ignored was a
    # TypeError naming ErrorModel.__init__
    import pytest
    import lmchallenge as lmc

    class Model(lmc.Model):
        def predict(self, context, candidates):
            return [(c, -1.0) for c in (candidates or ["a"])]

    log = list(lmc.we(Model(), ["a b", "b a"]))
    assert lmc.stats.humanize(lmc.stats.stats(log, human=False)) == lmc.stats.stats(log)
    by_name = [d["select"] for d in lmc.grep.grep("^b", data=log)]
    assert by_name == [d["select"] for d in lmc.grep.grep("^b", log)] == [False, True, True, False]
    both = lmc.grep.parse_patterns_all("^b", "$token=1")
    assert [both(d) for d in log] == [False, True, False, False]
    assert [lmc.grep.parse_patterns_all(["^b", "$token=1"])(d) for d in log] == [both(d) for d in log]
    assert list(lmc.pretty.ansi(data=log)) == list(lmc.pretty.ansi(log))
    with pytest.raises(TypeError, match=r"grep\(\) takes the log as log \(or data, as in LM "
                                        r"Challenge 5.x\): both given"):
        lmc.grep.grep("^b", log, data=log)
    with caplog.at_level("WARNING"):
        rows = list(lmc.wr(Model(), ["one two"], ["one", "two"],
                           error_config={"p_anykey": 0.1, "error_chars": "x", "note": "run 3"}))
    assert len(rows) == 2
    assert "wr: error_config keys ignored: 'note' (it takes p_anykey and error_chars)" in caplog.text


def test_5_x_keyword_names_and_core_errors(tmp_path):
    """QA (5.2's API against ours): humanize(stats=...), auto_open(filename=...) and
    flatten_keys(d=...) were TypeErrors (other names); lmchallenge.core.errors, where 5.x
    kept wr's DEFAULT_CONFIG, was a ModuleNotFoundError."""
    import random

    import lmchallenge as lmc
    from lmchallenge.core.common import auto_open, flatten_keys
    from lmchallenge.core.errors import DEFAULT_CONFIG, corrupt, score

    log = [{"user": None, "message": 0, "token": 0, "character": 0, "target": "a", "logp": -1.0}]
    assert lmc.stats.humanize(stats=lmc.stats.stats(log, human=False)) == lmc.stats.stats(log)
    assert flatten_keys(d={"a": {"b": 1}}, separator="/") == {"a/b": 1}
    path = tmp_path / "x.txt.gz"
    with auto_open(filename=str(path), mode="wt") as f:
        f.write("gzipped\n")
    with auto_open(str(path)) as f:
        assert f.read() == "gzipped\n"
    assert lmc.core.errors.DEFAULT_CONFIG is DEFAULT_CONFIG
    assert DEFAULT_CONFIG == {"p_anykey": 0.1, "error_chars": "abcdefghijklmnopqrstuvwxyz"
                                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ_-#@"}
    # k kept of n: k log(1 - p) + (n - k) log(p); the figure 5.2 gives for these words
    assert score(DEFAULT_CONFIG, "hallo", "hello") == -2.7240271556253504
    assert score(dict(DEFAULT_CONFIG, p_anykey=0.5), "ab", "xy") == 2 * math.log(0.5)
    typed = corrupt(dict(DEFAULT_CONFIG, error_chars="#"), "abcdefghij" * 10, random.Random(7))
    assert len(typed) == 100 and set(typed) - set("abcdefghij") == {"#"}
    assert typed == corrupt(dict(DEFAULT_CONFIG, error_chars="#"), "abcdefghij" * 10, random.Random(7))
    assert typed.count("#") == 14     # about p_anykey of the 100 (seed 7)
    with pytest.raises(ValueError, match="p_anykey must be in"):
        score({"p_anykey": 1.0}, "a", "a")

"""Models that misbehave (issue 11): each case is a real model process on real pipes (or a
``module:Class`` loaded by ``lmc run``), checked through the ``lmc`` console script: exit
code 2 and the pieces of the message that name the model, the failing answer, its request,
the requests in flight and the model's stderr."""

from __future__ import annotations

import json
import math
import pickle
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lmchallenge.errors import ModelError
from lmchallenge.logs.jsonl import write_jsonlines
from lmchallenge.model.shell import ShellModel, exec_form
from lmchallenge.model.wire import Predict
from conftest import BIN, PYTHON, REPO, lmc_command, toy_model_command

BATCHING_CRASH_MODEL = REPO / "tests" / "models" / "batching_crash_model.py"


def toy(*args: str) -> str:
    """The toy model's command line, its arguments quoted for the shell."""
    return toy_model_command(*map(shlex.quote, args))


def lmc(*args: str, stdin: bytes = b"", cwd: Path | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*lmc_command(), *args], input=stdin, capture_output=True, cwd=cwd,
                          timeout=timeout)


def failed(result: subprocess.CompletedProcess) -> str:
    """The error text of a run that must have failed with exit code 2 and no traceback."""
    text = result.stderr.decode()
    assert result.returncode == 2, text
    assert "Traceback" not in text
    return text


# -- non-finite scores --------------------------------------------------------------------------

@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "1e309", "NaN", "-Infinity"])
def test_a_non_finite_score_is_a_malformed_answer(tmp_path, score):
    out = tmp_path / "log.jsonl"
    model = toy("--mode", "answer", "--answer", f"of\\t{score}", "--after", "2")
    text = failed(lmc("run", "--output", str(out), model, "we", stdin=b"The book of\n"))
    assert (f"model {model!r}: malformed answer 'of\\t{score}': the score of 'of' is not a "
            f"finite number ('{score}')\n") in text
    assert "\nwhile evaluating user None, message 0, token 2 ('of')\n" in text
    assert "\nrequest (answer line 3): 'predict\\tThe book \\tof'\n" in text
    assert "requests in flight" not in text  # the answers before it were read: only this one
    assert not out.exists()


def test_a_non_finite_score_among_finite_ones_is_named():
    model = toy("--mode", "answer", "--answer", "a\\t-1\\tb\\t-inf\\tc\\t-2")
    text = failed(lmc("run", model, "wc", stdin=b"The\n"))
    assert "malformed answer 'a\\t-1\\tb\\t-inf\\tc\\t-2': the score of 'b' is not" in text


def test_answers_in_crlf_are_read_as_lmchallenge_5_reads_them(tmp_path):
    """A model writing CRLF: the CR is no part of its answer (QA: an empty answer, "\\r\\n",
    stopped the run, "malformed answer '\\r'", where LM Challenge 5.2 logs no score)."""
    model = tmp_path / "crlf.py"
    model.write_text("import sys\n"
                     "for line in sys.stdin:\n"
                     "    if line.startswith('predict'):\n"
                     "        answer = 'of\\t-1.5' if line.rstrip('\\n').endswith('of') else ''\n"
                     "        sys.stdout.write(answer + '\\r\\n')\n"
                     "        sys.stdout.flush()\n")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(model))}"
    result = lmc("run", command, "we", stdin=b"The book of\n")
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [None, None, -1.5]
    result = lmc("run", command, "wc", stdin=b"of\n")
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["completions"] == [[], []]


def test_finite_scores_near_the_float_range_are_answers():
    model = toy("--mode", "answer", "--answer", "of\\t-1e308\\tx\\t-1e308")
    result = lmc("run", model, "we", stdin=b"of\n")
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["logp"] == -1e308


def in_process(tmp_path: Path, spec: str, method: str, body: str, *args: str,
               stdin: bytes) -> subprocess.CompletedProcess:
    """``lmc run ARGS spec GAME`` in ``tmp_path``, where ``spec`` (module:Class) is a class
    with one ``method`` (``predict`` or ``predict_batch``) returning ``body``."""
    module, name = spec.split(":")
    parameters = "context, candidates" if method == "predict" else "queries"
    (tmp_path / f"{module}.py").write_text(
        f"class {name}:\n    def {method}(self, {parameters}):\n        {body}\n")
    return lmc("run", spec, *args, stdin=stdin, cwd=tmp_path)


def test_an_in_process_model_with_a_non_finite_score(tmp_path):
    text = failed(in_process(tmp_path, "nanmodel:NaN", "predict",
                             "return [(c, float('nan')) for c in candidates or []]", "we",
                             stdin=b"a b\n"))
    assert ("model 'nanmodel:NaN': malformed answer [('a', nan)]: the score of 'a' is not a "
            "finite number (nan)\nwhile evaluating user None, message 0, token 0 ('a')\n"
            "request: 'predict\\t\\ta'") in text
    assert "model stderr" not in text


@pytest.mark.parametrize("game, body, shown", [
    ("we", "return [(c, 'abc') for c in candidates]", "[('a', 'abc')]: the score of 'a' is not a number ('abc')"),
    ("we", "return [(c, True) for c in candidates]", "[('a', True)]: the score of 'a' is not a number (True)"),
    ("wr", "return [(c, '-1') for c in candidates]", ": the score of "),
    ("wc", "return [(5, -1.0)]", "[(5, -1.0)]: the text 5 is not a string"),
    ("wc", "return [('a', -1.0, 0)]", "[('a', -1.0, 0)]: ('a', -1.0, 0) is not a (text, score) pair"),
    ("wc", "return None", "None: expected (text, score) pairs, got NoneType"),
    ("wc", "return [('a', 'x')]", "[('a', 'x')]: the score of 'a' is not a number ('x')"),
])
def test_an_in_process_model_s_malformed_answer_is_named_and_nothing_is_written(
        tmp_path, game, body, shown):
    out = tmp_path / "log.jsonl"
    extra = [str(REPO / "data" / "vocab" / "american-english.no-possessive.txt")] if game == "wr" else []
    text = failed(in_process(tmp_path, "badmodel:Bad", "predict", body, "--output", str(out),
                             game, *extra, stdin=b"a b\n"))
    assert text.startswith("lmc: error: model 'badmodel:Bad': malformed answer ")
    assert shown in text.split("\n")[0]
    assert not out.exists()


def test_an_in_process_model_may_leave_wc_continuations_unscored(tmp_path):
    result = in_process(tmp_path, "unscored:Unscored", "predict",
                        "return [('b', None), ('a', -1.0), ('c', -0.5)]", "wc", stdin=b"a\n")
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["completions"][0] == ["b", "a", "c"]   # the model's order


@pytest.mark.parametrize("method", ["predict", "predict_batch"])
def test_an_in_process_model_reads_what_a_shell_model_reads(tmp_path, method):
    """A TAB or CR in a line reaches a shell model as a space (the protocol's fields are
    TAB-separated): an in-process model saw them as they are, and gave another log than the
    same model over a pipe (the neural adapter: -33.0 against -11.1 on 'tab\\tseparated')."""
    seen = tmp_path / "seen.txt"
    body = (f"open({str(seen)!r}, 'a').write(repr(context) + chr(10)); return [(c, -1.0) for c in candidates]"
            if method == "predict" else
            f"open({str(seen)!r}, 'a').write(''.join(repr(c) + chr(10) for c, _ in queries)); "
            f"return [[(w, -1.0) for w in ws] for _, ws in queries]")
    result = in_process(tmp_path, "recorder:Recorder", method, body, "we",
                        stdin=b"tab\tseparated old\rmac\n")
    assert result.returncode == 0, result.stderr.decode()
    assert seen.read_text().splitlines() == ["''", "'tab '", "'tab separated '", "'tab separated old '"]


# -- lmc validate and the log writer ------------------------------------------------------------

DATUM = '{"character": 0, "message": 0, "target": "a", "token": 0, "user": null'


@pytest.mark.parametrize("payload, field, shown", [
    ('"logp": NaN', "logp", "nan"),
    ('"logp": Infinity', "logp", "inf"),
    ('"logp": -Infinity', "logp", "-inf"),
    ('"logp": -1e400', "logp", "-inf"),
    ('"verbatim": "a", "results": [["a", -1.0, -1.0], ["b", NaN, null]]', "results[1][1]", "nan"),
])
def test_validate_rejects_non_finite_numbers(tmp_path, payload, field, shown):
    log = tmp_path / "log.jsonl"
    good = DATUM + ', "logp": -1.5}\n'
    log.write_text(good + DATUM + ", " + payload + "}\n")
    text = failed(lmc("validate", str(log)))
    assert text == f"lmc: error: {log}:2: field {field}: {shown} is not a finite number\n"


def parquet_log_with_nan(path: Path) -> Path:
    table = pa.table({"user": pa.array([None, None], pa.string()), "message": [0, 0],
                      "token": [0, 1], "character": [0, 2], "target": ["a", "b"],
                      "logp": [-1.0, math.nan]})
    pq.write_table(table, path)
    return path


def test_validate_rejects_nan_in_a_parquet_log(tmp_path):
    log = parquet_log_with_nan(tmp_path / "log.parquet")
    text = failed(lmc("validate", str(log)))
    assert text == f"lmc: error: {log}:2: field logp: nan is not a finite number\n"


def test_converting_nan_to_jsonl_is_refused(tmp_path):
    log = parquet_log_with_nan(tmp_path / "log.parquet")
    text = failed(lmc("convert", "-o", str(tmp_path / "out.jsonl"), str(log)))
    assert text == f"lmc: error: {log}:2: field logp: nan is not a finite number\n"
    assert not (tmp_path / "out.jsonl").exists()


def test_the_log_writer_never_writes_nan(tmp_path):
    with open(tmp_path / "log.jsonl", "w") as f:
        with pytest.raises(ValueError, match=r"log datum 2 cannot be written as JSON .*'logp': inf"):
            write_jsonlines([{"logp": -1.0}, {"logp": math.inf}], f)


# -- duplicate completions ----------------------------------------------------------------------

def test_duplicate_completions_keep_the_first_and_warn_once(tmp_path):
    out = tmp_path / "log.jsonl"
    model = toy("--mode", "answer", "--answer", "of\\t-1\\tx\\t-3\\tof\\t-2")
    result = lmc("run", "--output", str(out), model, "wc", stdin=b"of the book\n")
    assert result.returncode == 0, result.stderr.decode()
    warnings = [line for line in result.stderr.decode().splitlines() if "WARNING" in line]
    assert warnings == [f"WARNING\tmodel {model!r} answered a text twice in one answer "
                        "('of\\t-1.0\\tx\\t-3.0\\tof\\t-2.0'); the first of each is kept (warned "
                        "once)"]
    log = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(log) == 3 and all(c == ["of", "x"] for d in log for c in d["completions"])
    assert lmc("validate", str(out)).returncode == 0


def test_a_duplicate_keeps_its_first_score_in_we():
    model = toy("--mode", "answer", "--answer", "of\\t-2.5\\tof\\t-0.5")
    result = lmc("run", model, "we", stdin=b"of of\n")
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [-2.5, -2.5]


def test_an_in_process_model_answering_duplicates(tmp_path):
    result = in_process(tmp_path, "twice:Twice", "predict",
                        "return [('a', -1.0), ('b', -2.0), ('a', -0.5)]", "wc", stdin=b"a b c\n")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().count("WARNING") == 1
    assert "model 'twice:Twice' answered a text twice" in result.stderr.decode()
    assert all(c == ["a", "b"] for line in result.stdout.splitlines()
               for c in json.loads(line)["completions"])


# -- stderr floods ------------------------------------------------------------------------------

def test_a_model_flooding_stderr_is_drained_in_large_reads(tmp_path):
    """240 kB of stderr per request; the drain's read calls are counted (one byte per read
    before: 8.6 M reads for 7.7 MB)."""
    tally = tmp_path / "tally"
    model = ShellModel(toy_model_command("--stderr-bytes", "240000", "--tally", str(tally)))
    try:
        answers = list(model.stream([Predict("The b", None)] * 40))
    finally:
        model.close()
    assert answers == [[("e", -16.0)]] * 40
    model._stderr.text(wait=10)
    assert int(tally.read_text()) == model._stderr.size == 40 * 240000
    assert model._stderr.reads * 1000 <= model._stderr.size


def test_the_stderr_tail_of_a_flood_is_its_last_lines():
    model = toy_model_command("--stderr-bytes", "240000", "--mode", "exit", "--after", "10")
    text = failed(lmc("run", model, "we", stdin=b"a b c d e f g h i j k l m n\n"))
    tail = text.split("model stderr (tail):\n", 1)[1].splitlines()
    assert tail == ["x" * 99] * 39 + ["toy model: giving up"]


# -- --timeout is a deadline for each answer ----------------------------------------------------

def test_a_model_trickling_its_answer_misses_the_deadline():
    """A byte every 0.5 s, --timeout 1: silence never lasts 1 s, the answer takes 6 s."""
    model = toy_model_command("--mode", "trickle", "--delay", "0.5", "--after", "1")
    text = failed(lmc("run", "--timeout", "1", model, "we", stdin=b"The book of\n"))
    assert f"model {model!r}: no answer within 1 s (killed; " in text
    assert " bytes of it had come)\nwhile evaluating user None, message 0, token 1 ('book')" in text
    assert "\nrequest (answer line 2): 'predict\\tThe \\tbook'\n" in text


def test_a_model_s_start_has_its_own_deadline(tmp_path):
    """QA: a model that loads for longer than --timeout (60 s by default; a neural model on a
    CPU takes minutes) was killed before its first answer; LM Challenge 5.2 waits for ever.
    Its first answer may take --start-timeout (600 s by default)."""
    script = tmp_path / "slow.py"
    script.write_text("import sys, time\n"
                      "time.sleep(2)\n"
                      "from lmchallenge import Model\n"
                      "class M(Model):\n"
                      "    def predict(self, context, candidates):\n"
                      "        return [(c, -1.0) for c in candidates or ['x']]\n"
                      "M().run_loop()\n")
    model = f"{PYTHON} {script}"
    passed = lmc("run", "--timeout", "0.5", model, "we", stdin=b"a b c\n")
    assert passed.returncode == 0 and passed.stdout.count(b"\n") == 3, passed.stderr
    text = failed(lmc("run", "--timeout", "0.5", "--start-timeout", "1", model, "we", stdin=b"a b c\n"))
    assert f"model {model!r}: no answer within 1 s (--start-timeout: its first answer) (killed)\n" in text


def test_a_model_that_exits_leaving_its_output_open_is_not_waited_for_until_start_timeout(tmp_path):
    """CI: a launcher that exits after its request was written, while a process it started
    holds its output open, was waited for until --start-timeout (600 s) instead of being
    found exited once --timeout (1 s here) had passed without an answer."""
    pid_file = tmp_path / "child.pid"
    quitter = tmp_path / "quitter.sh"
    quitter.write_text(f"sleep 300 &\necho $! > {pid_file}\nsleep 1\nexit 0\n")
    text = failed(lmc("run", "--timeout", "1", f"sh {quitter}", "we", stdin=b"the lord\n", timeout=60))
    assert f"model 'sh {quitter}': exited (code 0) before answering\n" in text
    _wait_gone(int(pid_file.read_text()))


def test_the_deadline_is_per_answer_not_per_run():
    """30 answers of 0.1 s each take longer than --timeout 2 together: the run passes."""
    model = toy_model_command("--delay", "0.1")
    result = lmc("run", "--timeout", "2", model, "we", stdin=b"a b c d e f g h i j\n" * 3)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.count(b"\n") == 30


# -- a model that closes its output -------------------------------------------------------------

def test_a_model_closing_its_output_is_reported_at_once():
    """--timeout 300, the run's own limit 120 s: only an error seen at the close passes."""
    model = toy_model_command("--mode", "close-stdout", "--after", "1")
    text = failed(lmc("run", "--timeout", "300", model, "we", stdin=b"The book of\n",
                      timeout=120))
    assert (f"model {model!r}: closed its output but kept running (killed)\nwhile evaluating "
            "user None, message 0, token 1 ('book')") in text
    assert "\nrequest (answer line 2): 'predict\\tThe \\tbook'\n" in text


def test_a_compound_command_still_runs_in_the_shell(tmp_path):
    model = f"cd {shlex.quote(str(tmp_path))} && {toy_model_command('--tally', 'here')}"
    result = lmc("run", model, "we", stdin=b"The book\n")
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / "here").read_text() == "0"


def test_exec_form():
    assert exec_form(f"{PYTHON} m.py --x 'a b'") == f"exec {PYTHON} m.py --x 'a b'"
    assert exec_form("cat") == "exec cat"
    for compound in ["cd x && python3 m", "A=1 python3 m", "python3 m > log", "python3 m | cat",
                     "$HOME/m", "no-such-program-here x", "python3 m &", "python3 'm", "a\nb",
                     "exec cat", "python3 `m`"]:
        assert exec_form(compound) == compound


def test_a_model_killed_by_a_signal_is_named(tmp_path):
    script = tmp_path / "segv.py"
    script.write_text("import os, signal, sys\nsys.stdin.readline()\n"
                      "os.kill(os.getpid(), signal.SIGSEGV)\n")
    text = failed(lmc("run", f"{PYTHON} {script}", "we", stdin=b"a\n"))
    assert "': was killed by signal 11 (SIGSEGV)\n" in text
    assert "\nrequest (answer line 1): 'predict\\t\\ta'\n" in text


# -- the requests in flight ---------------------------------------------------------------------

MARKED = b"".join(b"alpha MARKER gamma delta\n" if n == 31 else b"alpha beta gamma delta\n"
                  for n in range(40))
"""40 messages of 4 tokens (160 predicts for we, all sent at once: window 256); the marker
is token 1 of message 31, so it is in the context of token 2 (answer 31 * 4 + 3 = 127)."""


def test_a_crash_is_named_where_the_model_died(tmp_path):
    """A model answering line by line dies on the marker: the answer it owed, its token, and
    the 34 requests in flight (up to the last token) are named."""
    flag = tmp_path / "crash"
    flag.write_text("")
    model = toy_model_command("--crash-if-exists", str(flag), "--crash-word", "MARKER")
    text = failed(lmc("run", model, "we", stdin=MARKED))
    assert f"model {model!r}: exited with code 3\n" in text
    assert ("\nwhile evaluating user None, message 31, token 2 ('gamma'); requests in flight up "
            "to user None, message 39, token 3 ('delta')\n") in text
    assert "\nrequest (answer line 127): 'predict\\talpha MARKER \\tgamma'\n" in text
    assert ("\nrequests in flight: 34, oldest first: 'predict\\talpha MARKER \\tgamma', "
            "'predict\\talpha MARKER gamma \\tdelta', 'predict\\t\\talpha', ... (28 more), "
            "'predict\\talpha \\tbeta', 'predict\\talpha beta \\tgamma', "
            "'predict\\talpha beta gamma \\tdelta'\n") in text
    assert text.endswith("model stderr (tail):\ntoy model: crashing on 'MARKER'\n")


def test_a_model_that_fails_before_its_first_answer_is_not_said_to_have_all_requests_in_flight():
    """A mistyped model command: the error named the 58 requests sent before the model's
    exit was seen, and 'requests in flight up to' the last of their tokens (noise: the model
    never answered); the first request is named, and the model's stderr."""
    model = "sh -c 'read request; echo no such model file >&2; exit 2'"   # (read: they were sent)
    text = failed(lmc("run", model, "we", stdin=MARKED))
    assert text == ("no such model file\n"
                    f"lmc: error: model {model!r}: exited with code 2\n"
                    "while evaluating user None, message 0, token 0 ('alpha')\n"
                    "request (answer line 1): 'predict\\t\\talpha'\n"
                    "model stderr (tail):\nno such model file\n")


@pytest.mark.parametrize("case, code, meaning", [
    ("missing", 127, "a command it did not find"),
    ("not executable", 126, "a command it found but could not run: not executable?")])
def test_a_model_command_the_shell_cannot_run_is_said_so(tmp_path, case, code, meaning):
    """A mistyped command (exit 127) or a script without its x bit (126): the shell's code
    said in words, and never "answer line 1" alone (QA: it was, for a model that ended
    before a request was written to it; the request is named where one was written
    before the end was seen, as it may be)."""
    script = tmp_path / "model.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    model = str(script) if case == "not executable" else f"{tmp_path}/no-such-model serve"
    said = failed(lmc("run", model, "we", stdin=MARKED)).split("lmc: error: ", 1)[1]
    assert said.startswith(f"model {model!r}: exited with code {code} (a shell's code for "
                           f"{meaning})\nwhile evaluating user None, message 0, token 0 "
                           "('alpha')\n"), said
    assert said.split("\n")[2] in ("model stderr (tail):",
                                   "request (answer line 1): 'predict\\t\\talpha'"), said


def test_a_crash_of_a_model_answering_in_batches_names_all_in_flight():
    """The model dies on message 31 with answers still in its buffer: the oldest unanswered
    request is earlier, so the requests in flight are named up to the newest sent."""
    model = f"{PYTHON} {BATCHING_CRASH_MODEL} --crash-word MARKER"
    text = failed(lmc("run", model, "we", stdin=MARKED))
    # its stderr as it came (as 5.2 shows it), then the error with its tail
    assert text.startswith("batching crash model: dying on 'MARKER'\n"
                           f"lmc: error: model {model!r}: exited with code 3\n")
    line = int(text.split("\nrequest (answer line ", 1)[1].split(")", 1)[0])
    assert line <= 127
    message, token = divmod(line - 1, 4)
    assert (f"\nwhile evaluating user None, message {message}, token {token} "
            f"({['alpha', 'beta', 'gamma', 'delta'][token]!r}); requests in flight up to user "
            "None, message 39, token 3 ('delta')\n") in text
    assert f"\nrequests in flight: {160 - line + 1}, oldest first: " in text
    assert text.endswith("model stderr (tail):\nbatching crash model: dying on 'MARKER'\n")


def test_a_malformed_answer_mid_batch_names_its_own_token():
    model = toy_model_command("--mode", "garbage", "--after", "5")
    text = failed(lmc("run", model, "we", stdin=b"a b c d e f g h\n"))
    assert "': malformed answer 'this is not\\ta score\\textra': expected" in text
    assert ("\nwhile evaluating user None, message 0, token 5 ('f'); requests in flight up to "
            "user None, message 0, token 7 ('h')\nrequest (answer line 6): 'predict\\ta b c d e \\tf'\n"
            "requests in flight: 3, oldest first: 'predict\\ta b c d e \\tf', "
            "'predict\\ta b c d e f \\tg', 'predict\\ta b c d e f g \\th'\n") in text


def test_model_errors_pickle_with_their_requests_in_flight():
    error = ModelError("m", "died", "predict\ta", None, "user 'u'", ("predict\ta", "predict\tb"), 7)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) == (
        "model 'm': died\nwhile evaluating user 'u'\nrequest (answer line 7): 'predict\\ta'\n"
        "requests in flight: 2, oldest first: 'predict\\ta', 'predict\\tb'")
    assert again.in_flight == error.in_flight and again.answer_line == 7


# -- module:Class models ------------------------------------------------------------------------

UNIGRAM = ("class Unigram:\n"
           "    def __init__(self, scale=1.0):\n"
           "        self.scale = scale\n"
           "    def predict(self, context, candidates):\n"
           "        if 'of' in context:\n"
           "            raise ValueError('no ' + repr(context))\n"
           "        return [(c, -1.0 * self.scale) for c in candidates or ['x']]\n")


def test_a_python_model_in_the_current_directory(tmp_path):
    (tmp_path / "unigram.py").write_text(UNIGRAM)
    result = lmc("run", "-o", '{"scale": 2}', "unigram:Unigram", "we", stdin=b"a b\n",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [-2.0, -2.0]


def test_a_python_model_that_raises_is_reported_like_a_shell_model(tmp_path):
    (tmp_path / "unigram.py").write_text(UNIGRAM)
    text = failed(lmc("run", "unigram:Unigram", "we", stdin=b"The book of it\n", cwd=tmp_path))
    assert text == ("lmc: error: model 'unigram:Unigram': predict raised ValueError: no "
                    "'The book of '\nwhile evaluating user None, message 0, token 3 ('it')\n"
                    "request: 'predict\\tThe book of \\tit'\n")


def test_a_model_that_does_not_exit_at_the_end_of_its_input_is_said_and_killed_once(tmp_path):
    """QA: a model going on after its input's end (here it ignores it, and SIGTERM) held
    ``lmc run`` twice ``--timeout`` in silence (the wait for its output's end, then another
    for its exit), the log already complete; now one ``--timeout`` in all, and a warning."""
    (tmp_path / "stays.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "for line in sys.stdin:\n"
        "    print('\\t'.join(c + '\\t-1.0' for c in line.rstrip('\\n').split('\\t')[2:]),"
        " flush=True)\n"
        "time.sleep(600)\n")
    started = time.monotonic()
    result = lmc("run", "--timeout", "7", f"{PYTHON} stays.py", "we", "--output", "log.jsonl",
                 stdin=b"The book of it\n", cwd=tmp_path)
    took = time.monotonic() - started
    text = result.stderr.decode()
    assert result.returncode == 0, text
    assert text == (f"WARNING\tmodel '{PYTHON} stays.py' has not exited 5 s after the end of its "
                    "input: waiting for it at most --timeout (7 s), then it is killed (its "
                    "answers are all in)\n")
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 4
    assert took < 13, f"waited {took:.1f} s: more than one --timeout (7 s)"


@pytest.mark.parametrize("method, body, said", [
    ("predict", "return (p if p else 1 // 0 for p in [(candidates[0], -1.0), None])",
     "predict raised ZeroDivisionError: integer division or modulo by zero"),
    ("predict_batch", "return (1 // 0 for query in queries)",
     "predict_batch raised ZeroDivisionError: integer division or modulo by zero"),
    ("predict_batch", "return None",
     "malformed answer None: expected a list of answers, one per query, got NoneType"),
])
def test_a_python_model_s_lazy_answer_that_raises_is_the_model_s_error(tmp_path, method, body,
                                                                       said):
    """QA: a model answering with a generator that raised as lmc read it (or a batch of
    None) ended ``lmc run`` with a Python traceback, not the model's error."""
    text = failed(in_process(tmp_path, "lazy:Lazy", method, body, "we", stdin=b"The book\n"))
    assert text.startswith(f"lmc: error: model 'lazy:Lazy': {said}\nwhile evaluating user None, "
                           "message 0, token 0 ('The')"), text


@pytest.mark.parametrize("score, expected", [("numpy.float32(-1.5)", -1.5),
                                             ("numpy.int64(-2)", -2.0),
                                             ("fractions.Fraction(-3, 2)", -1.5)])
def test_a_python_model_s_scores_of_other_real_types_are_logged_as_floats(tmp_path, score,
                                                                         expected):
    """QA: NumPy's float32 scores passed the answer's check, then ``lmc run`` failed with a
    traceback writing them (JSON cannot hold them); they are floats in the log."""
    (tmp_path / "typed.py").write_text(
        "import fractions, numpy\n"
        "class Typed:\n"
        "    def predict(self, context, candidates):\n"
        f"        return [(c, {score}) for c in candidates or ['x']]\n")
    result = lmc("run", "typed:Typed", "we", stdin=b"The book\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    logp = [json.loads(line)["logp"] for line in result.stdout.splitlines()]
    assert logp == [expected, expected] and all(type(x) is float for x in logp)


CRASHING = ("import ctypes\n"
            "class Crashing:\n"
            "    def predict(self, context, candidates):\n"
            "        if 'of' in context:\n"
            "            ctypes.string_at(0)     # a segmentation fault, as a broken extension\n"
            "        return [(c, -1.0) for c in candidates or ['x']]\n")
"""A Python model that crashes the process it runs in (lmc's, or an lmc-dist worker's)."""


def test_a_python_model_that_crashes_lmc_shows_where(tmp_path):
    """QA: a segmentation fault in a Python model ended ``lmc run`` with the shell's
    "Segmentation fault" alone; now with the Python stack, the model's frame in it, and no
    log written."""
    (tmp_path / "crashing.py").write_text(CRASHING)
    result = lmc("run", "crashing:Crashing", "we", "--output", "log.jsonl",
                 stdin=b"The book of it\n", cwd=tmp_path)
    text = result.stderr.decode()
    assert result.returncode == -11, text
    assert text.startswith("Fatal Python error: Segmentation fault\n"), text
    assert f'File "{tmp_path / "crashing.py"}", line 5 in predict\n' in text, text
    assert not (tmp_path / "log.jsonl").exists()


def test_a_python_model_that_raises_mid_word_in_wc_names_that_token(tmp_path):
    """Predicts are drawn a run at a time (lmchallenge.model.session.InProcessModel): the
    answers before the failing call are given to their tokens first, so the token named is
    the failing query's, not the first of the run (wc asks a query per typed prefix)."""
    text = failed(in_process(tmp_path, "midword:Midword", "predict",
                             "if context.endswith('The bo'): raise ValueError(repr(context))\n"
                             "        return [('x', -1.0)]", "wc",
                             stdin=b"The book of it\nmore\n"))
    assert text == ("lmc: error: model 'midword:Midword': predict raised ValueError: 'The "
                    "bo'\nwhile evaluating user None, message 0, token 1 ('book')\n"
                    "request: 'predict\\tThe bo'\n")


def test_a_python_models_answers_come_a_run_at_a_time(monkeypatch):
    """A model without predict_batch: up to batch_size predicts are drawn and answered in one
    run (one list), a train waits for the answers before it, and a slow run gives its
    answers so far every ANSWERS_EVERY seconds."""
    from lmchallenge.model import session
    from lmchallenge.model.wire import Train

    calls = []

    class Model:
        def predict(self, context, candidates):
            calls.append(context)
            return [("x", -1.0)]

        def train(self, text):
            calls.append(("train", text))

    requests = [*(Predict(f"c{i}", None) for i in range(100)), Train("t"),
                *(Predict(f"d{i}", None) for i in range(3))]
    model = session.InProcessModel(Model(), batch_size=64)
    runs = []
    for answers in model.stream_batches(requests):
        runs.append((len(answers), len(calls)))
    assert runs == [(64, 64), (36, 100), (3, 104)]
    assert calls[100] == ("train", "t")
    monkeypatch.setattr(session, "ANSWERS_EVERY", 0.0)
    assert [len(answers) for answers in session.InProcessModel(Model()).stream_batches(
        requests[:5])] == [1, 1, 1, 1, 1]


def test_a_python_model_batch_that_raises_names_its_queries(tmp_path):
    text = failed(in_process(tmp_path, "batched:Batched", "predict_batch",
                             "raise RuntimeError(f'{len(queries)} queries')", "we",
                             stdin=b"a b c\n"))
    assert text.startswith("lmc: error: model 'batched:Batched': predict_batch raised "
                           "RuntimeError: 3 queries\nwhile evaluating user None, message 0, "
                           "token 0 ('a'); requests in flight up to user None, message 0, token "
                           "2 ('c')\nrequest: 'predict\\t\\ta'\nrequests in flight: 3, oldest first: "
                           "'predict\\t\\ta', 'predict\\ta \\tb', 'predict\\ta b \\tc'\n")


@pytest.mark.parametrize("options, reason", [
    ('{"bogus": 1}', "does not take the options {\"bogus\": 1}: got an unexpected keyword "
                     "argument 'bogus' (it takes (scale=1.0))"),
    ('{"scale": 1, "extra": 2}', "does not take the options {\"scale\": 1, \"extra\": 2}: got "
                                 "an unexpected keyword argument 'extra' (it takes (scale=1.0))"),
])
def test_python_model_options_it_does_not_take(tmp_path, options, reason):
    (tmp_path / "unigram.py").write_text(UNIGRAM)
    text = failed(lmc("run", "-o", options, "unigram:Unigram", "we", stdin=b"a\n", cwd=tmp_path))
    assert text == f"lmc: error: model 'unigram:Unigram': {reason}\n"


def test_a_python_model_that_fails_to_start(tmp_path):
    (tmp_path / "broken.py").write_text(
        "class Broken:\n    def __init__(self):\n        open('/no/such/weights')\n")
    text = failed(lmc("run", "broken:Broken", "we", stdin=b"a\n", cwd=tmp_path))
    assert text == ("lmc: error: model 'broken:Broken': raised FileNotFoundError while starting: "
                    "[Errno 2] No such file or directory: '/no/such/weights'\n")


def test_a_python_models_own_model_error_is_reported_as_it_is(tmp_path):
    """A ModelError raised by the model's constructor names the model already (its weights,
    say): it is printed as it is, not wrapped in a second "raised ModelError" line."""
    (tmp_path / "picky.py").write_text(
        "from lmchallenge.errors import ModelError\n"
        "class Picky:\n    def __init__(self, size=0):\n"
        "        raise ModelError('weights.bin', f'option size must be >= 1, not {size}',"
        " stderr_tail=None)\n")
    text = failed(lmc("run", "picky:Picky", "we", stdin=b"a\n", cwd=tmp_path))
    assert text == "lmc: error: model 'weights.bin': option size must be >= 1, not 0\n"


def test_a_python_model_that_cannot_be_found(tmp_path):
    text = failed(lmc("run", "nosuchmodule:Model", "we", stdin=b"a\n", cwd=tmp_path))
    assert text == "lmc: error: model 'nosuchmodule:Model': cannot load: No module named " \
                   "'nosuchmodule'\n"


@pytest.mark.parametrize("spec, made", [
    ("parts:Tokenizer", "parts:Tokenizer"),         # a class of the module, not its model
    ("parts:load_vocabulary", "builtins:list"),     # a function that is not a factory
])
def test_a_python_spec_that_makes_no_model_is_said_when_it_starts(tmp_path, spec, made):
    """It was said at the first query, as "predict raised AttributeError: ..." with the
    request; under lmc-dist the same, once a partition."""
    (tmp_path / "parts.py").write_text(
        "class Tokenizer:\n    def split(self, text):\n        return text.split()\n"
        "def load_vocabulary():\n    return ['a']\n")
    why = (f"lmc: error: model '{spec}': is not a model: it made an object of type {made}, "
           "which has no predict(context, candidates) nor predict_batch(queries) method\n")
    assert failed(lmc("run", spec, "we", stdin=b"a b\n", cwd=tmp_path)) == why


@pytest.mark.parametrize("attribute, scores", [
    ("", [-5.0] * 5),                                       # 64 a call: all five at once
    ("    predict_batch_size = 2\n", [-2.0, -2.0, -2.0, -2.0, -1.0]),
])
def test_a_python_model_sets_its_predict_batch_size(tmp_path, attribute, scores):
    """Each word's score is the size of the predict_batch call that answered it."""
    (tmp_path / "sized.py").write_text(
        f"class Sized:\n{attribute}    def predict_batch(self, queries):\n"
        "        return [[(c, -float(len(queries))) for c in cs] for _, cs in queries]\n")
    result = lmc("run", "sized:Sized", "we", stdin=b"a b c d e\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == scores


# -- more answer lines than requests ------------------------------------------------------------

@pytest.mark.parametrize("attempt", range(3))
def test_a_model_answering_twice_fails_every_time_and_leaves_no_log(tmp_path, attempt):
    # every request fits the first window: the extra lines come after the last one asked for,
    # which lmc run reads to the model's end before it takes the log as complete
    out = tmp_path / "log.jsonl"
    model = toy("--mode", "twice")
    text = failed(lmc("run", "--output", str(out), model, "we",
                      stdin=b"the lord is my shepherd\nand god said\n"))
    assert text.startswith(f"lmc: error: model {model!r}: answered more lines than it was asked: ")
    assert "while evaluating" not in text   # no token to blame: the answers went out of step
    assert not out.exists()


def test_a_line_that_is_no_answer_is_named_though_the_extra_line_comes_with_it(tmp_path):
    """A debugging print among the answers puts every later answer out of step by one; where
    it and the line one too many are read together, the print is named (QA: the last,
    well-formed answer was named as the extra line, the print never)."""
    script = tmp_path / "chatty.py"
    script.write_text(
        "import sys\nasked = [sys.stdin.readline().rstrip('\\n').split('\\t') for _ in range(3)]\n"
        "answers = [f'{fields[2]}\\t-1.0' for fields in asked]\n"
        "answers.insert(1, 'debug: scored a')\n"
        "sys.stdout.write(''.join(a + '\\n' for a in answers)); sys.stdout.flush()\n"
        "sys.stdin.read()\n")
    text = failed(lmc("run", f"{PYTHON} {script}", "we", stdin=b"a b c\n"))
    assert text.startswith(
        f"lmc: error: model '{PYTHON} {script}': malformed answer 'debug: scored a': expected "
        "text<TAB>score pairs, got 1 fields\nwhile evaluating user None, message 0, token 1 "
        "('b'); requests in flight up to user None, message 0, token 2 ('c')\nrequest (answer "
        "line 2): 'predict\\ta \\tb'\n"), text


def test_a_line_written_at_exit_is_an_extra_answer():
    model = toy("--at-exit", "goodbye")
    text = failed(lmc("run", model, "we", stdin=b"the lord\n"))
    assert text.startswith(f"lmc: error: model {model!r}: answered more lines than it was asked: "
                           "'goodbye'\nanswer line 3\n")
    # a blank line too: it is an empty answer (a model out of step by one, whose last answer
    # was empty, leaves a blank line when it is finished)
    blank = failed(lmc("run", toy("--at-exit", ""), "we", stdin=b"the lord\n"))
    assert "answered more lines than it was asked: ''\nanswer line 3\n" in blank


@pytest.mark.parametrize("code", [1, 3])
def test_a_model_that_exits_with_an_error_after_its_last_answer_fails_the_run(tmp_path, code):
    # LM Challenge 5.2 fails too (its model's exit status checked); the log is not written
    out = tmp_path / "log.jsonl"
    model = toy("--exit-code", str(code))
    text = failed(lmc("run", "--output", str(out), model, "we", stdin=b"the lord\n"))
    assert text == (f"saving state failed\nlmc: error: model {model!r}: exited with code {code} "
                    "after its last answer\nmodel stderr (tail):\nsaving state failed\n")
    assert not out.exists()
    assert lmc("run", toy(), "we", stdin=b"the lord\n").returncode == 0


def test_the_python_api_s_shell_model_fails_its_with_block_when_it_exits_with_an_error():
    """As LM Challenge 5.2's ShellModel does (QA: the block ended quietly, the log looked
    whole); a block that raised keeps its own exception, and a model left with requests
    unread (a generator not finished) is not failed for the answers it still writes."""
    import lmchallenge as lmc

    with pytest.raises(ModelError) as raised:
        with ShellModel(toy("--exit-code", "3")) as model:
            log = list(lmc.we(model, ["the lord"]))
    assert len(log) == 2
    assert str(raised.value) == (f"model {toy('--exit-code', '3')!r}: exited with code 3 after "
                                 "its last answer\nmodel stderr (tail):\nsaving state failed")
    with pytest.raises(KeyError):
        with ShellModel(toy("--exit-code", "3")) as model:
            raise KeyError("the block's own")
    with ShellModel(toy()) as model:
        assert next(lmc.wc(model, ["the lord is my shepherd"] * 20))["target"] == "the"


def test_the_python_api_chains_a_models_own_exception():
    """docs/formats.md: a failing model raises ModelError, its own exception chained (QA: the
    copy that names the token dropped it)."""
    import lmchallenge as lmc

    class Failing(lmc.Model):
        def predict(self, context, candidates):
            raise RuntimeError("out of memory")

    for game in (lmc.we, lmc.wc):
        with pytest.raises(ModelError, match="predict raised RuntimeError: out of memory") as raised:
            list(game(Failing(), ["the lord"]))
        assert isinstance(raised.value.__cause__, RuntimeError)
        assert str(raised.value.__cause__) == "out of memory"


def test_a_blank_line_at_start_is_found_though_the_last_answer_is_empty(tmp_path):
    # a print() as the model starts: every answer goes to the request after its own, and the
    # last one, left for when the model is finished, is empty (wc's answer after the last word
    # of a line, which nothing continues)
    script = tmp_path / "blank_first.py"
    script.write_text("import sys, time\nprint(flush=True)\nfor line in sys.stdin:\n"
                      "    time.sleep(0.05)\n    print(flush=True)\n")
    out = tmp_path / "log.jsonl"
    text = failed(lmc("run", "--output", str(out), f"{PYTHON} {script}", "wc",
                      stdin=b"a b\n"))
    assert "answered more lines than it was asked: ''" in text
    assert not out.exists()


def test_a_persistent_model_s_extra_line_is_not_taken_for_the_next_answer():
    # lmc-dist keeps a model across partitions: one stream's extra answer line must fail the
    # next stream, not answer its first request
    import time

    model = ShellModel(toy_model_command("--mode", "twice", "--after", "1", "--delay", "0.3"),
                       timeout=10)
    try:
        first = list(model.stream([Predict("the ", ["lord"]), Predict("the lord ", ["is"])]))
        assert [r[0][0] for r in first] == ["lord", "is"]   # before the copy of "is" came
        time.sleep(0.6)   # now it has
        with pytest.raises(ModelError, match="answered more lines than it was asked: 'is"):
            list(model.stream([Predict("the lord is ", ["my"])]))
    finally:
        model.kill()
        model.close()


def test_a_score_above_zero_in_we_is_warned_once():
    model = toy("--mode", "answer", "--answer", "of\\t2.5")
    result = lmc("run", model, "we", stdin=b"of of of\n")
    assert result.returncode == 0
    assert result.stderr.decode() == (
        "WARNING\twe: the model scored 'of' 2.5, above 0: a log-probability is at most 0 (LM "
        "Challenge logs natural-log probabilities); entropies of these scores mean nothing "
        "(warned once)\n")
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [2.5] * 3
    rounding = toy("--mode", "answer", "--answer", "of\\t1e-7")
    assert lmc("run", rounding, "we", stdin=b"of\n").stderr == b""


# -- the game a model is told, and a game a model refuses ---------------------------------------

def test_a_model_class_that_refuses_a_game_is_never_made_for_it(tmp_path):
    (tmp_path / "wordonly.py").write_text(
        "import os\n"
        "class WordOnly:\n"
        "    refuses = {'ce': 'a word model'}\n"
        "    def __init__(self):\n"
        "        open('made', 'w').close()\n"
        "    def predict(self, context, candidates):\n"
        "        return [(c, -1.0) for c in candidates or []]\n")
    text = failed(lmc("run", "wordonly:WordOnly", "ce", stdin=b"a b\n", cwd=tmp_path))
    assert text == "lmc: error: model 'wordonly:WordOnly': does not play ce: a word model\n"
    assert not (tmp_path / "made").exists()
    played = lmc("run", "wordonly:WordOnly", "we", stdin=b"a b\n", cwd=tmp_path)
    assert played.returncode == 0 and played.stdout.count(b"\n") == 2


def test_a_shell_model_is_told_its_game(tmp_path):
    script = tmp_path / "told.py"
    script.write_text("import os, sys\n"
                      "open(sys.argv[1] + '.' + str(os.getpid()), 'w').write(os.environ['LMC_GAME'])\n"
                      "for line in sys.stdin:\n"
                      "    if line.startswith('predict'):\n"
                      "        print(flush=True)\n")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b\nc d\n")
    told = tmp_path / "game"
    for game in ("we", "wc", "ce"):
        assert lmc("run", f"{PYTHON} {script} {told}", game, str(corpus)).returncode == 0
        dist = subprocess.run([str(BIN / "lmc-dist"), "run", f"{PYTHON} {script} {told}", game,
                               "--input", str(corpus), "--run-dir", str(tmp_path / game),
                               "--workers", "1"], capture_output=True, timeout=300)
        assert dist.returncode == 0, dist.stderr.decode()
        said = {path.read_text() for path in tmp_path.glob("game.*")}
        assert said == {game}
        for path in tmp_path.glob("game.*"):
            path.unlink()


def _wait_gone(pid: int, seconds: float = 10.0) -> None:
    """Wait until process ``pid`` has ended (a zombie waiting for its reaper counts)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except FileNotFoundError:
            return
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


def test_a_model_started_by_a_launcher_that_exits_is_served(tmp_path):
    """setsid forks when it leads its process group (a model always does) and exits while
    the model it started answers: an exit must not be taken for the model's end while its
    output is open."""
    import shutil

    if shutil.which("setsid") is None:
        pytest.skip("no setsid (util-linux) on this machine")
    result = lmc("run", "--timeout", "20", "--window", "1",
                 f"setsid {toy_model_command('--delay', '0.7')}", "we", stdin=b"the lord\n")
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [-3.0, -5.0]


@pytest.mark.slow
def test_a_child_the_model_leaves_running_neither_delays_the_run_nor_outlives_it(tmp_path):
    """A model that starts `sleep &` (a server, a helper) before it answers: the child holds
    the model's output open, so the end of the output, by which lmc saw the model end, came
    only when --timeout ran out (60 s by default) and the child ran on after the run."""
    pid_file = tmp_path / "child.pid"
    model = f"sh -c 'sleep 300 & echo $! > {pid_file}; exec {toy_model_command()}'"
    result = lmc("run", "--timeout", "120", model, "we", stdin=b"the lord\n", timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["target"] for line in result.stdout.splitlines()] == ["the", "lord"]
    _wait_gone(int(pid_file.read_text()))
    # exiting at once: said as such (at once where its input is found closed, else when the
    # answer is late: a launcher such as setsid exits while what it started answers)
    quitter = tmp_path / "quitter.sh"
    quitter.write_text(f"sleep 300 &\necho $! > {pid_file}\nexit 0\n")
    result = lmc("run", "--timeout", "3", f"sh {quitter}", "we", stdin=b"the lord\n", timeout=60)
    assert "model 'sh " in failed(result) and "exited (code 0) before answering" in failed(result)
    _wait_gone(int(pid_file.read_text()))


# -- Python models that exit, print or fail to close (QA of in-process models) --------------


@pytest.mark.parametrize("where, body, shown", [
    ("predict", "import sys; sys.exit(3)", "predict raised SystemExit: 3"),
    ("__init__", "raise SystemExit('bad usage')", "raised SystemExit while starting: bad usage"),
])
def test_a_python_model_calling_sys_exit_is_its_failure(tmp_path, where, body, shown):
    """sys.exit in a model (an argparse in it) ended lmc run with its code and not a word."""
    parameters = "self, context, candidates" if where == "predict" else "self"
    (tmp_path / "exiter.py").write_text(
        f"class Exiter:\n    def {where}({parameters}):\n        {body}\n"
        + ("    def predict(self, context, candidates):\n        return []\n" if where == "__init__" else ""))
    text = failed(lmc("run", "exiter:Exiter", "we", "--output", str(tmp_path / "log.jsonl"),
                      stdin=b"a b\n", cwd=tmp_path))
    assert text.startswith(f"lmc: error: model 'exiter:Exiter': {shown}")
    assert not (tmp_path / "log.jsonl").exists()


def test_a_python_model_failing_to_close_is_one_line_and_no_log(tmp_path):
    """Closing it is part of the run, as a shell model's exit is: before, the whole log was
    written, then a traceback and exit 1."""
    (tmp_path / "closing.py").write_text(
        "class Closing:\n"
        "    def predict(self, context, candidates):\n        return [(c, -1.0) for c in candidates]\n"
        "    def close(self):\n        raise OSError('close failed')\n")
    text = failed(lmc("run", "closing:Closing", "we", "--output", str(tmp_path / "log.jsonl"),
                      stdin=b"a b\n", cwd=tmp_path))
    assert text.startswith("lmc: error: model 'closing:Closing': closing it raised OSError: close failed")
    assert not (tmp_path / "log.jsonl").exists()


def test_what_a_python_model_prints_goes_to_stderr_not_into_the_log(tmp_path):
    (tmp_path / "printer.py").write_text(
        "class Printer:\n"
        "    def __init__(self):\n        print('loading')\n"
        "    def predict(self, context, candidates):\n"
        "        print('predicting', context)\n        return [(c, -1.0) for c in candidates]\n")
    result = lmc("run", "printer:Printer", "we", stdin=b"a b\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["target"] for line in result.stdout.splitlines()] == ["a", "b"]
    assert "loading\npredicting \npredicting a \n" in result.stderr.decode()


def test_a_python_model_whose_file_changed_since_it_was_imported_is_refused(tmp_path, monkeypatch):
    """A Dask worker of a shared cluster imports a model's module once: it went on running the
    old code after the file was edited, and a worker started later the new one, in one run
    (QA: one log, two versions of the model, exit 0)."""
    from lmchallenge.errors import ModelError
    from lmchallenge.model.spec import load_python_object
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "edited_model_x.py"
    source.write_text("class M:\n    SCORE = -1.0\n")
    monkeypatch.delitem(sys.modules, "edited_model_x", raising=False)
    assert load_python_object("edited_model_x:M").SCORE == -1.0
    assert load_python_object("edited_model_x:M").SCORE == -1.0     # unchanged: loads again
    source.write_text("class M:\n    SCORE = -2.0  # edited\n")
    with pytest.raises(ModelError, match="edited_model_x.py changed since this process imported it"):
        load_python_object("edited_model_x:M")
    monkeypatch.delitem(sys.modules, "edited_model_x")


def test_an_answer_with_more_than_its_one_candidate_is_warned_once(tmp_path):
    result = in_process(tmp_path, "extra:Extra", "predict",
                        "return [(c, -1.0) for c in candidates] + [('zzz', -2.0)]", "we",
                        stdin=b"in the beginning god\n")
    assert result.returncode == 0, result.stderr.decode()
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [-1.0] * 4
    warnings = [line for line in result.stderr.decode().splitlines() if "answered 2 results" in line]
    assert warnings == ["WARNING\twe: the model answered 2 results when asked to score 'in' alone "
                        "([('in', -1.0), ('zzz', -2.0)]): only its score counts (warned once)"]


def test_a_python_model_call_running_past_the_timeout_is_warned_about(tmp_path):
    """A Python model cannot be killed as a shell model is; one that hangs said nothing (QA)."""
    (tmp_path / "slow.py").write_text(
        "import time\n"
        "class Slow:\n"
        "    def predict(self, context, candidates):\n"
        "        if context == 'in ':\n            time.sleep(1.5)\n"
        "        return [(c, -1.0) for c in candidates]\n")
    result = lmc("run", "slow:Slow", "we", "--timeout", "0.4", stdin=b"in the beginning\n",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.splitlines()) == 3
    warnings = [line for line in result.stderr.decode().splitlines() if "has been in" in line]
    assert len(warnings) == 1, result.stderr.decode()
    assert warnings[0].startswith("WARNING\tmodel 'slow:Slow' has been in predict for ")
    assert warnings[0].endswith("s (request 'predict\\tin \\tthe'): a Python model has no time limit "
                                "(--timeout stops a shell model only); Ctrl-C stops the run")

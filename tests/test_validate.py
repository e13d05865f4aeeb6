"""`lmc validate`: the schema accepts every log the games write and names the line and field
of a bad datum."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import BIN
from lmchallenge.errors import InputError
from lmchallenge.analysis.validate import problem, validate

LOGS = Path(__file__).resolve().parent / "data" / "pretty"
GOOD = {"user": None, "message": 0, "token": 0, "character": 0, "target": "a"}


@pytest.mark.parametrize("log", sorted(p.name for p in LOGS.glob("*.jsonl") if p.name != "rails8.jsonl"))
def test_every_shipped_log_is_valid(log):
    result = subprocess.run([str(BIN / "lmc"), "validate", str(LOGS / log)], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()


@pytest.mark.parametrize("datum, field, words", [
    ({**GOOD, "results": [["a", 0.5, None]], "verbatim": "a"}, "results[0][1]", "0.5 is greater than the maximum of 0"),
    ({**GOOD, "results": [["a", -1.0, None]]}, "(datum)", "'verbatim' is a dependency of 'results'"),
    ({**GOOD, "message": "x"}, "message", "'x' is not of type 'integer'"),
    ({k: v for k, v in GOOD.items() if k != "target"}, "(datum)", "'target' is a required property"),
    ({**GOOD, "completions": [["b", "b"]]}, "completions[0]", "has non-unique elements"),
    ({**GOOD, "logp": "high"}, "logp", "'high' is not of type 'number', 'null'"),
])
def test_problem_names_the_field(datum, field, words):
    assert problem(datum) == f"field {field}: {words}" or (field in problem(datum) and words in problem(datum))


def test_validate_counts_and_names_the_line():
    assert validate([GOOD, {**GOOD, "logp": -1.5}]) == 2
    with pytest.raises(InputError) as error:
        validate([GOOD, GOOD, {**GOOD, "user": 3.5}], name="x.jsonl")
    assert str(error.value) == "x.jsonl:3: field user: 3.5 is not of type 'string', 'integer', 'null'"
    # an integer user is what lmc run (and LM Challenge 5.x) logs for {"user": 3}
    assert validate([{**GOOD, "user": 3}]) == 1


def test_cli_bad_log_exits_2_with_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": null, "message": 0, "token": 0, "character": 0, "target": "a", "logp": -1}\n'
                   '{"user": null, "message": 0, "token": 1, "character": 2, "target": "b", "logp": "x"}\n')
    result = subprocess.run([str(BIN / "lmc"), "validate", str(bad)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"{bad}:2: field logp: 'x' is not of type 'number', 'null'" in result.stderr
    corpus = subprocess.run([str(BIN / "lmc"), "validate", "-"], input='{"text": "hello"}\n',
                            capture_output=True, text=True)
    assert corpus.returncode == 2 and "-:1: field (datum):" in corpus.stderr and "required" in corpus.stderr


def lmc_run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "lmc"), *argv], capture_output=True, text=True, timeout=120)


def test_a_log_of_two_games_is_invalid(tmp_path):
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join((LOGS / "kjv.o2.we.jsonl").read_text().splitlines(keepends=True)[:2])
                     + (LOGS / "kjv.o2.wc.jsonl").read_text().splitlines(keepends=True)[0])
    result = lmc_run("validate", str(mixed))
    assert result.returncode == 2
    assert result.stderr == (f"lmc: error: {mixed}:3: a datum of wc after datums of we: a log "
                             "holds one game\n")
    assert lmc_run("pretty", str(mixed)).stderr == (
        f"lmc: error: {mixed}:3: no logp: a wc datum in a log shown as we\n")


@pytest.mark.parametrize("command", ["pretty", "diff"])
@pytest.mark.parametrize("challenge, message", [
    ("reranking", "no verbatim/results: a we/ce datum in a log shown as wr"),
    ("completion", "no completions: a we/ce datum in a log shown as wc"),
])
def test_pretty_and_diff_name_a_log_of_another_game(command, challenge, message):
    log = str(LOGS / "kjv.o2.we.jsonl")
    logs = [log, log] if command == "diff" else [log]
    result = lmc_run(command, "-c", challenge, *logs)
    assert result.returncode == 2 and result.stderr == f"lmc: error: {log}:1: {message}\n"


def test_pretty_names_a_malformed_datum_and_a_bad_float_format(tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = (LOGS / "kjv.o2.we.jsonl").read_text().splitlines(keepends=True)
    bad.write_text(lines[0] + '{"character": 4, "logp": "x", "message": 0, "target": "b", '
                   '"token": 1, "user": null}\n')
    result = lmc_run("pretty", str(bad))
    assert result.returncode == 2
    assert result.stderr == f"lmc: error: {bad}:2: field logp: 'x' is not of type 'number', 'null'\n"
    result = lmc_run("pretty", "-o", "html", "-m", "d", str(LOGS / "kjv.o2.we.jsonl"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Invalid value for '-m' / '--float-format': 'd' is not a format of a float" in result.stderr
    # an ANSI page shows no such numbers: any -m goes, as in LM Challenge 5.2 (old scripts)
    for command, logs in (("pretty", [LOGS / "kjv.o2.we.jsonl"]),
                          ("diff", [LOGS / "kjv.o1.we.jsonl", LOGS / "kjv.o2.we.jsonl"])):
        plain = lmc_run(command, *map(str, logs))
        given = lmc_run(command, "-m", "%.2f", *map(str, logs))
        assert given.returncode == 0 and given.stdout == plain.stdout != ""


@pytest.mark.parametrize("user, shown", [("7.0", "7.0"), ("1e30", "1e+30"), ("true", "True"),
                                         ('[1]', "[1]")])
def test_users_that_are_neither_strings_nor_integers_are_refused_alike(tmp_path, user, shown):
    """validate passed 7.0 and 1e30 (JSON Schema counts them as integers) that stats refused;
    stats took true for the user 1 (Python's True == 1), then refused it saying 'TypeError:
    cannot fingerprint a bool': both say what lmc validate says."""
    log = tmp_path / "log.jsonl"
    log.write_text(f'{{"user": {user}, "message": 0, "token": 0, "character": 0, "target": "a", "logp": -1.0}}\n')
    said = f"field user: {shown} is not of type 'string', 'integer', 'null'\n"
    for command, prefix in (("validate", ""), ("stats", "not an LM Challenge log datum: ")):
        result = subprocess.run([str(BIN / "lmc"), command, str(log)], capture_output=True, text=True)
        assert (result.returncode, result.stderr) == (2, f"lmc: error: {log}:1: {prefix}{said}")


def test_an_integer_of_thousands_of_digits_is_invalid_json_not_a_traceback(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"user": ' + "9" * 5000 + ', "message": 0, "token": 0, "character": 0, "target": "a"}\n')
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"user": ' + "9" * 5000 + ', "text": "in the beginning"}\n')
    for argv in (["stats", str(log)], ["validate", str(log)], ["pretty", str(log)],
                 ["run", "lmc-ngram serve nothing", "we", str(corpus)]):
        result = subprocess.run([str(BIN / "lmc"), *argv], capture_output=True, text=True)
        name = corpus if argv[0] == "run" else log
        assert (result.returncode, result.stderr) == (
            2, f"lmc: error: {name}:1: invalid JSON: an integer of more than 4,300 digits\n"), argv


def test_a_run_dir_s_bad_datum_is_named_by_its_part_file_and_line(tmp_path):
    # as lmc stats names it (the datum's number over the whole run named no file to open)
    from conftest import toy_model_command

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of the corpus\n" for i in range(12)))
    run_dir = tmp_path / "run"
    subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input",
                    str(corpus), "--run-dir", str(run_dir), "--workers", "1", "--part-format",
                    "jsonl", "--partition-chars", "60"], check=True, capture_output=True,
                   timeout=300)
    assert lmc_run("validate", str(run_dir)).returncode == 0
    part = run_dir / "part-00001.jsonl.gz"
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    for entry in manifest["partitions"]:     # sizes not recorded (an older lmc-dist): the
        del entry["bytes"]                   # edited part is read, not refused for its size
    (run_dir / "_manifest.json").write_text(json.dumps(manifest))
    import gzip
    lines = gzip.decompress(part.read_bytes()).decode().splitlines(keepends=True)
    lines[2] = lines[2].replace('"logp": ', '"logp": "x", "was": ', 1)
    part.write_bytes(gzip.compress("".join(lines).encode()))
    result = lmc_run("validate", str(run_dir))
    assert result.returncode == 2
    assert result.stderr == f"lmc: error: {part}:3: field logp: 'x' is not of type 'number', 'null'\n"
    assert f"{part}:3: " in lmc_run("stats", str(run_dir)).stderr


# -- the quick check (jsonschema-rs) agrees with jsonschema --------------------------------

REAL = Path(__file__).resolve().parent / "data" / "logs"
ODD_VALUES = [None, True, False, 0, -1, 7, 7.0, -0.0, 0.5, -2.5, 2 ** 70, float("nan"), float("inf"),
              "", "a", "\ud800", [], ["a"], ["a", "a"], [["a"]], [["a", "a"]], ("a",), (("a",),),
              [("a",)], {}, {"a": 1}, [["a", -1.0, None]], [["a", -1.0, -2.0, -3.0]],
              [["a", 0.5, None]], [["a", -1.0]], [["a", -1.0, None, -1.0, 1]], [[1, -1.0, None]],
              [["a", -1.0, "x"]], [("a", -1.0, None)], [["a", -1.0, float("nan")]],
              [["a", float("-inf"), None]], {"b": [float("inf")]}, b"a"]


def _mutants(datum: dict, rng) -> list:
    """``datum`` changed in one or two places: a field set to an odd value (of another type,
    a float for an integer, a tuple for a list, NaN, ...), removed, or added."""
    import numpy as np
    keys = [*datum, "select", "completions", "logp", "verbatim", "results", "extra"]
    out = []
    for _ in range(12):
        changed = dict(datum)
        for _ in range(rng.choice([1, 2])):
            key = rng.choice(keys)
            how = rng.random()
            if how < 0.15:
                changed.pop(key, None)
            elif how < 0.25:
                changed[key] = rng.choice([np.int64(3), np.float64(7.0), np.float64(-1.0)])
            else:
                changed[key] = rng.choice(ODD_VALUES)
        out.append(changed)
    return out


def test_the_quick_check_never_passes_what_jsonschema_refuses():
    """Every datum of the real logs of each game, and thousands of mutants of them (odd types,
    floats for integers, tuples for lists, NumPy scalars, NaN, missing and extra fields):
    :func:`problem` (jsonschema-rs first) says what jsonschema alone says, and the mutants
    include datums each path judges valid and invalid."""
    import random

    from lmchallenge.logs.check import _schema_problem, _surely_valid
    rng = random.Random(5)
    data = [json.loads(line) for log in sorted(REAL.glob("*.jsonl")) if log.name != "rails40.jsonl"
            for line in log.read_text().splitlines()[:60]]
    assert {"completions", "logp", "results"} <= {key for d in data for key in d}
    quick = {True: 0, False: 0}
    for datum in data + [m for d in data for m in _mutants(d, rng)]:
        assert problem(datum) == _schema_problem(datum), datum
        quick[_surely_valid(datum)] += 1
    assert quick[True] > 1000 and quick[False] > 1000, quick


@pytest.mark.parametrize("datum, field", [
    ({**GOOD, "message": 7.0}, "message"),
    ({**GOOD, "user": 7.0}, "user"),
    ({**GOOD, "completions": (("a",),)}, "completions"),
    ({**GOOD, "completions": [("a",)]}, "completions[0]"),
    ({**GOOD, "results": [("a", -1.0, None)], "verbatim": "a"}, "results[0]"),
    ({**GOOD, "target": b"a"}, "target"),
])
def test_what_jsonschema_rs_alone_would_pass_is_refused(datum, field):
    """JSON Schema's integers include 7.0, and jsonschema-rs takes a tuple for an array; the
    log readers take neither."""
    assert problem(datum).startswith(f"field {field}: "), problem(datum)

"""`lmc convert`: jsonl <-> jsonl.gz <-> parquet, round trips and the CLI."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lmchallenge.logs.convert import convert, detect_game
from lmchallenge.logs.jsonl import load_jsonlines
from lmchallenge.logs.io import read_log

DATA = Path(__file__).resolve().parent / "data" / "pretty"
LOGS = ["kjv.o2.wc.jsonl", "kjv.o2.we.jsonl", "kjv.o2.ce.jsonl", "kjv.o2.wr.jsonl",
        "rails.wc.jsonl", "mixed.we.jsonl"]


@pytest.mark.parametrize("log", LOGS)
def test_jsonl_gz_round_trip_is_byte_identical(tmp_path, log):
    source = DATA / log
    gz = tmp_path / "log.jsonl.gz"
    back = tmp_path / "back.jsonl"
    n = convert(str(source), str(gz))
    assert n == len(source.read_text(encoding="utf-8").splitlines())
    with gzip.open(gz, "rt", encoding="utf-8") as f:
        assert f.read() == source.read_text(encoding="utf-8")
    assert convert(str(gz), str(back)) == n
    assert back.read_bytes() == source.read_bytes()


@pytest.mark.parametrize("log", LOGS)
def test_parquet_round_trip_keeps_every_datum(tmp_path, log):
    source = DATA / log
    pq = tmp_path / "log.parquet"
    back = tmp_path / "back.jsonl"
    original = list(load_jsonlines(str(source)))
    assert convert(str(source), str(pq)) == len(original)
    assert convert(str(pq), str(back)) == len(original)
    again = list(load_jsonlines(str(back)))
    # a null "select" is how Parquet says "no selection": compare without it
    strip = [{k: v for k, v in d.items() if not (k == "select" and v is None)} for d in again]
    assert strip == original


def test_parquet_is_pandas_queryable(tmp_path):
    import pandas
    pq = tmp_path / "wc.parquet"
    convert(str(DATA / "kjv.o2.wc.jsonl"), str(pq))
    frame = pandas.read_parquet(pq)
    assert len(frame) == 112
    assert {"user", "message", "token", "character", "target", "completions"} <= set(frame.columns)
    assert list(frame["target"][:4]) == ["The", "book", "of", "the"]
    # next-word predicted at rank 1: the first completion row's first entry is the target
    hits = frame[[c[0][0] == t if len(c) and len(c[0]) else False
                  for c, t in zip(frame["completions"], frame["target"])]]
    assert len(hits) == 15


def test_detect_game():
    assert detect_game({"completions": []}) == "wc"
    assert detect_game({"logp": None}) == "we"
    assert detect_game({"results": [], "verbatim": "x"}) == "wr"
    assert detect_game({"target": "x"}) is None


def test_cli_converts_and_reports(tmp_path):
    from lmchallenge.cli import cli
    out = tmp_path / "out.jsonl.gz"
    result = CliRunner().invoke(cli, ["convert", str(DATA / "mixed.we.jsonl"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote 36 tokens to {out} (jsonlines, gzip)" in result.output
    assert [d["target"] for d in read_log(str(out))][:3] == ["The", "book", "of"]
    # the form written is said, whatever the suffix (a .gz was gzip, said "jsonlines": QA)
    for name, form in (("out.gz", "jsonlines, gzip"), ("out.csv", "jsonlines"),
                       ("out.parquet", "parquet")):
        result = CliRunner().invoke(cli, ["convert", str(DATA / "mixed.we.jsonl"), "-o",
                                          str(tmp_path / name)])
        assert f"wrote 36 tokens to {tmp_path / name} ({form})" in result.output
    assert (tmp_path / "out.gz").read_bytes()[:2] == b"\x1f\x8b"


def test_cli_stdin_to_stdout():
    from lmchallenge.cli import cli
    text = (DATA / "mixed.we.jsonl").read_text(encoding="utf-8")
    result = CliRunner().invoke(cli, ["convert", "-o", "-"], input=text)
    assert result.exit_code == 0
    assert result.output == text


def test_cli_missing_input_and_missing_output_option(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "convert",
                           str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "x.jsonl")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "nope.jsonl" in proc.stderr and "does not exist" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "convert",
                           str(DATA / "mixed.we.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Missing option '-o'" in proc.stderr


def test_an_output_that_cannot_be_written_is_named_before_any_work(tmp_path):
    # it named the hidden temporary file it would have written (".out.tmp-PID: Is a directory")
    (tmp_path / "out").mkdir()
    (tmp_path / "file").write_text("")
    for output, why in ((tmp_path / "out", "Is a directory"),
                        (tmp_path / "file" / "log.parquet", "a parent is not a directory")):
        proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "convert",
                               str(DATA / "mixed.we.jsonl"), "-o", str(output)],
                              capture_output=True, text=True)
        assert proc.returncode == 2
        assert proc.stderr == f"lmc: error: {output}: cannot write: {why}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "out"]
    assert not list((tmp_path / "out").iterdir())


def test_a_run_dir_is_not_converted_into_itself(tmp_path):
    """Review: lmc convert RUN -o RUN/part-00001.parquet replaced the part, then failed."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = (DATA / "mixed.we.jsonl").read_bytes().splitlines(keepends=True)
    for i, chunk in enumerate((lines[:10], lines[10:])):
        (run_dir / f"part-{i:05d}.jsonl").write_bytes(b"".join(chunk))
    target = run_dir / "part-00001.jsonl"
    before = target.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "convert", str(run_dir),
                           "-o", str(target)], capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (2, f"lmc: error: {target}: cannot write: it is "
                                                 f"inside the input directory {run_dir}, whose "
                                                 "part files it could replace: write it elsewhere\n")
    assert target.read_bytes() == before


def test_invalid_json_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"user": None, "message": 0, "token": 0, "character": 0,
                               "target": "a", "logp": -1.0}) + "\n{oops\n")
    from lmchallenge.errors import InputError
    with pytest.raises(InputError, match=r"bad.jsonl:2: invalid JSON"):
        convert(str(bad), str(tmp_path / "out.jsonl"))
    assert not (tmp_path / "out.jsonl").exists()


def test_a_gzipped_log_names_itself_not_its_temporary_file(tmp_path):
    # the gzip header holds a name (gzip's: the file's, less ".gz"); it held the hidden
    # temporary name the log was written under, which `gunzip -N` would restore
    out = tmp_path / "out.jsonl.gz"
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "convert",
                           str(DATA / "mixed.we.jsonl"), "-o", str(out)], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    header = out.read_bytes()
    assert header[3] & 0x08                       # FNAME set (RFC 1952)
    assert header[10:header.index(b"\0", 10)] == b"out.jsonl"
    assert gzip.decompress(header) == (DATA / "mixed.we.jsonl").read_bytes()


@pytest.mark.parametrize("log, field, kind, source", [
    ("kjv.o2.we.jsonl", "target", "string", "file"),
    ("kjv.o2.we.jsonl", "target", "string", "run_dir"),
    ("kjv.o2.we.jsonl", "message", "integer", "file"),
    ("kjv.o2.wr.jsonl", "verbatim", "string", "file"),
    ("kjv.o2.wr.jsonl", "results", "array", "file"),
    ("kjv.o2.wc.jsonl", "completions", "array", "file")])
def test_a_parquet_log_with_a_null_is_refused_not_written_as_jsonl(tmp_path, log, field, kind,
                                                                   source):
    """A Parquet column can hold a null that jsonl cannot: the datum is named as `lmc
    validate` names it (a run dir's by its part), and nothing is written (it wrote the
    null, exit 0; a null ``results`` list turned every row's triples into dicts)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = tmp_path / "good.parquet"
    convert(str(DATA / log), str(good))
    table = pq.read_table(good)
    values = table.column(field).to_pylist()
    values[3] = None
    column = table.schema.get_field_index(field)
    table = table.set_column(column, pa.field(field, table.schema.field(field).type),
                             pa.array(values, type=table.schema.field(field).type))
    if source == "file":
        bad = tmp_path / "bad.parquet"
        pq.write_table(table, bad)
    else:
        bad = tmp_path / "run"
        bad.mkdir()
        pq.write_table(table.slice(0, 2), bad / "part-00000.parquet")
        pq.write_table(table.slice(2), bad / "part-00001.parquet")
    out = tmp_path / "out.jsonl"
    run = subprocess.run([sys.executable, "-m", "lmchallenge", "convert", str(bad), "-o",
                          str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and not out.exists()
    named = f"{bad}:4" if source == "file" else f"{bad / 'part-00001.parquet'}:2"
    assert run.stderr == f"lmc: error: {named}: field {field}: None is not of type '{kind}'\n"
    validate = subprocess.run([sys.executable, "-m", "lmchallenge", "validate", str(bad)],
                              capture_output=True, text=True)
    assert validate.returncode == 2 and validate.stderr == run.stderr


def test_a_wr_log_whose_lm_scores_are_null_converts_as_it_is(tmp_path):
    """A results triple's LM score may be null: not refused (kjv.o2.wr has such)."""
    parquet, back = tmp_path / "wr.parquet", tmp_path / "wr.jsonl"
    convert(str(DATA / "kjv.o2.wr.jsonl"), str(parquet))
    convert(str(parquet), str(back))
    assert back.read_bytes() == (DATA / "kjv.o2.wr.jsonl").read_bytes()


def _spoilt(datum: dict, change: str) -> None:
    """``datum`` changed in place so that ``lmc validate`` refuses it."""
    if change == "negative message":
        datum["message"] = -1
    elif change == "float token":
        datum["token"] = float(datum["token"])
    elif change == "completion twice":
        datum["completions"][0][1] = datum["completions"][0][0]
    elif change == "string logp":
        datum["logp"] = str(datum["logp"])
    elif change == "number target":
        datum["target"] = 5
    elif change == "boolean user":
        datum["user"] = True
    elif change == "no token":
        del datum["token"]
    elif change == "nan logp":
        datum["logp"] = float("nan")
    elif change == "infinite logp":
        datum["logp"] = -float("inf")
    else:
        raise AssertionError(change)


@pytest.mark.parametrize("output", ["out.jsonl", "out.jsonl.gz", "out.parquet"])
@pytest.mark.parametrize("log, change, rows", [
    ("kjv.o2.we.jsonl", "negative message", [3]),
    ("kjv.o2.we.jsonl", "float token", [3]),
    ("kjv.o2.wc.jsonl", "completion twice", [3]),
    ("kjv.o2.we.jsonl", "string logp", [3]),
    ("kjv.o2.we.jsonl", "string logp", "all"),     # (a whole column of strings cast silently)
    ("kjv.o2.ce.jsonl", "number target", "all"),
    ("kjv.o2.wc.jsonl", "boolean user", "all"),
    ("kjv.o2.wr.jsonl", "no token", [3]),
    ("kjv.o2.we.jsonl", "nan logp", [3]),       # (QA: written to Parquet as NaN, exit 0)
    ("kjv.o2.ce.jsonl", "infinite logp", [3])])
def test_convert_writes_no_log_that_lmc_validate_refuses(tmp_path, output, log, change, rows):
    """lmc convert of a log holding a datum that `lmc validate` refuses fails with validate's
    message and writes nothing (it copied such a log to jsonl, exit 0, and to Parquet where
    Arrow took the values: a negative index, 2.0 as 2, a completion twice, a column of
    strings cast to numbers)."""
    data = [json.loads(line) for line in (DATA / log).read_text().splitlines()]
    for row in (range(len(data)) if rows == "all" else rows):
        _spoilt(data[row], change)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(datum) + "\n" for datum in data))
    validate = subprocess.run([sys.executable, "-m", "lmchallenge", "validate", str(bad)],
                              capture_output=True, text=True)
    assert validate.returncode == 2 and validate.stderr.startswith(f"lmc: error: {bad}:")
    run = subprocess.run([sys.executable, "-m", "lmchallenge", "convert", str(bad), "-o",
                          str(tmp_path / output)], capture_output=True, text=True)
    assert (run.returncode, run.stderr) == (2, validate.stderr)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.jsonl"]


def test_a_valid_log_with_negative_numbers_elsewhere_converts_column_wise(tmp_path, monkeypatch):
    """The column-wise checks refuse no valid log (negative log-probabilities, lists of
    completions that share strings across prefixes): the datum path made unusable, each
    game's log is still written, equal to the datum path's file."""
    import lmchallenge.logs.convert as module
    for log in ("kjv.o2.wc.jsonl", "kjv.o2.we.jsonl", "kjv.o2.ce.jsonl", "rails.wc.jsonl"):
        expected = tmp_path / f"{log}.datums.parquet"
        assert module.write_log(read_log(str(DATA / log)), str(expected)) > 0
        with monkeypatch.context() as patch:
            patch.setattr(module, "write_log", None)
            convert(str(DATA / log), str(tmp_path / f"{log}.parquet"))
        assert (tmp_path / f"{log}.parquet").read_bytes() == expected.read_bytes()


@pytest.mark.parametrize("source, said", [
    ("file", "{bad}:4: user 'x' is a string but user 7 of line 2 is an integer"),
    ("run_dir", "{bad}/part-00001.jsonl:1: user 'x' is a string but user 7 of "
                "{bad}/part-00000.jsonl:2 is an integer"),
    ("wide", "{bad}:4: user 1180591620717411303424 is an integer beyond 64 bits")])
def test_users_no_parquet_log_holds_are_named_by_file_and_line(tmp_path, source, said):
    """lmc convert -o X.parquet of a log of users of both types (a valid log) named the output
    and its datum number (`x.parquet: datum 4: ...`); now the log's file and line, as
    lmc run and lmc-dist name the corpus'."""
    data = [json.loads(line) for line in (DATA / "kjv.o2.we.jsonl").read_text().splitlines()[:6]]
    for i, datum in enumerate(data):
        datum["user"] = None if i == 0 else 7 if i < 3 else (2**70 if source == "wide" else "x")
    lines = [json.dumps(datum) + "\n" for datum in data]
    bad = tmp_path / ("run" if source == "run_dir" else "bad.jsonl")
    if source == "run_dir":
        bad.mkdir()
        (bad / "part-00000.jsonl").write_text("".join(lines[:3]))
        (bad / "part-00001.jsonl").write_text("".join(lines[3:]))
    else:
        bad.write_text("".join(lines))
    out = tmp_path / "out.parquet"
    run = subprocess.run([sys.executable, "-m", "lmchallenge", "convert", str(bad), "-o",
                          str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and not out.exists()
    assert run.stderr.startswith(f"lmc: error: {said.format(bad=bad)}"), run.stderr
    assert run.stderr.endswith(", or write the log as jsonl\n" if source != "wide" else
                               "; write the log as jsonl, or give the users as strings\n")


@pytest.mark.parametrize("source", ["file", "run_dir"])
@pytest.mark.parametrize("change, said", [
    ("extra", "the datum does not fit the Parquet columns fixed by the first datum/game "
              "(missing [], unexpected ['extra']); a Parquet log holds datums of one game with "
              "the keys ['character', 'logp', 'message', 'target', 'token', 'user'] (plus "
              "optional 'select')"),
    ("token", "field token: 99999999999999999999 does not fit a Parquet log's int64 column"),
    ("message", "field message: 99999999999999999999 does not fit a Parquet log's int64 column"),
])
def test_a_valid_log_no_parquet_log_holds_is_named_by_file_and_line(tmp_path, source, change, said):
    """A datum lmc validate takes but a Parquet log cannot hold (a key of its own, an index
    beyond 64 bits) is named by its file and line, not by the output and its number in the
    whole log (QA: `out.parquet: datum 5 does not fit ...`; an index beyond 64 bits was an
    OverflowError traceback); nothing is written."""
    data = [json.loads(line) for line in (DATA / "kjv.o2.we.jsonl").read_text().splitlines()[:6]]
    if change == "extra":
        data[4]["extra"] = 1
    else:
        data[4][change] = 99999999999999999999
    lines = [json.dumps(datum) + "\n" for datum in data]
    if source == "run_dir":
        bad = tmp_path / "run"
        bad.mkdir()
        (bad / "part-00000.jsonl").write_text("".join(lines[:3]))
        (bad / "part-00001.jsonl").write_text("".join(lines[3:]))
        where = f"{bad}/part-00001.jsonl:2"
    else:
        bad = tmp_path / "bad.jsonl"
        bad.write_text("".join(lines))
        where = f"{bad}:5"
    assert subprocess.run([sys.executable, "-m", "lmchallenge", "validate", str(bad)],
                          capture_output=True).returncode == 0
    out = tmp_path / "out.parquet"
    run = subprocess.run([sys.executable, "-m", "lmchallenge", "convert", str(bad), "-o",
                          str(out)], capture_output=True, text=True)
    assert (run.returncode, run.stderr) == (2, f"lmc: error: {where}: {said}\n")
    assert not out.exists()

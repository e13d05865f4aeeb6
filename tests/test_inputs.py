"""Bad input and a newcomer's path (issue 11, "What must hold" 7 and 8), on the console scripts:
every bad input is one line ``PROG: error: FILE[:LINE]: what is wrong`` with exit code 2, never a
traceback; run options after the game; one meaning of ``--format``; units named."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import math
import os
import random
import subprocess
import threading
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import BIN, DATA, PYTHON, free_port, toy_model_command

LMC, LMC_DIST = str(BIN / "lmc"), str(BIN / "lmc-dist")
SAMPLE = DATA / "kjv" / "test.sample.txt"
VOCAB = DATA / "vocab" / "american-english.no-possessive.txt"
PRETTY_LOGS = Path(__file__).parent / "data" / "pretty"


def run(*argv: str, stdin: bytes | None = None, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), input=stdin, capture_output=True, timeout=300, cwd=cwd, env=env)


def assert_error(result: subprocess.CompletedProcess, message: str, prog: str = "lmc") -> None:
    """Exit code 2 and exactly one line ``PROG: error: MESSAGE`` on stderr."""
    assert result.returncode == 2, result.stderr.decode()
    assert result.stderr.decode() == f"{prog}: error: {message}\n"


def write_rows(path: Path, rows: list[dict], prefix: bytes = b"") -> Path:
    path.write_bytes(prefix + "".join(json.dumps(r) + "\n" for r in rows).encode())
    return path


def model_script(tmp_path: Path, name: str, answer: str) -> str:
    """A shell model answering ``answer`` to every predict (train/clear: no answer)."""
    script = tmp_path / f"{name}.py"
    script.write_text("import sys\n"
                      "for line in sys.stdin:\n"
                      "    if line.startswith('predict'):\n"
                      f"        sys.stdout.write({answer!r} + '\\n'); sys.stdout.flush()\n")
    return f"{PYTHON} {script}"


# -- bad input: exit 2, FILE:LINE ------------------------------------------------------------

def test_lone_surrogate_is_named_with_its_line(tmp_path):
    corpus = tmp_path / "s.jsonl"
    corpus.write_text('{"user": "a", "text": "fine"}\n{"user": "a", "text": "x \\ud800 y"}\n')
    assert_error(run(LMC, "run", toy_model_command(), "we", str(corpus)),
                 f'{corpus}:2: "text" holds a lone surrogate \\ud800 (not a Unicode character)')
    corpus.write_text('{"user": "\\udfff", "text": "x"}\n')
    assert_error(run(LMC, "run", toy_model_command(), "wc", str(corpus)),
                 f'{corpus}:1: "user" holds a lone surrogate \\udfff (not a Unicode character)')


def test_lone_surrogate_under_lmc_dist(tmp_path):
    corpus = tmp_path / "s.jsonl"
    corpus.write_text('{"user": "a", "text": "x \\ud800 y"}\n')
    assert_error(run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                     "--run-dir", str(tmp_path / "run"), "--workers", "1"),
                 f'{corpus}:1: "text" holds a lone surrogate \\ud800 (not a Unicode character)',
                 prog="lmc-dist")


def corrupt_gzip(path: Path, log: bool = False) -> Path:
    """A gzip file whose deflate stream is damaged in the middle (zlib.error when read): 5,000
    lines of text, or with ``log`` of a ``we`` log."""
    rng = random.Random(0)
    lines = [f"line {i} " + " ".join(rng.choice(["alpha", "beta", "gamma"]) for _ in range(12))
             for i in range(5000)]
    if log:
        lines = [json.dumps({"user": None, "message": i, "token": 0, "character": 0,
                             "target": line, "logp": -1.5}) for i, line in enumerate(lines)]
    data = gzip.compress("".join(line + "\n" for line in lines).encode())
    for seed in range(1000):
        damaged = bytearray(data)
        rng = random.Random(seed)
        for i in range(len(damaged) // 2, len(damaged) // 2 + (4 if seed < 500 else 256)):
            damaged[i] = rng.randrange(256)
        try:
            gzip.decompress(bytes(damaged))
        except zlib.error:
            path.write_bytes(bytes(damaged))
            return path
        except (OSError, EOFError):
            continue
    raise AssertionError("no damage gave a zlib.error")


def test_gzip_corrupt_in_the_middle(tmp_path):
    corpus = corrupt_gzip(tmp_path / "c.txt.gz")
    result = run(LMC, "run", toy_model_command(), "we", str(corpus))
    assert result.returncode == 2
    message = result.stderr.decode()
    assert message.startswith(f"lmc: error: {corpus}:") and message.count("\n") == 1
    line = int(message[len(f"lmc: error: {corpus}:"):].split(":")[0])
    assert 100 < line < 5000   # where reading failed, in the middle
    assert "cannot read: Error -3 while decompressing data" in message
    dist = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
               str(tmp_path / "run"), "--workers", "1")
    assert_error(dist, message[len("lmc: error: "):-1], prog="lmc-dist")   # the same line
    log = corrupt_gzip(tmp_path / "c.jsonl.gz", log=True)
    said = set()
    for command in ("stats", "pretty", "validate", "convert"):
        result = run(LMC, command, str(log), *(["-o", "-"] if command == "convert" else []))
        assert result.returncode == 2 and "Traceback" not in result.stderr.decode()
        said.add(result.stderr.decode().split("\n")[-2])
    (error,) = said     # each reader names the same line
    assert error.startswith(f"lmc: error: {log}:") and ": cannot read: Error -3" in error
    assert 100 < int(error[len(f"lmc: error: {log}:"):].split(":")[0]) < 5000


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf_16_corpus_is_said_to_be_utf_16(tmp_path, encoding):
    """It was 'not valid UTF-8 (byte 0 of the line)' (QA): true, but the cause is one step
    away."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(("\ufeff" if encoding.endswith("be") else "").encode(encoding)
                       + "in the beginning\n".encode(encoding))
    message = (f"{corpus}:1: UTF-16 text (it starts with a UTF-16 byte order mark), not UTF-8: "
               "convert it (iconv -f UTF-16 -t UTF-8)")
    assert_error(run(LMC, "run", toy_model_command(), "we", str(corpus)), message)
    assert_error(run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                     "--run-dir", str(tmp_path / "run"), "--workers", "1"), message,
                 prog="lmc-dist")


def test_an_empty_gz_file_is_not_an_empty_text(tmp_path):
    """A .gz file of no bytes (a compression that failed) read as an empty corpus: an empty
    log, exit 0 (QA); gzip -t calls it broken, and so does every reader now."""
    from lmchallenge.corpus import EMPTY_GZIP
    corpus = tmp_path / "c.txt.gz"
    corpus.write_bytes(b"")
    assert_error(run(LMC, "run", toy_model_command(), "we", str(corpus)), f"{corpus}: {EMPTY_GZIP}")
    dist = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
               str(tmp_path / "run"), "--workers", "1")
    assert_error(dist, f"{corpus}: {EMPTY_GZIP}", prog="lmc-dist")
    assert not (tmp_path / "run").exists()
    log = tmp_path / "log.jsonl.gz"
    log.write_bytes(b"")
    assert_error(run(LMC, "stats", str(log)), f"{log}: {EMPTY_GZIP}")
    corpus.write_bytes(gzip.compress(b""))    # an empty text, compressed: an empty log
    assert run(LMC, "run", toy_model_command(), "we", str(corpus)).returncode == 0


@pytest.mark.parametrize("damage", ["truncated", "not UTF-8"])
def test_a_damaged_log_is_named_with_the_line_it_breaks_off_in(tmp_path, damage):
    lines = [json.dumps({"user": None, "message": i, "token": 0, "character": 0,
                         "target": f"word{i}", "logp": -1.5}) + "\n" for i in range(20000)]
    log = tmp_path / ("log.jsonl.gz" if damage == "truncated" else "log.jsonl")
    if damage == "truncated":
        data = gzip.compress("".join(lines).encode())
        log.write_bytes(data[:len(data) // 2])
        whole = b""
        with gzip.open(log, "rb") as f:
            try:
                while chunk := f.read1(1 << 16):
                    whole += chunk
            except EOFError:
                pass
        line = whole.count(b"\n") + 1
        why = "cannot read: Compressed file ended before the end-of-stream marker was reached"
    else:
        line = 12345
        lines[line - 1] = lines[line - 1].replace("word", "w\udcff", 1)
        log.write_bytes("".join(lines).encode("utf-8", "surrogateescape"))
        byte = lines[line - 1].encode("utf-8", "surrogateescape").index(b"\xff")
        why = f"not valid UTF-8 (byte {byte} of the line)"
    for command in ("stats", "pretty", "validate"):
        assert_error(run(LMC, command, str(log)), f"{log}:{line}: {why}")


def test_unwritable_output_before_the_model_starts(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\n")
    assert_error(run(LMC, "run", "--output", f"{a_file}/log.jsonl", toy_model_command(), "we", str(corpus)),
                 f"{a_file}/log.jsonl: cannot write: a parent is not a directory")
    assert_error(run(LMC, "run", toy_model_command(), "we", str(corpus), "--output", str(tmp_path)),
                 f"{tmp_path}: cannot write: Is a directory")
    assert_error(run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                     "--run-dir", f"{a_file}/run", "--workers", "1"),
                 f"{a_file}/run: cannot write the run dir: Not a directory", prog="lmc-dist")
    assert_error(run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                     "--run-dir", str(a_file), "--workers", "1"),
                 f"{a_file}: cannot write the run dir: not a directory", prog="lmc-dist")
    # a directory nothing can be made in (QA: it said that the lock file kept being replaced)
    if os.path.isdir("/proc/self"):
        assert_error(run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                         "--run-dir", "/proc/lmc-run", "--workers", "1"),
                     "/proc/lmc-run: cannot write the run dir: No such file or directory",
                     prog="lmc-dist")


def test_parquet_log_with_a_string_message_column(tmp_path):
    log = tmp_path / "bad.parquet"
    table = pa.table({"user": pa.array(["u"]), "message": pa.array(["0"], pa.large_string()),
                      "token": [0], "character": [0], "target": ["a"], "logp": [-1.0]})
    pq.write_table(table, log)
    for command in ("stats", "validate", "pretty", "convert"):
        extra = ["-o", str(tmp_path / "out.jsonl")] if command == "convert" else []
        assert_error(run(LMC, command, str(log), *extra),
                     f"{log}: column 'message' is large_string, not int64 as an LM Challenge log's")


@pytest.mark.parametrize("game, change, said", [
    ("we", lambda t: pa.Table.from_arrays([t["logp"], *t.columns], names=["logp", *t.column_names]),
     "not an LM Challenge log: column(s) ['logp'] more than once"),
    ("wc", lambda t: t.set_column(t.schema.get_field_index("completions"), "completions",
                                  pa.array([["a", "b"]] * len(t))),
     "column 'completions' is list<element: string>, not list<item: list<item: string>> as an LM "
     "Challenge log's"),
    ("wr", lambda t: t.set_column(t.schema.get_field_index("results"), "results",
                                  pa.array([[["a", "0", "-1"]]] * len(t))),
     "column 'results' is list<element: list<element: string>>, not list<item: struct<candidate: "
     "string, error: double, lm: double>> as an LM Challenge log's"),
    ("wr", lambda t: t.set_column(t.schema.get_field_index("results"), "results", pa.array(
        [[{"lm": -1.0, "error": 0.0, "candidate": "a"}]] * len(t))),   # (review: read by position)
     "column 'results' is list<element: struct<lm: double, error: double, candidate: string>>, not "
     "list<item: struct<candidate: string, error: double, lm: double>> as an LM Challenge log's"),
])
def test_a_parquet_log_of_an_odd_shape_is_refused_by_every_reader(tmp_path, game, change, said):
    """QA: a column twice, or completions of strings instead of lists of strings: a
    traceback in lmc stats and lmc compare, while lmc validate passed the first and lmc
    convert and lmc grep wrote a log that lmc validate refuses from the second."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\nc d e\n")
    good = tmp_path / "good.parquet"
    args = [str(VOCAB)] if game == "wr" else []
    assert run(LMC, "run", toy_model_command(), game, *args, str(corpus), "--output", str(good)).returncode == 0
    log = tmp_path / "odd.parquet"
    pq.write_table(change(pq.read_table(good)), log)
    for command in (["stats", log], ["validate", log], ["pretty", log], ["grep", "a", log],
                    ["compare", log, log], ["diff", log, log],
                    ["convert", log, "-o", tmp_path / "out.jsonl"]):
        assert_error(run(LMC, *map(str, command)), f"{log}: {said}")
    assert not (tmp_path / "out.jsonl").exists()


def test_a_lone_surrogate_in_a_jsonl_log_is_refused_by_every_reader(tmp_path):
    """QA: '"\\ud800"' is valid JSON but no text: lmc pretty and lmc diff ended in a
    UnicodeEncodeError traceback, lmc validate, grep and convert passed it.  A surrogate
    pair (as LM Challenge 5.2 writes an emoji) is a character."""
    row = '{"character": 0, "logp": -1.0, "message": 0, "target": "%s", "token": %d, "user": null}\n'
    log = tmp_path / "lone.jsonl"
    log.write_text(row % ("a", 0) + row % ("\\ud83d\\ude00", 1) + row % ("b\\uD800", 2))
    said = f"{log}:3: field target: holds a lone surrogate \\ud800 (not a Unicode character)"
    for command in (["stats", log], ["validate", log], ["pretty", log], ["pretty", "-o", "html", log],
                    ["grep", "a", log], ["compare", log, log], ["diff", log, log],
                    ["convert", log, "-o", tmp_path / "out.jsonl"]):
        assert_error(run(LMC, *map(str, command)), said)
    log.write_text(row % ("a", 0) + row % ("\\ud83d\\ude00", 1))
    assert run(LMC, "validate", str(log)).returncode == 0
    assert "\U0001f600" in run(LMC, "pretty", str(log)).stdout.decode()


def test_a_null_target_in_a_parquet_log_is_named_by_its_file_and_row(tmp_path):
    """QA: 'lmc: error: <parquet>: null target in a selected row'; a deselected row's may
    be null, as before."""
    table = pa.table({"user": pa.array(["u"] * 8), "message": [0] * 8, "token": list(range(8)),
                      "character": [0] * 8, "target": ["a", "b", None, "d", "e", "f", None, "h"],
                      "select": [True, True, False, True, True, True, None, True],
                      "logp": [-1.0] * 8})
    log = tmp_path / "null.parquet"
    pq.write_table(table, log, row_group_size=3)
    assert_error(run(LMC, "stats", str(log)), f"{log}:7: null target in a selected row")


def test_log_and_corpus_names_are_read_whatever_their_case_and_parquet_without_a_name_is_said(tmp_path):
    """QA: LOG.JSONL.GZ was read as text ('gzip-compressed data: give it as a file named
    .gz'); a Parquet log without .parquet (or on stdin) was 'not valid UTF-8 (byte 11)'."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\nc d e\n")
    parquet = tmp_path / "log.parquet"
    assert run(LMC, "run", toy_model_command(), "we", str(corpus), "--output", str(parquet)).returncode == 0
    expected = run(LMC, "stats", str(parquet)).stdout.replace(b"log.parquet", b"LOG")
    for name in ("LOG.PARQUET", "LOG.JSONL.GZ"):
        assert run(LMC, "convert", str(parquet), "-o", str(tmp_path / name)).returncode == 0
        assert run(LMC, "stats", str(tmp_path / name)).stdout.replace(name.encode(), b"LOG") == expected
    packed = tmp_path / "C.TXT.GZ"
    packed.write_bytes(gzip.compress(corpus.read_bytes()))
    assert (run(LMC, "run", toy_model_command(), "we", str(packed)).stdout
            == run(LMC, "run", toy_model_command(), "we", str(corpus)).stdout)
    nameless = tmp_path / "log"
    nameless.write_bytes(parquet.read_bytes())
    assert_error(run(LMC, "stats", str(nameless)),
                 f"{nameless}:1: Parquet data, not text: give it as a file named .parquet")
    assert_error(run(LMC, "stats", stdin=parquet.read_bytes()),
                 "-:1: Parquet data, not text: give it as a file named .parquet")


@pytest.mark.parametrize("command", [["stats", "-", "-"], ["validate", "-", "-"], ["diff", "-", "-"],
                                     ["stats", "LOG", "-", "-"], ["stats", "-", "/dev/stdin"]])
def test_standard_input_named_twice_is_a_usage_error(tmp_path, command):
    """QA: lmc stats - - read stdin, then an empty stdin: a second row of an empty log, exit 0."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"character": 0, "logp": -1.0, "message": 0, "target": "a", "token": 0, "user": null}\n')
    result = subprocess.run(f"cat {log} | {LMC} " + " ".join(str(log) if arg == "LOG" else arg
                                                             for arg in command),
                            shell=True, capture_output=True, timeout=300)   # (a pipe: review)
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().endswith("Error: standard input (-) can be read once: give it once\n")


def test_all_null_select_column_reads_as_selected(tmp_path):
    log = tmp_path / "nulls.parquet"
    table = pa.table({"user": pa.array([None, None], pa.null()), "message": [0, 0], "token": [0, 1],
                      "character": [0, 2], "target": ["a", "b"], "select": pa.array([None, None], pa.null()),
                      "logp": [-1.0, -2.0]})
    pq.write_table(table, log)
    stats = json.loads(run(LMC, "stats", str(log)).stdout)
    assert stats["entropy"]["mean"] == 1.5 and stats["skipped"] == 0.0


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b"\n", b"\n  \n"], ids=["bom", "blank", "blanks"])
def test_bom_and_leading_blank_lines_keep_the_json_format(tmp_path, prefix):
    rows = [{"user": "u", "text": "In the beginning"}, {"user": "v", "text": "was the word"}]
    plain = run(LMC, "run", toy_model_command(), "we", str(write_rows(tmp_path / "a.jsonl", rows)))
    odd = run(LMC, "run", toy_model_command(), "we", str(write_rows(tmp_path / "b.jsonl", rows, prefix)))
    assert odd.returncode == 0 and odd.stdout == plain.stdout
    assert [json.loads(line)["user"] for line in odd.stdout.splitlines()][:1] == ["u"]


def test_a_byte_order_mark_is_not_part_of_a_plain_text_corpus(tmp_path):
    """A BOM before the first line is dropped, in lmc run and lmc-dist alike, CRLF endings
    too: the log is that of the same text without them (LM Challenge 5.2 keeps the BOM as a
    character of the first message; docs/formats.md)."""
    text = "In the beginning\nwas the word\n"
    (tmp_path / "plain.txt").write_text(text)
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    plain = run(LMC, "run", toy_model_command(), "we", str(tmp_path / "plain.txt"))
    bom = run(LMC, "run", toy_model_command(), "we", str(tmp_path / "bom.txt"))
    assert bom.returncode == 0 and bom.stdout == plain.stdout
    assert json.loads(bom.stdout.splitlines()[0])["character"] == 0
    dist = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(tmp_path / "bom.txt"),
               "--run-dir", str(tmp_path / "run"), "--workers", "1", "--output", str(tmp_path / "d.jsonl"))
    assert dist.returncode == 0 and (tmp_path / "d.jsonl").read_bytes() == plain.stdout


@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", b"\n\n"], ids=["bom", "blank"])
def test_lmc_dist_detects_json_after_bom_and_blank_lines(tmp_path, prefix):
    from lmc_dist.partition import detect_format
    path = write_rows(tmp_path / "c.jsonl", [{"user": "u", "text": "x"}], prefix)
    assert detect_format(str(path)) == "json"
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert detect_format(str(gz)) == "json"


def test_integer_and_string_users_stay_apart(tmp_path):
    corpus = write_rows(tmp_path / "u.jsonl", [{"user": 1, "text": "a b"}, {"user": "1", "text": "c"},
                                               {"user": "1", "text": "d"}])
    log = [json.loads(line) for line in run(LMC, "run", "-t", toy_model_command(), "we", str(corpus)).stdout.splitlines()]
    assert [(d["user"], d["message"]) for d in log] == [(1, 0), (1, 0), ("1", 0), ("1", 1)]
    stats = json.loads(run(LMC, "stats", "-", stdin="".join(json.dumps(d) + "\n" for d in log).encode()).stdout)
    assert stats["users"] == 2
    assert run(LMC, "validate", stdin="".join(json.dumps(d) + "\n" for d in log).encode()).returncode == 0
    corpus.write_text('{"user": 1.5, "text": "a"}\n')
    assert_error(run(LMC, "run", toy_model_command(), "we", str(corpus)),
                 f'{corpus}:1: "user"/"userId" must be a string, an integer or null')


def test_a_user_whose_rows_come_back_is_said_by_lmc_dist_as_by_lmc_run(tmp_path):
    rows = [{"user": f"u{i % 3}", "timestamp": i, "text": "a b"} for i in range(12)]
    corpus = write_rows(tmp_path / "t.jsonl", rows)     # in time order: users interleaved
    said = (f'{corpus}:4: user "u0" comes back after other users\' rows: as in LM Challenge '
            "5.x, a group is a run of one user's consecutive rows, so the corpus' 3 users make "
            "12 groups; lmc stats counts each as a user, and --train clears the model before "
            "each. For one group a user, sort the corpus by user, keeping each user's rows in order")
    single = run(LMC, "run", "-t", toy_model_command(), "we", str(corpus))
    assert single.returncode == 0 and single.stderr.decode() == f"WARNING\t{said}\n"
    dist = run(LMC_DIST, "run", toy_model_command(), "we", "-t", "--input", str(corpus),
               "--run-dir", str(tmp_path / "run"), "--workers", "1", "--output", str(tmp_path / "d.jsonl"))
    assert dist.returncode == 0 and f"WARNING\t{said}\n" in dist.stderr.decode()
    assert (tmp_path / "d.jsonl").read_bytes() == single.stdout
    assert json.loads(dist.stdout)["users"] == 12           # (5.x's count: runs of a user)
    rows.sort(key=lambda row: row["user"])                  # sorted by user: one group each
    write_rows(corpus, rows)
    for result in (run(LMC, "run", "-t", toy_model_command(), "we", str(corpus)),
                   run(LMC_DIST, "run", toy_model_command(), "we", "-t", "--input", str(corpus),
                       "--run-dir", str(tmp_path / "sorted"), "--workers", "1")):
        assert result.returncode == 0 and "WARNING" not in result.stderr.decode()
    assert json.loads(result.stdout)["users"] == 3


@pytest.mark.reference
def test_integer_users_as_the_reference_logs_them(tmp_path, reference_lmc):
    corpus = write_rows(tmp_path / "u.jsonl", [{"user": 1, "text": "a b"}, {"user": "1", "text": "c"}])
    ours = run(LMC, "run", "-t", toy_model_command(), "we", str(corpus)).stdout
    ref = run(str(reference_lmc), "run", "-t", toy_model_command(), "we", stdin=corpus.read_bytes()).stdout
    assert ours.splitlines() == ref.splitlines()


def test_memory_of_one_long_line_is_bounded(tmp_path):
    """A 200,000-character message (2,000 words of 99 letters): every context is a prefix of
    it, 200 MB in all; peak RSS of lmc and the model stays far below (was about 600 MB)."""
    rng = random.Random(1)
    words = ["".join(rng.choice("abcdefgh") for _ in range(99)) for _ in range(2000)]
    corpus = tmp_path / "long.txt"
    corpus.write_text(" ".join(words) + "\n")
    script = tmp_path / "measure.py"
    script.write_text("import resource, subprocess, sys\n"
                      "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
                      "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    result = run(PYTHON, str(script), LMC, "run", toy_model_command(), "we", str(corpus))
    code, max_rss_kib = map(int, result.stdout.split())
    assert code == 0, result.stderr.decode()
    assert max_rss_kib < 200 * 1024


def test_closed_stdout_pipe_ends_quietly(tmp_path):
    result = subprocess.run(["bash", "-c", f'set -o pipefail; "{LMC}" run "{toy_model_command()}" wc '
                             f'"{SAMPLE}" | head -1 >/dev/null; echo "${{PIPESTATUS[0]}}"'],
                            capture_output=True, timeout=300)
    assert result.stdout.decode() == "141\n"
    assert result.stderr.decode() == ""


# -- a newcomer's path -----------------------------------------------------------------------

def test_run_options_after_the_game_and_corpus(tmp_path):
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    assert run(LMC, "run", "-t", "--output", str(before), toy_model_command(), "wc", str(SAMPLE)).returncode == 0
    result = run(LMC, "run", toy_model_command(), "wc", str(SAMPLE), "--output", str(after), "--train")
    assert result.returncode == 0, result.stderr.decode()
    assert after.read_bytes() == before.read_bytes() and before.stat().st_size > 0
    result = run(LMC, "run", "--output", str(before), toy_model_command(), "we", str(SAMPLE), "--output", str(after))
    assert result.returncode == 2
    assert result.stderr.decode().endswith(
        "Error: --output is given twice, before the game and after it: give it once\n")


def test_stats_csv_of_mixed_games(tmp_path):
    wc, we = str(PRETTY_LOGS / "kjv.o2.wc.jsonl"), str(PRETTY_LOGS / "kjv.o2.we.jsonl")
    result = run(LMC, "stats", "-o", "csv", wc, we)
    assert result.returncode == 0, result.stderr.decode()
    rows = list(csv.DictReader(io.StringIO(result.stdout.decode())))
    assert [r["log"] for r in rows] == [wc, we]
    assert rows[0]["prediction.mrr"] and rows[0]["entropy.mean"] == ""
    assert rows[1]["entropy.mean"] and rows[1]["prediction.mrr"] == ""


def test_lmc_dist_format_is_the_corpus_format(tmp_path):
    corpus = write_rows(tmp_path / "c.txt", [{"user": "u", "text": "a b"}])
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                 "--run-dir", str(tmp_path / "run"), "--format", "jsonl")
    assert result.returncode == 2
    assert result.stderr.decode().endswith(
        "Error: Invalid value for '-f' / '--format': 'jsonl' is a partition file format: --format is "
        "the corpus format (auto, text, json), as for lmc run; write --part-format jsonl\n")
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                 str(tmp_path / "run"), "--format", "text", "--part-format", "jsonl", "--workers", "1")
    assert result.returncode == 0, result.stderr.decode()
    part, = (tmp_path / "run").glob("part-*")
    datum = json.loads(gzip.decompress(part.read_bytes()).splitlines()[0])
    assert part.name == "part-00000.jsonl.gz" and datum["user"] is None   # read as plain text


def test_run_options_between_predictor_and_game(tmp_path):
    """``lmc run PREDICTOR -o ... wc`` (as docs/neural.md showed it) is the run of the options
    before PREDICTOR: ``-o VALUE``, ``-oVALUE``, ``--timeout=VALUE``, flags and counters."""
    before, between = tmp_path / "before.jsonl", tmp_path / "between.jsonl"
    assert run(LMC, "run", "-t", "--output", str(before), toy_model_command(), "wc",
               str(SAMPLE)).returncode == 0
    result = run(LMC, "run", toy_model_command(), "-o{}", "--train", "--timeout=30", "-vv",
                 "--output", str(between), "wc", str(SAMPLE))
    assert result.returncode == 0, result.stderr.decode()
    assert between.read_bytes() == before.read_bytes() and before.stat().st_size > 0
    assert "DEBUG" in result.stderr.decode()                          # -vv was read as -vv
    misplaced = run(LMC, "run", toy_model_command(), "-n", "5", "wr", "vocab.txt", str(SAMPLE))
    assert misplaced.returncode == 2 and misplaced.stderr.decode().endswith(
        "Error: -n is an option of wr: give it after the game (lmc run PREDICTOR wr -n ...)\n")
    misspelt = run(LMC, "run", "--outptu", "x", toy_model_command(), "wc", str(SAMPLE))
    assert misspelt.returncode == 2 and misspelt.stderr.decode().endswith(
        "Error: No such option '--outptu'. Did you mean '--output'?\n")


@pytest.mark.slow
def test_lmc_dist_options_before_the_game(tmp_path):
    """``lmc-dist run`` takes its options after the game, and before it too (moved there),
    before or after PREDICTOR: the same log. Without PREDICTOR and a game to put a game's
    option after, or for an option that takes a value in one game and not in another, it says
    where it goes (a misspelt option is click's error)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\nd e\n")
    logs = []
    for k, args in enumerate([
            [toy_model_command(), "we", "--workers", "1", "--part-format", "jsonl"],
            ["--workers", "1", toy_model_command(), "--part-format=jsonl", "we"],
            ["-v", toy_model_command(), "--workers=1", "we", "--part-format", "jsonl"]]):
        result = run(LMC_DIST, "run", *args, "--input", str(corpus), "--run-dir", str(tmp_path / f"r{k}"))
        assert result.returncode == 0, result.stderr.decode()
        part, = (tmp_path / f"r{k}").glob("part-*")
        assert part.name == "part-00000.jsonl.gz"
        logs.append(gzip.decompress(part.read_bytes()))
    assert logs[0] == logs[1] == logs[2] and logs[0].count(b"\n") == 5
    result = run(LMC_DIST, "run", "-o", '{"a": 1}', toy_model_command())
    assert result.returncode == 2
    assert result.stderr.decode().endswith(
        "Error: -o is an option of the games: give it after the game (lmc-dist run PREDICTOR "
        "GAME -o ...)\n")
    ambiguous = run(LMC_DIST, "run", toy_model_command(), "-p", "wc", "--input", "c.txt")
    assert ambiguous.returncode == 2 and ambiguous.stderr.decode().endswith(   # wr -p VALUE
        "Error: -p is an option of the games: give it after the game (lmc-dist run PREDICTOR "
        "GAME -p ...)\n")
    misspelt = run(LMC_DIST, "run", "--input-file", "c.txt", toy_model_command(), "we")
    assert misspelt.returncode == 2
    assert misspelt.stderr.decode().endswith("Error: No such option '--input-file'.\n")
    unknown = run(LMC_DIST, "run", toy_model_command(), "--workers", "1", "wx", "--input", "c.txt")
    assert unknown.returncode == 2 and unknown.stderr.decode().endswith("Error: No such command 'wx'.\n")


def test_units_are_named():
    help_text = run(LMC, "stats", "--help").stdout.decode()
    assert "cross-entropy in nats" in help_text
    text = run(LMC, "stats", "-o", "text", str(PRETTY_LOGS / "kjv.o2.we.jsonl"))
    assert text.returncode == 0
    mean, = [line for line in text.stdout.decode().splitlines() if line.startswith("entropy.mean")]
    assert mean.split()[1:6] == ["4.94147", "nats", "per", "scored", "token"]
    assert "bits" in mean and "perplexity" in mean
    assert "nats" in run(LMC, "run", "x", "we", "--help").stdout.decode()
    # -H: sums, not the fractions the labels said
    raw = dict(line.split(None, 1) for line in run(
        LMC, "stats", "-H", "-o", "text", str(PRETTY_LOGS / "kjv.o2.wc.jsonl")).stdout.decode().splitlines()
        if line.startswith(("prediction.hit", "completion.", "prediction.srr")))
    # --by rows are ratios though they count their tokens
    by = run(LMC, "stats", "--by", "message-length", "-o", "text", str(PRETTY_LOGS / "kjv.o2.wc.jsonl"))
    assert "  Hit@1" in by.stdout.decode() and "among the first" not in by.stdout.decode()
    assert {key: value.split(None, 1)[1] for key, value in raw.items()} == {
        "prediction.srr": "sum of reciprocal ranks",
        "prediction.hit": "tokens with the target among the predictions",
        **{f"prediction.hit{n}": f"tokens with the target among the first {n} predictions" for n in (1, 3, 10, 20)},
        "completion.characters": "characters saved", "completion.tokens": "tokens completed"}


def test_ce_with_a_word_model_warns_once(tmp_path):
    words = model_script(tmp_path, "words", "the\t-1")
    result = run(LMC, "run", words, "ce", str(SAMPLE))
    assert result.returncode == 0
    warnings = [line for line in result.stderr.decode().splitlines() if line.startswith("WARNING\tce:")]
    assert warnings == ["WARNING\tce: the model answered 'the', not one character, when asked to "
                        "score 'T': is it a word model? ce scores characters (a character model: "
                        "lmc-ngram train --chars); with a word model its statistics mean little"]
    quiet = run(LMC, "run", toy_model_command(), "ce", str(SAMPLE))
    assert quiet.returncode == 0 and b"ce: the model answered" not in quiet.stderr


@pytest.mark.slow
def test_a_wait_for_the_scheduler_is_said(tmp_path):
    """A ``--scheduler`` that does not answer within 2 s: a warning says what the run waits
    for, and for how long (Dask's connect timeout, 5 s here), before the error."""
    corpus = write_rows(tmp_path / "c.jsonl", [{"text": "a b"}])
    address = f"tcp://127.0.0.1:{free_port()}"      # a port nothing listens on
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                 str(tmp_path / "run"), "--scheduler", address, "--workers", "1",
                 env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"})
    assert result.returncode == 2
    warning, error = result.stderr.decode().splitlines()
    assert warning == (f"WARNING\tno answer yet from the Dask scheduler at {address}: waiting up "
                       "to 5 s (Dask's distributed.comm.timeouts.connect)")
    assert error.startswith(f"lmc-dist: error: cannot reach the Dask scheduler at {address} (")


@pytest.mark.parametrize("address, why", [
    ("notanaddress", "missing port number in address 'notanaddress'"),
    ("tcp://localhost", "missing port number in address 'localhost'"),
    ("tcp://localhost:abc", "invalid literal for int() with base 10: 'abc'"),
    ("foo://bar:1", "unknown scheme 'foo'; one of tcp, tls, ws, wss"),
    ("tcp://127.0.0.1:99999", "port 99999 is not from 1 to 65535"),   # (it waited 30 s)
    ("localhost:0", "port 0 is not from 1 to 65535"),
    ("ws://127.0.0.1:70000", "port 70000 is not from 1 to 65535"),
])
def test_a_malformed_scheduler_address_is_refused_before_any_work(tmp_path, address, why):
    corpus = write_rows(tmp_path / "c.jsonl", [{"text": "a b"}])
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                 str(tmp_path / "run"), "--scheduler", address)
    assert result.returncode == 2
    assert result.stderr.decode().endswith(
        f"Error: Invalid value for '--scheduler': {address!r} is not a Dask scheduler address, "
        f"SCHEME://HOST:PORT such as tcp://127.0.0.1:8786 ({why})\n")
    assert not (tmp_path / "run").exists()


def test_a_scheduler_host_whose_name_does_not_resolve_is_refused_at_once(tmp_path):
    """QA: it waited Dask's connect timeout (30 s), then said 'Timed out trying to connect'."""
    corpus = write_rows(tmp_path / "c.jsonl", [{"text": "a b"}])
    for scheme in ("tcp", "wss"):
        result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                     "--run-dir", str(tmp_path / "run"), "--scheduler",
                     f"{scheme}://no-such-host.invalid:8786", "--workers", "1")
        assert result.returncode == 2
        assert re.fullmatch(rf"lmc-dist: error: cannot reach the Dask scheduler at "
                            rf"{scheme}://no-such-host.invalid:8786: its host "
                            r"'no-such-host.invalid' is not found: [^\n]+\n",
                            result.stderr.decode()), result.stderr
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("settings, why", [
    ({}, "a tls:// address needs the client's TLS certificates, and Dask's configuration gives "
         "none: set distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and "
         "distributed.comm.tls.client.key, e.g. as DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
         "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT and DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"),
    ({"CA_FILE": "{tmp}/ca.pem", "CLIENT__CERT": "{tmp}/c.pem"},
     "distributed.comm.tls.ca-file of Dask's configuration is {tmp}/ca.pem, which does not exist"),
])
def test_a_tls_scheduler_without_the_clients_certificates_is_one_line(tmp_path, settings, why):
    """QA: without them distributed raised "TypeError: TLS expects a ssl_context argument" as
    a traceback (exit 1); now at once, before the run dir is made (deploy/README.md, TLS)."""
    corpus = write_rows(tmp_path / "c.jsonl", [{"text": "a b"}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_DISTRIBUTED__COMM__TLS")}
    env.update({f"DASK_DISTRIBUTED__COMM__TLS__{k}": v.format(tmp=tmp_path) for k, v in settings.items()})
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus), "--run-dir",
                 str(tmp_path / "run"), "--scheduler", f"tls://127.0.0.1:{free_port()}", env=env)
    assert_error(result, f"cannot reach the Dask scheduler at tls://127.0.0.1:"
                 f"{result.args[-1].rsplit(':', 1)[1]}: {why.format(tmp=tmp_path)}", "lmc-dist")
    assert not (tmp_path / "run").exists()


def test_wr_fit_below_the_base_warns_and_reports_a_fit_at_least_base(tmp_path):
    silent = model_script(tmp_path, "silent", "")
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:3]))
    log = run(LMC, "run", silent, "wr", str(VOCAB), str(corpus))
    assert log.returncode == 0
    result = run(LMC, "stats", stdin=log.stdout)
    stats = json.loads(result.stdout)["reranking"]
    assert stats["accuracy"] == 0.0 < stats["base_accuracy"]   # LM Challenge 5.x's fit, kept
    assert "accuracy_at_least_base" not in stats               # 5.x's fields alone
    warning = result.stderr.decode()
    assert warning.startswith(
        "WARNING\twr: the reranking fit ends below the error model alone: 0 tokens correct vs ")
    assert warning.rstrip().endswith("(lmc stats --derived: reranking.accuracy_at_least_base)")
    derived = json.loads(run(LMC, "stats", "--derived", stdin=log.stdout).stdout)["reranking"]
    assert derived["accuracy_at_least_base"] == derived["base_accuracy"] > 0


@pytest.mark.parametrize("corpus_rows, workers, message", [
    pytest.param([{"text": "a b"}], ["--workers", "1"], "cannot reach the Dask scheduler at {address} (",
                 marks=pytest.mark.slow),
    ([{"text": "a b"}], [], "cannot reach the Dask scheduler at {address} ("),   # asked for its size
    ([{"text": "a"}, {"user": "x"}], ["--workers", "1"], '{corpus}:2: row has no "text"'),
])
def test_an_unreachable_scheduler_is_one_line_and_a_bad_corpus_is_named_first(
        tmp_path, corpus_rows, workers, message):
    """No traceback for a wrong --scheduler address; when the corpus is bad too (it is scanned
    while the client connects), the corpus' error is the one reported."""
    corpus = write_rows(tmp_path / "c.jsonl", corpus_rows)
    address = f"tcp://127.0.0.1:{free_port()}"      # a port nothing listens on
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                 "--run-dir", str(tmp_path / "run"), "--scheduler", address, *workers,
                 env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert result.returncode == 2, result.stderr.decode()
    expected = "lmc-dist: error: " + message.format(address=address, corpus=corpus)
    assert result.stderr.decode().startswith(expected), result.stderr.decode()
    assert result.stderr.decode().count("\n") == 1, result.stderr.decode()


# -- a corpus that can be read only once (a pipe) --------------------------------------------

def fifo_of(tmp_path: Path, data: bytes) -> tuple[Path, threading.Thread]:
    """A named pipe that a thread fills with ``data`` once a reader opens it."""
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)

    def fill() -> None:
        try:
            with open(fifo, "wb") as f:
                f.write(data)
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=fill, daemon=True)
    writer.start()
    return fifo, writer


def test_lmc_run_reads_a_pipe_corpus_once_and_logs_all_of_it(tmp_path):
    corpus = b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:6])
    (tmp_path / "c.txt").write_bytes(corpus)
    from_file = run(LMC, "run", toy_model_command(), "we", str(tmp_path / "c.txt"))
    fifo, writer = fifo_of(tmp_path, corpus)
    from_pipe = run(LMC, "run", toy_model_command(), "we", str(fifo))
    writer.join(5)
    assert from_pipe.returncode == 0, from_pipe.stderr.decode()
    assert from_pipe.stdout == from_file.stdout and from_file.stdout.count(b"\n") > 50


def test_lmc_dist_refuses_a_pipe_corpus_before_making_the_run_dir(tmp_path):
    fifo, writer = fifo_of(tmp_path, b"in the beginning\n")
    result = run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(fifo),
                 "--run-dir", str(tmp_path / "rd"), "--workers", "1")
    assert_error(result, f"{fifo}: a pipe or standard input, not a file: lmc-dist reads the "
                         "corpus by byte ranges on the workers; write it to a file first (lmc run "
                         "reads pipes)", prog="lmc-dist")
    assert not (tmp_path / "rd").exists()
    with open(fifo, "rb"):   # let the writer finish
        pass
    writer.join(5)


@pytest.mark.parametrize("count", [0, 1])
def test_wr_takes_no_or_one_candidate_as_5_2_does(tmp_path, count):
    """5.2 takes -n 0 and -n 1 (each token's candidates are then its target and its typo);
    they were refused as out of range (QA)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning god created the heaven and the earth\n" * 3)
    result = run(LMC, "run", toy_model_command(), "wr", "-n", str(count),
                 str(DATA / "vocab" / "american-english.no-possessive.txt"), str(corpus))
    assert result.returncode == 0, result.stderr.decode()
    datums = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert len(datums) == 30
    for datum in datums:
        candidates = [candidate for candidate, _, _ in datum["results"]]
        assert set(candidates) == {datum["target"], datum["verbatim"]}


@pytest.mark.parametrize("prog, argv, message", [
    ("lmc", ["--timeout", "-1"], "Invalid value for '--timeout': -1.0 is not in the range 0<x<=1000000000.0."),
    ("lmc", ["--timeout", "nan"], "Invalid value for '--timeout': nan is not a finite number"),
    ("lmc", ["--timeout", "inf"], "Invalid value for '--timeout': inf is not in the range 0<x<=1000000000.0."),
    ("lmc", ["-o", '{"positional": 5}'], 'Invalid value for --options: "positional" must be a '
                                         "JSON list (the arguments before the named ones)"),
    ("lmc", ["wr", "-p", "nan"], "Invalid value for '-p' / '--p-anykey': nan is not a finite number"),
    ("lmc", ["wr", "--error-chars", ""],
     "Invalid value for '--error-chars': must name at least one character"),
    ("lmc-dist", ["--timeout", "nan"], "Invalid value for '--timeout': nan is not a finite number"),
    ("lmc-dist", ["-o", '{"positional": "a"}'], 'Invalid value for --options: "positional" must '
                                                "be a JSON list (the arguments before the named ones)"),
])
def test_run_option_values_out_of_range_are_usage_errors(tmp_path, prog, argv, message):
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\n")
    game = ["wr", *argv[1:], str(VOCAB)] if argv[0] == "wr" else ["we", *argv]
    place = ["--input", str(corpus), "--run-dir", str(tmp_path / "rd"), "--workers", "1"] \
        if prog == "lmc-dist" else [str(corpus)]
    result = run(LMC if prog == "lmc" else LMC_DIST, "run", toy_model_command(), *game, *place)
    assert result.returncode == 2 and result.stderr.decode().rstrip().endswith(f"Error: {message}")
    assert b"Traceback" not in result.stderr and not (tmp_path / "rd").exists()


@pytest.mark.parametrize("argv, name", [
    (["lmc", "run", "MODEL", "we", "CORPUS", "--output", ""], "'--output'"),
    (["lmc", "run", "MODEL", "we", ""], "'[CORPUS]'"),
    (["lmc", "run", "", "we", "CORPUS"], "'PREDICTOR'"),
    (["lmc-dist", "run", "MODEL", "we", "--input", "", "--run-dir", "RD"], "'--input'"),
    (["lmc-dist", "run", "MODEL", "we", "--input", "CORPUS", "--run-dir", ""], "'--run-dir'"),
    (["lmc-dist", "run", "MODEL", "we", "--input", "CORPUS", "--run-dir", "RD", "--output", ""],
     "'--output'"),
    (["lmc-dist", "run", "", "we", "--input", "CORPUS", "--run-dir", "RD"], "'PREDICTOR'"),
    (["lmc", "stats", "LOG", ""], "'[LOG]...'"),
    (["lmc", "validate", ""], "'[LOG]...'"),
    (["lmc", "convert", "LOG", "-o", ""], "'-o' / '--output'"),
    (["lmc", "grep", "x", "LOG", "-o", ""], "'-o' / '--output'"),
    (["lmc-ngram", "train", "", "-o", "RD"], "'CORPUS'"),
    (["lmc-ngram", "train", "CORPUS", "-o", ""], "'-o' / '--output'"),
    (["lmc-neural", "skeleton", "CORPUS", ""], "'OUT_DIR'"),
    (["lmc-neural", "unpack", "CORPUS", ""], "'OUT_DIR'"),
])
def test_an_empty_path_or_model_command_is_a_usage_error(tmp_path, argv, name):
    """QA: an empty path (``--input ""``, an unset shell variable) was made absolute, the
    current directory: ``lmc-dist`` said "/tmp: Is a directory", ``lmc run --output ""``
    "cannot write" there; an empty model command was a shell that exited at once."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\n")
    log = PRETTY_LOGS / "kjv.o2.we.jsonl"
    names = {"MODEL": toy_model_command(), "CORPUS": str(corpus), "LOG": str(log),
             "RD": str(tmp_path / "rd")}
    result = run(str(BIN / argv[0]), *[names.get(a, a) for a in argv[1:]], cwd=tmp_path)
    assert result.returncode == 2, result.stderr.decode()
    assert result.stderr.decode().rstrip().endswith(f"Error: Invalid value for {name}: an empty string")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["stats"], ["pretty"], ["convert", "-o", "-"]])
def test_a_full_disk_behind_stdout_is_one_line_not_a_traceback(argv):
    log = str(PRETTY_LOGS / "kjv.o2.we.jsonl")
    with open("/dev/full", "wb") as full:
        result = subprocess.run([LMC, *argv, log], stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert result.returncode == 2
    assert result.stderr.decode() == "lmc: error: cannot write the output: No space left on device\n"


def test_a_gzipped_corpus_not_named_gz_is_said_to_be_gzip(tmp_path):
    packed = gzip.compress(b"in the beginning\n")
    (tmp_path / "c.txt").write_bytes(packed)
    message = "gzip-compressed data, not text: give it as a file named .gz, or decompress it (zcat)"
    assert_error(run(LMC, "run", toy_model_command(), "we", str(tmp_path / "c.txt")),
                 f"{tmp_path / 'c.txt'}:1: {message}")
    assert_error(run(LMC, "run", toy_model_command(), "we", stdin=packed), f"<stdin>:1: {message}")


@pytest.mark.parametrize("argv", [["stats"], ["stats", "-n", "5"], ["validate"], ["grep", "x"],
                                  ["pretty"]])
def test_a_log_on_stdin_that_is_gzip_or_cut_short_is_said_alike_by_every_reader(argv, tmp_path):
    # QA: lmc stats alone said "-: not UTF-8: invalid start byte at byte 1" for gzip on
    # stdin, and "(column 1)" for a line cut short where the others said column 8
    line = b'{"character":0,"logp":-1,"message":0,"target":"a","token":0,"user":null}\n'
    message = "gzip-compressed data, not text: give it as a file named .gz, or decompress it (zcat)"
    assert_error(run(LMC, *argv, stdin=gzip.compress(line)), f"-:1: {message}")
    assert_error(run(LMC, *argv, stdin=b"\xff\xfe" + "a b".encode("utf-16-le")),
                 "-:1: UTF-16 text (it starts with a UTF-16 byte order mark), not UTF-8: convert "
                 "it (iconv -f UTF-16 -t UTF-8)")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(line + line[:24] + b"\n")      # ...,"logp":-1
    assert_error(run(LMC, *argv, str(cut)), f"{cut}:2: invalid JSON: Expecting ',' delimiter (column 25)")


def test_options_that_are_neither_json_nor_a_file_say_so(tmp_path):
    (tmp_path / "bad.json").write_text("{bad")
    missing = run(LMC, "run", "-o", "missing.json", toy_model_command(), "we", stdin=b"a\n")
    assert missing.returncode == 2 and missing.stderr.decode().rstrip().endswith(
        "Error: Invalid value for '-o' / '--options': not JSON, nor a file of that name: "
        "Expecting value: line 1 column 1 (char 0)")
    log = run(LMC, "run", toy_model_command(), "we", "-o", "out.jsonl.gz", stdin=b"a\n")
    assert log.returncode == 2 and log.stderr.decode().rstrip().endswith(
        "not JSON, nor a file of that name: Expecting value: line 1 column 1 (char 0) "
        "(a log is written with --output, not -o)")
    bad = run(LMC, "run", "-o", str(tmp_path / "bad.json"), toy_model_command(), "we", stdin=b"a\n")
    assert bad.returncode == 2 and f"'--options': {tmp_path / 'bad.json'}: not JSON: " in bad.stderr.decode()


def test_statistics_that_are_not_finite_are_warned_about(tmp_path):
    log = tmp_path / "nan.jsonl"
    log.write_text('{"character": 0, "logp": NaN, "message": 0, "target": "a", "token": 0, "user": null}\n')
    result = run(LMC, "stats", str(log))
    assert result.returncode == 0 and math.isnan(json.loads(result.stdout)["entropy"]["mean"])
    assert result.stderr.decode() == (f"WARNING\t{log}: entropy.mean not finite: the log holds a "
                                      f"NaN or infinite score (lmc validate {log} names the first), "
                                      "or scores whose sum is beyond the largest float\n")
    # with every option of lmc stats, and in lmc compare (no numpy warning, no traceback):
    # 4 scores of -1e308 sum beyond the largest float (an OverflowError traceback)
    huge = tmp_path / "huge.jsonl"
    huge.write_text("".join(json.dumps({"character": 2 * i, "logp": -1e308, "message": 0, "target": "ab",
                                        "token": i, "user": f"u{i % 2}"}) + "\n" for i in range(4)))
    warning = (f"WARNING\t{huge}: entropy.mean not finite: the log holds a NaN or infinite score "
               f"(lmc validate {huge} names the first), or scores whose sum is beyond the largest float")
    for options in ([], ["--confidence", "0.9", "--resamples", "400"], ["--derived"], ["--by", "user"]):
        result = run(LMC, "stats", *options, str(huge))
        assert result.returncode == 0, result.stderr
        assert [line for line in result.stderr.decode().splitlines() if "rough" not in line] == [warning]
        assert all(json.loads(line)["entropy"]["mean"] == math.inf for line in result.stdout.splitlines())
    result = run(LMC, "compare", "-o", "json", "--resamples", "400", str(huge), str(huge))
    assert result.returncode == 0
    assert [line for line in result.stderr.decode().splitlines()
            if "rough" not in line and "paired bootstrap's p-values" not in line] == []
    mean = json.loads(result.stdout)["metrics"]["entropy.mean"]
    assert mean["delta"] is None and mean["note"].startswith("not comparable: not finite")
    # a log that scores nothing has no figure (0 / 0), not a non-finite one
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text(huge.read_text().replace("-1e+308", "null"))
    finite = tmp_path / "finite.jsonl"
    finite.write_text(huge.read_text().replace("-1e+308", "-2.5"))
    for logs in ([nothing, finite], [finite, nothing]):
        result = run(LMC, "compare", "-o", "json", "--resamples", "400", *map(str, logs))
        assert result.returncode == 0 and b"not finite" not in result.stderr + result.stdout
        note = json.loads(result.stdout)["metrics"]["entropy.mean"]["note"]
        assert note.startswith("not comparable: entropy fingerprints differ")


def test_lmc_dist_output_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\n")
    (tmp_path / "adir.txt").mkdir()
    assert_error(run(LMC_DIST, "run", toy_model_command(), "we", "--input", str(corpus),
                     "--run-dir", str(tmp_path / "rd"), "--workers", "1",
                     "--output", str(tmp_path / "adir.txt")),
                 f"{tmp_path / 'adir.txt'}: cannot write: Is a directory", prog="lmc-dist")
    assert not (tmp_path / "rd").exists()


def _commands(command, path=()):
    """Every (path, click command) under ``command``, groups included."""
    import click

    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from _commands(command.get_command(ctx, name), path + (name,))


def test_every_number_option_refuses_nan_and_the_infinities():
    # click.FloatRange lets "nan" through (every comparison with NaN is false), and a float
    # option lets anything through: each ran a whole job, then failed in a traceback
    import click

    from lmc_dist.cli import cli as dist_cli
    from lmchallenge.cli import cli as lmc_cli
    from lmchallenge.cli.neural import cli as neural_cli
    from lmchallenge.cli.ngram import cli as ngram_cli
    from lmchallenge.cli.options import FiniteFloatRange

    loose, checked = [], 0
    for root, name in ((lmc_cli, "lmc"), (dist_cli, "lmc-dist"), (ngram_cli, "lmc-ngram"),
                       (neural_cli, "lmc-neural")):
        for path, command in _commands(root):
            for param in command.params:
                if isinstance(param.type, (click.types.FloatParamType, click.FloatRange)):
                    checked += 1
                    if not isinstance(param.type, FiniteFloatRange):
                        loose.append(" ".join((name, *path, param.opts[0])))
    assert not loose
    assert checked >= 8


@pytest.mark.parametrize("argv", [
    ["lmc-dist", "run", "MODEL", "we", "--input", "CORPUS", "--run-dir", "RUN",
     "--confidence", "nan"],
    ["lmc", "stats", "LOG", "--confidence", "nan"],
    ["lmc", "compare", "LOG", "LOG", "--confidence", "nan"],
    ["lmc-ngram", "serve", "kjv.lm", "--cache-weight", "nan"],
])
def test_nan_is_refused_before_any_work(tmp_path, argv):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord\n")
    log = tmp_path / "log.jsonl"
    subprocess.run([str(BIN / "lmc"), "run", toy_model_command(), "we", str(corpus), "--output",
                    str(log)], check=True, timeout=60)
    (tmp_path / "kjv.lm").write_text("")
    names = {"MODEL": toy_model_command(), "CORPUS": str(corpus), "RUN": str(tmp_path / "run"),
             "LOG": str(log)}
    result = subprocess.run([str(BIN / argv[0]), *(names.get(a, a) for a in argv[1:])],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "nan is not a finite number" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [["serve", "MODEL"], ["skeleton", "MODEL", "OUT"],
                                  ["unpack", "MODEL", "OUT"]])
def test_lmc_neural_without_the_neural_extra_says_how_to_install_it(tmp_path, argv):
    # the extra's modules hidden (None in sys.modules: "import torch" fails as if absent),
    # whether the extra is installed here or not
    hide = "import sys; sys.modules['torch'] = sys.modules['transformers'] = None; "
    names = {"MODEL": str(tmp_path), "OUT": str(tmp_path / "out")}
    code = hide + "sys.argv[0] = 'lmc-neural'; from lmchallenge.cli.neural import main; main()"
    result = run(PYTHON, "-c", code, *(names.get(a, a) for a in argv))
    assert result.returncode == 2
    assert result.stderr.decode() == (
        "lmc-neural: error: the neural extra is not installed (no module 'torch', "
        "'transformers'): pip install 'lmchallenge-dist[neural]'\n")
    assert not (tmp_path / "out").exists()
    # the options can be read before installing it
    helped = run(PYTHON, "-c", code, argv[0], "--help")
    assert helped.returncode == 0 and b"Usage: lmc-neural " + argv[0].encode() in helped.stdout
    loaded = run(PYTHON, "-c", hide + "sys.argv[0] = 'lmc'; "
                 "from lmchallenge.cli import main; main()", "run",
                 "lmchallenge.model.neural.adapter:CausalLM", "-o",
                 json.dumps({"model": str(tmp_path)}), "we", "-", stdin=b"a b\n")
    assert loaded.returncode == 2
    assert loaded.stderr.decode().startswith(
        "lmc: error: model 'lmchallenge.model.neural.adapter:CausalLM': cannot load: ")
    assert ("(the neural extra is not installed (no module 'torch'): pip install "
            "'lmchallenge-dist[neural]')\n") in loaded.stderr.decode()


@pytest.mark.parametrize("program", ["lmc", "lmc-dist"])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, program):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the\nlord\n")
    link = tmp_path / "link.txt"          # the same file by another name
    link.symlink_to(corpus)
    for output, source, game in ((corpus, corpus, ["we"]), (link, corpus, ["we"]),
                                 (vocab, vocab, ["wr", str(vocab)])):
        if program == "lmc":
            argv = [LMC, "run", toy_model_command(), *game, str(corpus), "--output", str(output)]
        else:
            argv = [LMC_DIST, "run", toy_model_command(), *game, "--input", str(corpus),
                    "--run-dir", str(tmp_path / "run"), "--workers", "1", "--output", str(output)]
        result = run(*argv)
        assert_error(result, f"{output}: cannot write: it is the input "
                             f"{source}, which the output would replace", prog=program)
    assert corpus.read_text() == "the lord\n" and vocab.read_text() == "the\nlord\n"
    assert not (tmp_path / "run").exists()


def test_json_nested_past_python_s_stack_is_an_invalid_line_not_a_traceback(tmp_path):
    """QA: a log or corpus line of 100,000 nested arrays ended every reader in a
    RecursionError traceback (exit 1)."""
    deep = "[" * 100_000 + "]" * 100_000
    log = tmp_path / "deep.jsonl"
    log.write_text(json.dumps({"user": None, "message": 0, "token": 0, "character": 0,
                               "target": "a", "logp": -1.0}) + "\n" + deep + "\n")
    reason = f"{log}:2: invalid JSON: arrays or objects nested too deeply"
    for args in (["stats"], ["validate"], ["grep", "a"], ["pretty"], ["convert", "-o", str(tmp_path / "x.parquet")]):
        assert_error(run(LMC, *args, str(log)), reason)
    corpus = tmp_path / "deep.corpus.jsonl"
    corpus.write_text('{"text": "a b"}\n{"text": "c", "x": ' + deep + "}\n")
    for form in ([], ["-f", "json"]):       # auto-detected as json too: its row reported
        assert_error(run(LMC, "run", toy_model_command(), "we", *form, str(corpus)),
                     f"{corpus}:2: invalid JSON: arrays or objects nested too deeply")


@pytest.mark.parametrize("argv, option", [
    ([LMC, "stats", "-n", str(10**31), str(PRETTY_LOGS / "kjv.o1.we.jsonl")], "'-n' / '--lines'"),
    ([LMC, "pretty", "-o", "html", "--max-tokens", str(10**31), str(PRETTY_LOGS / "kjv.o1.we.jsonl")],
     "'--max-tokens'"),
    ([LMC, "run", "--timeout", "1e10", "cat", "we", str(SAMPLE)], "'--timeout'"),
    ([LMC, "run", "--start-timeout", "1e10", "cat", "we", str(SAMPLE)], "'--start-timeout'"),
    ([LMC_DIST, "run", "cat", "we", "--input", str(SAMPLE), "--run-dir", "r", "--retries", "101"], "'--retries'"),
    ([LMC_DIST, "run", "cat", "we", "--input", str(SAMPLE), "--run-dir", "r", "--workers", "1025"], "'--workers'"),
    ([LMC_DIST, "run", "cat", "we", "--input", str(SAMPLE), "--run-dir", "r", "--timeout", "1e10"], "'--timeout'"),
    ([str(BIN / "lmc-neural"), "serve", "model", "--threads", "100000"], "'--threads'"),
    ([LMC, "run", "cat", "wr", "--error-chars", "ab\t", str(VOCAB), str(SAMPLE)], "'--error-chars'"),
    ([LMC, "pretty", "-o", "html", "-m", ".1000000000f", str(PRETTY_LOGS / "kjv.o1.we.jsonl")],
     "'-m' / '--float-format'"),
])
def test_option_values_past_what_the_machine_takes_are_usage_errors(tmp_path, argv, option):
    """QA (option fuzzing): -n 10**31 and --max-tokens 10**31 ended in an OverflowError
    traceback, --timeout 1e10 in another (the clock), --retries 10**31 in Dask's tracebacks
    and a hang, --workers 10**31 and -m .1000000000f ran the machine out of memory, torch
    crashed at --threads 100000, and a TAB in --error-chars went into the model's protocol."""
    result = run(*argv, cwd=tmp_path)
    assert result.returncode == 2 and f"Invalid value for {option}" in result.stderr.decode(), result.stderr
    assert not (tmp_path / "r").exists()


def test_long_timeouts_and_odd_stdout_encodings_work(tmp_path):
    """The longest --timeout is waited for in steps (an API caller's 1e10 s too); a standard
    output that cannot encode Δ gets it escaped (QA: a UnicodeEncodeError traceback)."""
    from lmchallenge.games.typos import ErrorModel
    from lmchallenge.model.shell import ShellModel

    model = ShellModel(toy_model_command(), timeout=1e10, start_timeout=1e12)
    try:
        assert model.predict("a ", ["b"])
    finally:
        model.close()
    with pytest.raises(ValueError, match="error_chars must not hold whitespace"):
        ErrorModel(error_chars="a b")
    log = str(PRETTY_LOGS / "kjv.o1.we.jsonl")
    result = run(LMC, "compare", log, log, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0 and b"\\u0394 +0.0000" in result.stdout, result.stderr


def test_an_empty_word_list_or_training_corpus_is_said_to_be_empty(tmp_path):
    """QA: `wr /dev/null` ran with no word and no warning; `lmc-ngram train /dev/null` said
    'no word occurs at least 1 times'."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\n")
    result = run(LMC, "run", toy_model_command(), "wr", os.devnull, str(corpus))
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 3
    assert result.stderr.decode() == (f"WARNING\t{os.devnull}: it holds no word: the candidates "
                                      "are the target and its typo only\n")
    assert_error(run(str(BIN / "lmc-ngram"), "train", "-", "-o", str(tmp_path / "m.lm"), stdin=b"\n \n"),
                 "the training corpus holds no word (it is empty, or blank lines)", prog="lmc-ngram")


def test_a_corpus_without_a_token_gives_an_empty_log_and_says_so(tmp_path):
    """As 5.2, a corpus with nothing to evaluate gives an empty log (exit 0); it was given in
    silence, as if the model had been evaluated."""
    empty, blank = tmp_path / "empty.txt", tmp_path / "blank.txt"
    empty.write_bytes(b"")
    blank.write_bytes(b"\n  \n\t\n")
    for args, stdin, said in (
            (["we", str(empty)], None, f"{empty}: it holds no message"),
            (["wc", "-"], b"", "<stdin>: it holds no message"),
            (["we", str(blank), "--output", str(tmp_path / "log.jsonl")], None,
             f"{blank}: none of its 3 messages has a token to evaluate")):
        result = run(LMC, "run", toy_model_command(), *args, stdin=stdin)
        assert result.returncode == 0 and result.stdout == b""
        assert result.stderr.decode() == f"WARNING\t{said}: the log is empty\n"
    assert (tmp_path / "log.jsonl").read_bytes() == b""

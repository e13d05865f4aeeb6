"""`lmc grep`: the pattern grammar, --keep, --and, composition, every log form, and
differential tests against the reference lmchallenge==5.2."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lmchallenge.analysis import grep as G
from lmchallenge.logs.io import read_log
from lmchallenge.logs.jsonl import load_jsonlines

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "pretty"
MIXED = DATA / "mixed.we.jsonl"
REFERENCE_LMC = Path(os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref")) / "bin" / "lmc"

ALL_PATTERNS = [
    "o", "^[A-Z][a-z]+$", "~o", "~^.{1,3}$", "[0-9]", r"\p{Lu}", "e-", "",
    "$nospace", "$alpha", "$alphaonly", "$emoji", "$alphaemoji",
    "$user=alice", "$user=bob", "$user=bob.*", "$user=None", "$user=ali",
    "$message=0", "$message=[13]", "$token=0", "$token=1|2", "$character=0",
    "$character=1[0-9]",
]


def mixed() -> list[dict]:
    return list(load_jsonlines(str(MIXED)))


def selected_targets(data) -> list[str]:
    return [d["target"] for d in data if d["select"]]


@pytest.mark.parametrize("pattern, expected", [
    ("o", ["book", "of", "don't", "Hello", "Ünïcode", "hello", "bob", "none", "None", "one"]),
    ("^[A-Z][a-z]+$", ["The", "Hello", "Fish", "None"]),
    ("~[a-z]", None),
    ("$nospace", None),
    ("$alpha", None),
    ("$alphaonly", ["The", "book", "of", "Hello", "café", "中文", "Ünïcode", "ÅÄÖ", "hello",
                    "HELLO", "fish", "Fish", "x", "bob", "none", "None", "last", "one"]),
    ("$emoji", ["😀", "ab😀", "👍", "❤", "😀😀"]),
    ("$alphaemoji", None),
    ("$user=bob", ["fish", "Fish", "10", "😀😀", "x"]),
    ("$user=None", ["The", "book", "of", "don't", "2nd", "...", "Hello",
                    "😀", "ab😀", "👍", "❤", "café", "中文", "-"]),
    ("$message=[13]", ["😀", "ab😀", "👍", "❤", "café", "中文", "-",
                       "ÅÄÖ", "hello", "HELLO", "e-mail", "last", "one", "."]),
    ("$token=0", ["The", "😀", "a b", "ÅÄÖ", "fish", "bob", "last"]),
    ("$character=1[0-9]", ["don't", "2nd", "café", "中文", "-", "#tag", "123", "HELLO",
                           "e-mail", "10", "😀😀", "x"]),
])
def test_pattern_forms_select_exactly(pattern, expected):
    data = mixed()
    got = selected_targets(G.grep(pattern, data))
    if expected is None:
        # derive the expectation independently of the implementation under test
        import regex
        checks = {
            "~[a-z]": lambda t: not regex.search("[a-z]", t),
            "$nospace": lambda t: not any(c.isspace() for c in t),
            "$alpha": lambda t: any(c.isalpha() for c in t),
            "$alphaemoji": lambda t: any(c.isalpha() for c in t) or t in (
                "😀", "ab😀", "👍", "❤", "😀😀"),
        }
        expected = [d["target"] for d in data
                    if d.get("select", True) and checks[pattern](d["target"])]
    assert got == expected
    # the datum deselected in the input ("x\ty" of alice) never comes back selected
    assert all(not d["select"] for d in G.grep(pattern, data) if d["target"] == "x\ty")


def test_select_is_set_on_every_datum_and_input_not_modified():
    data = mixed()
    before = json.dumps(data)
    out = list(G.grep("o", data))
    assert json.dumps(data) == before
    assert len(out) == len(data)
    assert all(isinstance(d["select"], bool) for d in out)
    assert [{k: v for k, v in d.items() if k != "select"} for d in out] == \
        [{k: v for k, v in d.items() if k != "select"} for d in data]


def test_and_patterns_all_must_match():
    got = selected_targets(G.grep("$alphaonly", mixed(), and_patterns=["^[a-z]", "o"]))
    assert got == ["book", "of", "hello", "bob", "none", "one"]


def test_grep_composes_with_an_earlier_selection():
    once = list(G.grep("$alphaonly", mixed()))
    twice = selected_targets(G.grep("o", once))
    assert twice == selected_targets(G.grep("$alphaonly", mixed(), and_patterns=["o"]))
    assert twice == ["book", "of", "Hello", "Ünïcode", "hello", "bob", "none", "None", "one"]


def test_keep_message_and_token():
    tokens = list(G.grep("$emoji", mixed(), keep="token"))
    assert [d["target"] for d in tokens] == ["😀", "ab😀", "👍", "❤", "😀😀"]
    assert all(d["select"] for d in tokens)
    messages = list(G.grep("$emoji", mixed(), keep="message"))
    assert [(d["user"], d["message"]) for d in messages] == [(None, 1)] * 7 + [("bob", 0)] * 5
    assert [d["select"] for d in messages if d["user"] == "bob"] == [False, False, False, True, False]


def test_bad_patterns_raise_pattern_error_before_reading():
    def never():
        raise AssertionError("data must not be read")
        yield  # pragma: no cover

    with pytest.raises(G.PatternError, match=r"unrecognized special pattern '\$nosuch'"):
        G.grep("$nosuch", never())
    with pytest.raises(G.PatternError, match="invalid regular expression"):
        G.grep("(unclosed", never())
    with pytest.raises(G.PatternError, match="invalid regular expression"):
        G.grep("ok", never(), and_patterns=["$user=("])
    with pytest.raises(ValueError, match="keep must be one of"):
        G.grep("ok", never(), keep="lines")
    assert issubclass(G.PatternError, ValueError)


def test_is_selected_missing_and_null_mean_selected():
    assert G.is_selected({}) and G.is_selected({"select": None}) and G.is_selected({"select": True})
    assert not G.is_selected({"select": False})


def run_cli(args, input=None):
    from lmchallenge.cli import cli
    return CliRunner().invoke(cli, args, input=input, catch_exceptions=False)


def test_cli_outputs_jsonlines_with_select(tmp_path):
    result = run_cli(["grep", "-k", "token", "--and", "^[a-z]", "$alphaonly", str(MIXED)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.output.splitlines()]
    assert [d["target"] for d in lines] == [
        "book", "of", "café", "hello", "fish", "x", "bob", "none", "last", "one"]
    # sorted keys, as LM Challenge 5.x writes logs
    first = result.output.splitlines()[0]
    assert first == json.dumps(lines[0], sort_keys=True)


def test_cli_reads_stdin_and_gz_and_run_directory(tmp_path):
    text = MIXED.read_text(encoding="utf-8")
    via_stdin = run_cli(["grep", "$emoji"], input=text).output
    gz = tmp_path / "log.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(text)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = text.splitlines(keepends=True)
    for i, chunk in enumerate([lines[:10], lines[10:]]):
        with gzip.open(run_dir / f"part-{i:05d}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(chunk)
    assert run_cli(["grep", "$emoji", str(gz)]).output == via_stdin
    assert run_cli(["grep", "$emoji", str(run_dir)]).output == via_stdin
    assert run_cli(["grep", "$emoji", str(MIXED)]).output == via_stdin
    assert sum(json.loads(x)["select"] for x in via_stdin.splitlines()) == 5


def test_reads_parquet(tmp_path):
    from lmchallenge.logs.io import write_log
    path = tmp_path / "log.parquet"
    write_log(load_jsonlines(str(MIXED)), str(path), game="we")
    assert selected_targets(G.grep("$emoji", str(path))) == ["😀", "ab😀", "👍", "❤", "😀😀"]
    assert selected_targets(G.grep("~o", str(path))) == selected_targets(G.grep("~o", mixed()))


def test_cli_output_appears_only_complete_in_the_form_its_name_says(tmp_path):
    """QA: on stdout, a damaged input leaves the lines before the damage written, which read
    as a smaller log; --output writes a file only when the whole input was read."""
    def lmc_grep(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lmchallenge.cli", "grep", *args],
                              capture_output=True, text=True)

    streamed = lmc_grep("$emoji", str(MIXED)).stdout
    for name in ("sel.jsonl", "sel.jsonl.gz", "sel.parquet"):
        out = tmp_path / name
        assert lmc_grep("$emoji", str(MIXED), "-o", str(out)).returncode == 0
        assert [json.dumps(d, sort_keys=True) for d in read_log(str(out))] == streamed.splitlines()
    damaged = tmp_path / "damaged.jsonl"
    lines = MIXED.read_text(encoding="utf-8").splitlines(keepends=True)
    damaged.write_text("".join(lines[:12]) + "{not json\n" + "".join(lines[12:]), encoding="utf-8")
    failed = lmc_grep("$emoji", str(damaged), "-o", str(tmp_path / "out.jsonl"))
    assert failed.returncode == 2 and f"{damaged}:13: invalid JSON" in failed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.jsonl", "sel.jsonl",
                                                          "sel.jsonl.gz", "sel.parquet"]
    same = lmc_grep("$emoji", str(tmp_path / "sel.jsonl"), "-o", str(tmp_path / "sel.jsonl"))
    assert same.returncode == 2 and "cannot write: it is the input" in same.stderr
    # nor into a run dir it reads (review: it replaced a part file, exit 0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    part = run_dir / "part-00000.jsonl"
    part.write_bytes(MIXED.read_bytes())
    inside = lmc_grep("$emoji", str(run_dir), "-o", str(part))
    assert inside.returncode == 2 and inside.stderr == (
        f"lmc: error: {part}: cannot write: it is inside the input directory {run_dir}, whose "
        "part files it could replace: write it elsewhere\n")
    assert part.read_bytes() == MIXED.read_bytes()


def test_cli_bad_pattern_exit_code_and_message():
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "grep", "$bogus", str(MIXED)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "unrecognized special pattern '$bogus'" in proc.stderr
    assert proc.stdout == ""


def test_cli_more_than_one_log_is_a_usage_error():
    from lmchallenge.cli import cli
    result = CliRunner().invoke(cli, ["grep", "x", str(MIXED), str(MIXED)])
    assert result.exit_code == 2
    assert "at most one log" in result.output


# --- differential tests against the reference ---------------------------------------------

def reference_or_skip() -> str:
    if not REFERENCE_LMC.exists():
        pytest.skip("reference lmchallenge==5.2 not installed ($LMC_REFERENCE_VENV or /opt/lmcref)")
    return str(REFERENCE_LMC)


def reference(*args: str) -> str:
    proc = subprocess.run([reference_or_skip(), *args], capture_output=True, text=True,
                          check=True, env={"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"})
    return proc.stdout


REFERENCE_LOGS = ["mixed.we.jsonl", "kjv.o2.wc.jsonl", "rails.we.jsonl"]


@pytest.mark.reference
@pytest.mark.parametrize("log", [*REFERENCE_LOGS[:2], pytest.param(REFERENCE_LOGS[2], marks=pytest.mark.slow)])
def test_same_output_as_reference_for_every_pattern_form(log):
    reference_or_skip()
    path = str(DATA / log)
    for pattern in ALL_PATTERNS:
        ours = run_cli(["grep", pattern, path]).output
        assert ours == reference("grep", pattern, path), pattern


@pytest.mark.reference
@pytest.mark.parametrize("args", [
    ["-k", "message", "$emoji"],
    ["-k", "token", "$alpha", "-a", "~^[A-Z]", "--and", "$token=[0-4]"],
    ["--keep", "message", "$user=00.*", "-a", "e"],
    ["-k", "token", "$message=[24]", "--and-pattern", "$nospace"],
])
def test_same_output_as_reference_for_keep_and_and(args):
    reference_or_skip()
    for log in REFERENCE_LOGS:
        path = str(DATA / log)
        assert run_cli(["grep", *args, path]).output == reference("grep", *args, path), (args, log)


@pytest.mark.reference
def test_grep_of_grep_same_as_reference(tmp_path):
    reference_or_skip()
    path = str(DATA / "kjv.o2.wc.jsonl")
    first = tmp_path / "first.jsonl"
    first.write_text(reference("grep", "$alphaonly", path))
    assert run_cli(["grep", "^[a-z]", str(first)]).output == reference("grep", "^[a-z]", str(first))


@pytest.mark.reference
@pytest.mark.parametrize("log, pattern", [
    ("kjv.o2.wc.jsonl", "^[A-Z][a-z]+$"),
    ("kjv.o2.wc.jsonl", "$token=[0-3]"),
    ("kjv.o2.we.jsonl", "~^[a-z]+$"),
    ("kjv.o2.ce.jsonl", "$nospace"),
    ("rails.we.jsonl", "$user=00.*"),
])
def test_stats_after_grep_same_as_reference(tmp_path, log, pattern):
    from lmchallenge import stats
    reference_or_skip()
    path = str(DATA / log)
    grepped = tmp_path / "grepped.jsonl"
    grepped.write_text(reference("grep", pattern, path))
    expected = json.loads(reference("stats", str(grepped)))
    expected.pop("log", None)
    ours = stats.stats(list(G.grep(pattern, path)), human=True)
    ours = {k: v for k, v in ours.items() if k != "log"}
    assert expected["skipped"] > 0
    assert _approx_equal(ours, expected)


def _approx_equal(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), (sorted(a), sorted(b))
        return all(_approx_equal(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9), (a, b)
        return True
    assert a == b
    return True


@pytest.mark.parametrize("bad, reason", [
    ({"text": "hello"}, "field (datum): 'user' is a required property"),
    ({"user": None, "message": 0, "token": 1, "character": 0, "target": 5},
     "field target: 5 is not of type 'string'"),
])
def test_cli_names_a_datum_it_cannot_read(tmp_path, bad, reason):
    """A line that is not a log datum (a corpus line given as a log, a target that is not a
    string) is named by file and datum number, not a traceback (QA)."""
    good = {"user": None, "message": 0, "token": 0, "character": 0, "target": "x"}
    log = tmp_path / "odd.jsonl"
    log.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    for keep in ("all", "message"):
        result = subprocess.run([sys.executable, "-c", "from lmchallenge.cli import main; main()",
                                 "grep", "-k", keep, "x", str(log)], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert result.stderr == f"lmc: error: {log}:2: {reason}\n"

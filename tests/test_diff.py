"""`lmc diff`: colours of two models on the same text, refusal of mismatched logs,
differential tests against the reference, and the HTML page data."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lmchallenge.analysis import diff as D
from lmchallenge.analysis import pretty as P
from lmchallenge.logs.io import read_log
from lmchallenge.logs.jsonl import load_jsonlines

DATA = Path(__file__).resolve().parent / "data" / "pretty"
REFERENCE_LMC = Path(os.environ.get("LMC_REFERENCE_VENV", "/opt/lmcref")) / "bin" / "lmc"
ESC = "\x1b"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load(name: str) -> list[dict]:
    return list(load_jsonlines(str(DATA / name)))


def wc(target, completions, token=0, character=0):
    return {"user": "u", "message": 0, "token": token, "character": character,
            "target": target, "completions": completions}


def pair(target, base_completions, log_completions):
    return D.zip_logs([wc(target, base_completions)], [wc(target, log_completions)])[0]


# --- wc: only the differing characters are highlighted ---------------------------------

def test_wc_diff_marks_the_differing_characters_only():
    # baseline types "ge" then completes; the log types "gener" then completes
    base = [["x"], ["y"], ["neration"]]
    log = [["x"], ["y"], ["z"], ["q"], ["w"], ["ation"]]
    d = pair("generation", base, log)
    assert D.diff_completion(d) == [
        ("ge", P.Style(P.Colour.BLACK)),            # typed with both
        ("ner", P.Style(P.Colour.RED, True)),       # typed with the log only
        ("ation", P.DEFAULT),                       # completed by both
    ]
    # swapped: the log is the better one
    d = pair("generation", log, base)
    assert D.diff_completion(d)[1] == ("ner", P.Style(P.Colour.GREEN, True))
    # next-word prediction within the top 3 counts as nothing typed
    d = pair("of", [["a", "b", "of"]], [["a", "b", "c", "of"], ["f"]])
    assert D.diff_completion(d) == [("", P.Style(P.Colour.BLACK)),
                                    ("o", P.Style(P.Colour.RED, True)), ("f", P.DEFAULT)]
    # same number typed: nothing highlighted
    d = pair("of", [["a"], ["f"]], [["b"], ["f"]])
    assert D.diff_completion(d) == [("o", P.Style(P.Colour.BLACK)), ("f", P.DEFAULT)]


def test_wc_diff_on_real_logs_highlights_exactly_the_difference_in_typing():
    base, log = load("kjv.o1.wc.jsonl"), load("kjv.o2.wc.jsonl")
    zipped = D.zip_logs(base, log)
    highlighted = 0
    for d in zipped:
        nb = D.typed_for_diff(d["target"], d["baseline"]["completions"])
        nl = D.typed_for_diff(d["target"], d["log"]["completions"])
        marked = "".join(text for text, style in D.diff_completion(d) if style.bold)
        assert marked == d["target"][min(nb, nl):max(nb, nl)]
        highlighted += bool(marked)
    assert highlighted >= 5
    lines = list(D.ansi(base, log))
    assert f"{ESC}[30m{ESC}[1;32mo{ESC}[0;39mf " in lines[0]


# --- we/ce and wr colours ----------------------------------------------------------------

@pytest.mark.parametrize("base, logp, expected", [
    (None, None, P.Style(P.Colour.MAGENTA)),
    (-1.0, None, P.Style(P.Colour.WHITE, True)),
    (None, -1.0, P.Style(P.Colour.WHITE)),
    (-10.0, -4.0, P.Style(P.Colour.GREEN, True)),    # +6 > 10/2
    (-10.0, -8.0, P.Style(P.Colour.GREEN)),          # +2 > 10/6
    (-10.0, -9.0, P.Style(P.Colour.YELLOW)),
    (-10.0, -11.0, P.Style(P.Colour.YELLOW)),
    (-10.0, -12.0, P.Style(P.Colour.RED)),
    (-10.0, -15.5, P.Style(P.Colour.RED, True)),
])
def test_entropy_diff_bands(base, logp, expected):
    assert D.entropy_diff_style(base, logp, 10.0) == expected


def test_wr_diff_cases():
    def trust_lm(error, lm):
        return error + 10 * (lm if lm is not None else -10.0)

    datum = {"user": None, "message": 0, "token": 0, "character": 0, "target": "can", "select": True,
             "baseline": {"verbatim": "caj", "results": [["caj", 0.0, None], ["can", -3.0, -1.0]]},
             "log": {"verbatim": "caj", "results": [["caj", 0.0, None], ["can", -3.0, -1.0]]}}
    # uncorrected (error model only) -> corrected by the log's model
    assert D.wr_diff_case(datum, P.error_only, trust_lm) == (False, False, True)
    assert D.diff_reranking(P.error_only, trust_lm)(datum) == [("can", P.Style(P.Colour.GREEN))]
    assert D.diff_reranking(trust_lm, P.error_only)(datum) == [("can", P.Style(P.Colour.RED))]
    assert D.diff_reranking(trust_lm, trust_lm)(datum) == [("can", P.Style(P.Colour.BLACK))]


# --- refusing logs of different data ------------------------------------------------------

def test_refuses_logs_of_different_lengths():
    """The first token where they part is named; where one log is the other's beginning,
    both lengths (counted to the end of the longer)."""
    with pytest.raises(D.LogMismatchError, match=r"token 1 \(user None, message 0, token 0\) has user "
                                                 r"None in BASELINE but '00b65b5faa16' in LOG"):
        list(D.ansi(str(DATA / "kjv.o1.wc.jsonl"), str(DATA / "rails.wc.jsonl")))
    whole = load("kjv.o1.wc.jsonl")
    for base, log, said in ((whole, whole[:70], "BASELINE has 112 tokens, LOG has 70"),
                            (whole[:3], whole, "BASELINE has 3 tokens, LOG has 112")):
        with pytest.raises(D.LogMismatchError, match=f"^the logs are not of the same data: {said} "
                                                     r"\(the logs of two models on the same text are compared\)$"):
            D.zip_logs(iter(base), iter(log))


def test_refuses_logs_of_different_text():
    base = load("kjv.o1.we.jsonl")
    log = load("kjv.o2.we.jsonl")
    log[40] = dict(log[40], target="Moses")
    with pytest.raises(D.LogMismatchError,
                       match=r"token 41 \(user None, message 2, token 4\) has target "
                             r"'and' in BASELINE but 'Moses' in LOG"):
        D.zip_logs(base, log)


def test_refuses_different_games_and_selections():
    with pytest.raises(D.LogMismatchError, match="different games: BASELINE is wc, LOG is we"):
        D.zip_logs(load("kjv.o1.wc.jsonl"), load("kjv.o2.we.jsonl"))
    from lmchallenge.analysis import grep
    with pytest.raises(D.LogMismatchError, match="different selections: token 1 is deselected"):
        D.zip_logs(list(grep.grep("^[a-z]", load("kjv.o1.we.jsonl"))), load("kjv.o2.we.jsonl"))
    # the same selection on both is fine, and deselected tokens are blue
    a = list(grep.grep("^[a-z]", load("kjv.o1.we.jsonl")))
    b = list(grep.grep("^[a-z]", load("kjv.o2.we.jsonl")))
    assert next(D.ansi(a, b)).startswith(f"{ESC}[34mThe ")


def test_cli_mismatch_exit_code_message_and_no_output():
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "diff",
                           str(DATA / "kjv.o1.wc.jsonl"), str(DATA / "kjv.o2.we.jsonl")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "the logs are of different games" in proc.stderr


def test_cli_names_a_line_that_is_no_log_datum(tmp_path):
    """A line without user, message and token is named by file and line, not taken for a
    difference between the logs (QA: "not of the same data: ... message 0 in BASELINE but
    None in LOG")."""
    lines = (DATA / "kjv.o2.we.jsonl").read_text().splitlines(keepends=True)[:4]
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("".join(lines))
    bad.write_text("".join(lines[:3]) + '{"target": "x", "logp": -1}\n')
    for pair in ((good, bad), (bad, good)):
        proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "diff", *map(str, pair)],
                              capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == f"lmc: error: {bad}:4: field (datum): 'user' is a required property\n"


# --- against the reference ---------------------------------------------------------------

def reference(*args: str) -> str:
    if not REFERENCE_LMC.exists():
        pytest.skip("reference lmchallenge==5.2 not installed ($LMC_REFERENCE_VENV or /opt/lmcref)")
    return subprocess.run([str(REFERENCE_LMC), *args], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.reference
@pytest.mark.parametrize("game, args", [("we", []), ("ce", []), ("we", ["-i", "3"]),
                                        ("ce", ["--entropy_interval", "1.5"])])
def test_entropy_diff_escape_by_escape_as_reference(game, args):
    from lmchallenge.cli import cli
    paths = [str(DATA / f"kjv.o1.{game}.jsonl"), str(DATA / f"kjv.o2.{game}.jsonl")]
    result = CliRunner().invoke(cli, ["diff", *args, *paths])
    assert result.exit_code == 0
    assert result.output == reference("diff", *args, *paths)


@pytest.mark.reference
def test_wc_diff_as_reference_except_where_both_complete(tmp_path):
    """The reference marks every character after the common typed prefix; we stop the mark
    where the other model completes too.  On tokens where that cannot differ (equal typing,
    or one model never completing) the output is escape for escape the reference's."""
    paths = [str(DATA / "kjv.o1.wc.jsonl"), str(DATA / "kjv.o2.wc.jsonl")]
    theirs = reference("diff", *paths).splitlines()
    assert [ANSI.sub("", x) for x in D.ansi(*paths)] == [ANSI.sub("", x) for x in theirs]

    zipped = D.zip_logs(load("kjv.o1.wc.jsonl"), load("kjv.o2.wc.jsonl"))
    keep = []
    for n, d in enumerate(zipped):
        typed = (D.typed_for_diff(d["target"], d["baseline"]["completions"]),
                 D.typed_for_diff(d["target"], d["log"]["completions"]))
        if typed[0] == typed[1] or max(typed) == len(d["target"]):
            keep.append(n)
    base, log = load("kjv.o1.wc.jsonl"), load("kjv.o2.wc.jsonl")
    # and a message where one model completes, the other never does (both directions)
    extra = (
        [dict(wc("Abba", [["x"], ["bba"]], 0, 0), message=99),
         dict(wc("Abba", [["x"], ["y"], ["z"], ["w"]], 1, 5), message=99)],
        [dict(wc("Abba", [["x"], ["y"], ["z"], ["w"]], 0, 0), message=99),
         dict(wc("Abba", [["x"], ["bba"]], 1, 5), message=99)],
    )
    filtered = []
    for name, data, more in (("base", base, extra[0]), ("log", log, extra[1])):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(d, sort_keys=True) + "\n"
                                for d in [data[n] for n in keep] + more))
        filtered.append(str(path))
    ours = "".join(line + "\n" for line in D.ansi(*filtered))
    assert ours == reference("diff", *filtered)
    assert f"{ESC}[1;32m" in ours and f"{ESC}[1;31m" in ours  # some tokens do differ
    assert len(keep) < len(zipped)  # and some were the partial ones


# --- HTML --------------------------------------------------------------------------------

def page_data(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="lmc-data">(.*?)</script>', page, re.S)
    return json.loads(match.group(1))


def test_html_diff_we_details_and_summary():
    page = D.html(str(DATA / "kjv.o1.we.jsonl"), str(DATA / "kjv.o2.we.jsonl"), float_format=".2f")
    assert "https://" not in page and "http://" not in page
    data = page_data(page)
    assert list(data["summary"]) == ["baseline", "log"]
    first = data["lines"][0]["tokens"][0]
    rows = dict(map(tuple, first["d"]["rows"]))
    base = load("kjv.o1.we.jsonl")[0]["logp"]
    log = load("kjv.o2.we.jsonl")[0]["logp"]
    assert rows["logp (baseline)"] == format(base, ".2f")
    assert rows["logp (log)"] == format(log, ".2f")
    assert rows["difference (log - baseline)"] == format(log - base, ".2f")


def test_cli_html_diff_of_mismatched_logs_fails():
    from lmchallenge.cli import cli
    result = CliRunner().invoke(cli, ["diff", "-o", "html", str(DATA / "kjv.o1.we.jsonl"),
                                      str(DATA / "rails.we.jsonl")])
    assert result.exit_code != 0
    assert isinstance(result.exception, D.LogMismatchError)


def test_ansi_of_two_paths_holds_neither_log(tmp_path, monkeypatch):
    """Two log files are checked in a first pass and shown in a second, each read as it is
    shown (QA: the ANSI diff of 1M tokens held both logs, 2.3 GB); the lines are those of the
    logs given as data, and a mismatch at the end is still said before any line."""
    paths = [str(DATA / "kjv.o1.we.jsonl"), str(DATA / "kjv.o2.we.jsonl")]
    read = []

    def counting(path):
        for datum in read_log(path):
            read.append(path)
            yield datum
    monkeypatch.setattr(D, "read_log", counting)
    lines = D.ansi(*paths)
    first_pass = len(read)
    assert first_pass == 1 + 2 * len(load("kjv.o1.we.jsonl"))      # the game, then both
    assert next(lines) == next(D.ansi(load("kjv.o1.we.jsonl"), load("kjv.o2.we.jsonl")))
    message = sum(1 for d in load("kjv.o1.we.jsonl") if d["message"] == 0)
    assert len(read) - first_pass == 2 * (message + 1)  # one message of each, and the next datum
    assert [next(lines), *lines] == list(D.ansi(load("kjv.o1.we.jsonl"), load("kjv.o2.we.jsonl")))[1:]
    short = tmp_path / "short.jsonl"
    short.write_text("".join((DATA / "kjv.o2.we.jsonl").read_text().splitlines(keepends=True)[:-1]))
    proc = subprocess.run([sys.executable, "-m", "lmchallenge.cli", "diff", paths[0], str(short)],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "BASELINE has 112 tokens, LOG has 111" in proc.stderr

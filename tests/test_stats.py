"""Behaviour tests of `lmc stats` (lmchallenge.stats): exact values on hand-written logs,
merge invariance of StatsState on real logs, differential tests against lmchallenge==5.2,
and the command line."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from lmchallenge import stats as lmc_stats
from lmchallenge.stats import StatsState, state_of
from lmchallenge.stats.output import flatten
from lmchallenge.stats.state import column_hash, datum_hash
from conftest import DATA, REPO, lmc_command, toy_model_command

PRETTY = REPO / "tests" / "data" / "pretty"
REAL_LOGS = sorted(p for p in PRETTY.glob("*.jsonl") if p.name != "rails8.jsonl")


def run_lmc(*args: str, stdin: bytes | None = None, check: bool = True,
            lmc: list[str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([*(lmc or lmc_command()), *args], input=stdin,
                            capture_output=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr.decode())
    return result


def read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: Path, data: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in data))
    return path


# -- an independent implementation of the documented fingerprint ---------------------------

def hand_hash(datum: dict) -> int:
    h = 0
    for key in ("user", "message", "token", "target"):
        value = datum.get(key)
        h *= 48677
        if isinstance(value, str):
            h += struct.unpack("<Q", hashlib.md5(value.encode("utf-8")).digest()[:8])[0]
        elif isinstance(value, (bool, int)):
            h += 50123 * value
        else:
            assert value is None
            h += 49307
    return h & 0xFFFFFFFF


def hand_fingerprint(data: list[dict]) -> str:
    return "%08x" % (sum(hand_hash(d) for d in data) % 2 ** 32)


# -- hand-written logs -----------------------------------------------------------------------

FILLER = [f"w{i}" for i in range(30)]


def ranked(target: str, rank: int) -> list[str]:
    """A prediction list with ``target`` at 1-based ``rank``."""
    return FILLER[:rank - 1] + [target] + FILLER[rank - 1:rank + 2]


WC_LOG = [
    # target at rank 1, completed at prefix 0 (3 characters)
    dict(user="A", message=0, token=0, character=0, target="the",
         completions=[ranked("the", 1), ["he"], ["e"]]),
    # rank 3 (so not a completion at prefix 0: only the first 2 count); completed at prefix 2
    dict(user="A", message=0, token=1, character=4, target="cat",
         completions=[ranked("cat", 3), ["x", "y", "at"], ["t"]]),
    # rank 5, never completed
    dict(user="B", message=0, token=0, character=0, target="dog",
         completions=[ranked("dog", 5), ["x"], ["y"]]),
    # rank 15, never completed
    dict(user="A", message=0, token=0, character=0, target="horse",
         completions=[ranked("horse", 15)]),
    # rank 25, never completed
    dict(user="A", message=1, token=0, character=0, target="mouse",
         completions=[ranked("mouse", 25)]),
    # absent from the predictions; completed at prefix 1 at rank 2 (4 characters)
    dict(user="A", message=1, token=1, character=6, target="zebra",
         completions=[["a", "b"], ["x", "ebra"]]),
    # unselected: counted only as skipped
    dict(user="C", message=7, token=2, character=12, target="ignored", select=False,
         completions=[["ignored"], ["gnored"]]),
]

WE_LOG = [
    dict(user="A", message=0, token=0, character=0, target="In", logp=-1.5),
    dict(user="A", message=0, token=1, character=3, target="the", logp=-0.5),
    dict(user="A", message=0, token=2, character=7, target="zzz", logp=None),
    dict(user="B", message=3, token=0, character=0, target="skip", logp=-100.0, select=False),
]

WR_LOG = [
    # correct by the error score alone and after reranking
    dict(user=None, message=0, token=0, character=0, target="cat", verbatim="cat",
         results=[["cot", -2.0, -5.0], ["cat", -0.1, -1.0], ["cut", -2.0, -6.0]]),
    # the error model prefers "dig", the LM strongly prefers "dog": fixed by reranking
    dict(user=None, message=0, token=1, character=4, target="dog", verbatim="dig",
         results=[["dig", -0.1, -20.0], ["dog", -0.5, -1.0]]),
    # a tie: never strictly best
    dict(user=None, message=0, token=2, character=8, target="ewe", verbatim="eve",
         results=[["eve", -1.0, -2.0], ["ewe", -1.0, -2.0]]),
    # unselected, with more candidates: does not count for max_candidates
    dict(user=None, message=0, token=3, character=12, target="a", verbatim="a", select=False,
         results=[[c, -1.0, -1.0] for c in "abcdef"]),
]


def test_wc_raw_values_by_hand():
    raw = lmc_stats.stats(WC_LOG, human=False)
    selected = WC_LOG[:6]
    assert raw["users"] == 3            # A A B A A A: runs A, B, A
    assert raw["messages"] == 4         # (A,0) (A,0) (B,0) (A,0) (A,1) (A,1)
    assert raw["tokens"] == 6
    assert raw["characters"] == 24
    assert raw["skipped"] == 1
    assert raw["fingerprint"] == int(hand_fingerprint(selected), 16)
    prediction = raw["prediction"]
    assert {k: v for k, v in prediction.items() if k != "srr"} == dict(hit=5, hit1=1, hit3=2,
                                                                      hit10=3, hit20=4)
    assert prediction["srr"] == math.fsum([1, 1 / 3, 1 / 5, 1 / 15, 1 / 25])
    assert raw["completion"] == dict(characters=3 + 1 + 4, tokens=3)
    assert raw["entropy"] == dict(sum=0.0, tokens=0, fingerprint=0)
    assert raw["reranking"]["max_candidates"] == 0


def test_wc_human_values_by_hand():
    human = lmc_stats.stats(WC_LOG)
    srr = math.fsum([1, 1 / 3, 1 / 5, 1 / 15, 1 / 25])
    assert human == dict(
        fingerprint=hand_fingerprint(WC_LOG[:6]), users=3, messages_per_user=4 / 3,
        tokens_per_user=2.0, characters_per_token=4.0, skipped=1 / 7,
        prediction=dict(hit=5 / 6, hit1=1 / 6, hit3=2 / 6, hit10=3 / 6, hit20=4 / 6, mrr=srr / 6),
        completion=dict(characters=8 / 24, tokens=3 / 6),
    )
    assert human["prediction"]["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 5 + 1 / 15 + 1 / 25) / 6,
                                                       rel=1e-15)
    assert len(human["fingerprint"]) == 8 and int(human["fingerprint"], 16) >= 0


def test_we_entropy_by_hand():
    human = lmc_stats.stats(WE_LOG)
    assert human["users"] == 1 and human["tokens_per_user"] == 3.0
    assert human["skipped"] == 1 / 4
    assert human["fingerprint"] == hand_fingerprint(WE_LOG[:3])
    assert human["entropy"] == dict(mean=1.0, hit=2 / 3, fingerprint=hand_fingerprint(WE_LOG[:2]))
    assert human["entropy"]["fingerprint"] != human["fingerprint"]
    assert "prediction" not in human and "completion" not in human and "reranking" not in human
    raw = lmc_stats.stats(WE_LOG, human=False)
    assert raw["entropy"] == dict(sum=2.0, tokens=2, fingerprint=int(hand_fingerprint(WE_LOG[:2]), 16))


def test_fingerprint_of_one_datum_and_column_types():
    datum = dict(user=None, message=0, token=0, target="The")
    md5 = int.from_bytes(hashlib.md5(b"The").digest()[:8], "little")
    expected = ((49307 * 48677 + 0) * 48677 + 0) * 48677 + md5
    assert datum_hash(datum) == expected & 0xFFFFFFFF
    assert lmc_stats.stats([datum])["fingerprint"] == "%08x" % (expected & 0xFFFFFFFF)
    # user as a string and ints other than 0
    datum = dict(user="u1", message=3, token=5, target="x")
    assert datum_hash(datum) == hand_hash(datum)
    with pytest.raises(TypeError):
        column_hash(1.5)


def test_fingerprint_is_order_invariant_and_sensitive_to_content():
    data = read_jsonl(PRETTY / "kjv.o2.we.jsonl")
    expected = lmc_stats.stats(data)
    assert expected["fingerprint"] == hand_fingerprint([d for d in data if d.get("select", True)])
    rng = random.Random(4)
    for _ in range(3):
        shuffled = data[:]
        rng.shuffle(shuffled)
        result = lmc_stats.stats(shuffled)
        assert result["fingerprint"] == expected["fingerprint"]
        assert result["entropy"]["fingerprint"] == expected["entropy"]["fingerprint"]
    changed = [dict(d) for d in data]
    changed[5]["target"] += "x"
    assert lmc_stats.stats(changed)["fingerprint"] != expected["fingerprint"]


def test_reranking_on_an_obvious_log():
    human = lmc_stats.stats(WR_LOG)
    assert human["reranking"] == dict(accuracy=2 / 3, base_accuracy=1 / 3, max_candidates=3)
    assert human["users"] == 1 and human["skipped"] == 1 / 4
    assert human["characters_per_token"] == 3.0
    raw = lmc_stats.stats(WR_LOG, human=False)
    rerank = raw["reranking"]
    assert (rerank["correct"], rerank["base_correct"], rerank["max_candidates"]) == (2, 1, 3)
    assert set(rerank["args"]) == {"alpha", "beta"}


def test_merged_piece_with_only_empty_results():
    # a piece whose every results list is empty has no candidate columns at all
    empty = dict(WR_LOG[0], token=9, results=[])
    expected = lmc_stats.stats(WR_LOG + [empty], human=False)
    merged = state_of(WR_LOG).merge(state_of([empty])).result(human=False)
    assert merged == expected
    assert merged["reranking"]["correct"] == 2 and merged["tokens"] == 4


def test_no_wr_data_gives_already_correct_key():
    raw = lmc_stats.stats(WE_LOG, human=False)
    assert raw["reranking"] == dict(max_candidates=0, already_correct=0, correct=0, args=None)


# -- merge invariance ------------------------------------------------------------------------

MERGE_LOGS = ["kjv.o2.wc.jsonl", "kjv.o2.we.jsonl", "kjv.o2.wr.jsonl", "rails.wc.jsonl"]


def cut_points(data: list[dict]) -> list[int]:
    n = len(data)
    cuts = {1, n // 3, n // 2, n - 1}
    # inside a message: between two datums of the same (user, message)
    key = [(d.get("user"), d.get("message")) for d in data]
    inside_message = [i for i in range(1, n) if key[i] == key[i - 1]]
    inside_user = [i for i in range(1, n) if data[i].get("user") == data[i - 1].get("user")
                   and key[i] != key[i - 1]]
    assert inside_message
    cuts.add(inside_message[len(inside_message) // 2])
    if inside_user:
        cuts.add(inside_user[0])
    return sorted(c for c in cuts if 0 < c < n)


@pytest.mark.parametrize("name", MERGE_LOGS)
def test_merged_pieces_equal_one_pass(name):
    data = read_jsonl(PRETTY / name)
    whole = state_of(data)
    expected_raw, expected_human = whole.result(human=False), whole.result()
    cuts = cut_points(data)
    bounds = [0, *cuts, len(data)]
    pieces = [state_of(data[a:b]) for a, b in zip(bounds, bounds[1:])]
    merged = StatsState()
    for piece in pieces:
        merged.merge(piece)
    assert merged.result(human=False) == expected_raw
    assert merged.result() == expected_human
    # every single cut, and a right-nested grouping
    for cut in cuts:
        assert state_of(data[:cut]).merge(state_of(data[cut:])).result(human=False) == expected_raw
    nested = StatsState()
    for piece in reversed([state_of(data[a:b]) for a, b in zip(bounds, bounds[1:])]):
        nested = piece.merge(nested)
    assert nested.result(human=False) == expected_raw
    assert nested.result() == expected_human


def test_merge_counts_runs_across_the_cut():
    # A | A B A: the run of A crossing the cut counts once
    states = [state_of(WC_LOG[:1]), state_of(WC_LOG[1:])]
    assert states[0].merge(states[1]).result(human=False)["users"] == 3
    # a cut inside message (A,1)
    assert state_of(WC_LOG[:5]).merge(state_of(WC_LOG[5:])).result(human=False)["messages"] == 4
    # empty pieces are neutral
    assert StatsState().merge(state_of(WC_LOG)).merge(StatsState()).result() == lmc_stats.stats(WC_LOG)


def test_pinned_reference_values():
    """Values printed by lmchallenge==5.2 `lmc stats` on the checked-in logs."""
    wc = lmc_stats.stats(read_jsonl(PRETTY / "kjv.o2.wc.jsonl"))
    assert wc["fingerprint"] == "3ad3676a" and wc["users"] == 1 and wc["tokens_per_user"] == 112.0
    assert wc["prediction"]["mrr"] == pytest.approx(0.1845238095238095, rel=1e-12)
    wr = lmc_stats.stats(read_jsonl(PRETTY / "kjv.o2.wr.jsonl"))
    assert wr["fingerprint"] == "ef18c377"
    assert wr["reranking"] == dict(accuracy=0.7636363636363637, base_accuracy=0.6545454545454545,
                                   max_candidates=8)


# -- differential against lmchallenge==5.2 ---------------------------------------------------

def assert_same(ours, ref, where="", strict_types=False) -> None:
    if isinstance(ref, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(ref), f"{where}: keys {sorted(ours)} != {sorted(ref)}"
        for key in ref:
            assert_same(ours[key], ref[key], f"{where}.{key}", strict_types)
    elif not strict_types and type(ref) is int and type(ours) is float and ref == 0:
        # an empty float sum: the reference prints 0 (see test_empty_sums_print_as_int_zero)
        assert ours == 0.0, f"{where}: {ours!r} vs {ref!r}"
    elif isinstance(ref, float):
        assert type(ours) is float, f"{where}: {ours!r} vs {ref!r}"
        assert ours == pytest.approx(ref, rel=1e-9, abs=0 if ref else 1e-300), f"{where}: {ours!r} vs {ref!r}"
    else:
        assert type(ours) is type(ref) and ours == ref, f"{where}: {ours!r} vs {ref!r}"


def assert_same_csv(ours: str, ref: str) -> None:
    ours_rows, ref_rows = list(csv.reader(io.StringIO(ours))), list(csv.reader(io.StringIO(ref)))
    assert ours_rows[0] == ref_rows[0]
    assert len(ours_rows) == len(ref_rows)
    for o_row, r_row in zip(ours_rows[1:], ref_rows[1:]):
        assert len(o_row) == len(r_row)
        for column, o, r in zip(ours_rows[0], o_row, r_row):
            try:
                r_value = float(r)
            except ValueError:
                assert o == r, column
                continue
            if r.lstrip("-").isdigit():
                assert o == r, column
            else:
                assert float(o) == pytest.approx(r_value, rel=1e-9), column


@pytest.fixture(scope="module")
def generated_logs(tmp_path_factory) -> list[Path]:
    """Logs of the toy model on 50 lines of the real KJV corpus, one per game, and the
    hand-written logs."""
    folder = tmp_path_factory.mktemp("stats_logs")
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus = b"".join(f.readline() for _ in range(50))
    logs = []
    for game in ("wc", "we", "ce", "wr"):
        out = folder / f"toy.{game}.jsonl"
        extra = ["-n", "8", str(DATA / "vocab" / "american-english.no-possessive.txt")] if game == "wr" else []
        out.write_bytes(run_lmc("run", toy_model_command(), game, *extra, stdin=corpus).stdout)
        assert out.stat().st_size > 0
        logs.append(out)
    for name, data in (("hand.wc.jsonl", WC_LOG), ("hand.we.jsonl", WE_LOG), ("hand.wr.jsonl", WR_LOG)):
        logs.append(write_jsonl(folder / name, data))
    return logs


def json_rows(stdout: bytes) -> list[dict]:
    return [json.loads(line) for line in stdout.decode().splitlines()]


@pytest.mark.reference
@pytest.mark.parametrize("human", [True, False], ids=["human", "no-human"])
def test_json_same_as_reference(human, reference_lmc, generated_logs):
    logs = [str(p) for p in [*REAL_LOGS, *generated_logs]]
    flags = [] if human else ["--no-human"]
    ours = json_rows(run_lmc("stats", *flags, *logs).stdout)
    ref = json_rows(run_lmc("stats", *flags, *logs, lmc=[str(reference_lmc)]).stdout)
    assert len(ours) == len(ref) == len(logs)
    for o, r in zip(ours, ref):
        assert_same(o, r, r["log"])


@pytest.mark.reference
def test_empty_sums_print_as_int_zero(reference_lmc):
    log = str(PRETTY / "kjv.o2.wr.jsonl")
    ours, = json_rows(run_lmc("stats", "--no-human", log).stdout)
    ref, = json_rows(run_lmc("stats", "--no-human", log, lmc=[str(reference_lmc)]).stdout)
    assert_same(ours, ref, log, strict_types=True)


@pytest.mark.reference
def test_csv_same_as_reference(reference_lmc, generated_logs):
    logs = [str(p) for p in [*REAL_LOGS, *generated_logs]]
    # one csv call per set of columns (the reference writes the columns of the first row)
    groups: dict[tuple, list[str]] = {}
    for log, row in zip(logs, json_rows(run_lmc("stats", *logs).stdout)):
        groups.setdefault(tuple(sorted(flatten(row))), []).append(log)
    for group in groups.values():
        ours = run_lmc("stats", "-o", "csv", *group).stdout.decode()
        ref = run_lmc("stats", "-o", "csv", *group, lmc=[str(reference_lmc)]).stdout.decode()
        assert_same_csv(ours, ref)


# -- command line ----------------------------------------------------------------------------

def test_cli_several_logs_one_line_each():
    logs = [str(PRETTY / "kjv.o2.wc.jsonl"), str(PRETTY / "kjv.o2.we.jsonl"), str(PRETTY / "kjv.o2.wr.jsonl")]
    rows = json_rows(run_lmc("stats", *logs).stdout)
    assert [r["log"] for r in rows] == logs
    for log, row in zip(logs, rows):
        expected = lmc_stats.stats(read_jsonl(Path(log)))
        assert {k: v for k, v in row.items() if k != "log"} == json.loads(json.dumps(expected))
    assert "prediction" in rows[0] and "entropy" in rows[1] and "reranking" in rows[2]


def test_cli_lines_limits_datums():
    log = PRETTY / "kjv.o2.wc.jsonl"
    row, = json_rows(run_lmc("stats", "--no-human", "-n", "10", str(log)).stdout)
    expected = lmc_stats.stats(read_jsonl(log)[:10], human=False)
    assert row["tokens"] + row["skipped"] == 10
    assert {k: v for k, v in row.items() if k != "log"} == json.loads(json.dumps(expected))


def test_cli_reads_stdin():
    log = PRETTY / "kjv.o2.we.jsonl"
    from_file, = json_rows(run_lmc("stats", str(log)).stdout)
    for args in ((), ("-",)):
        from_stdin, = json_rows(run_lmc("stats", *args, stdin=log.read_bytes()).stdout)
        assert from_stdin.pop("log") == "-"
        from_file.pop("log", None)
        assert from_stdin == from_file


def test_cli_corpus_is_not_a_log():
    corpus = REPO / "tests" / "data" / "logs" / "rails40.jsonl"
    result = run_lmc("stats", str(corpus), check=False)
    assert result.returncode == 2
    assert result.stderr.decode().endswith(
        "rails40.jsonl:1: not an LM Challenge log datum: field (datum): 'message' is a required property\n")
    assert result.stdout == b""


_WR_DATUM = '{"user": null, "message": 0, "token": %d, "character": 0, "target": "x", ' \
    '"verbatim": "x", %s}\n'


@pytest.mark.parametrize("payload, message", [
    ('"results": [["x", 0]]', "field results[0]: ['x', 0] is too short"),
    ('"results": "xy"', "field results: 'xy' is not of type 'array'"),
    ('"results": [["x", 0, null], "y"]', "field results[1]: 'y' is not of type 'array'"),
    ('"results": [[1, 0, null]]', "field results[0][0]: 1 is not of type 'string'"),
    ('"results": [["x", "0", null]]', "field results[0][1]: '0' is not of type 'number'"),
    ('"results": [["x", 0, "-1"]]', "field results[0][2]: '-1' is not of type 'number', 'null'"),
    ('"logp": "-1"', "field (datum): 'results' is a dependency of 'verbatim'"),   # (a wr datum)
    ('"logp": true', "field (datum): 'results' is a dependency of 'verbatim'"),
    ('"results": [["x", 0, null], ["y", 0, null, 1], {"z": 1}]',
     "field results[2]: {'z': 1} is not of type 'array'"),
])
def test_cli_datum_of_wrong_shape(payload, message, tmp_path):
    """A datum whose results or logp are not of the log's types is named by file and line,
    and what is wrong as lmc validate says it (QA: a short results row was an IndexError
    traceback, a string logp was read as a number, a string score as a score)."""
    log = tmp_path / "odd.jsonl"
    log.write_text(_WR_DATUM % (0, '"results": [["x", 0, -1.5], ["y", -2, -1]]')
                   + _WR_DATUM % (1, payload))
    result = run_lmc("stats", str(log), check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.decode().endswith(f"odd.jsonl:2: not an LM Challenge log datum: {message}\n")
    assert "Traceback" not in result.stderr.decode() and result.stdout == b""


def test_a_logp_beyond_the_float_range_is_infinite(tmp_path):
    """An integer logp too large for a float is read as the columnar readers read it, an
    infinity (review: an OverflowError traceback datum by datum, as with -n)."""
    log = tmp_path / "huge.jsonl"
    log.write_text(_WR_DATUM % (0, '"logp": -1' + "0" * 400))
    for args in ((), ("-n", "1")):
        result = run_lmc("stats", *args, str(log), check=False)
        assert result.returncode == 0 and "Traceback" not in result.stderr.decode()
        assert json.loads(result.stdout)["entropy"]["mean"] == math.inf


def test_results_rows_with_more_fields_are_read(tmp_path):
    """Rows of four fields (the fitted form LM Challenge 5.x documents) stay readable."""
    log = tmp_path / "four.jsonl"
    log.write_text(_WR_DATUM % (0, '"results": [["x", 0, -1.5, 0.1], ["y", -2, null, 0.2]]'))
    row, = json_rows(run_lmc("stats", str(log)).stdout)
    assert row["reranking"]["max_candidates"] == 2


def test_cli_empty_log(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    row, = json_rows(run_lmc("stats", str(empty)).stdout)
    assert row["users"] == 0 and row["skipped"] == 0.0
    raw, = json_rows(run_lmc("stats", "--no-human", str(empty)).stdout)
    assert raw["users"] == 0 and raw["tokens"] == 0


@pytest.mark.parametrize("log", ["kjv.o2.wc.jsonl", "kjv.o2.wc.parquet"])
def test_stats_imports_only_what_it_needs(log, tmp_path):
    """`lmc stats` start-up: no games, models, JSON schema or pandas (each costs start-up
    time on every call)."""
    path = PRETTY / log
    if log.endswith(".parquet"):
        from lmchallenge.logs import convert
        path = tmp_path / log
        convert.convert(str(PRETTY / "kjv.o2.wc.jsonl"), str(path))
    code = ("import sys, io, contextlib\n"
            "from lmchallenge.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['stats', {str(path)!r}])\n"
            "print(' '.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(out.stdout.split())
    assert "lmchallenge.stats" in modules
    for heavy in ("lmchallenge.games", "lmchallenge.model", "lmchallenge.cli.run", "jsonschema",
                  "pandas", "scipy", "lmchallenge.analysis.pretty"):
        assert heavy not in modules, heavy

"""`lmc compare`'s column-wise same-data check (lmchallenge.analysis.same_data): it finds
real logs the same in every form and however they are cut into parts or blocks, and it says
"the same" only where the datum-by-datum check passes (thousands of mutants of the logs of
every game); where it does not know, the datum-by-datum check answers, message unchanged."""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path

import pytest

from lmchallenge.analysis import compare, same_data
from lmchallenge.analysis.diff import LogMismatchError
from lmchallenge.errors import LmcError
from lmchallenge.logs import parquet
from lmchallenge.logs.io import read_log
from conftest import REPO
from test_stats import run_lmc, write_jsonl

PRETTY = REPO / "tests" / "data" / "pretty"
GAMES = ("wc", "we", "ce", "wr")


def datums(game: str, order: str = "o1") -> list[dict]:
    return list(read_log(str(PRETTY / f"kjv.{order}.{game}.jsonl")))


def datum_check(monkeypatch, base: Path, log: Path) -> str | None:
    """The datum-by-datum check's answer: None (the same) or its message."""
    with monkeypatch.context() as patch:
        patch.setattr(same_data, "certainly_same", lambda *_: False)
        try:
            compare.check_same_data(str(base), [str(log)])
        except LogMismatchError as error:
            return str(error)
    return None


def forms(data: list[dict], game: str, where: Path) -> list[Path]:
    """``data`` as jsonl, gzipped jsonl, Parquet (small row groups), and run directories
    of Parquet parts and of mixed parts, cut inside messages."""
    where.mkdir()
    plain = write_jsonl(where / "log.jsonl", data)
    packed = where / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    table = where / "log.parquet"
    parquet.write_parquet(data, str(table), game, row_group_rows=7)
    cuts = [0, len(data) // 3, len(data) // 3 + 1, len(data)]
    runs = [where / "run", where / "mixed"]
    for run in runs:
        run.mkdir()
        for i, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
            if run.name == "mixed" and i == 1 and game != "wr":
                write_jsonl(run / f"part-{i:05d}.jsonl", data[lo:hi])
            else:
                parquet.write_parquet(data[lo:hi], str(run / f"part-{i:05d}.parquet"), game,
                                      row_group_rows=5)
    return [plain, packed, table, *runs]


@pytest.mark.parametrize("game", GAMES)
def test_the_same_log_in_every_form_is_the_same_data(game, tmp_path):
    one = forms(datums(game), game, tmp_path / "one")
    # another model's log of the same data
    other = forms(datums(game, "o2"), game, tmp_path / "other")
    for a in one:
        for b in one + other:
            # (wr jsonlines logs are checked datum by datum: Arrow reads no mixed lists)
            expected = not (game == "wr" and any(p.name.startswith("log.jsonl") for p in (a, b)))
            assert same_data.certainly_same(str(a), str(b)) is expected, (a, b)


def mutated(data: list[dict], key: str, value, rng: random.Random) -> list[dict]:
    """A copy of ``data`` with ``key`` of one datum (chosen by ``rng``) set to ``value``, or
    removed where ``value`` is ``"missing"``."""
    changed = copy.deepcopy(data)
    datum = changed[rng.randrange(len(changed))]
    if value == "missing":
        datum.pop(key, None)
    else:
        datum[key] = value
    return changed


def mutants(data: list[dict], game: str, rng: random.Random) -> list[tuple[str, list[dict]]]:
    """Changed copies of ``data``: each of the compared keys given another value or type,
    rows dropped or added, the selection changed, and for wr the typos and candidates."""
    out: list[tuple[str, list[dict]]] = []
    values = [None, 0, 1, -1, 2**40, "0", "1", "", "x", "\u00e9", "e\u0301", "\ud83d\ude00",
              True, False]
    for key in ("user", "message", "token", "character", "target", "select"):
        for value in values + ["missing"]:
            out.append((f"{key}={value!r}", mutated(data, key, value, rng)))
    out.append(("a row fewer", data[:-1]))
    out.append(("a row more", data + data[-1:]))
    out.append(("first row dropped", data[1:]))
    out.append(("rows swapped", [data[1], data[0], *data[2:]]))
    # users as integers (users of one type in a Parquet log)
    names = {d["user"] for d in data}
    numbers = {name: i for i, name in enumerate(sorted(names, key=str))}
    out.append(("integer users", [dict(d, user=numbers[d["user"]]) for d in data]))
    if game == "wr":
        for change in ("verbatim", "candidate", "error", "error type", "order", "fewer", "lm"):
            changed = copy.deepcopy(data)
            datum = rng.choice([d for d in changed if len(d["results"]) > 1])
            results = datum["results"]
            if change == "verbatim":
                datum["verbatim"] = (datum.get("verbatim") or "") + "x"
            elif change == "candidate":
                results[-1][0] += "x"
            elif change == "error":
                results[-1][1] = (results[-1][1] or 0.0) - 0.25
            elif change == "error type":
                results[0][1] = int(results[0][1]) if results[0][1] == int(results[0][1]) else 7
            elif change == "order":
                results.reverse()
            elif change == "fewer":
                results.pop()
            else:       # another model's score: the same typos
                results[0][2] = -123.0
            out.append((change, changed))
    return out


@pytest.mark.parametrize("game", GAMES)
def test_the_same_only_where_the_datum_check_passes(game, tmp_path, monkeypatch):
    data = datums(game)[:60]
    rng = random.Random(game)
    base = write_jsonl(tmp_path / "base.jsonl", data)
    base_pq = tmp_path / "base.parquet"
    parquet.write_parquet(data, str(base_pq), game, row_group_rows=8)
    judged = {True: 0, False: 0}
    for i, (name, changed) in enumerate(mutants(data, game, rng)):
        logs = [write_jsonl(tmp_path / f"m{i}.jsonl", changed)]
        try:
            parquet.write_parquet(changed, str(tmp_path / f"m{i}.parquet"), game, row_group_rows=6)
            logs.append(tmp_path / f"m{i}.parquet")
        except LmcError:       # (not every mutant is a Parquet log: bool users, say)
            pass
        for b in (base, base_pq):
            for log in logs:
                fast = same_data.certainly_same(str(b), str(log))
                slow = datum_check(monkeypatch, b, log)
                judged[fast] += 1
                assert not (fast and slow), (name, b.name, log.name, slow)
                # lmc compare's own answer is the datum check's, message and all
                try:
                    compare.check_same_data(str(b), [str(log)])
                    assert slow is None, (name, log.name)
                except LogMismatchError as error:
                    assert str(error) == slow
    assert judged[False] > 20 and judged[True] >= 3


def test_a_jsonl_block_arrow_does_not_read_is_left_to_the_datum_check(tmp_path):
    data = datums("we")[:20]
    base = write_jsonl(tmp_path / "base.jsonl", data)
    # a null select: Arrow would read it as missing (selected), Python's reader as null
    changed = copy.deepcopy(data)
    changed[3]["select"] = None
    odd = write_jsonl(tmp_path / "odd.jsonl", changed)
    assert not same_data.certainly_same(str(base), str(odd))
    assert not same_data.certainly_same(str(odd), str(odd))
    compare.check_same_data(str(base), [str(odd)])      # (null select = selected: the same)
    # not re-readable inputs are never read by it
    assert not same_data.certainly_same("-", str(base))
    assert not same_data.certainly_same(str(base), str(tmp_path / "missing.jsonl"))


def test_lmc_compare_of_logs_in_two_forms(tmp_path):
    """The command: a jsonl baseline against a Parquet run directory of another model."""
    one = forms(datums("wc"), "wc", tmp_path / "one")
    other = forms(datums("wc", "o2"), "wc", tmp_path / "other")
    out = run_lmc("compare", "-o", "json", "--resamples", "50", str(one[0]), str(other[3])).stdout
    [row] = [json.loads(line) for line in out.decode().splitlines()]
    assert (row["baseline"], row["log"]) == (str(one[0]), str(other[3]))
    assert row["metrics"]["prediction.mrr"]["delta"] != 0


def test_logs_of_two_games_on_the_same_tokens_are_not_the_same(tmp_path):
    we, wc = (forms(datums(game), game, tmp_path / game) for game in ("we", "wc"))
    for a, b in zip(we, wc):
        assert not same_data.certainly_same(str(a), str(b))
        with pytest.raises(LogMismatchError, match="the logs are of different games: BASELINE is "
                                                   "we, LOG is wc"):
            compare.check_same_data(str(a), [str(b)])


def test_the_first_datum_of_every_form(tmp_path):
    from lmchallenge.logs.io import first_datum

    data = datums("wc")
    for path in forms(data, "wc", tmp_path / "wc"):
        assert first_datum(str(path)) == data[0], path
    # a run directory whose first part is empty; an empty log
    run = tmp_path / "run"
    run.mkdir()
    parquet.write_parquet([], str(run / "part-00000.parquet"), "wc")
    parquet.write_parquet(data[5:9], str(run / "part-00001.parquet"), "wc")
    assert first_datum(str(run)) == data[5]
    assert first_datum(str(write_jsonl(tmp_path / "empty.jsonl", []))) is None


def test_a_damaged_log_is_the_datum_checks_error(tmp_path, monkeypatch):
    data = datums("we")
    base = write_jsonl(tmp_path / "base.jsonl", data)
    packed = gzip.compress(base.read_bytes())
    for name, content in (("cut.jsonl.gz", packed[:len(packed) // 2]),
                          ("garbled.jsonl.gz", packed[:40] + b"\0" * 64 + packed[104:]),
                          ("latin1.jsonl", base.read_bytes().replace(b"the", b"th\xe9", 1))):
        damaged = tmp_path / name
        damaged.write_bytes(content)
        assert not same_data.certainly_same(str(base), str(damaged)), name
        with monkeypatch.context() as patch:
            patch.setattr(same_data, "certainly_same", lambda *_: False)
            with pytest.raises(LmcError) as datum_check:
                compare.check_same_data(str(base), [str(damaged)])
        with pytest.raises(LmcError) as checked:
            compare.check_same_data(str(base), [str(damaged)])
        assert str(checked.value) == str(datum_check.value), name

"""`lmc convert LOG.jsonl -o LOG.parquet` column-wise (lmchallenge.logs.parquet_from_jsonl):
the file it writes is byte for byte the datum-by-datum conversion's, and wherever that
conversion refuses a log, or the log is not certainly written so, nothing is written
column-wise and the datum path answers, with its error (mutants of every game's logs)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from lmchallenge.errors import LmcError
from lmchallenge.logs import parquet_from_jsonl
from lmchallenge.logs.convert import convert
from test_same_data import PRETTY, datums, mutants, mutated
from test_stats import write_jsonl

GAMES = ("wc", "we", "ce")


def outcome(src: Path, dst: Path, monkeypatch, column_wise: bool) -> bytes | str:
    """What ``lmc convert src -o dst`` leaves: the file's bytes, or its error."""
    dst.unlink(missing_ok=True)
    with monkeypatch.context() as patch:
        if not column_wise:
            patch.setattr(parquet_from_jsonl, "write_columns", lambda *_, **__: None)
        try:
            convert(str(src), str(dst))
        except LmcError as error:
            assert not dst.exists()
            return str(error).replace(str(src), "SRC").replace(str(dst), "DST")
    return dst.read_bytes()


def logs_of(game: str) -> list[tuple[str, list[dict]]]:
    """Real logs of ``game``: plain text (no users), string users, integer users."""
    plain = datums(game)
    rails = [json.loads(line) for line in (PRETTY / f"rails.{'wc' if game == 'wc' else 'we'}.jsonl")
             .read_text().splitlines()] if game != "ce" else []
    out = [("plain", plain)]
    if rails:
        numbers = {name: i for i, name in enumerate(sorted({d["user"] for d in rails}))}
        out += [("users", rails), ("integer users", [dict(d, user=numbers[d["user"]]) for d in rails])]
    return out


@pytest.mark.parametrize("game", GAMES)
def test_real_logs_are_written_column_wise_as_datum_by_datum(game, tmp_path, monkeypatch):
    for name, data in logs_of(game):
        for packed in (False, True):
            src = write_jsonl(tmp_path / "log.jsonl", data)
            if packed:
                src = tmp_path / "log.jsonl.gz"
                src.write_bytes(gzip.compress((tmp_path / "log.jsonl").read_bytes()))
            slow = outcome(src, tmp_path / "slow.parquet", monkeypatch, column_wise=False)
            assert isinstance(slow, bytes), (name, slow)
            # column-wise indeed, in blocks of any size, and the same bytes
            for block_bytes in (1 << 24, 2000, 1):
                fast = tmp_path / f"fast{block_bytes}.parquet"
                rows = parquet_from_jsonl.write_columns(str(src), str(fast), game, block_bytes)
                assert rows == len(data) and fast.read_bytes() == slow, (name, block_bytes)
            assert outcome(src, tmp_path / "cli.parquet", monkeypatch, column_wise=True) == slow


def convert_mutants(data: list[dict], game: str, rng: random.Random) -> list[tuple[str, list[dict]]]:
    """What a log may hold that the datum path refuses or reads otherwise than Arrow: the
    compared keys' mutants, and the payload's (a null, missing, another game's key)."""
    out = mutants(data, game, rng)
    payload, other = ("completions", "logp") if game == "wc" else ("logp", "completions")
    for key, value in ((payload, None), (payload, "missing"), (other, None), (other, -1.0),
                       (other, [["a"]]), ("extra", 1), ("logp", "-1"), ("logp", 1),
                       ("completions", [["a", None]]), ("completions", [None]),
                       ("completions", []), ("completions", [[]])):
        out.append((f"{key}={value!r}", mutated(data, key, value, rng)))
    out.append(("no logp scored", [dict(d, logp=None) if "logp" in d else d for d in data]))
    out.append(("a user null", [dict(d, user=None) if i == 3 else d for i, d in enumerate(data)]))
    out.append(("the first user null", [dict(d, user=None) if i == 0 else d for i, d in enumerate(data)]))
    return out


@pytest.mark.parametrize("game", GAMES)
def test_a_mutant_is_converted_or_refused_as_datum_by_datum(game, tmp_path, monkeypatch):
    rng = random.Random(f"convert {game}")
    written = refused = 0
    for name, data in logs_of(game):
        for mutant, changed in convert_mutants(data[:80], game, rng):
            src = write_jsonl(tmp_path / "m.jsonl", changed)
            slow = outcome(src, tmp_path / "slow.parquet", monkeypatch, column_wise=False)
            fast = outcome(src, tmp_path / "fast.parquet", monkeypatch, column_wise=True)
            assert fast == slow, (name, mutant)
            written += isinstance(slow, bytes)
            refused += isinstance(slow, str)
    assert written > 20 and refused > 20, (written, refused)


def test_many_row_groups_as_datum_by_datum(tmp_path, monkeypatch):
    data = datums("we")
    rows = [dict(d, message=i) for i in range(70_000 // len(data) + 1) for d in data]
    src = write_jsonl(tmp_path / "big.jsonl", rows)
    fast = outcome(src, tmp_path / "fast.parquet", monkeypatch, column_wise=True)
    assert fast == outcome(src, tmp_path / "slow.parquet", monkeypatch, column_wise=False)
    import pyarrow.parquet as pq
    assert pq.ParquetFile(tmp_path / "fast.parquet").metadata.num_row_groups == 2


def test_what_is_not_written_column_wise(tmp_path):
    wr = write_jsonl(tmp_path / "wr.jsonl", datums("wr"))
    assert parquet_from_jsonl.write_columns(str(wr), str(tmp_path / "wr.parquet"), "wr") is None
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert parquet_from_jsonl.write_columns(str(empty), str(tmp_path / "e.parquet"), "we") is None
    damaged = tmp_path / "d.jsonl.gz"
    damaged.write_bytes(gzip.compress(b"{}\n" * 100)[:30])
    assert parquet_from_jsonl.write_columns(str(damaged), str(tmp_path / "d.parquet"), "we") is None
    assert not list(tmp_path.glob("*.parquet"))


@pytest.mark.parametrize("game", GAMES)
def test_a_run_dir_of_jsonl_parts_is_written_column_wise_as_its_whole_log(game, tmp_path,
                                                                          monkeypatch):
    """`lmc convert RUN_DIR -o X.parquet` of jsonl parts (`lmc-dist --part-format jsonl`)
    went datum by datum (2.5 s against 0.9 s for the same 599k-token log in one file): now
    column-wise, the whole log's file byte for byte (a part empty, one gzipped); a part the
    datum path refuses is named as before."""
    from lmchallenge.logs import convert as convert_module
    for name, data in logs_of(game):
        whole = write_jsonl(tmp_path / "log.jsonl", data)
        slow = outcome(whole, tmp_path / "slow.parquet", monkeypatch, column_wise=False)
        assert isinstance(slow, bytes), name
        run = tmp_path / name.replace(" ", "-")
        run.mkdir()
        cuts = [0, 3, 3, len(data) // 2, len(data)]
        for i, (start, end) in enumerate(zip(cuts, cuts[1:])):
            write_jsonl(run / f"part-{i:05d}.jsonl", data[start:end])
        part = run / "part-00002.jsonl"
        (run / "part-00002.jsonl.gz").write_bytes(gzip.compress(part.read_bytes()))
        part.unlink()
        with monkeypatch.context() as patch:    # no datum read one by one
            patch.setattr(convert_module, "write_log", None)
            fast = outcome(run, tmp_path / "fast.parquet", monkeypatch, column_wise=True)
        assert fast == slow, name
        bad = [dict(d, logp="-1") if i == 1 else d for i, d in enumerate(data[cuts[3]:])]
        write_jsonl(run / "part-00003.jsonl", bad)
        refused = outcome(run, tmp_path / "bad.parquet", monkeypatch, column_wise=True)
        assert refused == ("SRC/part-00003.jsonl:2: field logp: '-1' is not of type 'number', "
                           "'null'"), refused


def test_a_bad_value_is_named_by_its_file_and_line_not_the_output(tmp_path):
    """The datum path's Parquet writer named the output and a range of datums (`out.parquet:
    datums 1-30, column 'logp' (double): Could not convert '-1' ...`): the log's own line
    is named, as `lmc validate` names it; and a datum of another game after them."""
    data = datums("we")[:30]
    src = write_jsonl(tmp_path / "log.jsonl", [dict(d, logp="-1") if i == 6 else d
                                              for i, d in enumerate(data)])
    out = tmp_path / "out.parquet"
    with pytest.raises(LmcError) as caught:
        convert(str(src), str(out))
    assert str(caught.value) == f"{src}:7: field logp: '-1' is not of type 'number', 'null'"
    wc = datums("wc")[0]
    write_jsonl(src, data[:4] + [wc] + data[4:])
    with pytest.raises(LmcError) as caught:
        convert(str(src), str(out))
    assert str(caught.value) == f"{src}:5: a datum of wc after datums of we: a log holds one game"
    assert not out.exists()


@pytest.mark.parametrize("first, then", [(None, 7), ("x", 7), (7, None), (None, "x")])
def test_parts_of_other_users_than_the_first_part_s_as_datum_by_datum(tmp_path, monkeypatch,
                                                                      first, then):
    """Each part's blocks are typed by its own first datum: a part of integer users after a
    part of none (or of strings) was written as the strings '7' (review); now as the datum
    path writes or refuses it.  So too where the parts are converted one by one and joined
    (`lmc-dist --part-format jsonl --output X.parquet`), which read every part with the first
    one's user type."""
    from lmchallenge.logs.convert import join_logs
    data = datums("we")[:12]
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "part-00000.jsonl", [dict(d, user=first) for d in data[:6]])
    write_jsonl(run / "part-00001.jsonl", [dict(d, user=then) for d in data[6:]])
    slow = outcome(run, tmp_path / "slow.parquet", monkeypatch, column_wise=False)
    assert outcome(run, tmp_path / "fast.parquet", monkeypatch, column_wise=True) == slow
    joined = tmp_path / "joined.parquet"
    try:
        join_logs([str(run / "part-00000.jsonl"), str(run / "part-00001.jsonl")], str(joined), "we")
    except LmcError as error:     # (refused too; lmc convert names the part's line)
        assert str(error).replace(str(joined), "DST").startswith("DST: datum 7: user ")
        assert str(error).split(": the user column")[1] == slow.split(": the user column")[1]
    else:
        assert joined.read_bytes() == slow

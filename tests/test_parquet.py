"""lmchallenge.logs.parquet: the Parquet log layout of docs/formats.md, written and read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lmchallenge.logs import parquet as P
from lmchallenge.errors import InputError, LmcError
from lmchallenge.logs.jsonl import dumps_datum, load_jsonlines
from lmchallenge.logs.io import read_log

DATA = Path(__file__).resolve().parent / "data" / "pretty"
LOGS = sorted(p.name for p in DATA.glob("*.jsonl") if p.name != "rails8.jsonl")
GAME_OF = {"wc": "wc", "we": "we", "ce": "we", "wr": "wr"}


def game_of_name(name: str) -> str:
    return GAME_OF[name.split(".")[-2]]


def we_datum(i: int, **extra) -> dict:
    return {"user": None if i % 3 else f"u{i // 10}", "message": i // 10, "token": i % 10,
            "character": 5 * (i % 10), "target": f"w{i}", "logp": None if i % 4 == 0 else -i / 7,
            **extra}


def wr_datum(i: int) -> dict:
    results = [[f"c{i}.{j}", -j / 3, None if (i + j) % 2 else -float(j)] for j in range(i % 5)]
    return {"user": "u", "message": 0, "token": i, "character": i, "target": f"t{i}",
            "verbatim": f"v{i}", "results": results}


# --- round trips ------------------------------------------------------------------------

@pytest.mark.parametrize("log", LOGS)
def test_real_logs_round_trip_exactly(tmp_path, log):
    source = DATA / log
    original = list(load_jsonlines(str(source)))
    out = tmp_path / "log.parquet"
    assert P.write_parquet(iter(original), str(out)) == len(original)
    back = list(P.iter_parquet(str(out)))
    assert back == original
    # the same JSON lines, byte for byte: ints stay ints, floats keep every digit
    lines = source.read_text(encoding="utf-8").splitlines()
    assert [dumps_datum(d) for d in back] == lines
    assert pq.ParquetFile(out).schema_arrow == P.schema_for(game_of_name(log))


def test_select_key_survives_only_where_it_was(tmp_path):
    data = [we_datum(0, select=True), we_datum(1), we_datum(2, select=False)]
    out = tmp_path / "s.parquet"
    P.write_parquet(data, str(out))
    back = list(P.iter_parquet(str(out)))
    assert [d.get("select", "absent") for d in back] == [True, "absent", False]
    assert pq.read_table(out).column("select").to_pylist() == [True, None, False]


def test_schema_columns_and_types():
    assert P.schema_for("wc").names == ["user", "message", "token", "character", "target",
                                         "select", "completions"]
    assert P.schema_for("ce") == P.schema_for("we")
    assert P.schema_for("we").field("logp").type == pa.float64()
    wr = P.schema_for("wr")
    assert wr.names[-2:] == ["verbatim", "results"]
    assert wr.field("results").type == pa.list_(pa.struct([("candidate", pa.string()),
                                                           ("error", pa.float64()),
                                                           ("lm", pa.float64())]))
    assert P.schema_for("wc").field("completions").type == pa.list_(pa.list_(pa.string()))
    assert P.schema_for(None).names == ["user", "message", "token", "character", "target",
                                         "select"]
    with pytest.raises(LmcError, match="unknown game 'xx'"):
        P.schema_for("xx")


def test_pandas_reads_documented_dtypes(tmp_path):
    out = tmp_path / "we.parquet"
    data = list(load_jsonlines(str(DATA / "mixed.we.jsonl")))
    P.write_parquet(data, str(out))
    frame = pd.read_parquet(out)
    assert len(frame) == len(data)
    for column in ("message", "token", "character"):
        assert str(frame[column].dtype) == "int64"
    assert str(frame["logp"].dtype) == "float64"
    assert frame["logp"].isna().sum() == sum(d["logp"] is None for d in data)
    users = [d["user"] for d in data]
    assert [u is None for u in users] == list(frame["user"].isna())
    assert [u for u in frame["user"] if not pd.isna(u)] == [u for u in users if u is not None]
    assert frame["select"].isna().sum() == sum("select" not in d for d in data)
    assert list(frame["target"]) == [d["target"] for d in data]


@pytest.mark.parametrize("users", ["none", "some"])
def test_a_log_pandas_wrote_with_float_users_is_refused_saying_how_to_write_it(tmp_path, users):
    """QA: ``pandas.read_json(LOG, lines=True).to_parquet(...)`` of a log with no users (or
    integer users, some missing) gives a ``double`` user column: refused, saying how to write
    it (``astype('Int64')``), which then reads as the log."""
    from lmchallenge.stats.compute import stats
    data = [dict(d, user=None if users == "none" or i % 3 else 7)
            for i, d in enumerate(load_jsonlines(str(DATA / "kjv.o1.we.jsonl")))]
    source = tmp_path / "we.jsonl"
    source.write_text("".join(dumps_datum(d) + "\n" for d in data))
    frame = pd.read_json(source, lines=True)
    assert str(frame["user"].dtype) == "float64"
    frame.to_parquet(tmp_path / "float.parquet")
    with pytest.raises(InputError) as refused:
        list(read_log(str(tmp_path / "float.parquet")))
    assert str(refused.value) == (
        f"{tmp_path / 'float.parquet'}: column 'user' is double, not string or int64 as an LM "
        "Challenge log's (pandas holds integer users with some missing, or none at all, as "
        "floats: `df['user'] = df['user'].astype('Int64')` before writing)")
    frame["user"] = frame["user"].astype("Int64")
    frame.to_parquet(tmp_path / "int.parquet")
    assert [d["user"] for d in read_log(str(tmp_path / "int.parquet"))] == [d["user"] for d in data]
    assert stats(read_log(str(tmp_path / "int.parquet"))) == stats(data)


def test_a_frame_pandas_filtered_and_wrote_reads_as_its_rows_without_the_index(tmp_path):
    """QA: a log filtered with pandas and written back (``df[df.message % 2 == 0]
    .to_parquet(...)``) has pandas' index as a column ``__index_level_0__``: `lmc convert` to
    jsonl wrote it into every datum, to Parquet it failed on it.  It is not read; a column
    of the index's own name (``set_index('message')``) is the log's column."""
    from lmchallenge.logs.convert import convert
    from lmchallenge.stats.compute import stats
    data = list(load_jsonlines(str(DATA / "kjv.o1.wc.jsonl")))
    P.write_parquet(data, str(tmp_path / "wc.parquet"))
    frame = pd.read_parquet(tmp_path / "wc.parquet")
    frame[frame["message"] % 2 == 0].to_parquet(tmp_path / "even.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "even.parquet").names
    even = [d for d in data if d["message"] % 2 == 0]
    assert list(read_log(str(tmp_path / "even.parquet"))) == even
    assert P.read_table(str(tmp_path / "even.parquet")).column_names == \
        pq.read_schema(tmp_path / "wc.parquet").names
    for name in ("even.jsonl", "even.parquet.parquet"):
        convert(str(tmp_path / "even.parquet"), str(tmp_path / name))
        assert list(read_log(str(tmp_path / name))) == even
    frame.set_index("message").to_parquet(tmp_path / "indexed.parquet")
    assert list(read_log(str(tmp_path / "indexed.parquet"))) == data
    assert stats(read_log(str(tmp_path / "even.parquet"))) == stats(even)


def test_pandas_reads_a_run_directory_of_parts(tmp_path):
    data = list(load_jsonlines(str(DATA / "rails.we.jsonl")))
    run = tmp_path / "run"
    cut = len(data) // 3
    P.write_parquet(data[:cut], str(run / "part-00000.parquet"))
    P.write_parquet(data[cut:], str(run / "part-00001.parquet"))
    frame = pd.read_parquet(run)
    assert list(frame["target"]) == [d["target"] for d in data]
    assert str(frame["message"].dtype) == "int64"
    assert list(read_log(str(run))) == data


# --- empty logs, row groups -------------------------------------------------------------

@pytest.mark.parametrize("game", ["wc", "we", "ce", "wr"])
def test_empty_log_with_known_game_has_full_schema(tmp_path, game):
    out = tmp_path / "empty.parquet"
    assert P.write_parquet([], str(out), game=game) == 0
    assert pq.ParquetFile(out).schema_arrow == P.schema_for(game)
    assert list(P.iter_parquet(str(out))) == []
    assert P.read_table(str(out)).num_rows == 0


def test_empty_log_without_game_has_common_columns(tmp_path):
    out = tmp_path / "empty.parquet"
    assert P.write_parquet(iter(()), str(out)) == 0
    assert pq.ParquetFile(out).schema_arrow.names == P.schema_for(None).names


def test_small_row_groups_and_batches_round_trip_wr(tmp_path):
    data = [wr_datum(i) for i in range(95)]
    out = tmp_path / "wr.parquet"
    assert P.write_parquet(data, str(out), row_group_rows=10) == 95
    assert pq.ParquetFile(out).num_row_groups == 10
    # batches that do not line up with row groups slice the results lists
    assert list(P.iter_parquet(str(out), batch_rows=7)) == data
    assert list(P.iter_parquet(str(out))) == data


def test_default_row_groups_are_bounded(tmp_path):
    n = P.ROW_GROUP_ROWS + 1000
    out = tmp_path / "big.parquet"
    assert P.write_parquet((we_datum(i) for i in range(n)), str(out)) == n
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == 2
    assert max(meta.row_group(i).num_rows for i in range(2)) == P.ROW_GROUP_ROWS
    back = P.iter_parquet(str(out))
    for i, datum in enumerate(back):
        assert datum == we_datum(i)
    assert i == n - 1


def test_row_group_rows_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="positive"):
        P.write_parquet([we_datum(0)], str(tmp_path / "x.parquet"), row_group_rows=0)


# --- atomic writes and errors -----------------------------------------------------------

def test_failure_midway_leaves_no_file_and_no_temporary(tmp_path):
    def failing():
        for i in range(25):
            yield we_datum(i)
        raise RuntimeError("model died")

    out = tmp_path / "log.parquet"
    with pytest.raises(RuntimeError, match="model died"):
        P.write_parquet(failing(), str(out), row_group_rows=10)
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_an_existing_file(tmp_path):
    out = tmp_path / "log.parquet"
    P.write_parquet([we_datum(1)], str(out))
    before = out.read_bytes()
    with pytest.raises(InputError):
        P.write_parquet([we_datum(2), {"target": "x"}], str(out))
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["log.parquet"]


def test_mixed_game_keys_are_an_error_naming_the_datum(tmp_path):
    wc = {"user": None, "message": 0, "token": 2, "character": 4, "target": "x",
          "completions": [["x"]]}
    out = tmp_path / "mixed.parquet"
    with pytest.raises(InputError) as info:
        P.write_parquet([we_datum(0), we_datum(1), wc], str(out))
    message = str(info.value)
    assert str(out) in message
    assert "datum 3" in message
    assert "missing ['logp']" in message and "unexpected ['completions']" in message
    assert not out.exists()


def test_given_game_must_match_the_data(tmp_path):
    with pytest.raises(InputError, match=r"datum 1 .*missing \['completions'\].*unexpected \['logp'\]"):
        P.write_parquet([we_datum(0)], str(tmp_path / "x.parquet"), game="wc")


def test_extra_key_is_not_silently_dropped(tmp_path):
    with pytest.raises(InputError, match=r"unexpected \['timestamp'\]"):
        P.write_parquet([we_datum(0), we_datum(1, timestamp=3)], str(tmp_path / "x.parquet"))


def test_bad_values_name_the_column(tmp_path):
    with pytest.raises(InputError, match=r"datums 1-2, column 'message'"):
        P.write_parquet([we_datum(0), {**we_datum(1), "message": "one"}], str(tmp_path / "a.parquet"))
    with pytest.raises(InputError, match=r"column 'target'.*cannot be null"):
        P.write_parquet([{**we_datum(0), "target": None}], str(tmp_path / "b.parquet"))
    bad_wr = {**wr_datum(3), "results": [["a", -1.0]]}
    with pytest.raises(InputError, match=r"column 'results'"):
        P.write_parquet([bad_wr], str(tmp_path / "c.parquet"))
    assert list(tmp_path.iterdir()) == []


# --- reading errors and read_table ------------------------------------------------------

def test_reading_missing_or_non_parquet_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        list(P.iter_parquet(str(tmp_path / "nope.parquet")))
    junk = tmp_path / "junk.parquet"
    junk.write_text(json.dumps({"target": "x"}) + "\n")
    with pytest.raises(InputError, match="junk.parquet: not a readable Parquet file"):
        list(P.iter_parquet(str(junk)))
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), other)
    with pytest.raises(InputError, match="not an LM Challenge log"):
        list(P.iter_parquet(str(other)))


def test_a_damaged_parquet_log_is_an_error_not_other_numbers(tmp_path):
    """Two bytes flipped inside a data page gave other statistics, exit 0 (QA: a mean of
    -44.8 for 4.4): the pages carry CRC checksums, checked as they are read, so every
    command that reads the log says which file cannot be read, and none prints numbers."""
    import subprocess
    import sys
    path = tmp_path / "we.parquet"
    P.write_parquet([we_datum(i) for i in range(2000)], str(path), game="we")
    data = bytearray(path.read_bytes())
    column = pq.ParquetFile(path).metadata.row_group(0).column(4)   # target
    assert column.path_in_schema == "target"
    middle = column.data_page_offset + column.total_compressed_size // 2
    data[middle] ^= 0xFF
    data[middle + 1] ^= 0xFF
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(bytes(data))
    lmc = [sys.executable, "-m", "lmchallenge.cli"]
    for args in (["stats"], ["validate"], ["pretty"], ["grep", "w1"],
                 ["convert", "-o", str(tmp_path / "out.jsonl")]):
        run = subprocess.run([*lmc, *args, str(damaged)], capture_output=True, text=True)
        assert (run.returncode, run.stdout) == (2, ""), (args, run.stdout, run.stderr)
        assert run.stderr == (f"lmc: error: {damaged}: cannot read the Parquet log: could not "
                              f"verify page integrity, CRC checksum verification failed for "
                              f"page_ordinal 0\n"), args
    with pytest.raises(InputError, match="damaged.parquet: cannot read the Parquet log"):
        P.read_table(str(damaged))
    assert P.read_table(str(path)).num_rows == 2000


def test_read_table_file_columns_and_run_directory(tmp_path):
    data = [wr_datum(i) for i in range(30)]
    single = tmp_path / "all.parquet"
    P.write_parquet(data, str(single))
    run = tmp_path / "run"
    # written out of order: read in part order
    P.write_parquet(data[20:], str(run / "part-00002.parquet"))
    P.write_parquet(data[:8], str(run / "part-00000.parquet"))
    P.write_parquet(data[8:20], str(run / "part-00001.parquet"), game="wr")
    whole = P.read_table(str(single))
    assert whole.schema == P.schema_for("wr")
    assert P.read_table(str(run)).equals(whole)
    slim = P.read_table(str(run), columns=["token", "verbatim"])
    assert slim.column_names == ["token", "verbatim"]
    assert slim.column("token").to_pylist() == list(range(30))
    with pytest.raises(InputError, match=r"no column\(s\) \['logp'\]"):
        P.read_table(str(single), columns=["logp"])


def test_read_table_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        P.read_table(str(tmp_path / "nope.parquet"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no part-NNNNN"):
        P.read_table(str(empty))
    jsonl_run = tmp_path / "jsonl"
    jsonl_run.mkdir()
    (jsonl_run / "part-00000.jsonl").write_text(dumps_datum(we_datum(0)) + "\n")
    with pytest.raises(InputError, match="not a Parquet log"):
        P.read_table(str(jsonl_run))
    mixed = tmp_path / "mixed"
    P.write_parquet([we_datum(0)], str(mixed / "part-00000.parquet"))
    P.write_parquet([wr_datum(1)], str(mixed / "part-00001.parquet"))
    with pytest.raises(InputError, match="part-00001.parquet: columns"):
        P.read_table(str(mixed))


def test_sliced_batches_decode_results_from_their_own_offsets(tmp_path):
    # pyarrow may hand back batches that are views into a larger buffer (non-zero offsets)
    out = tmp_path / "wr.parquet"
    data = [wr_datum(i) for i in range(20)]
    P.write_parquet(data, str(out))
    batch = pq.read_table(out).combine_chunks().to_batches()[0]
    assert list(P._batch_datums(batch.slice(6, 9))) == data[6:15]


# --- the type of the users ------------------------------------------------------------------

def test_integer_users_stay_integers(tmp_path):
    """{"user": 7} in a corpus logs user 7 (LM Challenge 5.x); its Parquet log has an int64
    user column and reads back as the same datums, with the jsonl log's fingerprint."""
    data = [dict(we_datum(i), user=None if i % 5 == 0 else i // 10) for i in range(40)]
    out = tmp_path / "int.parquet"
    # row groups of 4 rows: the first group's first user is null, its type known by its second
    P.write_parquet(iter(data), str(out), row_group_rows=4)
    assert pq.ParquetFile(out).schema_arrow.field("user").type == pa.int64()
    assert list(P.iter_parquet(str(out))) == data
    assert [dumps_datum(d) for d in P.iter_parquet(str(out))] == [dumps_datum(d) for d in data]


def test_users_of_a_first_batch_without_any_are_retyped(tmp_path, monkeypatch):
    """Batches converted before any user was seen (string nulls) join the integer column."""
    monkeypatch.setattr(P, "CONVERT_ROWS", 3)
    data = [dict(we_datum(i), user=None if i < 7 else 3) for i in range(20)]
    out = tmp_path / "late.parquet"
    P.write_parquet(data, str(out), row_group_rows=10)
    assert pq.ParquetFile(out).schema_arrow.field("user").type == pa.int64()
    assert [d["user"] for d in P.iter_parquet(str(out))] == [None] * 7 + [3] * 13


@pytest.mark.parametrize("first, later, said", [
    (1, "1", "datum 5: user '1' is a string but user 1 before it is an integer"),
    ("a", 2, "datum 5: user 2 is an integer but user 'a' before it is a string"),
])
def test_users_of_both_types_are_refused_and_no_file_is_left(tmp_path, first, later, said):
    data = [dict(we_datum(i), user=first if i < 4 else later) for i in range(8)]
    out = tmp_path / "mixed.parquet"
    with pytest.raises(InputError) as caught:
        P.write_parquet(data, str(out))
    assert said in str(caught.value)
    assert "holds one type" in str(caught.value) and "write the log as jsonl" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_given_user_type_fixes_the_column_even_without_users(tmp_path):
    """lmc-dist gives every part the run's type: a part holding no user still agrees."""
    out = tmp_path / "none.parquet"
    P.write_parquet([we_datum(1), we_datum(2)], str(out), user_type="integer")
    assert pq.ParquetFile(out).schema_arrow.field("user").type == pa.int64()
    P.write_parquet([], str(out), game="we", user_type="integer")
    assert pq.ParquetFile(out).schema_arrow.field("user").type == pa.int64()
    with pytest.raises(InputError, match="datum 1: user 'u0' is a string but the log's users "
                                         "are integers"):
        P.write_parquet([we_datum(0)], str(out), user_type="integer")


def test_a_first_row_group_without_users_fixes_strings(tmp_path):
    """Once a row group is written its user column's type is fixed: strings where it held no
    user; an integer user after it is refused (it would be written as text otherwise)."""
    data = [dict(we_datum(i), user=None if i < 4 else 5) for i in range(6)]
    with pytest.raises(InputError, match="datum 5: user 5 is an integer but the log.s first 4 datums, "
                                         "without a user, fixed its user column as strings"):
        P.write_parquet(data, str(tmp_path / "x.parquet"), row_group_rows=4)


def test_parts_with_users_of_different_types_are_not_one_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    P.write_parquet([dict(we_datum(1), user=1)], str(run / "part-00000.parquet"))
    P.write_parquet([dict(we_datum(2), user="1")], str(run / "part-00001.parquet"))
    with pytest.raises(InputError, match=r"part-00001.parquet: its users are strings, those of "
                                         r"part-00000.parquet integers: not parts of one run"):
        P.read_table(str(run))


def test_an_integer_user_beyond_64_bits_is_refused_and_no_file_is_left(tmp_path):
    data = [dict(we_datum(i), user=7 if i < 3 else 2**70) for i in range(5)]
    with pytest.raises(InputError, match=r"datum 4: user 1180591620717411303424 is an integer beyond "
                                         r"64 bits, more than the user column of a Parquet log holds "
                                         r"\(int64\); write the log as jsonl"):
        P.write_parquet(data, str(tmp_path / "wide.parquet"))
    assert list(tmp_path.iterdir()) == []
    edge = [dict(we_datum(i), user=u) for i, u in enumerate((2**63 - 1, -2**63))]
    P.write_parquet(edge, str(tmp_path / "edge.parquet"))
    assert [d["user"] for d in P.iter_parquet(str(tmp_path / "edge.parquet"))] == [2**63 - 1, -2**63]


# --- a batch's datums checked at once ---------------------------------------------------------

@pytest.mark.parametrize("users, said", [
    ([7] * 7 + [None, 2**70], "datum 9: user 1180591620717411303424 is an integer beyond 64 bits"),
    ([7] * 7 + [-2**63 - 1, 8], "datum 8: user -9223372036854775809 is an integer beyond 64 bits"),
    ([7] * 6 + [None, "7", 8], "datum 8: user '7' is a string but user 7 before it is an integer"),
    (["a"] * 6 + [None, 7, 8], "datum 8: user 7 is an integer but user 'a' before it is a string"),
    (["a"] * 6 + [None, 1.5], "datum 8: user 1.5 is a float, not a string or an integer"),
    ([None] * 6 + [None, 3, "a"], "datum 8: user 3 is an integer but the log's first 6 datums"),
    ([None, None, True], "datum 3: user True is a bool, not a string or an integer"),
])
def test_users_of_a_later_batch_are_checked_as_the_first(tmp_path, monkeypatch, users, said):
    """The users of a batch after the one that fixed their type (checked at once where they
    all fit) are refused at the same datum and with the same words as one by one."""
    monkeypatch.setattr(P, "CONVERT_ROWS", 3)
    data = [dict(we_datum(i), user=user) for i, user in enumerate(users)]
    with pytest.raises(InputError) as caught:
        P.write_parquet(data, str(tmp_path / "users.parquet"), row_group_rows=6)
    assert said in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_later_batches_of_integer_users_with_nulls_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "CONVERT_ROWS", 4)
    data = [dict(we_datum(i), user=None if i % 3 == 0 else (2**63 - 1 if i % 2 else -2**63))
            for i in range(19)]
    P.write_parquet(data, str(tmp_path / "ints.parquet"))
    assert list(P.iter_parquet(str(tmp_path / "ints.parquet"))) == data


@pytest.mark.parametrize("bad, fails, said", [
    (5, 7, r"datum 6 does not fit .*unexpected \['zzz'\]"),   # a bad datum, then the data's error
    (8, 7, r"model died"),                                    # the data's error first
])
def test_the_first_fault_in_the_datums_order_is_reported(tmp_path, monkeypatch, bad, fails, said):
    """A datum with a wrong key and an error of the data itself in the same batch: whichever
    comes first, as when each datum was checked as it came."""
    monkeypatch.setattr(P, "CONVERT_ROWS", 10)

    def data():
        for i in range(20):
            if i == fails:
                raise RuntimeError("model died")
            yield we_datum(i, zzz=1) if i == bad else we_datum(i)

    with pytest.raises((InputError, RuntimeError), match=said):
        P.write_parquet(data(), str(tmp_path / "x.parquet"))
    assert list(tmp_path.iterdir()) == []


def test_a_batch_with_select_on_some_datums_only(tmp_path, monkeypatch):
    """``select`` on some datums of a batch: the others' column cells null; a batch without
    any has an all-null column; a bad key beside ``select`` is still refused."""
    monkeypatch.setattr(P, "CONVERT_ROWS", 4)
    data = [we_datum(i, select=bool(i % 2)) if i in (1, 2, 9) else we_datum(i) for i in range(12)]
    P.write_parquet(data, str(tmp_path / "s.parquet"))
    assert list(P.iter_parquet(str(tmp_path / "s.parquet"))) == data
    with pytest.raises(InputError, match=r"datum 10 does not fit .*unexpected \['zzz'\]"):
        P.write_parquet(data[:9] + [we_datum(9, select=True, zzz=0)], str(tmp_path / "t.parquet"))

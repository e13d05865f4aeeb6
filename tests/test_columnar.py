"""Column-wise statistics of Parquet logs equal the datum-by-datum statistics exactly."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lmchallenge.stats import columnar
from lmchallenge.logs import convert
from lmchallenge.analysis import grep
from lmchallenge.logs import parquet
from lmchallenge import stats
from lmchallenge.logs.io import read_log

DATA = Path(__file__).parent / "data"
LOGS = sorted(p for p in (DATA / "pretty").glob("*.jsonl") if p.name != "rails8.jsonl")
LOGS.append(DATA / "logs" / "kjv.wc.jsonl")   # made by lmchallenge 5.2 (logs/regenerate.sh)
LOGS.append(DATA / "empty.wc.jsonl")
PATTERNS = ("$alphaonly", "e", "~o", "$token=[02468]")


def load_jsonlines(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def game_of(path: Path) -> str:
    return path.name.split(".")[-2]


def expected(data: list[dict]) -> dict:
    return stats.state_of(data).result(human=False)


@pytest.mark.parametrize("src", LOGS, ids=lambda p: p.name)
def test_converted_log_same_raw_stats(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "log.parquet"
    convert.convert(str(src), str(dst), game=game_of(src))
    assert columnar.is_columnar(str(dst))
    got = columnar.state_of_parquet(str(dst)).result(human=False)
    assert got == expected(load_jsonlines(src))


@pytest.mark.parametrize("src", [p for p in LOGS if p.stat().st_size], ids=lambda p: p.name)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_grep_selection_tiny_row_groups(src: Path, pattern: str, tmp_path: Path) -> None:
    data = list(grep.grep(pattern, load_jsonlines(src)))
    assert any(d["select"] for d in data) or pattern == "$alphaonly"
    want = expected(data)
    assert want["skipped"] > 0 or all(d["select"] for d in data)
    for rows in (1, 7, 1000):
        dst = tmp_path / f"log{rows}.parquet"
        parquet.write_parquet(data, str(dst), game_of(src), row_group_rows=rows)
        assert columnar.state_of_parquet(str(dst)).result(human=False) == want
    # smaller batches than row groups too
    assert columnar.state_of_parquet(str(tmp_path / "log1000.parquet"),
                                     batch_rows=5).result(human=False) == want


@pytest.mark.parametrize("src", [p for p in LOGS if p.stat().st_size], ids=lambda p: p.name)
def test_run_directory_of_parts(src: Path, tmp_path: Path) -> None:
    data = list(grep.grep("$nospace", load_jsonlines(src)))
    run = tmp_path / "run"
    run.mkdir()
    # split inside messages so that user/message runs cross part boundaries
    cuts = [0, len(data) // 3, len(data) // 3 + 1, 2 * len(data) // 3, len(data)]
    for i, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
        parquet.write_parquet(data[lo:hi], str(run / f"part-{i:05d}.parquet"), game_of(src),
                              row_group_rows=4)
    assert columnar.is_columnar(str(run))
    want = expected(data)
    assert columnar.state_of_parquet(str(run)).result(human=False) == want
    assert stats.state_of_log(str(run)).result(human=False) == want


def test_is_columnar(tmp_path: Path) -> None:
    src = DATA / "pretty" / "kjv.o1.we.jsonl"
    assert not columnar.is_columnar(str(src))
    assert not columnar.is_columnar(str(tmp_path))                     # no parts
    assert not columnar.is_columnar(str(tmp_path / "missing.parquet"))
    (tmp_path / "part-00000.jsonl").write_text(src.read_text())
    assert not columnar.is_columnar(str(tmp_path))


def wc_datum(token: int, target: str, completions: list[list[str]], user: str | None = "u",
             message: int = 0) -> dict:
    return dict(user=user, message=message, token=token, character=0, target=target,
                completions=completions)


def test_completion_characters_are_code_points(tmp_path: Path) -> None:
    data = [
        # "é😀x": completes after 1 code point (rest "😀x" = 2 code points, 6 UTF-8 bytes)
        wc_datum(0, "é😀x", [["a"], ["zz", "😀x"], ["x"]]),
        # completes from the start, and predicted at rank 2
        wc_datum(1, "😀😀", [["q", "😀😀"], []]),
        # rank 3 of the second prefix: not a completion
        wc_datum(2, "ab😀", [["b"], ["c", "d", "b😀"]], user=None, message=1),
    ]
    dst = tmp_path / "emoji.parquet"
    parquet.write_parquet(data, str(dst), "wc", row_group_rows=2)
    got = columnar.state_of_parquet(str(dst)).result(human=False)
    assert got["completion"] == {"characters": 2 + 2, "tokens": 2}
    assert got["characters"] == 3 + 2 + 3
    assert got["prediction"]["hit"] == 1 and got["prediction"]["hit1"] == 0
    assert got["prediction"]["srr"] == 0.5
    assert got["users"] == 2 and got["messages"] == 2
    assert got == expected(data)


def test_wr_target_first_with_null_lm_and_duplicates(tmp_path: Path) -> None:
    data = [dict(user="u", message=0, token=t, character=0, target="ab", verbatim="ax",
                 results=results)
            for t, results in enumerate([
                [["ax", -0.1, -5.0], ["ab", -2.0, -1.0], ["ac", -3.0, None]],
                [["ab", -0.5, None]],
                [["zz", -0.2, -9.0], ["ab", -1.0, -2.0], ["ab", -1.5, -0.5], ["yy", -4.0, -1.0]],
                [],
            ])]
    dst = tmp_path / "wr.parquet"
    parquet.write_parquet(data, str(dst), "wr", row_group_rows=3)
    got = columnar.state_of_parquet(str(dst)).result(human=False)
    assert got["reranking"]["max_candidates"] == 4
    assert got == expected(data)


def test_stats_cli_reads_parquet(tmp_path: Path) -> None:
    src = DATA / "pretty" / "kjv.o2.wc.jsonl"
    dst = tmp_path / "log.parquet"
    convert.convert(str(src), str(dst))
    assert stats.state_of_log(str(dst)).result() == stats.state_of(read_log(str(src))).result()


def test_unreadable_parquet_is_input_error(tmp_path: Path) -> None:
    from lmchallenge.errors import InputError

    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet\n")
    with pytest.raises(InputError):
        columnar.state_of_parquet(str(bad))
    run = tmp_path / "run"
    run.mkdir()
    src = DATA / "pretty" / "kjv.o1.we.jsonl"
    convert.convert(str(src), str(run / "part-00000.parquet"))
    (run / "part-00001.parquet").write_text("truncated")
    with pytest.raises(InputError):
        columnar.state_of_parquet(str(run))


@pytest.mark.parametrize("encoding", [
    dict(use_dictionary=False),                                      # plain strings
    dict(dictionary_pagesize_limit=64, data_page_size=64),           # dictionary, then plain
    dict(row_group_size=37),                                         # many small row groups
])
@pytest.mark.parametrize("name", ["kjv.o2.wc.jsonl", "rails.wc.jsonl", "kjv.o2.wr.jsonl"])
def test_same_stats_whatever_the_string_encoding(name: str, encoding: dict, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    src = DATA / "pretty" / name
    data = list(grep.grep("e", load_jsonlines(src)))
    converted = tmp_path / "log.parquet"
    parquet.write_parquet(data, str(converted), game_of(src))
    dst = tmp_path / "encoded.parquet"
    pq.write_table(pq.read_table(converted), dst, **encoding)
    assert columnar.state_of_parquet(str(dst)).result(human=False) == expected(data)


def random_wc_log(seed: int, rows: int) -> list[dict]:
    """wc datums over a small vocabulary, so that targets, their suffixes and completions
    often coincide: empty prefix lists, lists shorter and longer than the ranks compared,
    the target (or its rest) at every rank, empty targets, users and messages changing."""
    rng = random.Random(seed)
    words = ["a", "ab", "abc", "b", "bc", "c", "", "é", "é😀", "😀"]
    data = []
    message = 0
    for token in range(rows):
        if rng.random() < 0.2:
            message += 1
        target = rng.choice(words)
        completions = [[rng.choice(words) for _ in range(rng.choice([0, 0, 1, 2, 3, 5, 12]))]
                       for _ in range(len(target) + 1 if rng.random() < 0.8 else rng.randrange(4))]
        data.append(wc_datum(token, target, completions, user=rng.choice(["u", "v", None]),
                             message=message))
    return data


@pytest.mark.parametrize("seed", range(8))
def test_random_wc_logs_same_stats(seed: int, tmp_path: Path) -> None:
    data = random_wc_log(seed, 400)
    want = expected(data)
    assert want["completion"]["tokens"] > 0 and want["prediction"]["hit"] > 0
    for rows in (1, 3, 64, 1000):
        dst = tmp_path / f"log{rows}.parquet"
        parquet.write_parquet(data, str(dst), "wc", row_group_rows=rows)
        assert columnar.state_of_parquet(str(dst)).result(human=False) == want, rows

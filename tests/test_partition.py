"""Cutting a corpus into partitions (lmc_dist.partition.scan): contiguous byte ranges of
whole lines, cut at about --partition-chars characters, smaller towards the end."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from lmc_dist import partition
from lmc_dist import sizing as sizing_module
from lmc_dist.partition import read_partition, scan, taper_limit
from lmc_dist.sizing import ForCluster, PartitionSize, query_cost
from lmchallenge.errors import InputError
from lmchallenge.games.spec import GameSpec

from conftest import DATA
COMMITS = DATA / "commits" / "rails.test.sample.jsonl"


def rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_taper_limit() -> None:
    assert taper_limit(20000, 10**9) == 20000
    assert taper_limit(20000, 80000) == 20000
    assert taper_limit(20000, 40000) == 10000
    assert taper_limit(20000, 12000) == 3000
    assert taper_limit(20000, 0) == 2500          # an eighth of partition_chars at least
    assert taper_limit(5, 0) == 1


@pytest.mark.parametrize("partition_chars", [2000, 20000, 10**9])
def test_partitions_tile_the_corpus_and_taper_at_its_end(tmp_path: Path, partition_chars: int) -> None:
    result = scan(str(COMMITS), "auto", partition_chars, False, str(tmp_path))
    parts = result.partitions
    assert [p.index for p in parts] == list(range(len(parts)))
    assert parts[0].start == 0 and parts[-1].end == COMMITS.stat().st_size
    assert all(a.end == b.start for a, b in zip(parts, parts[1:]))
    assert [p.first_line for p in parts] == [1] + [1 + sum(q.messages for q in parts[:i])
                                                  for i in range(1, len(parts))]
    texts = [r["text"] for r in rows(COMMITS)]
    assert result.messages == len(texts) == sum(p.messages for p in parts)
    assert result.characters == sum(map(len, texts)) == sum(p.characters for p in parts)
    longest = max(map(len, texts))
    after = result.characters
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        # a partition is cut at the first message that reaches its limit
        assert p.characters < partition_chars + longest
        if after >= 4 * partition_chars * 1.2 and not last:   # far from the end: full size
            assert p.characters >= partition_chars
        if after <= 4 * partition_chars * 0.8:                 # near the end: smaller
            assert p.characters <= max(after // 4 * 1.3, partition_chars // 8) + longest
            assert p.characters >= partition_chars // 8 or last
        after -= p.characters
    if partition_chars == 20000:   # 320,000 characters: the last 80,000 in 10 shrinking pieces
        sizes = [p.characters for p in parts]
        assert len(parts) == 22 and sizes[12:] == sorted(sizes[12:], reverse=True)
        assert sizes[-1] < 2600
    # the messages are those of the corpus, in order, each once
    read = [m.text for p in parts for m in read_partition(result.path, p, "json")]
    assert read == texts


def test_training_never_splits_a_user(tmp_path: Path) -> None:
    parts = scan(str(COMMITS), "auto", 3000, True, str(tmp_path)).partitions
    owner: dict[str, int] = {}
    for p in parts:
        for m in read_partition(str(COMMITS), p, "json"):
            assert owner.setdefault(m.user, p.index) == p.index
    assert all(p.first_message == 0 for p in parts)
    assert len(parts) > 20


def test_gz_input_cuts_as_the_plain_file(tmp_path: Path) -> None:
    packed = tmp_path / "commits.jsonl.gz"
    with open(COMMITS, "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = scan(str(COMMITS), "auto", 5000, False, str(tmp_path / "a"))
    unpacked = scan(str(packed), "auto", 5000, False, str(tmp_path / "b"))
    assert unpacked.partitions == plain.partitions
    assert Path(unpacked.path).read_bytes() == COMMITS.read_bytes()
    # the digest (computed beside the scan) is of the file as given
    assert plain.sha256 == hashlib.sha256(COMMITS.read_bytes()).hexdigest()
    assert unpacked.sha256 == hashlib.sha256(packed.read_bytes()).hexdigest()
    for missing in ("nope.jsonl", "nope.jsonl.gz"):
        with pytest.raises(InputError, match=rf"{missing}: no such file$"):
            scan(str(tmp_path / missing), "json", 5000, False, str(tmp_path / "b"))


def test_a_url_fsspec_cannot_read_here_is_refused_by_name(tmp_path: Path, monkeypatch) -> None:
    """QA: `lmc-dist run --input s3://...` without s3fs ended in fsspec's ImportError
    traceback (and an unknown protocol in its ValueError's)."""
    from fsspec.registry import known_implementations
    monkeypatch.setitem(known_implementations, "lmcmissing",
                        {"class": "lmc_no_such_package.FileSystem",
                         "err": "Install lmc-no-such-package to access it"})
    for url, said in (("nosuchproto://c.txt", "Protocol not known: nosuchproto"),
                      ("lmcmissing://c.txt", "Install lmc-no-such-package to access it")):
        with pytest.raises(InputError) as caught:
            scan(url, "auto", 5000, False, str(tmp_path))
        assert str(caught.value) == f"{url}: cannot read it here: {said}"


def test_resume_refuses_a_run_dir_cut_otherwise(tmp_path: Path) -> None:
    """A run dir whose partitions were cut otherwise (say by an earlier version, before the
    taper) cannot be resumed: its finished part files would stand for other lines."""
    from lmc_dist import manifest as mf
    from lmchallenge.errors import LmcError

    result = scan(str(COMMITS), "auto", 20000, False, str(tmp_path))

    def manifest_of(partitions) -> dict:
        return mf.new_manifest(game="wc", game_options={}, predictor="p", corpus=str(COMMITS),
                               scan=replace(result, partitions=partitions), train=False,
                               partition_chars=20000, out_format="parquet",
                               part_names=[f"part-{p.index:05d}.parquet" for p in partitions])

    now = manifest_of(result.partitions)
    mf.check_resumable(now, manifest_of(result.partitions))          # the same cut: fine
    merged = result.partitions[:-2] + [replace(result.partitions[-2], end=result.partitions[-1].end)]
    with pytest.raises(LmcError, match="cut into other partitions.*22 partitions there, 21 now"):
        mf.check_resumable(now, manifest_of(merged))


def odd_text(seed: int, lines: int = 400) -> bytes:
    """A plain-text corpus of ``lines`` + 1 lines of ASCII words, punctuation, tabs,
    multi-byte characters (2, 3 and 4 bytes), CRs inside lines and before their LF (two in
    the middle line: its block is read line by line), blank lines; a BOM first."""
    rng = random.Random(seed)
    pieces = ["the", "Lord", ",", ".", "\t", " ", "  ", "é", "ñandú", "日本", "😀", "\r", "!?",
              "x=1", "\ufeff", "\u200d"]
    out = ["\ufeff"] if seed % 2 else []
    for _ in range(lines):
        text = "".join(rng.choice(pieces) for _ in range(rng.choice([0, 1, 3, 8, 20])))
        out.append(text + rng.choice(["\n", "\n", "\n", "\r\n"]))
    out.insert(len(out) // 2, "two CRs\r\r\n")
    if seed % 3 == 0:
        out[-1] = out[-1].rstrip("\n")    # no LF at the end (a CR may stay)
    return "".join(out).encode("utf-8")


def line_by_line(monkeypatch: pytest.MonkeyPatch, *args, **kwargs):
    """scan() with every block of a plain-text corpus read line by line."""
    with monkeypatch.context() as m:
        m.setattr(partition, "_block_lines", lambda *_: None)
        return scan(*args, **kwargs)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("game", ["we", "wc", "ce"])
def test_a_text_corpus_cut_a_block_at_a_time_as_line_by_line(tmp_path, monkeypatch, seed, game):
    """The block scan (numpy counts, lmc_dist.partition._block_lines) cuts every plain-text
    corpus where the line-by-line scan does, with the same counts, sizes and estimate:
    blocks of about 100 bytes so that partitions span blocks."""
    corpus = tmp_path / "odd.txt"
    corpus.write_bytes(odd_text(seed))
    monkeypatch.setattr(partition, "BLOCK_BYTES", 97)
    monkeypatch.setattr(sizing_module, "SAMPLE_BYTES", 1500)
    monkeypatch.setattr(partition, "SAMPLE_BYTES", 1500)
    cost = query_cost(GameSpec(game))
    for size in (ForCluster(3, min_queries=40), PartitionSize("characters", 300), 1):
        blocks = scan(str(corpus), "text", size, False, str(tmp_path), cost=cost)
        lines = line_by_line(monkeypatch, str(corpus), "text", size, False, str(tmp_path),
                             cost=cost)
        assert blocks == lines
        assert len(blocks.partitions) > 5
    texts = [m.text for p in blocks.partitions for m in read_partition(blocks.path, p, "text")]
    assert len(texts) == blocks.messages == 401
    assert sum(map(cost, texts)) == sum(p.queries for p in blocks.partitions)
    assert sum(map(len, texts)) == blocks.characters


def test_a_block_that_is_not_utf_8_is_read_line_by_line_and_its_line_named(tmp_path, monkeypatch):
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(odd_text(1, 50) + b"caf\xe9\n" + odd_text(2, 50))    # line 52
    monkeypatch.setattr(partition, "BLOCK_BYTES", 97)
    with pytest.raises(InputError) as raised:
        scan(str(corpus), "text", 100, False, str(tmp_path), cost=query_cost(GameSpec("we")))
    assert str(raised.value) == f"{corpus}:52: not valid UTF-8 (byte 3 of the line)"


def odd_json(seed: int, rows: int = 400) -> bytes:
    """A json corpus of ``rows`` lines: rows of string, integer and null users (``user``,
    ``userId`` or none; "1" and 1 both), runs of one user, texts of multi-byte characters,
    escapes and line separators, blank lines of ASCII and other spaces, CRLF and two CRs,
    spaces around a row; a BOM first where ``seed`` is odd, no LF at the end where it is a
    multiple of 3."""
    rng = random.Random(seed)
    pieces = ["the", "Lord", ",", ".", "\t", " ", "é", "日本", "😀", "!?", "\n", "\r", "\u2028", "\\"]
    users = [None, "a", "b", 1, 2, "1", "ü"]
    user = rng.choice(users)
    out = ["\ufeff"] if seed % 2 else []
    for _ in range(rows):
        if rng.random() < 0.1:
            out.append(rng.choice(["\n", "  \n", "\t\r\n", "\u00a0\n", "\u3000\n", "\r\n"]))
            continue
        if rng.random() < 0.2:
            user = rng.choice(users)
        row: dict = {"text": "".join(rng.choice(pieces) for _ in range(rng.choice([0, 1, 3, 12])))}
        if user is not None or rng.random() < 0.5:
            row["user" if rng.random() < 0.5 else "userId"] = user
        line = json.dumps(row, ensure_ascii=rng.random() < 0.5)
        line = "  " + line + " \t" if rng.random() < 0.1 else line
        out.append(line + rng.choice(["\n", "\n", "\r\n", "\r\r\n"]))
    if seed % 3 == 0:
        out[-1] = out[-1].rstrip("\n")
    return "".join(out).encode("utf-8")


def cut_line_by_line(corpus: bytes, limit: int, train: bool) -> list[tuple]:
    """The cut, one line at a time, without the taper: a partition is closed before the
    first message that finds it holding ``limit`` characters or more, where a cut may fall
    (anywhere; when training, at a user's first message); the blank lines after a message
    belong to its partition.  Per partition: (start, end, first line, first message number,
    messages, characters, users begun or continued)."""
    parts: list[list] = []
    offset, previous, number = 0, object(), -1
    lines = [line + b"\n" for line in corpus.split(b"\n")]
    lines[-1] = lines[-1][:-1]    # (after the last LF: b"", or a line without one)
    for line_number, raw in enumerate(filter(None, lines), start=1):
        start, offset = offset, offset + len(raw)
        text = raw.decode("utf-8").removeprefix("\ufeff" if line_number == 1 else "")
        if not text.strip():
            if parts:
                parts[-1][1] = offset
            continue
        row = json.loads(text)
        user = row["user"] if "user" in row else row.get("userId")
        new_group = user != previous
        number = 0 if new_group else number + 1
        if not parts or (parts[-1][5] >= limit and (new_group or not train)):
            parts.append([start, offset, line_number, number, 0, 0, 0])
        part = parts[-1]
        part[1] = offset
        part[4] += 1
        part[5] += len(row["text"])
        part[6] += new_group or part[4] == 1
        previous = user
    return [tuple(part) for part in parts]


def as_tuples(partitions) -> list[tuple]:
    return [(p.start, p.end, p.first_line, p.first_message, p.messages, p.characters, p.users)
            for p in partitions]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("train", [False, True])
def test_a_json_corpus_cut_a_block_at_a_time_as_line_by_line(tmp_path, monkeypatch, seed, train):
    """The block scan of a json corpus (lmc_dist.partition._json_block; the cut of every
    corpus, lmc_dist.partition._Cutter.add_block) cuts as the rule read one line at a time,
    with the same message numbers and counts, and as its blocks read line by line (with
    the sizes chosen for a cluster too): blocks of about 100 bytes, partitions across them."""
    corpus = tmp_path / "odd.jsonl"
    corpus.write_bytes(odd_json(seed))
    monkeypatch.setattr(partition, "BLOCK_BYTES", 97)
    monkeypatch.setattr(sizing_module, "SAMPLE_BYTES", 1500)
    monkeypatch.setattr(partition, "SAMPLE_BYTES", 1500)
    for limit in (1, 40, 300):
        with monkeypatch.context() as m:
            m.setattr(partition, "taper_limit", lambda limit, *_: limit)
            result = scan(str(corpus), "json", limit, train, str(tmp_path))
        assert as_tuples(result.partitions) == cut_line_by_line(corpus.read_bytes(), limit, train)
        assert len(result.partitions) > (20 if limit <= 40 and not train else 5)
    cost = query_cost(GameSpec("we"))
    for size in (ForCluster(3, min_queries=40), PartitionSize("characters", 300)):
        blocks = scan(str(corpus), "json", size, train, str(tmp_path), cost=cost)
        with monkeypatch.context() as m:
            m.setattr(partition, "_json_block", lambda *_: None)
            lines = scan(str(corpus), "json", size, train, str(tmp_path), cost=cost)
        assert blocks == lines
    messages = [m for p in blocks.partitions for m in read_partition(blocks.path, p, "json")]
    assert len(messages) == blocks.messages > 300
    assert sum(cost(m.text) for m in messages) == sum(p.queries for p in blocks.partitions)
    assert sorted(blocks.users.first) == ["integer", "string"]


@pytest.mark.parametrize("seed", [1, 3])
@pytest.mark.parametrize("train", [False, True])
def test_a_json_corpus_parsed_in_helper_processes_cuts_as_in_one(tmp_path, monkeypatch, seed,
                                                                 train):
    """The blocks of a large json corpus parsed in helper processes (lmc_dist.partition.
    scan_processes) give the scan of one process: the same partitions, counts, message
    numbers, users and estimates (blocks of about 100 bytes, many in flight at once)."""
    corpus = tmp_path / "odd.jsonl"
    corpus.write_bytes(odd_json(seed, rows=600))
    monkeypatch.setattr(partition, "BLOCK_BYTES", 97)
    mapped, ordered_map = [], partition.ordered_map
    monkeypatch.setattr(partition, "ordered_map",
                        lambda *args: mapped.append(args[2]) or ordered_map(*args))
    cost = query_cost(GameSpec("wc"))
    for size in (ForCluster(3, min_queries=40), 300):
        helpers = scan(str(corpus), "json", size, train, str(tmp_path), cost=cost, processes=2)
        alone = scan(str(corpus), "json", size, train, str(tmp_path), cost=cost, processes=0)
        assert helpers == alone
        assert len(helpers.partitions) > 5
    assert mapped == [2, 2]     # (the helpers' scans, not the others)


@pytest.mark.parametrize("bad, message", [
    (b'{"text": "a", "user": [1]}\n', '"user"/"userId" must be a string, an integer or null'),
    (b'{"text": "caf\xe9"}\n', "not valid UTF-8 (byte 13 of the line)")])
def test_a_bad_row_parsed_in_a_helper_process_is_named_as_in_one(tmp_path, monkeypatch, bad,
                                                                 message):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(odd_json(4, 300) + b"\n" + bad + odd_json(5, 300) + b'{"text": 1}\n')
    data = corpus.read_bytes()
    line = data[:data.index(bad)].count(b"\n") + 1      # (the later bad row is not reached)
    monkeypatch.setattr(partition, "BLOCK_BYTES", 97)
    errors = []
    for processes in (2, 0):
        with pytest.raises(InputError) as raised:
            scan(str(corpus), "json", 100, False, str(tmp_path), processes=processes)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(f"{corpus}:{line}: ") and message in errors[0]


def test_only_a_large_json_corpus_is_parsed_in_helper_processes(monkeypatch):
    monkeypatch.setattr(partition, "usable_cpus", lambda: 16)
    large = partition.PARALLEL_SCAN_BYTES
    assert partition.scan_processes("json", large - 1) == 0
    assert partition.scan_processes("json", None) == 0
    assert partition.scan_processes("text", 10 * large) == 0
    assert partition.scan_processes("json", large) == 4         # (one per block)
    assert partition.scan_processes("json", 10 * large) == 16   # (one per CPU)


@pytest.mark.parametrize("line", [
    '{"text": "a", "user": 1}', '{"text": "a"}  \t\r', '  {"text": "a"}', '{"text": "a"} x',
    '{"text": "a"}{"text": "b"}', '{"text": "a"}\x0c', '{"text": "a", "text": "b"}',
    '{"text": "a", "timestamp": NaN}', '{"text": "a", "user": ' + "9" * 40 + '}',
    '{"text": "a\\ud800"}', '{"text": "a",}', '{"text": ' * 100_000, '{"text": "\\u00e9\\n"}',
    '{"text": "a"}\n', '\ufeff{"text": "a"}', '[{"text": "a"}]', '{"text": "a" ]'])
def test_a_row_is_read_as_json_loads_reads_it(line):
    """The quick reading of a row (lmchallenge.corpus._json_object) gives what json.loads
    gives, and leaves what it does not read (or an error) to it."""
    from lmchallenge import corpus

    def read(text: str):
        try:
            return corpus.parse_json_row(text, "c.jsonl", 7)
        except InputError as e:
            return str(e)

    quick = read(line)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(corpus, "_json_object", lambda _: None)
        assert read(line) == quick

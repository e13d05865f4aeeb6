"""Log lines: ``dumps_datum`` writes each datum exactly as ``json.dumps(datum, sort_keys=True)``
(LM Challenge 5.x's form), on every shipped test log and on awkward values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmchallenge.logs.jsonl import dumps_datum, load_jsonlines

LOGS = sorted(p for p in (Path(__file__).parent / "data").rglob("*.jsonl*") if p.stat().st_size)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_lines_are_json_dumps_with_sorted_keys(path):
    data = list(load_jsonlines(str(path)))
    assert [dumps_datum(d) for d in data] == [json.dumps(d, sort_keys=True) for d in data]


def test_awkward_values():
    datum = {"user": None, "target": "\u00e9\U0001f600\"\\\n\x00", "logp": -1e308,
             "z": [1e-320, 2**70, -0.0, True], "a": {"nested": [[], {}]}}
    assert dumps_datum(datum) == json.dumps(datum, sort_keys=True)
    assert dumps_datum(datum).startswith('{"a": {"nested": [[], {}]}, "logp": -1e+308')


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_numbers_json_has_not_are_refused(number):
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps_datum({"logp": -1.0, "results": [["a", -1.0, number]]})


def test_load_and_dump_take_paths_and_open_files(tmp_path):
    """QA: `lmc.dump_jsonlines(log, pathlib.Path(...))` and `lmc.load_jsonlines(open(...))`
    were AttributeError and TypeError tracebacks (LM Challenge 5.x takes only a str): a Path
    reads and writes as its str; an open file, text or binary, is read or written where it
    stands, as it is, and left open."""
    import gzip
    import io

    import lmchallenge as lmc
    from lmchallenge.errors import InputError
    data = [{"user": None, "message": 0, "token": i, "character": 2 * i, "target": "é",
             "logp": -1.5} for i in range(3)]
    lines = "".join(json.dumps(d, sort_keys=True) + "\n" for d in data)
    packed = tmp_path / "log.jsonl.gz"
    lmc.dump_jsonlines(data, packed)
    assert gzip.decompress(packed.read_bytes()).decode() == lines
    assert list(lmc.load_jsonlines(packed)) == data
    with open(tmp_path / "text.jsonl", "w", encoding="utf-8") as f:
        f.write("\n")
        lmc.dump_jsonlines(data, f)
        lmc.dump_jsonlines(data[:1], f)
        assert not f.closed
    with open(tmp_path / "bytes.jsonl", "wb") as f:
        lmc.dump_jsonlines(data, f)
        f.write(b"\n")
        assert not f.closed
    assert (tmp_path / "text.jsonl").read_text() == "\n" + lines + lines.splitlines(True)[0]
    assert (tmp_path / "bytes.jsonl").read_bytes() == lines.encode() + b"\n"
    for mode in ("r", "rb"):
        with open(tmp_path / "bytes.jsonl", mode) as f:
            assert list(lmc.load_jsonlines(f)) == data and not f.closed
    with gzip.open(packed, "rt", encoding="utf-8") as f:
        assert list(lmc.load_jsonlines(f)) == data
    with pytest.raises(InputError, match=r"^<stream>:2: invalid JSON: Expecting property name"):
        list(lmc.load_jsonlines(io.StringIO(lines.splitlines(True)[0] + "{bad\n")))
    with open(tmp_path / "bad.jsonl", "wb") as f:
        f.write(lines.encode() + b'{"target": "\xff"}\n')
    with open(tmp_path / "bad.jsonl", "rb") as f, \
            pytest.raises(InputError, match=r"bad.jsonl:4: not valid UTF-8"):
        list(lmc.load_jsonlines(f))

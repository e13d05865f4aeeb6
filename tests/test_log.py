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

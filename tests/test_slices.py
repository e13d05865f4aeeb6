"""`lmc stats --by`, `--derived`, `--signature` (lmchallenge.stats.slices, .derived, .signature)
and the per-token table."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from lmchallenge.stats import bootstrap
from lmchallenge.logs.io import read_log
from lmchallenge.logs.parquet import write_parquet
from lmchallenge.stats.slices import length_bin, token_table
from conftest import REPO
from test_stats import run_lmc

LOGS = REPO / "tests" / "data" / "logs"


def by_hand(path, key) -> dict:
    """Per slice key (of a datum), selected tokens, Hit@1 and entropy sums, by hand."""
    out: dict = {}
    for d in read_log(str(path)):
        if not d.get("select", True):
            continue
        s = out.setdefault(key(d), {"tokens": 0, "hit1": 0, "logp": 0.0, "scored": 0})
        s["tokens"] += 1
        if d.get("completions"):
            s["hit1"] += d["completions"][0][:1] == [d["target"]]
        if d.get("logp") is not None:
            s["logp"] -= d["logp"]
            s["scored"] += 1
    return out


def test_by_user_is_one_row_per_user(tmp_path):
    path = LOGS / "rails.wc.jsonl"
    parquet = tmp_path / "rails.wc.parquet"
    write_parquet(list(read_log(str(path))), str(parquet))
    expected = by_hand(path, lambda d: d["user"])
    for log in (path, parquet):
        rows = [json.loads(line) for line in run_lmc("stats", "--by", "user", str(log)).stdout.splitlines()]
        assert [r["user"] for r in rows] == sorted(expected)
        for row in rows:
            hand = expected[row["user"]]
            assert row["tokens"] == hand["tokens"]
            assert row["prediction"]["hit1"] == hand["hit1"] / hand["tokens"]
            assert row["log"] == str(log)
    table = list(csv.DictReader(io.StringIO(run_lmc("stats", "--by", "user", "-o", "csv", str(path)).stdout.decode())))
    assert len(table) == len(expected) and "prediction.hit1" in table[0]


def test_by_user_keeps_integer_users_apart_from_messages_without_user(tmp_path):
    """Integer users ({"user": 3}) are users of their own, in jsonl and Parquet logs: neither
    one null-user row, nor merged with the user-less message of the same number, nor with
    the string user "3"."""
    data = []
    for user, messages in ((None, 4), (3, 2), ("3", 1), (1, 3)):
        for message in range(messages):
            for token in range(2):
                data.append({"user": user, "message": message, "token": token, "character": 2 * token,
                             "target": "ab"[token], "logp": -(1 + message + token + (user == 3))})
    jsonl = tmp_path / "mixed.jsonl"
    jsonl.write_text("".join(json.dumps(d) + "\n" for d in data))
    ints = [d for d in data if d["user"] != "3"]
    parquet = tmp_path / "ints.parquet"
    write_parquet(ints, str(parquet))
    for log, users in ((jsonl, [None, "3", 1, 3]), (parquet, [None, 1, 3])):
        expected = by_hand(log, lambda d: d["user"])
        rows = [json.loads(line) for line in run_lmc("stats", "--by", "user", str(log)).stdout.splitlines()]
        assert [r["user"] for r in rows] == users
        for row in rows:
            hand = expected[row["user"]]
            assert row["tokens"] == hand["tokens"]
            assert row["entropy"]["mean"] == pytest.approx(hand["logp"] / hand["scored"], rel=1e-12)
        # the bootstrap groups: each user, and each message without user
        keys = bootstrap.summarise(str(log)).table.keys
        assert keys == ["3", 1, 3, (None, 0), (None, 1), (None, 2), (None, 3)][log == parquet:]
    # the text output tells them apart too (the users as JSON)
    text = run_lmc("stats", "--by", "user", "-o", "text", str(jsonl)).stdout.decode()
    assert [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("user ")] == \
        ["null", '"3"', "1", "3"]


def test_by_message_length_bins_messages_by_tokens():
    path = LOGS / "rails.we.jsonl"
    messages = by_hand(path, lambda d: (d["user"], d["message"]))
    bins: dict = {}
    for s in messages.values():
        b = bins.setdefault(length_bin(s["tokens"]), {"messages": 0, "tokens": 0, "logp": 0.0, "scored": 0})
        b["messages"] += 1
        for k in ("tokens", "logp", "scored"):
            b[k] += s[k]
    rows = [json.loads(line) for line in run_lmc("stats", "--by", "message-length", str(path)).stdout.splitlines()]
    assert [r["message_length"] for r in rows] == sorted(bins, key=lambda b: int(b.split("-")[0]))
    for row in rows:
        hand = bins[row["message_length"]]
        assert (row["messages"], row["tokens"]) == (hand["messages"], hand["tokens"])
        assert row["entropy"]["mean"] == pytest.approx(hand["logp"] / hand["scored"], rel=1e-12)
    assert [length_bin(n) for n in (1, 2, 3, 4, 7, 8, 100)] == ["1", "2-3", "2-3", "4-7", "4-7", "8-15", "64-127"]


def test_by_refuses_intervals():
    result = run_lmc("stats", "--by", "user", "--confidence", "0.9", str(LOGS / "rails.we.jsonl"), check=False)
    assert result.returncode == 2 and b"--by prints figures per slice" in result.stderr


@pytest.mark.parametrize("args, flags", [(["--resamples", "50"], "--resamples tunes"),
                                         (["--seed", "3", "--ci-method", "bca"],
                                          "--seed, --ci-method tune")])
def test_interval_settings_without_confidence_are_a_usage_error(args, flags):
    """They printed the statistics without intervals, exit 0, as if they had been used (QA)."""
    result = run_lmc("stats", *args, str(LOGS / "kjv.we.jsonl"), check=False)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode().endswith(
        f"Error: {flags} the bootstrap intervals: give --confidence too\n")
    run_lmc("stats", *args, "--confidence", "0.9", str(LOGS / "kjv.we.jsonl"))


def test_derived_adds_units_bits_perplexity_and_ksr():
    we = json.loads(run_lmc("stats", "--derived", "--confidence", "0.9", str(LOGS / "kjv.we.jsonl")).stdout)
    plain = json.loads(run_lmc("stats", str(LOGS / "kjv.we.jsonl")).stdout)
    mean = plain["entropy"]["mean"]
    assert we["entropy"]["bits"] == pytest.approx(mean / math.log(2))
    assert we["entropy"]["perplexity"] == pytest.approx(math.exp(mean))
    assert we["units"]["entropy.mean"] == "nats per word"
    assert we["ci"]["entropy.perplexity"] == pytest.approx([math.exp(x) for x in we["ci"]["entropy.mean"]])
    ce = json.loads(run_lmc("stats", "--derived", str(LOGS / "kjv.ce.jsonl")).stdout)
    assert ce["units"]["entropy.bits"] == "bits per character"
    wc = json.loads(run_lmc("stats", "--derived", "--confidence", "0.9", str(LOGS / "kjv.wc.jsonl")).stdout)
    raw = json.loads(run_lmc("stats", "-H", str(LOGS / "kjv.wc.jsonl")).stdout)
    assert wc["completion"]["ksr"] == raw["completion"]["characters"] / (raw["characters"] + raw["tokens"])
    low, high = wc["ci"]["completion.ksr"]
    assert low <= wc["completion"]["ksr"] <= high
    # a log read from stdin: the same units and signature (it said per token, and game:?)
    for game in ("we", "ce", "wc", "wr"):
        path = LOGS / f"kjv.{game}.jsonl"
        from_file = json.loads(run_lmc("stats", "--derived", "--signature", str(path)).stdout)
        from_stdin = json.loads(run_lmc("stats", "--derived", "--signature", stdin=path.read_bytes()).stdout)
        assert from_stdin["units"] == from_file["units"], game
        assert from_stdin["signature"] == from_file["signature"] and f"game:{game}|" in from_file["signature"]


def test_derived_by_slice_adds_bits_and_perplexity_per_row():
    """--by with --derived gave KSR for wc but nothing for we (--derived silently ignored)."""
    for by in ("user", "message-length"):
        rows = [json.loads(line) for line in
                run_lmc("stats", "--by", by, "--derived", str(LOGS / "rails.we.jsonl")).stdout.splitlines()]
        assert len(rows) > 1
        for row in rows:
            mean = row["entropy"]["mean"]
            assert row["entropy"]["bits"] == pytest.approx(mean / math.log(2), rel=1e-12)
            assert row["entropy"]["perplexity"] == pytest.approx(math.exp(mean), rel=1e-12)


def test_signature_names_what_makes_the_number(tmp_path):
    path = LOGS / "kjv.wr.jsonl"
    row = json.loads(run_lmc("stats", "--signature", "--confidence", "0.9", "--resamples", "200", "--seed", "3",
                             str(path)).stdout)
    fields = dict(f.split(":", 1) for f in row["signature"].split("|"))
    assert fields["lmc"] == "stats" and fields["game"] == "wr"
    assert (fields["ci"], fields["nrs"], fields["rs"], fields["unit"]) == ("percentile.0.9", "200", "3", "user")
    assert fields["corpus"] == "?"          # a plain log file: no manifest
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_parquet(list(read_log(str(path))), str(run_dir / "part-00000.parquet"))
    manifest = {"game": "wr", "game_options": {"num_candidates": 100}, "seed": 42, "predictor": "ngram x",
                "corpus_sha256": "ab" * 32, "train": False, "versions": {"lmchallenge-dist": "9.9"},
                "partitions": [{"index": 0, "file": "part-00000.parquet", "state": "done"}],
                "finished": "2026-01-01T00:00:00+00:00"}
    (run_dir / "_manifest.json").write_text(json.dumps(manifest))
    result = run_lmc("stats", "--signature", str(run_dir), check=False)
    assert result.returncode == 0, result.stderr.decode()
    fields = dict(f.split(":", 1) for f in json.loads(result.stdout)["signature"].split("|"))
    assert fields["corpus"] == "sha256." + "ab" * 32 and fields["seed"] == "42"
    assert fields["model"] == "ngram x" and fields["version"] == "9.9"
    assert fields["opts"] == '{"num_candidates":100}' and "ci" not in fields
    assert fields["mopts"] == "?" and fields["vocab"] == "?"     # an older manifest: unknown
    # the model's options and the wr word list are part of what makes the number (QA: two
    # models that differ in their options had the same signature)
    signatures = []
    for model_file in ("kjv.lm", "kjv.o2.lm"):
        manifest.update(predictor_options={"model": model_file}, vocabulary_sha256="cd" * 32)
        (run_dir / "_manifest.json").write_text(json.dumps(manifest))
        signatures.append(json.loads(run_lmc("stats", "--signature", str(run_dir)).stdout)["signature"])
    fields = dict(f.split(":", 1) for f in signatures[0].split("|"))
    assert fields["mopts"] == '{"model":"kjv.lm"}' and fields["vocab"] == "sha256." + "cd" * 32
    assert signatures[0] != signatures[1]
    manifest.update(game="we", game_options={}, predictor_options={}, vocabulary_sha256=None)
    (run_dir / "_manifest.json").write_text(json.dumps(manifest))
    result = run_lmc("stats", "--signature", str(run_dir), check=False)
    fields = dict(f.split(":", 1) for f in json.loads(result.stdout)["signature"].split("|"))
    assert (fields["mopts"], fields["vocab"]) == ("{}", "-")


@pytest.mark.parametrize("name", ["kjv.wc.jsonl", "rails.we.jsonl", "rails.wr.jsonl"])
def test_token_table_adds_up_to_the_statistics(name, tmp_path):
    path = LOGS / name
    parquet = tmp_path / name.replace(".jsonl", ".parquet")
    write_parquet(list(read_log(str(path))), str(parquet))
    totals = bootstrap.summarise(str(path)).table.totals()
    for log in (path, parquet):
        table = token_table(str(log))
        assert len(table) == sum(1 for d in read_log(str(path)) if d.get("select", True))
        for column in bootstrap.COLUMNS:
            assert table[column].sum() == pytest.approx(totals[bootstrap.COLUMN[column]], rel=1e-12, abs=0)

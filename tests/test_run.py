"""End-to-end tests of `lmc run`: logs, corpus semantics, bad input and model failures."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import lmchallenge as lmc
from lmchallenge.model.shell import ShellModel, shell_command
from lmchallenge.model.wire import parse_answer
from conftest import DATA, PYTHON, lmc_command, toy_model_command


def run_lmc(*args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*lmc_command(), *args], input=stdin, capture_output=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr.decode())
    return result


def lines_of(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return b"".join(f.readline() for _ in range(n))


def marked_up(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


# -- differential tests against lmchallenge==5.2 ---------------------------------------------

@pytest.mark.reference
@pytest.mark.parametrize("game", ["wc", "we", "ce"])
def test_same_log_as_reference_on_kjv(game, reference_lmc):
    corpus = lines_of(DATA / "kjv" / "test.sample.txt", 40)
    ours = run_lmc("run", toy_model_command(), game, stdin=corpus).stdout
    ref = subprocess.run([str(reference_lmc), "run", toy_model_command(), game], input=corpus,
                         capture_output=True, check=True).stdout
    assert ours.count(b"\n") > 900 if game == "ce" else ours.count(b"\n") > 900
    assert ours == ref


@pytest.mark.reference
@pytest.mark.parametrize("game", ["wc", "we"])
def test_same_log_as_reference_when_training_per_user(game, reference_lmc, tmp_path):
    # the reference groups by "user" and trains after every message; without timestamps our
    # semantics are the same, so the logs must be identical
    rows = [json.loads(line) for line in lines_of(DATA / "commits" / "rails.test.sample.jsonl", 300).splitlines()]
    ours_rows = [{"userId": r["userId"], "text": r["text"]} for r in rows]
    ref_rows = [{"user": r["userId"], "text": r["text"]} for r in rows]
    ours = run_lmc("run", "--train", toy_model_command(), game, stdin=marked_up(ours_rows)).stdout
    ref = subprocess.run([str(reference_lmc), "run", "--train", toy_model_command(), game],
                         input=marked_up(ref_rows), capture_output=True, check=True).stdout
    assert len({json.loads(line)["user"] for line in ours.splitlines()}) >= 5
    assert ours == ref


# -- corpus semantics ---------------------------------------------------------------------------

def test_user_groups_and_message_numbers():
    rows = [{"userId": "a", "text": "one two"}, {"userId": "a", "text": "three"},
            {"user": "b", "text": "four"}, {"userId": "a", "text": "five"}]
    result = run_lmc("run", toy_model_command(), "we", stdin=marked_up(rows))
    log = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(d["user"], d["message"], d["token"], d["character"], d["target"]) for d in log] == [
        ("a", 0, 0, 0, "one"), ("a", 0, 1, 4, "two"), ("a", 1, 0, 0, "three"),
        ("b", 0, 0, 0, "four"), ("a", 0, 0, 0, "five")]
    # "a" comes back: said (a corpus in time order is not grouped by user), the log as 5.x's
    assert result.stderr.decode() == (
        "WARNING\t<stdin>:4: user \"a\" comes back after other users' rows: as in LM Challenge "
        "5.x, a group is a run of one user's consecutive rows, so the corpus' 2 users make 3 "
        "groups; lmc stats counts each as a user, and --train clears the model before each. For "
        "one group a user, sort the corpus by user, keeping each user's rows in order\n")


@pytest.mark.parametrize("rows, groups, resumed", [
    ([], 0, None),
    ([None, None, None], 1, None),                   # plain text: one group
    (["a", "a", "b", "b", 1, "1", None], 5, None),   # 1 and "1" are different users
    (["a", "b", "a", "b"], 4, (3, "a")),             # the first that comes back
    ([1, "1", 1], 3, (3, 1)),
    ([None, "a", None], 3, (3, None)),
])
def test_user_groups_count_runs_and_find_the_first_user_that_comes_back(rows, groups, resumed):
    from lmchallenge.corpus import UserGroups
    tracker = UserGroups()
    half = len(rows) // 2           # fed in two pieces, as lmc-dist's scan feeds its blocks
    assert tracker.add_all((user, i + 1) for i, user in enumerate(rows[:half])) == half
    tracker.add_all((user, half + i + 1) for i, user in enumerate(rows[half:]))
    assert (tracker.groups, tracker.resumed) == (groups, resumed)
    assert len(tracker.users) == len({(type(u), u) for u in rows})
    assert (tracker.warning("c") is None) == (resumed is None)


def test_training_waits_for_rows_sharing_a_timestamp():
    # the toy model scores trained words 0.0; "zebra" is trained on by row 1
    rows = [{"userId": "u", "timestamp": 5, "text": "zebra"},
            {"userId": "u", "timestamp": 5, "text": "zebra"},
            {"userId": "u", "timestamp": 6, "text": "zebra"},
            {"userId": "v", "timestamp": 6, "text": "zebra"}]
    log = [json.loads(line) for line in run_lmc("run", "--train", toy_model_command(), "we",
                                                stdin=marked_up(rows)).stdout.splitlines()]
    # same timestamp: not yet trained; later timestamp: trained; new user: cleared
    assert [d["logp"] for d in log] == [-5.0, -5.0, 0.0, -5.0]


def test_without_train_the_model_never_learns():
    rows = [{"userId": "u", "timestamp": 1, "text": "zebra"},
            {"userId": "u", "timestamp": 2, "text": "zebra"}]
    log = [json.loads(line) for line in run_lmc("run", toy_model_command(), "we",
                                                stdin=marked_up(rows)).stdout.splitlines()]
    assert [d["logp"] for d in log] == [-5.0, -5.0]


def test_gzip_corpus_and_output_forms(tmp_path):
    corpus = tmp_path / "c.txt.gz"
    corpus.write_bytes(gzip.compress(lines_of(DATA / "fortunes" / "fortunes.test.txt", 20)))
    plain = run_lmc("run", toy_model_command(), "wc", "-p", str(corpus)).stdout
    run_lmc("run", "--output", str(tmp_path / "out.jsonl.gz"), toy_model_command(), "wc", "-p", str(corpus))
    run_lmc("run", "--output", str(tmp_path / "out.jsonl"), toy_model_command(), "wc", "-p", str(corpus))
    assert gzip.decompress((tmp_path / "out.jsonl.gz").read_bytes()) == plain
    assert (tmp_path / "out.jsonl").read_bytes() == plain
    assert all(len(json.loads(line)["completions"]) == 1 for line in plain.splitlines())


# -- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b'{"text": "fine"}\n{"text": "broken\n', 'c.jsonl:2: invalid JSON: Unterminated string'),
    (b'{"text": "fine"}\n{"user": "a"}\n', 'c.jsonl:2: row has no "text"'),
    (b'{"text": "fine"}\n{"text": 3}\n', 'c.jsonl:2: "text" must be a string'),
    (b'{"text": "fine"}\n\n[1, 2]\n', 'c.jsonl:3: a marked-up row must be a JSON object'),
    (b'good line\nbad \xff line\n', 'c.jsonl:2: not valid UTF-8'),
])
def test_bad_corpus_names_file_and_line_and_writes_nothing(tmp_path, content, message):
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(content)
    out = tmp_path / "log.jsonl"
    result = run_lmc("run", "--output", str(out), toy_model_command(), "wc", str(corpus), check=False)
    assert result.returncode == 2
    assert message in result.stderr.decode()
    assert result.stdout == b""
    assert not out.exists() and list(tmp_path.iterdir()) == [corpus]


@pytest.mark.parametrize("corpus, said", [
    ("nope.txt", "nope.txt: no such file"),
    ("s3://bucket/c.txt", "s3://bucket/c.txt: no such file (a local file or standard input is "
                          "read here, not a URL: lmc-dist run --input reads URLs)")])
def test_a_missing_corpus_is_named_and_a_url_is_said_not_to_be_read(tmp_path, corpus, said):
    result = run_lmc("run", toy_model_command(), "we", corpus, check=False)
    assert (result.returncode, result.stderr.decode()) == (2, f"lmc: error: {said}\n")


def test_bad_corpus_on_stdin_writes_nothing_to_stdout():
    result = run_lmc("run", toy_model_command(), "we",
                     stdin=b'{"text": "a b c"}\n{"text": "d"}\n{"txt": 1}\n', check=False)
    assert result.returncode == 2
    assert result.stdout == b""
    assert '<stdin>:3: row has no "text"' in result.stderr.decode()


# -- model failures -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode, reason, stderr", [
    ("exit", "exited with code 3", "toy model: giving up"),
    ("hang", "no answer within 1 s (killed)", "toy model: hanging"),
    ("garbage", "malformed answer 'this is not\\ta score\\textra': expected text<TAB>score pairs, "
                "got 3 fields", "model stderr: (empty)"),
    ("silent-exit", "exited (code 0) before answering", "model stderr: (empty)"),
])
def test_model_failure_names_model_query_and_stderr(tmp_path, mode, reason, stderr):
    out = tmp_path / "log.jsonl"
    result = run_lmc("run", "--timeout", "1", "--output", str(out),
                     toy_model_command("--mode", mode, "--after", "3"), "wc",
                     stdin=b"The book of the generation\n", check=False)
    text = result.stderr.decode()
    assert result.returncode == 2, text
    assert f"--mode {mode} --after 3': {reason}\n" in text
    # answers 1-3 are token 0 ('The', 3 prefixes); answer 4 is the first of token 1 ('book')
    assert ("while evaluating user None, message 0, token 1 ('book'); requests in flight up to "
            "user None, message 0, token 4 ('generation')\n") in text
    assert "\nrequest (answer line 4): 'predict\\tThe '\n" in text
    assert ("\nrequests in flight: 19, oldest first: 'predict\\tThe ', 'predict\\tThe b', "
            "'predict\\tThe bo', ... (13 more), 'predict\\tThe book of the generat', "
            "'predict\\tThe book of the generati', 'predict\\tThe book of the generatio'\n") in text
    assert stderr in text
    assert not out.exists()


def test_model_flooding_stderr_does_not_deadlock():
    corpus = lines_of(DATA / "kjv" / "test.sample.txt", 5)
    flooded = run_lmc("run", toy_model_command("--mode", "flood"), "wc", stdin=corpus).stdout
    normal = run_lmc("run", toy_model_command(), "wc", stdin=corpus).stdout
    assert flooded == normal and flooded.count(b"\n") == 89


def test_a_shell_models_stderr_is_shown_as_it_comes(tmp_path):
    # as 5.2, whose model shared lmc's stderr (QA: a model's warnings were seen only with -v)
    model = tmp_path / "noisy.sh"
    model.write_text('#!/bin/sh\necho "model: vocab file missing, using fallback" >&2\n'
                     'while read -r l; do echo; done\n')
    model.chmod(0o755)
    result = run_lmc("run", str(model), "we", stdin=b"a b\n")
    assert result.stderr == b"model: vocab file missing, using fallback\n"
    assert result.stdout.count(b"\n") == 2
    # a flood passes through whole, and the run's log is as without it
    corpus = lines_of(DATA / "kjv" / "test.sample.txt", 2)
    flooded = run_lmc("run", toy_model_command("--stderr-bytes", "240000"), "we", stdin=corpus)
    assert flooded.stdout == run_lmc("run", toy_model_command(), "we", stdin=corpus).stdout
    requests = flooded.stdout.count(b"\n")
    assert len(flooded.stderr) == requests * 240000 and set(flooded.stderr) == set(b"x\n")


def test_shell_model_stream_pipelines_in_order():
    model = ShellModel(toy_model_command(), window=4)
    try:
        from lmchallenge.model.wire import Predict, Train, Clear
        answers = list(model.stream([Predict("The b", None), Train("zebra"),
                                     Predict("", ["zebra", "quail", "ox"]), Clear(),
                                     Predict("", ["zebra"])] * 20))
        assert len(answers) == 60
        assert answers[0] == [("e", -16.0)]
        assert answers[1] == [("zebra", 0.0), ("ox", -2.0)]
        assert answers[2] == [("zebra", -5.0)]
        assert answers[57:] == answers[:3]
    finally:
        model.close()


LONG_ANSWER_MODEL = (
    "import sys\n"
    "for n, line in enumerate(sys.stdin):\n"
    "    print('\\t'.join(f'w{n}x{i}\\t-{i}' for i in range(30000)), flush=True)\n")


def test_answer_lines_longer_than_several_pipe_reads_arrive_whole():
    """About 400 kB a line, so each answer takes several reads of the pipe."""
    import shlex
    model = ShellModel(f"{PYTHON} -c {shlex.quote(LONG_ANSWER_MODEL)}", window=2)
    try:
        from lmchallenge.model.wire import Predict
        answers = list(model.stream([Predict("a", None)] * 3))
    finally:
        model.close()
    assert [len(a) for a in answers] == [30000] * 3
    for n, answer in enumerate(answers):
        assert answer[0] == (f"w{n}x0", -0.0) and answer[-1] == (f"w{n}x29999", -29999.0)


def test_protocol_helpers():
    assert parse_answer("a\t-1\tb\t2.5") == [("a", -1.0), ("b", 2.5)]
    assert parse_answer("") == []
    with pytest.raises(ValueError, match="3 fields"):
        parse_answer("a\t1\tb\n")
    with pytest.raises(ValueError, match="not a number"):
        parse_answer("a\tx\n")
    # positional as written, as in 5.2 (the shell expands $HOME there); values quoted
    assert (shell_command("m", {"positional": ["$HOME/x y", 2], "n": "a b", "-k": "v"})
            == "m $HOME/x y 2 --n 'a b' -k v")


# -- wr -----------------------------------------------------------------------------------------

def test_wr_is_byte_identical_across_processes_and_hash_seeds(tmp_path):
    corpus = lines_of(DATA / "commits" / "rails.test.sample.jsonl", 60)
    vocab = str(DATA / "vocab" / "american-english.txt")
    logs = []
    for hash_seed in ("1", "2"):
        result = subprocess.run([*lmc_command(), "run", toy_model_command(), "wr", vocab],
                                input=corpus, capture_output=True, check=True,
                                env={**__import__("os").environ, "PYTHONHASHSEED": hash_seed})
        logs.append(result.stdout)
    assert logs[0] == logs[1]
    log = [json.loads(line) for line in logs[0].splitlines()]
    assert len(log) > 300
    for datum in log:
        candidates = [r[0] for r in datum["results"]]
        assert datum["target"] in candidates and datum["verbatim"] in candidates
        assert len(candidates) == len(set(candidates)) <= 100
        errors = [r[1] for r in datum["results"]]
        assert errors == sorted(errors, reverse=True)
    assert sum(d["verbatim"] != d["target"] for d in log) > 0.1 * len(log)


def test_wr_corruption_depends_only_on_user_and_message():
    rows = [json.loads(line) for line in lines_of(DATA / "commits" / "rails.test.sample.jsonl", 40).splitlines()]
    vocab = str(DATA / "vocab" / "american-english.txt")
    whole = run_lmc("run", toy_model_command(), "wr", vocab, stdin=marked_up(rows)).stdout.splitlines()
    last_user = rows[-1]["userId"]
    tail = [r for r in rows if r["userId"] == last_user]
    part = run_lmc("run", toy_model_command(), "wr", vocab, stdin=marked_up(tail)).stdout.splitlines()
    assert part == whole[-len(part):]


# -- Python API -----------------------------------------------------------------------------------

class CountingModel(lmc.FilteringWordModel):
    def score_word(self, context, candidates):
        return [(c, -len(c)) for c in candidates]

    def predict_word_iter(self, context):
        return [("one", -1), ("two", -2), ("three", -3)]


def test_python_api_games():
    model = CountingModel(n_predictions=3)
    assert model.predict("", None) == [("one", -1), ("two", -2), ("three", -3)]
    assert model.predict("This is ", ["foo", "a", "brilliant"]) == [("foo", -3), ("a", -1), ("brilliant", -9)]
    assert model.predict("t", None) == [("wo", -2), ("hree", -3)]
    log = list(lmc.wc(model, ["one potato two potato three"]))
    assert [d["target"] for d in log] == ["one", "potato", "two", "potato", "three"]
    assert log[2]["completions"] == [["one", "two", "three"], ["wo", "hree"], ["o"]]
    entropy = list(lmc.we(model, [{"user": "x", "text": "a bb"}]))
    assert [(d["user"], d["logp"]) for d in entropy] == [("x", -1), ("x", -2)]
    chars = list(lmc.ce(model, ["ab"]))
    assert [d["target"] for d in chars] == ["a", "b"]
    # n_predictions: None is no limit, as in 5.x (QA: it raised a TypeError); 0 is none
    assert CountingModel(n_predictions=None).predict("", None) == model.predict("", None)
    assert CountingModel(n_predictions=1).predict("", None) == [("one", -1)]
    assert CountingModel(n_predictions=0).predict("", None) == []


def test_python_model_spec_with_options(tmp_path):
    module = tmp_path / "mymodel.py"
    module.write_text("class Fixed:\n    def __init__(self, score):\n        self.score = score\n"
                      "    def predict(self, context, candidates):\n"
                      "        return [(c, self.score) for c in candidates or ['x']]\n")
    result = subprocess.run([*lmc_command(), "run", "-o", '{"score": -1.5}', "mymodel:Fixed", "we"],
                            input=b"a b\n", capture_output=True, check=True, cwd=tmp_path,
                            env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [-1.5, -1.5]


def test_a_tab_in_the_context_reaches_the_model_as_a_space(tmp_path):
    """TAB separates the protocol's fields: inside a context it is sent as a space
    (docs/formats.md), so the model sees the whole context, not a shorter one and a
    candidate (as LM Challenge 5.2's raw TAB makes it)."""
    corpus = tmp_path / "tab.txt"
    corpus.write_text("tab\there we go\n")
    counted = tmp_path / "contexts"
    run_lmc("run", toy_model_command("--count-file", str(counted)), "we", str(corpus))
    [log] = list(tmp_path.glob("contexts.*"))
    assert log.read_text().splitlines() == ["", "tab ", "tab here ", "tab here we "]


# -- where logs differ from LM Challenge 5.2, on purpose (docs/formats.md) ------------------

def reference_log(reference_lmc: Path, corpus: bytes, *args: str) -> list[dict]:
    out = subprocess.run([str(reference_lmc), "run", *args, toy_model_command(), "we"], input=corpus,
                         capture_output=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def our_log(corpus: bytes, *args: str) -> list[dict]:
    return [json.loads(line) for line in run_lmc("run", *args, toy_model_command(), "we",
                                                 stdin=corpus).stdout.splitlines()]


@pytest.mark.reference
def test_the_documented_differences_from_lm_challenge_5_2(reference_lmc):
    """Each difference docs/formats.md lists, against the reference itself: the log differs
    just as described, and is the reference's on the input without the difference."""
    text = "In the beginning\nwas the word\n"
    # a BOM: the reference reads it as the first message's first character (in its offsets,
    # and in the contexts its model sees)
    bom = reference_log(reference_lmc, b"\xef\xbb\xbf" + text.encode())
    ours = our_log(b"\xef\xbb\xbf" + text.encode())
    assert ours == our_log(text.encode()) == reference_log(reference_lmc, text.encode())
    assert [d | {"logp": None} for d in bom] == [
        d | {"character": d["character"] + 1, "logp": None} if d["message"] == 0 else d | {"logp": None}
        for d in ours]
    assert bom[len(ours) // 2:] == ours[len(ours) // 2:] and bom[0]["logp"] != ours[0]["logp"]
    # TAB inside a text (and LF inside a marked-up text): sent to the model as a space
    tab = "In the\tbeginning was\n".encode()
    assert our_log(tab) == reference_log(reference_lmc, tab.replace(b"\t", b" "))
    assert our_log(tab) != reference_log(reference_lmc, tab)
    lf = marked_up([{"user": "u", "text": "In the\nbeginning was"}])
    assert our_log(lf) == reference_log(reference_lmc, marked_up([{"user": "u", "text": "In the beginning was"}]))
    assert our_log(lf) != reference_log(reference_lmc, lf)
    # "userId" (the older formats page's name): a user here, null in the reference
    rows = [{"userId": "a", "text": "one two"}, {"userId": "b", "text": "three"}]
    assert our_log(marked_up(rows), "-t") == reference_log(
        reference_lmc, marked_up([{"user": r["userId"], "text": r["text"]} for r in rows]), "-t")
    assert {d["user"] for d in reference_log(reference_lmc, marked_up(rows), "-t")} == {None}
    # --train with rows sharing a timestamp: all evaluated before any is learnt (the
    # reference learns each one after its evaluation: the toy model then scores a learnt word 0)
    rows = [{"user": "u", "timestamp": 5, "text": "alpha"}, {"user": "u", "timestamp": 5, "text": "alpha beta"},
            {"user": "u", "timestamp": 6, "text": "alpha"}]
    ours, ref = our_log(marked_up(rows), "-t"), reference_log(reference_lmc, marked_up(rows), "-t")
    assert [d["logp"] for d in ours] == [-5.0, -5.0, -4.0, 0.0]
    assert ref == [d | {"logp": 0.0} if (d["message"], d["token"]) == (1, 0) else d for d in ours]
    # jsonl after a blank first line, or after a BOM: jsonl here; plain text in the reference,
    # whose format detection reads the first line only (and does not take a BOM for JSON)
    rows = marked_up([{"user": "a", "text": "the lord"}, {"user": "b", "text": "God"}])
    for odd in (b"\n" + rows, b"  \n" + rows, b"\xef\xbb\xbf" + rows):
        assert our_log(odd) == reference_log(reference_lmc, rows)
        assert {d["user"] for d in reference_log(reference_lmc, odd)} == {None}


@pytest.mark.reference
def test_the_documented_differences_in_vocabulary_and_answers(reference_lmc, tmp_path):
    """More differences docs/formats.md lists (QA): a byte-order mark before a `wr`
    vocabulary's first word is not part of it here (5.2 can offer the marked word as a
    candidate), an answer with a field left over (a trailing TAB) is refused here (5.2
    drops the odd field), and a candidate answered twice keeps its first score in `wr`."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("xyzz\n")
    marked, plain = tmp_path / "marked.txt", tmp_path / "plain.txt"
    marked.write_bytes(b"\xef\xbb\xbfxyz\nand\n")
    plain.write_bytes(b"xyz\nand\n")

    def candidates(command: list[str]) -> set[str]:
        out = subprocess.run(command, capture_output=True, check=True).stdout
        return {row[0] for line in out.splitlines() for row in json.loads(line)["results"]}

    def ours(vocabulary: Path) -> set[str]:
        return candidates([*lmc_command(), "run", toy_model_command(), "wr", "-p", "1e-12",
                           str(vocabulary), str(corpus)])

    def reference(vocabulary: Path) -> set[str]:
        return candidates(["sh", "-c", '"$0" run "$1" wr "$2" -p 1e-12 < "$3"', str(reference_lmc),
                           toy_model_command(), str(vocabulary), str(corpus)])

    assert ours(marked) == ours(plain) == reference(plain)
    assert "\ufeffxyz" in reference(marked) and "\ufeffxyz" not in ours(marked)

    model = tmp_path / "trailing_tab.py"
    model.write_text("import sys\n"
                     "for line in sys.stdin:\n"
                     "    f = line.rstrip('\\n').split('\\t')\n"
                     "    if f[0] == 'predict':\n"
                     "        print('\\t'.join(x for c in (f[2:] or ['the']) for x in (c, '-1.5'))"
                     " + '\\t', flush=True)\n")
    command = f"{PYTHON} {model}"
    ref = subprocess.run([str(reference_lmc), "run", command, "we"], input=b"the LORD\n",
                         capture_output=True, check=True).stdout
    assert [json.loads(line)["logp"] for line in ref.splitlines()] == [-1.5, -1.5]
    result = run_lmc("run", command, "we", stdin=b"the LORD\n", check=False)
    assert result.returncode == 2 and result.stdout == b""
    assert "expected text<TAB>score pairs, got 3 fields" in result.stderr.decode()

    # a candidate answered twice: its first score here, the last in 5.2's wr
    model = tmp_path / "twice.py"
    model.write_text("import sys\n"
                     "for line in sys.stdin:\n"
                     "    f = line.rstrip('\\n').split('\\t')\n"
                     "    if f[0] == 'predict':\n"
                     "        print('\\t'.join(x for c in (f[2:] or ['the']) for x in (c, '-1', c, '-2')),"
                     " flush=True)\n")
    command = f"{PYTHON} {model}"

    def lm_scores(out: bytes) -> set:
        return {row[2] for line in out.splitlines() for row in json.loads(line)["results"]}
    ours_twice = run_lmc("run", command, "wr", "-p", "1e-12", str(plain), str(corpus)).stdout
    ref_twice = subprocess.run(["sh", "-c", '"$0" run "$1" wr "$2" -p 1e-12 < "$3"', str(reference_lmc),
                                command, str(plain), str(corpus)], capture_output=True, check=True).stdout
    assert (lm_scores(ours_twice), lm_scores(ref_twice)) == ({-1.0}, {-2.0})


def test_lmc_run_whose_output_closes_early_does_not_wait_for_its_model(tmp_path):
    # `lmc run ... | head`: the log's reader goes away with many answers unread; the model,
    # blocked writing them, would never see its input end: it is killed, not waited for
    # (--timeout, here 300 s, beyond this test's limit)
    import shlex

    corpus, text, model = tmp_path / "c.txt", tmp_path / "train.txt", tmp_path / "small.lm"
    corpus.write_bytes(lines_of(DATA / "kjv" / "test.sample.txt", 300))
    with gzip.open(DATA / "kjv" / "train.txt.gz", "rb") as f:
        text.write_bytes(b"".join(f.readline() for _ in range(3000)))
    ngram = str(Path(lmc_command()[0]).with_name("lmc-ngram"))
    subprocess.run([ngram, "train", str(text), "-o", str(model)], check=True, timeout=120)
    argv = [*lmc_command(), "run", "--timeout", "300", f"{ngram} serve {model}", "wc", str(corpus)]
    result = subprocess.run(["sh", "-c", f"{shlex.join(argv)} | head -c 100"], capture_output=True,
                            timeout=100)
    assert len(result.stdout) == 100 and b"Traceback" not in result.stderr


@pytest.mark.parametrize("signal_name, code, word", [("SIGTERM", 143, "terminated"),
                                                     ("SIGINT", 130, "interrupted")])
def test_a_run_stopped_by_a_signal_leaves_no_output_and_no_model(tmp_path, signal_name, code, word):
    """SIGTERM (``kill``, ``timeout``, a job scheduler's time limit) unwinds as Ctrl-C does: one
    line, the half-written output removed, the model stopped (SIGTERM used to kill lmc at once,
    leaving ``.log.jsonl.tmp-PID`` behind)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord said unto moses\n" * 400)
    counts = tmp_path / "requests"
    output = tmp_path / "log.jsonl"
    proc = subprocess.Popen([*lmc_command(), "run", toy_model_command("--delay", "0.002", "--count-file",
                                                                      str(counts)),
                             "we", str(corpus), "--output", str(output)],
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".log.jsonl.tmp-*")) or not list(tmp_path.glob("requests.*")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    model_pid = int(next(tmp_path.glob("requests.*")).suffix[1:])
    proc.send_signal(getattr(signal, signal_name))
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.decode()) == (code, f"lmc: {word}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", next(tmp_path.glob("requests.*")).name]
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{model_pid}"):
        with open(f"/proc/{model_pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        assert time.monotonic() < deadline, "the model still runs"
        time.sleep(0.05)


def test_the_temporary_of_a_killed_run_is_removed_by_the_next(tmp_path):
    """SIGKILL leaves the half-written output's temporary (no cleanup can run); the next
    run writing that output removes it, and leaves a temporary of a live writer alone."""
    import socket

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord said unto moses\n" * 400)
    output = tmp_path / "log.jsonl"
    proc = subprocess.Popen([*lmc_command(), "run", toy_model_command("--delay", "0.002"), "we",
                             str(corpus), "--output", str(output)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".log.jsonl.tmp-*")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.kill()
    proc.communicate(timeout=60)
    [left] = tmp_path.glob(".log.jsonl.tmp-*")
    assert left.name == f".log.jsonl.tmp-{socket.gethostname()}-{proc.pid}"
    live = tmp_path / f".log.jsonl.tmp-{socket.gethostname()}-{os.getpid()}"   # this test's
    live.write_text("a writer that still runs\n")
    short = tmp_path / "short.txt"
    short.write_text("the lord\n")
    subprocess.run([*lmc_command(), "run", toy_model_command(), "we", str(short), "--output",
                    str(output)], check=True, capture_output=True, timeout=120)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["corpus.txt", "short.txt", "log.jsonl", live.name])
    assert len(output.read_text().splitlines()) == 2


def _changing_model(tmp_path: Path, corpus: Path, change: str) -> str:
    """A model that, at its first request, runs the shell command ``change`` on ``corpus``
    (``: >`` truncates it, ``cat X >>`` appends), then answers as the toy model."""
    wrapper = tmp_path / "changing.sh"
    wrapper.write_text(f'IFS= read -r first\n{change} "{corpus}"\n'
                       f'{{ printf "%s\\n" "$first"; cat; }} | {toy_model_command()}\n')
    return f"sh {wrapper}"


def test_a_corpus_truncated_under_lmc_run_fails_it(tmp_path):
    """The corpus is read twice (checked, then run): truncated in between, the run gave a
    log of part of it with exit 0."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the lord said unto moses\n" * 20000)      # more than one read's block
    output = tmp_path / "log.jsonl"
    result = subprocess.run([*lmc_command(), "run", _changing_model(tmp_path, corpus, ": >"), "we",
                             str(corpus), "--output", str(output)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and not output.exists()
    assert result.stderr.startswith(f"lmc: error: {corpus}: changed while this run read it (20000 "
                                    "messages when it was checked, ")
    assert result.stderr.endswith(" when it was read): its log would be of no one version of the "
                                  "corpus; run again on a corpus that stays as it is\n")


def test_closed_standard_streams_read_as_empty_and_output_to_them_fails(tmp_path):
    """`>&-` and `<&-` (a cron line, a daemon): Python leaves sys.stdout None, and every
    command ended in an AttributeError traceback; lmc-dist did after committing its run.
    A command with output for a closed stdout fails as cat does (QA: `lmc stats LOG >&-`
    exited 0, its statistics gone); one that writes files only runs."""
    import shlex

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("in the beginning\n")
    lmc = shlex.join(lmc_command())
    dist = shlex.quote(str(Path(lmc_command()[0]).with_name("lmc-dist")))
    model = shlex.quote(toy_model_command())
    output = tmp_path / "log.jsonl"
    closed = "error: cannot write the output: standard output is closed\n"
    for line, code in ((f"{lmc} run {model} we {corpus} --output {output} >&-", 0),
                       (f"{lmc} stats {output} >&-", 2),
                       (f"{lmc} run {model} we - <&- >&-", 0),   # nothing read, nothing to write
                       (f"{lmc} run {model} we {corpus} >&-", 2),
                       (f"{dist} run {model} we --input {corpus} --run-dir {tmp_path / 'run'} >&-", 2)):
        result = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=300)
        assert result.returncode == code and "Traceback" not in result.stderr, (line, result.stderr)
        assert result.stderr.endswith(closed) == bool(code), (line, result.stderr)
    assert len(output.read_text().splitlines()) == 3
    assert json.loads((tmp_path / "run" / "_stats.json").read_text())["entropy"]["hit"] == 1.0
    empty = subprocess.run(["sh", "-c", f"{lmc} run {model} we - <&-"], capture_output=True,
                           timeout=120)
    assert (empty.returncode, empty.stdout) == (0, b"")


def test_a_python_model_is_run_in_a_with_block_as_lm_challenge_5_does(tmp_path):
    """LM Challenge 5.x runs a module:Class model as `with Class(**options) as model`: a
    model made ready in __enter__ (or whose __enter__ returns another object) failed here,
    as __exit__ alone was called."""
    (tmp_path / "ctxmodels.py").write_text(
        "import lmchallenge as lmc\n"
        "class Lazy(lmc.Model):\n"
        "    def __init__(self, done):\n"
        "        self.words, self.done = None, done\n"
        "    def __enter__(self):\n"
        "        self.words = {'the': -1.0, 'cat': -2.0}\n"
        "        return self\n"
        "    def __exit__(self, *exc):\n"
        "        open(self.done, 'w').write('left')\n"
        "    def predict(self, context, candidates):\n"
        "        return [(c, self.words[c]) for c in candidates or () if c in self.words]\n"
        "class Outer:\n"
        "    def __enter__(self):\n"
        "        return Lazy('unused').__enter__()\n"
        "    def __exit__(self, *exc):\n"
        "        pass\n")
    done = tmp_path / "done"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for spec, options in (("ctxmodels:Lazy", ["-o", json.dumps({"done": str(done)})]),
                          ("ctxmodels:Outer", [])):
        result = subprocess.run([*lmc_command(), "run", *options, spec, "we"], input=b"the cat of\n",
                                capture_output=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr.decode()
        assert [json.loads(line)["logp"] for line in result.stdout.splitlines()] == [-1.0, -2.0, None]
    assert done.read_text() == "left"


def test_a_corpus_given_as_the_wr_word_list_is_warned_about(tmp_path):
    # QA: `wr CORPUS VOCAB` swapped ran to the end, exit 0: the dictionary read as the corpus
    # and two JSON lines as the words
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(lines_of(DATA / "commits" / "rails.test.sample.jsonl", 20))
    words = tmp_path / "words.txt"
    words.write_text("the\nlord\nsaid\n")
    swapped = run_lmc("run", toy_model_command(), "wr", str(corpus), str(words))
    assert swapped.stderr.decode() == (
        f"WARNING\t{corpus}: its lines look like JSON, not one word each: is it a corpus? (wr "
        "takes the word list first: wr VOCAB [CORPUS])\n")
    text = tmp_path / "c.txt"
    text.write_text("in the beginning\nand the earth\nthe lord\n")
    assert b"3 of its 3 lines hold several words: is it a corpus?" in run_lmc(
        "run", toy_model_command(), "wr", str(text), str(words)).stderr
    assert run_lmc("run", toy_model_command(), "wr", str(words), str(text)).stderr == b""

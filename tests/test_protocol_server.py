"""Tests of the model side of the line protocol (lmchallenge/model/serve.py) and of
``lmc-ngram serve`` over real pipes."""

from __future__ import annotations

import gzip
import io
import queue
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import BIN, DATA, PYTHON
from lmchallenge.model.api import Model
from lmchallenge.model.wire import Predict, Train, Clear, parse_answer
from lmchallenge.model.shell import ShellModel
from lmchallenge.model import serve as protocol
from lmchallenge.model.ngram import NgramModel, save_tables, train_tables
from lmchallenge.tokenize import words


class RecordingModel(Model):
    """A small real model: predicts the last character of the context, scores candidates
    by minus their length (leaving out those with a "q"), and remembers what it was taught."""

    def __init__(self):
        self.taught: list[str] = []

    def predict(self, context, candidates):
        if context == "boom":
            raise RuntimeError("exploded")
        if candidates is None:
            return [(context[-1:] or "^", -1.0), ("tab\there", -2.0), ("nothing", None)]
        return [(c, -float(len(c))) for c in candidates if "q" not in c]

    def train(self, text):
        self.taught.append(text)

    def clear(self):
        self.taught.clear()


def serve_bytes(model, data: bytes) -> tuple[bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    protocol.serve(model, io.BytesIO(data), out, err)
    return out.getvalue(), err.getvalue()


def test_predict_train_clear_answers():
    model = RecordingModel()
    out, err = serve_bytes(model, b"predict\tI am\npredict\tI am \tyour\tquux\tbe\n"
                                  b"train\tHello world\nclear\ntrain\tagain\npredict\n")
    assert out == (b"m\t-1.0\ttab here\t-2.0\n"
                   b"your\t-4.0\tbe\t-2.0\n"  # in the model's order
                   b"^\t-1.0\ttab here\t-2.0\n")
    assert err == ""
    assert model.taught == ["again"]


def test_scores_are_written_exactly():
    class Exact(Model):
        def predict(self, context, candidates):
            return [("a", -0.1 - 0.2), ("b", -1e-300), ("c", -123456789.125)]

    out, _ = serve_bytes(Exact(), b"predict\tx\n")
    answer = parse_answer(out.decode().rstrip("\n"))
    assert answer == [("a", -0.1 - 0.2), ("b", -1e-300), ("c", -123456789.125)]


def test_empty_answer_is_an_empty_line():
    class Silent(Model):
        def predict(self, context, candidates):
            return []

    out, _ = serve_bytes(Silent(), b"predict\tx\tq\npredict\ty\n")
    assert out == b"\n\n"


def test_malformed_requests_never_leave_the_client_waiting():
    model = RecordingModel()
    out, err = serve_bytes(model, b"predict\t\xff\xfe broken\n"
                                  b"frobnicate\tx\n"
                                  b"train\t\xff\n"
                                  b"predict\tok\n")
    # one line per predict, in order, even for undecodable bytes
    assert out == b"\nk\t-1.0\ttab here\t-2.0\n"
    assert "not valid UTF-8" in err
    assert "unknown command 'frobnicate'" in err
    assert model.taught == []


def test_a_model_that_raises_ends_the_serving_after_the_answers_before():
    """QA: an exception in a served model's predict was answered with an empty line, so
    lmc run logged the token as unscored and exited 0; LM Challenge 5.2's run_loop lets it
    propagate (the model process dies, the run fails naming it)."""
    out, err = io.BytesIO(), io.StringIO()
    with pytest.raises(RuntimeError, match="exploded"):
        protocol.serve(RecordingModel(), io.BytesIO(b"predict\tok\npredict\tboom\npredict\tx\n"),
                       out, err)
    assert out.getvalue() == b"k\t-1.0\ttab here\t-2.0\n"
    assert err.getvalue() == ("protocol: predict failed on the request 'predict\\tboom': "
                              "RuntimeError: exploded\n")


def test_a_served_model_that_raises_fails_the_run_naming_it(tmp_path):
    script = tmp_path / "buggy.py"
    script.write_text("from lmchallenge import Model\n"
                      "class Buggy(Model):\n"
                      "    def predict(self, context, candidates):\n"
                      "        return [(c, {'the': -1.0, 'cat': -2.0}[c]) for c in candidates]\n"
                      "Buggy().run_loop()\n")
    result = subprocess.run([str(BIN / "lmc"), "run", f"{PYTHON} {script}", "we"],
                            input=b"the cat sat\n", capture_output=True, timeout=120)
    text = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"", text
    assert f"lmc: error: model '{PYTHON} {script}': exited with code 1\n" in text
    assert "\nrequest (answer line 3): 'predict\\tthe cat \\tsat'\n" in text
    assert text.endswith("KeyError: 'sat'\n")


def test_lines_split_on_line_feed_only():
    model = RecordingModel()
    out, _ = serve_bytes(model, "predict\tab\rc\u2028d\ntrain\tx\ry\n".encode())
    assert out == b"d\t-1.0\ttab here\t-2.0\n"
    assert model.taught == ["x\ry"]


def test_last_line_without_newline_is_answered():
    out, _ = serve_bytes(RecordingModel(), b"predict\tend")
    assert out == b"d\t-1.0\ttab here\t-2.0\n"


class ChunkedSource:
    """Request bytes handed out in given chunks (as a pipe would), recording at each read
    the answers the sink already holds."""

    def __init__(self, chunks: list[bytes], sink: "CountingSink"):
        self.chunks = list(chunks)
        self.sink = sink
        self.seen_at_read: list[int] = []

    def read1(self, size: int = -1) -> bytes:
        self.seen_at_read.append(self.sink.getvalue().count(b"\n"))
        return self.chunks.pop(0) if self.chunks else b""


class CountingSink(io.BytesIO):
    """A sink that counts its write calls (one per flushed batch of answers)."""

    writes = 0

    def write(self, data) -> int:
        self.writes += 1
        return super().write(data)


def test_whole_line_blocks_cut_at_the_last_line_feed_of_each_read():
    from lmchallenge.corpus import whole_line_blocks
    chunks = iter([b"a\nb", b"c", b"d\ne\nf", b"\n\n", b"tail", b""])
    assert list(whole_line_blocks(lambda size: next(chunks))) == [
        b"a\n", b"bcd\ne\n", b"f\n\n", b"tail"]
    assert list(whole_line_blocks(io.BytesIO(b"").read)) == []


def test_answers_are_flushed_before_waiting_for_more_requests():
    sink = CountingSink()
    source = ChunkedSource([b"predict\ta\npredict\tb\ntrain\tx\npredict\tc\n",
                            b"predict\td\npredict\t", b"e\n"], sink)
    protocol.serve(RecordingModel(), source, sink, io.StringIO())
    assert sink.getvalue() == b"".join(bytes([ch]) + b"\t-1.0\ttab here\t-2.0\n" for ch in b"abcde")
    # before each read, every request of the chunks read so far is answered
    assert source.seen_at_read == [0, 3, 4, 5]


def test_pipelined_answers_are_written_in_batches():
    sink = CountingSink()
    requests = b"".join(b"predict\t%d\n" % i for i in range(40))
    protocol.serve(RecordingModel(), ChunkedSource([requests], sink), sink, io.StringIO())
    assert sink.getvalue().count(b"\n") == 40
    assert sink.writes == 3  # 16 + 16 + 8 answers, not one write per answer


def test_run_loop_on_text_streams():
    model = RecordingModel()
    out, err = io.StringIO(), io.StringIO()
    model.run_loop(io.StringIO("predict\tcaf\u00e9\ntrain\tt\u00e9\n"), out, err)
    assert out.getvalue() == "\u00e9\t-1.0\ttab here\t-2.0\n"
    assert model.taught == ["t\u00e9"]


@pytest.mark.parametrize("unbuffered", [True, False])
def test_run_loop_leaves_stdout_open(unbuffered):
    """After run_loop returns, the program can still write to its standard output, as with
    LM Challenge 5.2 (QA: under python -u the loop's own buffer closed file descriptor 1)."""
    code = ("import sys\n"
            "import lmchallenge as lmc\n"
            "class Fixed(lmc.Model):\n"
            "    def predict(self, context, candidates):\n"
            "        return [('x', -1.0)]\n"
            "Fixed().run_loop()\n"
            "sys.stdout.write('after run_loop\\n')\n")
    result = subprocess.run([PYTHON, *(["-u"] if unbuffered else []), "-c", code],
                            input=b"predict\tIn the\n", capture_output=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, b"x\t-1.0\nafter run_loop\n"), result.stderr


def test_answers_before_a_model_exits_are_written():
    """A model that exits (SystemExit) inside a block of requests: the answers it gave
    before are written, not lost with the gathered block (review)."""
    code = ("import sys\n"
            "import lmchallenge as lmc\n"
            "class Quits(lmc.Model):\n"
            "    def predict(self, context, candidates):\n"
            "        if context == 'exit':\n"
            "            sys.exit(3)\n"
            "        return [('x', -1.0)]\n"
            "Quits().run_loop()\n")
    result = subprocess.run([PYTHON, "-c", code], input=b"predict\thi\npredict\texit\n",
                            capture_output=True, timeout=60)
    assert (result.returncode, result.stdout) == (3, b"x\t-1.0\n"), result.stderr


def test_model_without_train_or_clear_is_served():
    class PredictOnly:
        def predict(self, context, candidates):
            return [("x", 0.0)]

    out, err = serve_bytes(PredictOnly(), b"train\tabc\nclear\npredict\t\n")
    assert out == b"x\t0.0\n" and err == ""


# lmc-ngram serve over real pipes ---------------------------------------------------------------

@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    with gzip.open(DATA / "kjv" / "train.txt.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(500)]
    path = tmp_path_factory.mktemp("serve") / "kjv500.lm"
    save_tables(train_tables([words(line) for line in lines], order=3), path)
    return path


class Server:
    """``python -m lmchallenge.cli.ngram serve MODEL`` with a line reader thread."""

    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in iter(self.proc.stdout.readline, b""):
            self.lines.put(raw)
        self.lines.put(None)

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60) -> bytes:
        return self.lines.get(timeout=timeout)

    def result(self):
        return parse_answer(self.answer().decode("utf-8").rstrip("\n"))

    def close(self) -> tuple[int, str]:
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        return code, self.proc.stderr.read().decode()


def test_serve_answers_each_request_before_the_next_is_sent(model_file):
    local = NgramModel(model=str(model_file), top=5)
    server = Server([PYTHON, "-m", "lmchallenge.cli.ngram", "serve", str(model_file),
                     "--top", "5"])
    try:
        server.send(b"predict\tIn the \n")
        assert server.result() == local.predict("In the ", None)
        server.send(b"predict\tIn the beg\tinning\tzzz\n")
        assert server.result() == local.predict("In the beg", ["inning", "zzz"])
        server.send(b"train\tAnd he wept , he wept sore .\n")
        local.train("And he wept , he wept sore .")
        server.send(b"predict\tAnd he \twept\n")
        assert server.result() == local.predict("And he ", ["wept"])
        server.send(b"clear\npredict\t\xff\npredict\tAnd he \twept\n")
        local.clear()
        assert server.answer() == b"\n"
        assert server.result() == local.predict("And he ", ["wept"])
    finally:
        code, err = server.close()
    assert code == 0
    assert "not valid UTF-8" in err
    assert server.answer() is None  # nothing more was written (train/clear are silent)


def test_console_script_with_pipelined_shell_model(model_file, kjv_test_lines):
    script = BIN / "lmc-ngram"
    if not script.exists():
        pytest.skip(f"console script not installed at {script} (pip install -e .)")
    local = NgramModel(model=str(model_file))
    requests = []
    for line in kjv_test_lines:
        for i in range(0, len(line), 3):
            requests.append(Predict(line[:i], None))
            requests.append(Predict(line[:i], ["the", "LORD", "Jesus"]))
        requests.append(Train(line))
    requests.append(Clear())
    requests.append(Predict("And ", ["Jesus"]))
    expected = [local.predict(r.context, r.candidates) if isinstance(r, Predict)
                else (local.train(r.text) if isinstance(r, Train) else local.clear())
                for r in requests]
    expected = [e for e, r in zip(expected, requests) if isinstance(r, Predict)]
    with ShellModel(f"{script} serve {model_file}", window=64) as shell:
        answers = list(shell.stream(requests))
    assert answers == expected
    assert answers[-1] == []


@pytest.fixture(scope="module")
def kjv_test_lines() -> list[str]:
    return (DATA / "kjv" / "test.sample.txt").read_text(encoding="utf-8").splitlines()[:12]


def test_lmc_neural_serve_groups_queries_by_the_models_batch_and_a_candidate_budget():
    """lmc-neural's server: up to predict_batch_size scoring queries a call, at most
    BATCH_CANDIDATES candidates in all (a bigger query alone), and a completion alone."""
    from lmchallenge.model.batched import BATCH_CANDIDATES, serve_batched

    class Sizes:
        predict_batch_size = 3

        def __init__(self):
            self.calls: list[list[int]] = []  # candidates per query, per call (-1: none)

        def predict_batch(self, queries):
            self.calls.append([-1 if c is None else len(c) for _, c in queries])
            return [[("x", -1.0)] for _ in queries]

    many = "\t".join(str(i) for i in range(BATCH_CANDIDATES // 2 - 1))
    requests = ["predict\ta\tb"] * 4 + ["predict\ta\t" + many] * 3 + ["predict\tab"] \
        + ["predict\ta\t" + "\t".join(map(str, range(BATCH_CANDIDATES + 1)))] \
        + ["predict\ta\tb"] * 2
    model, sink = Sizes(), io.BytesIO()
    serve_batched(model, io.BytesIO("".join(r + "\n" for r in requests).encode()), sink,
                  io.StringIO())
    half = BATCH_CANDIDATES // 2 - 1
    assert model.calls == [[1, 1, 1], [1, half, half], [half], [-1], [BATCH_CANDIDATES + 1],
                           [1, 1]]
    assert sink.getvalue() == b"x\t-1.0\n" * len(requests)

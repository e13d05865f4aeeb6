"""One model process for many clients (lmchallenge/model/shared.py): ``lmc-neural serve
--listen`` and ``lmc-neural connect``, here with the built-in n-gram behind the shared
server (the neural model's own test is in tests/test_neural.py), over real Unix sockets,
real relay processes and real ``lmc run`` / ``lmc-dist run`` clients."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import BIN, DATA
from lmchallenge.errors import LmcError
from lmchallenge.model import shared
from lmchallenge.model.ngram import NgramModel, save_tables, train_tables
from lmchallenge.model.wire import format_answer


def in_the(model_file: Path) -> bytes:
    """The n-gram's answer to ``predict<TAB>In the `` as the protocol writes it."""
    return format_answer(NgramModel(str(model_file)).predict("In the ", None)).encode()


class Batched:
    """The n-gram with ``predict_batch`` (what the shared server calls), recording the
    number of queries of each call; ``fail_on`` a context makes the call raise."""

    predict_batch_size = 8

    def __init__(self, model: NgramModel, fail_on: str | None = None):
        self.model, self.fail_on = model, fail_on
        self.calls: list[int] = []

    def predict_batch(self, queries):
        self.calls.append(len(queries))
        if any(context == self.fail_on for context, _ in queries):
            raise RuntimeError("exploded")
        return [self.model.predict(context, candidates) for context, candidates in queries]


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return (DATA / "kjv" / "test.sample.txt").read_text(encoding="utf-8").splitlines()[:40]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, lines) -> Path:
    with gzip.open(DATA / "kjv" / "train.txt.gz", "rt", encoding="utf-8") as f:
        train = [next(f) for _ in range(3000)]
    path = tmp_path_factory.mktemp("model") / "kjv.lm"
    save_tables(train_tables(train, order=3), path)
    return path


class Server:
    """``serve_shared`` in a thread, listening at ``address``; stopped on exit."""

    def __init__(self, model, address: str):
        self.address = shared.address_of(address)
        self.listening = shared.listening(self.address)
        self.listener = self.listening.__enter__()
        # listening before serve_shared's thread does (it listens again): a test's raw
        # socket connects at once, where a relay would wait (CI: refused, once)
        self.listener.listen(socket.SOMAXCONN)
        self.errors = io.StringIO()
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, args=(model,), daemon=True)
        self.thread.start()

    def _serve(self, model) -> None:
        try:
            shared.serve_shared(model, self.listener, self.errors, self.stop)
        except BaseException as e:     # noqa: BLE001 - reported to the test
            self.failure = e

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        self.listening.__exit__(None, None, None)


def connect(*args: str) -> str:
    return f"{BIN / 'lmc-neural'} connect {' '.join(args)}"


def test_lmc_run_through_a_shared_server_equals_the_model_on_its_own_pipe(model_file, lines, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sock = str(tmp_path / "kjv.sock")
    expected = {game: subprocess.run([str(BIN / "lmc"), "run", f"{BIN / 'lmc-ngram'} serve "
                                      f"{model_file}", game, str(corpus)], capture_output=True,
                                     check=True).stdout for game in ("we", "wc")}
    with Server(Batched(NgramModel(str(model_file))), sock) as server:
        for game in ("we", "wc"):
            run = subprocess.run([str(BIN / "lmc"), "run", connect(sock), game, str(corpus)],
                                 capture_output=True, timeout=300)
            assert run.returncode == 0, run.stderr.decode()
            assert run.stdout == expected[game] and run.stdout.count(b"\n") > 300
        assert server.failure is None and server.errors.getvalue() == ""


def test_clients_at_once_get_their_own_answers_and_share_calls(model_file, lines, tmp_path):
    """Three relays at once, each with its own requests (one with training and clearing,
    which a shared model ignores): each gets the answers of its own queries in its order,
    and the model's calls held queries of several of them."""
    sock = str(tmp_path / "kjv.sock")
    model = NgramModel(str(model_file))
    requests = [[f"predict\t{line[:n]}\t{line[n:n + 4]}\tand\tthe\n" for line in lines[k::3]
                 for n in (5, 12, 20)] for k in range(3)]
    requests[1] = ["train\tsome text\n", "clear\n"] + requests[1]
    batched = Batched(model)
    batched.predict_batch_size = 256
    gate = threading.Event()    # the first call waits until every client has sent all
    original = batched.predict_batch
    batched.predict_batch = lambda queries: (gate.wait(10), original(queries))[1]
    with Server(batched, sock) as server:
        relays = [subprocess.Popen(connect(sock).split(), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                  for _ in requests]
        for relay, sent in zip(relays, requests):
            relay.stdin.write("".join(sent).encode())
            relay.stdin.flush()
        threading.Timer(3.0, gate.set).start()     # (the relays have sent all by then)
        for relay, sent in zip(relays, requests):
            out, err = relay.communicate(timeout=60)
            assert relay.returncode == 0 and err == b""
            queries = [r[:-1].split("\t")[1:] for r in sent if r.startswith("predict")]
            assert out.decode() == "".join(format_answer(model.predict(q[0], q[1:]))
                                           for q in queries)
        assert server.failure is None
    assert sum(batched.calls) == sum(len(r) for r in requests) - 2
    assert max(batched.calls) > max(len(r) for r in requests)   # shared between clients


def test_lmc_dist_workers_share_one_server(model_file, lines, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sock = str(tmp_path / "kjv.sock")
    expected = subprocess.run([str(BIN / "lmc"), "run", f"{BIN / 'lmc-ngram'} serve "
                               f"{model_file}", "we", str(corpus)], capture_output=True,
                              check=True).stdout
    with Server(Batched(NgramModel(str(model_file))), sock) as server:
        run = subprocess.run([str(BIN / "lmc-dist"), "run", connect(sock), "we", "--input",
                              str(corpus), "--run-dir", str(tmp_path / "run"), "--workers", "2",
                              "--partition-chars", "600", "--output",
                              str(tmp_path / "all.jsonl")], capture_output=True, timeout=300)
        assert run.returncode == 0, run.stderr.decode()
        assert server.failure is None
    assert (tmp_path / "all.jsonl").read_bytes() == expected
    assert len(list((tmp_path / "run").glob("part-*"))) >= 2


def test_a_failing_query_fails_its_client_after_the_answers_before_it(model_file, tmp_path):
    sock = str(tmp_path / "kjv.sock")
    with Server(Batched(NgramModel(str(model_file)), fail_on="boom"), sock) as server:
        relay = subprocess.run(connect(sock).split(), capture_output=True, timeout=60,
                               input=b"predict\tIn the \nclear\npredict\tboom\tx\tyz\n"
                                     b"predict\tIn\tthe\n")
        assert server.failure is None
    assert relay.returncode == 2
    assert relay.stdout == in_the(model_file)   # the completion's call was answered
    reason = ("predict_batch failed on a call of 2 queries, the first ('boom', ['x', 'yz']): "
              "RuntimeError: exploded")
    assert relay.stderr.decode() == f"lmc-neural: error: the server at {sock}: {reason}\n"
    assert server.errors.getvalue() == f"lmc-neural: client 1: {reason}; its connection is closed\n"


def test_no_server_is_waited_for_then_named(tmp_path):
    sock = tmp_path / "none.sock"
    relay = subprocess.run(connect(str(sock), "--wait", "0.5").split(), input=b"",
                           capture_output=True, timeout=60)
    assert relay.returncode == 2
    assert relay.stderr.decode() == (   # the wait said once as it starts (QA: a minute's silence)
        f"no server at {sock} yet (No such file or directory): waiting up to 0.5 s for it to "
        "listen (still loading?)\n"
        f"lmc-neural: error: no server at {sock} after 0.5 s: No such file or directory (start "
        "it with `lmc-neural serve MODEL --listen ADDRESS`)\n")


def test_a_relay_waits_for_a_server_that_starts_late(model_file, tmp_path):
    sock = str(tmp_path / "late.sock")
    relay = subprocess.Popen(connect(sock).split(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threading.Event().wait(1.0)
    with Server(Batched(NgramModel(str(model_file))), sock):
        out, err = relay.communicate(b"predict\tIn the \n", timeout=60)
    assert relay.returncode == 0 and out == in_the(model_file)
    assert err.decode() == (f"no server at {sock} yet (No such file or directory): waiting up "
                            "to 60 s for it to listen (still loading?)\n")


def test_the_relay_refuses_a_game_the_model_does_not_play(tmp_path):
    relay = subprocess.run(connect(str(tmp_path / "x.sock")).split(), input=b"",
                           capture_output=True, timeout=60, env={**os.environ, "LMC_GAME": "ce"})
    assert relay.returncode == 2
    assert relay.stderr.decode().startswith("lmc-neural: error: does not play ce: it scores "
                                            "whole words")


def test_listen_replaces_a_dead_servers_socket_and_refuses_a_live_one_or_a_file(tmp_path):
    path = tmp_path / "s.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()            # the file stays, nobody listens
    with shared.listening(shared.address_of(str(path))):
        assert path.is_socket() and (tmp_path / "s.sock.lock").exists()
        with pytest.raises(LmcError, match=r"a server is listening there already \(.*s\.sock"
                                           r"\.lock is locked\)"):
            with shared.listening(shared.address_of(str(path))):
                pass
        assert path.is_socket()
    assert not path.exists() and not (tmp_path / "s.sock.lock").exists()
    for name in ("plain", "adir"):
        other = tmp_path / name
        other.mkdir() if name == "adir" else other.write_text("x")
        with pytest.raises(LmcError, match="it is there and is not a socket"):
            with shared.listening(shared.address_of(str(other))):
                pass
        assert other.exists()
    assert (tmp_path / "plain").read_text() == "x"


def test_connect_to_what_can_never_be_a_server_fails_at_once(tmp_path):
    (tmp_path / "plain").write_text("x")
    for path, why in ((tmp_path / "plain", "it is not a socket"),
                      (tmp_path, "it is not a socket"),
                      (tmp_path / "nodir" / "s.sock", f"there is no directory {tmp_path}/nodir")):
        relay = subprocess.run(connect(str(path)).split(), input=b"", capture_output=True,
                               timeout=60)     # not after --wait's 60 s
        assert relay.returncode == 2
        assert relay.stderr.decode() == f"lmc-neural: error: no server at {path}: {why}\n"


def test_a_query_that_fails_fails_its_client_only(model_file, tmp_path):
    """A call holding the queries of two clients fails: each client's queries are asked
    again apart; the one whose query fails is told why (its relay fails with the reason),
    the other is answered, and the server goes on."""
    sock = str(tmp_path / "kjv.sock")
    model = Batched(NgramModel(str(model_file)), fail_on="boom")
    model.predict_batch_size = 256
    gate, entered = threading.Event(), threading.Event()
    original = model.predict_batch
    model.predict_batch = lambda queries: (entered.set(), gate.wait(30), original(queries))[2]
    good_requests = b"predict\tIn\tthe\tbeginning\n" * 3
    with Server(model, sock) as server:
        primer = subprocess.Popen(connect(sock).split(), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        primer.stdin.write(b"predict\tIn the \n")     # its call waits for the gate
        primer.stdin.flush()
        assert entered.wait(30)
        bad = subprocess.Popen(connect(sock).split(), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        good = subprocess.Popen(connect(sock).split(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        bad.stdin.write(b"predict\tIn\tthe\npredict\tboom\tx\n")
        bad.stdin.flush()
        good.stdin.write(good_requests)
        good.stdin.flush()
        threading.Timer(1.0, gate.set).start()
        assert primer.communicate(timeout=60)[0] == in_the(model_file)
        bad_out, bad_err = bad.communicate(timeout=60)
        good_out, good_err = good.communicate(timeout=60)
        after = subprocess.run(connect(sock).split(), input=b"predict\tIn the \n",
                               capture_output=True, timeout=60)
        assert server.failure is None
    ngram = NgramModel(str(model_file))
    assert good.returncode == 0 and good_err == b""
    assert good_out == format_answer(ngram.predict("In", ["the", "beginning"])).encode() * 3
    assert after.returncode == 0 and after.stdout == in_the(model_file)
    assert bad.returncode == 2 and bad_out == b""
    reason = ("predict_batch failed on a call of 2 queries, the first ('In', ['the']): "
              "RuntimeError: exploded")
    assert bad_err.decode() == f"lmc-neural: error: the server at {sock}: {reason}\n"
    assert re.fullmatch(f"lmc-neural: client [23]: {re.escape(reason)}; its connection is "
                        "closed\n", server.errors.getvalue())
    # the primer, both clients, then each apart (in the order their blocks arrived)
    assert model.calls[:2] == [1, 5] and sorted(model.calls[2:4]) == [2, 3]


def test_a_relay_that_fails_while_its_input_is_open_exits_cleanly(model_file, tmp_path):
    """(QA: the relay's thread blocked reading stdin held the stream's lock at exit: a
    'Fatal Python error', SIGABRT, exit 134 instead of 2.)"""
    sock = str(tmp_path / "kjv.sock")
    server = Server(Batched(NgramModel(str(model_file))), sock)
    relay = subprocess.Popen(connect(sock).split(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    relay.stdin.write(b"predict\tIn the \n")
    relay.stdin.flush()
    assert relay.stdout.readline() == in_the(model_file)
    server.__exit__(None, None, None)       # stopped while the relay's stdin is open
    err = relay.stderr.read().decode()
    assert relay.wait(60) == 2
    assert err == (f"lmc-neural: error: the server at {sock} closed the connection with 1 of "
                   "1+ predict requests answered (it stopped or failed: its own output says "
                   "why)\n")
    relay.stdin.close()


def test_addresses():
    assert shared.address_of("/tmp/a.sock") == shared.Address(socket.AF_UNIX, "/tmp/a.sock",
                                                               "/tmp/a.sock")
    assert shared.address_of("gpu1:7000").where == ("gpu1", 7000)
    assert shared.address_of(":7000").where == ("localhost", 7000)
    assert shared.address_of("[::1]:7000") == shared.Address(socket.AF_INET6, ("::1", 7000),
                                                             "[::1]:7000")
    assert shared.address_of("a:b").family == socket.AF_UNIX
    assert shared.address_of("dir/x:80").family == socket.AF_UNIX
    with pytest.raises(LmcError, match="the port must be from 1 to 65535"):
        shared.address_of("gpu1:70000")
    with pytest.raises(LmcError, match="the address is empty"):
        shared.address_of("")


def test_tcp(model_file):
    from conftest import free_port
    address = f"127.0.0.1:{free_port()}"
    with Server(Batched(NgramModel(str(model_file))), address):
        relay = subprocess.run(connect(address).split(), input=b"predict\tIn the \n",
                               capture_output=True, timeout=60)
    assert relay.returncode == 0 and relay.stdout == in_the(model_file)


def test_several_servers_share_the_clients(model_file, tmp_path):
    """``connect A B`` outside lmc-dist: each relay picks one of the servers at random; all
    are answered alike."""
    socks = [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]
    models = [Batched(NgramModel(str(model_file))) for _ in socks]
    with Server(models[0], socks[0]), Server(models[1], socks[1]):
        relays = [subprocess.Popen(connect(*socks).split(), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                  for _ in range(20)]
        for relay in relays:
            out, err = relay.communicate(b"predict\tIn the \n", timeout=60)
            assert relay.returncode == 0 and out == in_the(model_file), err
    assert all(model.calls for model in models)     # (one unused: 1 in 500,000)


def test_a_worker_takes_the_server_of_its_number_and_other_clients_one_at_random():
    texts = ["/tmp/a.sock", "/tmp/b.sock", "[::1]:7000"]
    addresses = [shared.address_of(a) for a in texts]

    def order(name):
        return [a.text for a in shared.in_preference(addresses, name)]

    assert [order(name)[0] for name in ("0", "1", "2", "3", "worker-7")] \
        == ["/tmp/a.sock", "/tmp/b.sock", "[::1]:7000", "/tmp/a.sock", "/tmp/b.sock"]
    assert order("1") == ["/tmp/b.sock", "[::1]:7000", "/tmp/a.sock"]   # then the others
    assert order("gpu_node-5")[0] == "[::1]:7000"
    # a dask worker's default name is its address: its port would send all to one server
    for name in (None, "", "tcp://10.0.0.5:40100", "tcp://[::1]:40102", "10.0.0.5", "1" * 5000):
        orders = {tuple(order(name)) for _ in range(200)}
        assert {o[0] for o in orders} == set(texts)
        assert all(sorted(o) == sorted(texts) for o in orders)


def test_a_relay_whose_server_is_not_there_takes_another_after_the_wait(model_file, tmp_path):
    """Worker 0's server (A) is down, or bound but never serving (a load that failed):
    after --wait its relay connects to B; with no server at all, every address is named."""
    socks = [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]
    env = {**os.environ, "LMC_WORKER": "0"}
    with Server(Batched(NgramModel(str(model_file))), socks[1]):
        for loading in (False, True):
            with (shared.listening(shared.address_of(socks[0])) if loading
                  else contextlib.nullcontext()):
                relay = subprocess.run(connect(*socks, "--wait", "0.5").split(),
                                       input=b"predict\tIn the \n", capture_output=True,
                                       timeout=60, env=env)
            assert relay.returncode == 0 and relay.stdout == in_the(model_file)
            why = "Connection refused" if loading else "No such file or directory"
            assert relay.stderr.decode() == (f"no server at {socks[0]} yet ({why}): waiting up "
                                             "to 0.5 s for it to listen (still loading?)\n")
    relay = subprocess.run(connect(*socks, "--wait", "0.5").split(), input=b"",
                           capture_output=True, timeout=60, env=env)
    assert relay.returncode == 2
    assert relay.stderr.decode() == (
        f"no server at {socks[0]} yet (No such file or directory): waiting up to 0.5 s for it "
        "to listen (still loading?)\n"
        f"lmc-neural: error: no server at {socks[0]} after 0.5 s: No such file or directory; "
        f"no server at {socks[1]}: No such file or directory (start it with `lmc-neural "
        "serve MODEL --listen ADDRESS`)\n")
    relay = subprocess.run(connect(*socks, str(tmp_path / "none" / "c.sock"), "--wait",
                                   "0").split(), input=b"", capture_output=True, timeout=60,
                           env=env)
    assert relay.returncode == 2 and relay.stderr.decode().endswith(
        f"; no server at {tmp_path / 'none' / 'c.sock'}: there is no directory "
        f"{tmp_path / 'none'} (start it with `lmc-neural serve MODEL --listen ADDRESS`)\n")


def test_lmc_dist_workers_are_spread_over_the_servers(model_file, lines, tmp_path):
    """The embedded cluster's workers 0 and 1 with ``connect A B``: worker 0's model is A,
    worker 1's B (not at random: each server gets one of them)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    socks = [str(tmp_path / "a.sock"), str(tmp_path / "b.sock")]
    models = [Batched(NgramModel(str(model_file))) for _ in socks]
    log = tmp_path / "workers.txt"     # each model process's LMC_WORKER
    command = f"sh -c 'echo $LMC_WORKER >> {log}; exec {connect(*socks)}'"
    with Server(models[0], socks[0]), Server(models[1], socks[1]):
        run = subprocess.run([str(BIN / "lmc-dist"), "run", command, "we", "--input",
                              str(corpus), "--run-dir", str(tmp_path / "run"), "--workers", "2",
                              "--partition-chars", "600"], capture_output=True, timeout=300)
        assert run.returncode == 0, run.stderr.decode()
    assert set(log.read_text().split()) == {"0", "1"}
    assert all(model.calls for model in models)


def test_a_client_that_does_not_read_its_answers_holds_up_only_itself(model_file, tmp_path):
    """Its answers wait in the server (past its socket's buffers) while another client is
    answered; it gets them all once it reads."""
    sock = str(tmp_path / "kjv.sock")
    with Server(Batched(NgramModel(str(model_file))), sock) as server:
        idle = socket.socket(socket.AF_UNIX)
        idle.connect(sock)
        requests = b"predict\tIn the \n" * 4000     # about 1.5 MB of answers
        sender = threading.Thread(target=idle.sendall, args=(requests,))
        sender.start()
        threading.Event().wait(1.0)
        relay = subprocess.run(connect(sock).split(), input=b"predict\tIn the \n",
                               capture_output=True, timeout=60)
        assert relay.returncode == 0 and relay.stdout == in_the(model_file)
        sender.join(10)
        idle.shutdown(socket.SHUT_WR)
        received = b""
        while data := idle.recv(1 << 16):
            received += data
        idle.close()
        assert received == in_the(model_file) * 4000
        assert server.failure is None

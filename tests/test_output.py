"""`lmc-dist run --output`: partitions joined in order into one log of any form
(lmc_dist.job.write_output, lmchallenge.logs.convert.join_logs), converting partitions of the
other form first; `lmc convert RUN_DIR` joins the same way."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pandas
import pyarrow.parquet as pq
import pytest

from lmc_dist.job import write_output
from lmchallenge.logs.io import read_log, write_log

LOGS = Path(__file__).parent / "data" / "pretty"


def parts_of(src: Path, run_dir: Path, part_form: str, cuts: list[int]) -> tuple[list[dict], list[str]]:
    """The datums of ``src`` written as partitions ``part-NNNNN.<part_form>`` cut at ``cuts``."""
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)
    data = [json.loads(line) for line in lines]
    run_dir.mkdir()
    names = []
    bounds = [0, *cuts, len(data)]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        name = f"part-{i:05d}.{part_form}"
        write_log(data[lo:hi], str(run_dir / name), game=src.name.split(".")[-2], compresslevel=1)
        names.append(name)
    return data, names


@pytest.mark.parametrize("part_form", ["parquet", "jsonl.gz"])
@pytest.mark.parametrize("output", ["all.jsonl", "all.jsonl.gz", "all.parquet"])
@pytest.mark.parametrize("src", ["kjv.o1.wc.jsonl", "kjv.o2.wr.jsonl"])
def test_partitions_joined_in_order(tmp_path: Path, part_form: str, output: str, src: str) -> None:
    log = LOGS / src
    data, names = parts_of(log, tmp_path / "run", part_form, cuts=[3, 3, 10])   # one part empty
    out = tmp_path / output
    write_output(str(tmp_path / "run"), names, str(out), log.name.split(".")[-2])
    assert list(read_log(str(out))) == data
    if output == "all.jsonl":      # the very lines lmc run writes
        assert out.read_bytes() == log.read_bytes()
    if output == "all.jsonl.gz":
        with gzip.open(out, "rb") as f:
            assert f.read() == log.read_bytes()
    if output == "all.parquet":
        assert len(pandas.read_parquet(out)) == len(data)
        assert pq.ParquetFile(out).metadata.num_row_groups == 1
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == names   # no .out-* left


def test_parquet_output_in_whole_row_groups(tmp_path: Path, monkeypatch) -> None:
    import lmchallenge.logs.parquet
    monkeypatch.setattr(lmchallenge.logs.parquet, "ROW_GROUP_ROWS", 4)
    data, names = parts_of(LOGS / "kjv.o1.we.jsonl", tmp_path / "run", "parquet", cuts=[3, 5, 11])
    out = tmp_path / "all.parquet"
    write_output(str(tmp_path / "run"), names, str(out), "we")
    metadata = pq.ParquetFile(out).metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert sizes == [4] * (len(data) // 4) + ([len(data) % 4] if len(data) % 4 else [])
    assert list(read_log(str(out))) == data


def test_no_partitions_gives_an_empty_log(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    write_output(str(tmp_path / "run"), [], str(tmp_path / "all.parquet"), "wc")
    assert "completions" in pq.read_schema(tmp_path / "all.parquet").names
    assert list(read_log(str(tmp_path / "all.parquet"))) == []


@pytest.mark.parametrize("part_form", ["parquet", "jsonl.gz"])
@pytest.mark.parametrize("output", ["all.jsonl", "all.jsonl.gz", "all.parquet"])
def test_lmc_convert_joins_a_run_directory(tmp_path: Path, part_form: str, output: str) -> None:
    from click.testing import CliRunner

    from lmchallenge.cli.convert import cli
    log = LOGS / "kjv.o2.wc.jsonl"
    data, names = parts_of(log, tmp_path / "run", part_form, cuts=[4, 9])
    out = tmp_path / output
    result = CliRunner().invoke(cli, [str(tmp_path / "run"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    form = ("parquet" if output.endswith(".parquet") else "jsonlines, gzip"
            if output.endswith(".gz") else "jsonlines")
    assert f"lmc convert: wrote {len(data)} tokens to {out} ({form})" in result.output
    assert list(read_log(str(out))) == data
    if output == "all.jsonl":
        assert out.read_bytes() == log.read_bytes()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == names


# -- outputs that are not plain files ------------------------------------------------------------

def _lmc_run(*argv: str):
    import subprocess

    from conftest import BIN, toy_model_command
    return subprocess.run([str(BIN / "lmc"), "run", toy_model_command(), "we", *argv],
                          input=b"in the beginning\n", capture_output=True, timeout=120)


def test_an_output_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(tmp_path):
    (tmp_path / "real").mkdir()
    link = tmp_path / "log.jsonl"
    link.symlink_to(tmp_path / "real" / "target.jsonl")
    result = _lmc_run("--output", str(link))
    assert result.returncode == 0, result.stderr.decode()
    assert link.is_symlink() and len((tmp_path / "real" / "target.jsonl").read_text().splitlines()) == 3
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["target.jsonl"]


def test_an_output_that_is_a_pipe_is_written_as_it_is(tmp_path):
    import os
    import threading

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    result = _lmc_run("--output", str(fifo))
    reader.join(30)
    assert result.returncode == 0, result.stderr.decode()
    assert fifo.is_fifo() and len(received[0].splitlines()) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["log.fifo"]
    assert _lmc_run("--output", "/dev/stdout").stdout.count(b"\n") == 3


@pytest.mark.parametrize("output", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_an_output_naming_stdout_appends_where_the_shell_appends(tmp_path, output):
    """`--output /dev/stdout >> app.log`: the file the shell opened is written through the
    descriptor; it was replaced by a new file (the temporary renamed over its path), and
    what it held before was lost."""
    import subprocess

    from conftest import BIN, toy_model_command
    log = tmp_path / "app.log"
    log.write_text("my notes\n")
    inode = log.stat().st_ino
    with open(log, "ab") as out:
        result = subprocess.run([str(BIN / "lmc"), "run", toy_model_command(), "we", "--output",
                                 output], input=b"in the beginning\n", stdout=out,
                                stderr=subprocess.PIPE, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    lines = log.read_text().splitlines()
    assert lines[0] == "my notes" and len(lines) == 4 and json.loads(lines[1])["target"] == "in"
    assert log.stat().st_ino == inode and sorted(p.name for p in tmp_path.iterdir()) == ["app.log"]
    # lmc convert the same way, and after `>` the file holds the log alone
    with open(log, "wb") as out:
        subprocess.run([str(BIN / "lmc"), "convert", str(LOGS / "kjv.o1.we.jsonl"), "-o", output],
                       stdout=out, check=True, timeout=120)
    assert log.read_bytes() == (LOGS / "kjv.o1.we.jsonl").read_bytes()


def test_parquet_to_a_pipe_is_refused_before_any_work(tmp_path):
    import os

    fifo = tmp_path / "log.parquet"
    os.mkfifo(fifo)
    result = _lmc_run("--output", str(fifo))      # nobody reads it: it would hang if opened
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode() == (f"lmc: error: {fifo}: cannot write Parquet here: it is not "
                                      "a regular file (a pipe, a device, or a descriptor such as "
                                      "/dev/stdout); write .jsonl or .jsonl.gz to it\n")


@pytest.mark.parametrize("users, said", [
    ([7, 7, "7"], "user '7' is a string but user 7 of line 1 is an integer: the user column of a "
                  "Parquet log holds one type (1 and \"1\" are different users); give every user "
                  "as a string or every one as an integer, or write the log as jsonl"),
    ([7, 7, 2**70], "user 1180591620717411303424 is an integer beyond 64 bits, more than the user "
                    "column of a Parquet log holds (int64); write the log as jsonl, or give the "
                    "users as strings")])
def test_users_no_parquet_log_holds_stop_lmc_run_before_the_model(tmp_path, users, said):
    """`lmc run --output X.parquet` of a corpus whose users no Parquet column holds is refused
    naming the corpus' line, before the model starts (QA: the model ran until the first user
    of the other type, then the error named the log's datum 3), as lmc-dist refuses it."""
    import subprocess

    from conftest import BIN, toy_model_command
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"user": user, "text": "in the beginning"}) + "\n"
                              for user in users))
    started = tmp_path / "started"
    model = f"sh -c 'touch {started}; exec {toy_model_command()}'"
    out = tmp_path / "log.parquet"
    result = subprocess.run([str(BIN / "lmc"), "run", model, "we", str(corpus), "--output",
                             str(out)], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (2, f"lmc: error: {corpus}:3: {said}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]
    ok = subprocess.run([str(BIN / "lmc"), "run", model, "we", str(corpus), "--output",
                         str(tmp_path / "log.jsonl")], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and started.exists(), ok.stderr     # (the marker works)


WRITTEN_BY_URL = "cannot write to a URL: give a local path (or one on a file system mounted here)"


@pytest.mark.parametrize("argv, url, said", [
    (["lmc", "run", "{model}", "we", "c.txt", "--output", "{url}"], "s3://b/log.jsonl",
     f"lmc: error: s3://b/log.jsonl: {WRITTEN_BY_URL}"),
    (["lmc", "convert", "{log}", "-o", "{url}"], "gs://b/log.parquet",
     f"lmc: error: gs://b/log.parquet: {WRITTEN_BY_URL}"),
    (["lmc", "grep", "the", "{log}", "-o", "{url}"], "s3://b/sel.jsonl.gz",
     f"lmc: error: s3://b/sel.jsonl.gz: {WRITTEN_BY_URL}"),
    (["lmc-ngram", "train", "c.txt", "-o", "{url}"], "s3://b/m.lm",
     f"lmc-ngram: error: s3://b/m.lm: {WRITTEN_BY_URL}"),
    (["lmc-dist", "run", "{model}", "we", "--input", "c.txt", "--run-dir", "run", "--output",
      "{url}"], "s3://b/all.parquet", f"lmc-dist: error: s3://b/all.parquet: {WRITTEN_BY_URL}"),
    (["lmc-dist", "run", "{model}", "we", "--input", "c.txt", "--run-dir", "{url}"], "s3://b/run",
     "lmc-dist: error: s3://b/run: the run dir cannot be a URL: it is a directory on a file "
     "system that the client and every worker mount at the same path (deploy/README.md)")])
def test_an_output_that_is_a_url_is_refused_not_written_as_a_local_path(tmp_path, argv, url,
                                                                        said):
    """QA: `--run-dir s3://b/run`, `--output s3://b/x.parquet` (and every other output) were
    written to the local directory `s3:/b/...`, and the run said it had written s3://b/run."""
    import subprocess

    from conftest import BIN, toy_model_command
    (tmp_path / "c.txt").write_text("in the beginning\n")
    names = {"model": toy_model_command(), "log": str(LOGS / "kjv.o1.we.jsonl"), "url": url}
    result = subprocess.run([str(BIN / argv[0]), *(arg.format(**names) for arg in argv[1:])],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (2, said + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


def test_no_output_is_written_inside_an_lmc_dist_run_dir(tmp_path):
    """QA: `lmc-dist run ... --run-dir run --output run/all.parquet` put the whole log beside
    its parts, and `pandas.read_parquet("run")` (README's way to read a run dir) counted every
    row twice (a .jsonl there made it fail).  Refused before anything is made; so is any
    output inside an existing run dir, at any depth."""
    import subprocess

    from conftest import BIN, toy_model_command
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\nwas the word\n")
    run = ["run", toy_model_command(), "we", "--input", str(corpus), "--run-dir", "run",
           "--workers", "1", "--no-progress"]
    said = ("cannot write: it is inside the lmc-dist run dir {}, whose every file "
            "pandas.read_parquet reads as a part of the run's log: write it elsewhere")
    refused = subprocess.run([str(BIN / "lmc-dist"), *run, "--output", "run/all.parquet"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (refused.returncode, refused.stderr) == (
        2, "lmc-dist: error: run/all.parquet: " + said.format("run") + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]
    made = subprocess.run([str(BIN / "lmc-dist"), *run], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    files = sorted(p.name for p in (tmp_path / "run").iterdir())
    for argv, output in [(["lmc", "run", toy_model_command(), "we", "c.txt", "--output"],
                          "run/logs/all.jsonl"),
                         (["lmc-ngram", "train", "c.txt", "-o"], "run/model.lm"),
                         (["lmc", "convert", "some.jsonl", "-o"], "run/all.parquet")]:
        if argv[1] == "convert":
            (tmp_path / "some.jsonl").write_bytes((LOGS / "kjv.o1.we.jsonl").read_bytes())
        refused = subprocess.run([str(BIN / argv[0]), *argv[1:], output], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
        assert (refused.returncode, refused.stderr) == (
            2, f"{argv[0]}: error: {output}: " + said.format(tmp_path / "run") + "\n")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == files
    assert len(pandas.read_parquet(tmp_path / "run")) == 6


def test_lmc_dist_refuses_the_log_on_stdout_as_a_dash(tmp_path):
    import subprocess

    from conftest import BIN, toy_model_command
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("in the beginning\n")
    result = subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input",
                             str(corpus), "--run-dir", str(tmp_path / "run"), "--output", "-"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert ("Error: Invalid value for '--output': lmc-dist writes its statistics to stdout: give "
            "the log a file (or /dev/stdout, to have both there)") in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


def _limited(limit: int):
    """A ``preexec_fn`` capping the size of any file the process writes (RLIMIT_FSIZE: a
    write past it fails with EFBIG, as a full disk fails with ENOSPC; Python ignores the
    SIGXFSZ that comes with it)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_an_output_too_large_for_the_disk_is_named_and_leaves_nothing(tmp_path):
    import subprocess

    from conftest import BIN, DATA, toy_model_command
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"".join((DATA / "kjv" / "test.sample.txt").read_bytes().splitlines(True)[:300]))
    output = tmp_path / "out" / "log.jsonl"
    result = subprocess.run([str(BIN / "lmc"), "run", toy_model_command(), "we", str(corpus),
                             "--output", str(output)], capture_output=True, text=True,
                            timeout=120, preexec_fn=_limited(50_000))
    assert (result.returncode, result.stderr) == (2, f"lmc: error: {output}: File too large\n")
    assert list((tmp_path / "out").iterdir()) == []
    # lmc-dist: the parts fit, the joined log does not: the run is complete all the same
    run_dir = tmp_path / "run"
    result = subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input",
                             str(corpus), "--run-dir", str(run_dir), "--workers", "1",
                             "--partition-chars", "4000", "--output", str(output), "--no-progress"],
                            capture_output=True, text=True, timeout=300, preexec_fn=_limited(50_000))
    assert result.returncode == 2 and result.stderr.endswith(
        f"lmc-dist: error: {output}: cannot write: File too large; the run in {run_dir} is "
        f"complete (statistics in _stats.json): write the log with `lmc convert {run_dir} -o "
        "FILE`\n"), result.stderr
    assert (run_dir / "_stats.json").exists() and list((tmp_path / "out").iterdir()) == []
    converted = subprocess.run([str(BIN / "lmc"), "convert", str(run_dir), "-o", str(output)],
                               capture_output=True, timeout=120)
    assert converted.returncode == 0 and len(output.read_text().splitlines()) > 3000


def test_an_output_replaced_keeps_its_permissions(tmp_path):
    import os
    import stat

    output = tmp_path / "log.jsonl"
    output.write_text("old\n")
    os.chmod(output, 0o640)
    result = _lmc_run("--output", str(output))
    assert result.returncode == 0, result.stderr.decode()
    assert stat.S_IMODE(output.stat().st_mode) == 0o640 and len(output.read_text().splitlines()) == 3


def test_a_parquet_name_that_is_not_utf_8_is_refused_not_a_traceback(tmp_path):
    """pyarrow opens only UTF-8 paths: a name of other bytes (kept by Python as surrogates)
    ended every Parquet write and read, and every Parquet part of such a run dir, in a
    UnicodeEncodeError traceback."""
    import os
    import subprocess

    from conftest import BIN, toy_model_command
    odd = os.fsdecode(b"caf\xe9")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("in the beginning\n")
    for argv, name in (
            (["lmc", "run", toy_model_command(), "we", str(corpus), "--output"], odd + ".parquet"),
            (["lmc", "convert", str(LOGS / "kjv.o1.we.jsonl"), "-o"], odd + ".parquet"),
            (["lmc", "stats"], odd + ".parquet")):
        path = str(tmp_path / name)
        if argv[1] == "stats":
            write_log(list(read_log(str(LOGS / "kjv.o1.we.jsonl"))), path.replace(odd, "ok"), game="we")
            os.rename(path.replace(odd, "ok"), path)
        result = subprocess.run([str(BIN / argv[0]), *argv[1:], path], capture_output=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert result.stderr.endswith(b": a Parquet file's name is not UTF-8, and pyarrow opens no "
                                      b"other Parquet file: rename it, or use jsonl\n"), result.stderr
    run_dir = tmp_path / odd
    result = subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input",
                             str(corpus), "--run-dir", str(run_dir)], capture_output=True, timeout=120)
    assert result.returncode == 2 and result.stderr.endswith(
        b" is not UTF-8, and pyarrow opens no other Parquet file: rename it, or write jsonl parts "
        b"(--part-format jsonl)\n") and not run_dir.exists()
    result = subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input",
                             str(corpus), "--run-dir", str(run_dir), "--part-format", "jsonl"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_log_through_a_descriptor_shares_its_position_with_what_else_is_written(tmp_path):
    """The log was written through a file opened anew on /dev/stdout: its position was not
    the shell's, and what the shell (or lmc-dist's statistics line) wrote after it landed on
    the log's first records.  However the descriptor is spelt, or linked to."""
    import os
    import shlex
    import subprocess

    from conftest import BIN, toy_model_command
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("in the beginning\n")
    link = tmp_path / "link.jsonl"
    os.symlink("/dev/stdout", link)
    lmc, model = shlex.quote(str(BIN / "lmc")), shlex.quote(toy_model_command())
    for spelling in ("/dev/stdout", "//dev/./stdout", str(link)):
        out = tmp_path / "out.txt"
        subprocess.run(["sh", "-c", f"{{ echo header; {lmc} run {model} we {corpus} --output "
                        f"{shlex.quote(spelling)}; echo footer; }} > {out}"], check=True, timeout=120)
        lines = out.read_text().splitlines()
        assert lines[0] == "header" and lines[-1] == "footer" and len(lines) == 5, (spelling, lines)
        assert [json.loads(line)["target"] for line in lines[1:4]] == ["in", "the", "beginning"]
    dist = subprocess.run([str(BIN / "lmc-dist"), "run", toy_model_command(), "we", "--input",
                           str(corpus), "--run-dir", str(tmp_path / "run"), "--output", "/dev/stdout"],
                          capture_output=True, timeout=300)
    lines = dist.stdout.decode().splitlines()
    assert len(lines) == 4 and [json.loads(line).get("target") for line in lines[:3]] == [
        "in", "the", "beginning"] and "entropy" in json.loads(lines[3])
    full = _lmc_run("--output", "/dev/full")
    assert (full.returncode, full.stderr) == (2, b"lmc: error: /dev/full: No space left on device\n")


def test_an_atomic_write_reaches_the_disk_before_its_rename(tmp_path, monkeypatch):
    """The temporary's bytes are synced before it is renamed over the path, and the
    directory after (QA: nothing was synced; after a power cut a renamed file may be empty)."""
    from lmchallenge.logs import files
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(
        f"/proc/self/fd/{fd}"))), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(b))),
                                                     real_replace(a, b))[1])
    path = tmp_path / "log.jsonl"
    with files.atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write("{}\n")
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
    assert events[0][1] == tmp and events[1][1] == str(path) and events[2][1] == str(tmp_path)
    assert path.read_text() == "{}\n"

"""README.md's commands, run as a user would: the quick start (less the install) and every block of
"A walk through every command", in order, in a scratch folder where ``data`` is the shipped data
(slow: trains three models and runs every game). A fast test runs every ``lmc``/``lmc-ngram``/
``lmc-dist`` command of the README with ``--help`` appended (click rejects an unknown option or
argument count before it prints the help). The docker-compose section is checked by
tests/test_deploy.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

from conftest import BIN, DATA, REPO

README = REPO / "README.md"
WALKTHROUGH = "## A walk through every command"
PROGRAMS = ("lmc", "lmc-ngram", "lmc-dist")
INSTALL = re.compile(r"^(python3 -m venv|\. \.venv/bin/activate|pip install)")


def section(text: str, heading: str) -> str:
    """The text of README's section ``heading`` (to the next ``## `` heading)."""
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else len(text)]


def sh_blocks(text: str) -> list[str]:
    """The ```sh blocks of ``text``, in order."""
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def quick_start(text: str) -> list[str]:
    """The quick start's command lines, less the install, then the single-process equivalent
    given inline after it."""
    first = sh_blocks(text[:text.index("Run the tests")])[0]
    commands = [part.strip() for line in first.splitlines() for part in line.split(" && ")
                if part.strip() and not INSTALL.match(part.strip())]
    inline = re.search(r"single-process equivalent is `(.*?)`", text, flags=re.S)
    assert inline, "README: the single-process equivalent is gone"
    commands += [part.strip() for part in " ".join(inline.group(1).split()).split(" && ")]
    return commands


def walkthrough(text: str) -> list[str]:
    return [line for block in sh_blocks(section(text, WALKTHROUGH)) for line in block.splitlines()
            if line.strip() and not line.startswith("#")]


def program_calls(command: str, programs: tuple[str, ...] = PROGRAMS) -> list[list[str]]:
    """The argv of each call of ``programs`` in a shell line (its pipes and redirections left
    out)."""
    calls = []
    for stage in re.split(r"\s(?:\||&&)\s", command):
        argv = shlex.split(stage.split(" > ")[0])
        if argv and argv[0] in programs:
            calls.append(argv)
    return calls


def environment() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def docs_calls() -> list[tuple[str, list[str]]]:
    """Each ``lmc``/``lmc-ngram``/``lmc-dist``/``lmc-neural`` call in the ```sh blocks of docs/
    and deploy/README.md, as (where, argv), lines continued with a backslash joined; lines that
    use shell variables are left out."""
    calls = []
    for page in [*sorted((REPO / "docs").glob("*.md")), REPO / "deploy" / "README.md"]:
        for block in sh_blocks(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                if "$" not in line and not line.lstrip().startswith("#"):
                    calls += [(f"{page.name}: {line.strip()}", argv) for argv in
                              program_calls(line.strip(), (*PROGRAMS, "lmc-neural"))]
    return calls


def test_readme_keeps_install_and_tests_first():
    text = README.read_text()
    blocks = sh_blocks(text)
    assert "pip install" in blocks[0] and "lmc-dist run" in blocks[0]
    assert blocks[1].strip() == ".venv/bin/python -m pytest"
    assert text.index(WALKTHROUGH) > text.index(blocks[1])


def test_walkthrough_shows_every_command():
    text = README.read_text()
    calls = [call for line in quick_start(text) + walkthrough(text) for call in program_calls(line)]
    shown = {(argv[0], argv[1]) for argv in calls}
    for game in ("wc", "we", "ce", "wr"):
        assert any(argv[:2] == ["lmc", "run"] and game in argv for argv in calls), game
    for command in ("stats", "validate", "pretty", "diff", "grep", "convert", "compare"):
        assert ("lmc", command) in shown, command
    assert ("lmc-dist", "run") in shown and ("lmc-dist", "stats") in shown
    ngram = [argv for argv in calls if argv[:2] == ["lmc-ngram", "train"]]
    assert any("--order" in argv for argv in ngram) and any("--chars" in argv for argv in ngram)
    wr, = [argv for argv in calls if argv[:2] == ["lmc", "run"] and "wr" in argv]
    assert any(arg.startswith("data/vocab/") for arg in wr)


def test_every_readme_command_parses():
    text = README.read_text()
    for line in quick_start(text) + walkthrough(text):
        for argv in program_calls(line):
            result = subprocess.run([str(BIN / argv[0]), *argv[1:], "--help"], capture_output=True,
                                    timeout=120, env=environment())
            assert result.returncode == 0, f"{line}\n{result.stderr.decode()}"


def test_every_docs_command_parses():
    """As the README's: docs/neural.md showed ``lmc run MODEL -o ... wc`` when ``lmc run`` took
    its options only before MODEL or after the game."""
    calls = docs_calls()
    assert any(argv[2].endswith("adapter:CausalLM") for _, argv in calls) and len(calls) >= 6
    for where, argv in calls:
        result = subprocess.run([str(BIN / argv[0]), *argv[1:], "--help"], capture_output=True,
                                timeout=120, env=environment())
        assert result.returncode == 0, f"{where}\n{result.stderr.decode()}"


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_readme_commands_run(tmp_path):
    (tmp_path / "data").symlink_to(DATA)
    (tmp_path / "runs").mkdir()
    for line in quick_start(README.read_text()) + walkthrough(README.read_text()):
        result = subprocess.run(["bash", "-c", "set -e\n" + line], cwd=tmp_path, capture_output=True,
                                timeout=1200, env=environment())
        stderr = result.stderr.decode()
        assert result.returncode == 0 and "Traceback" not in stderr, f"{line}\n{stderr}"
        for target in re.findall(r"(?:-o|--output|--run-dir|>) (runs/\S+)", line):
            path = tmp_path / target
            assert path.exists() and (path.is_dir() or path.stat().st_size > 0), f"{line}: {target}"
    runs = tmp_path / "runs"
    assert (runs / "kjv-wc" / "_stats.json").exists() and (runs / "rails-we" / "_stats.json").exists()
    # the built-in model in the workers' processes: the statistics of the same run over the pipe
    assert (runs / "rails-we-in-process" / "_stats.json").read_text() == \
        (runs / "rails-we" / "_stats.json").read_text()
    assert "<html" in (runs / "kjv.wr.html").read_text()[:200].lower()
    header = (runs / "kjv.stats.csv").read_text().splitlines()[0].split(",")
    assert "prediction.mrr" in header and "entropy.mean" in header
    # docs/uncertainty.md shows lmc compare's output on the README's two word models
    shown = re.search(r"\(`(lmc compare [^`]*)`\):\n\n```text\n(.*?)```",
                      (REPO / "docs" / "uncertainty.md").read_text(), flags=re.S)
    result = subprocess.run(shlex.split(shown.group(1)), cwd=tmp_path, capture_output=True,
                            timeout=120, env=environment())
    assert result.stdout.decode() == shown.group(2)

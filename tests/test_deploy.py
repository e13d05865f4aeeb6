"""docker-compose.yml and deploy/Dockerfile checked against the package, without a docker daemon.

What can drift between the container setup and the code: a command a service runs (or that the
READMEs tell users to ``docker compose run``) that the package no longer has, or an option it no
longer takes (each is run with ``--help`` appended on this venv's console scripts: click rejects an
unknown option before it prints the help); a relative path in those commands that is not under a
mounted folder; the scheduler address; a port published on more than 127.0.0.1; the image's user,
working directory and PATH against what the compose file assumes.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from pathlib import PurePosixPath

import pytest
import yaml

from conftest import BIN, REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
BUILD_SCRIPT = REPO / "deploy" / "build-image.sh"
CI_SCRIPT = REPO / "deploy" / "ci-docker.sh"
DOCS = [REPO / "README.md", REPO / "deploy" / "README.md", COMPOSE_FILE]
README_SECTION = "Run on a local cluster with docker-compose"


# --- helpers ----------------------------------------------------------------------------------

def substitute(value):
    """Compose's variable substitution with every variable unset: ``${X:-default}`` -> default."""
    if isinstance(value, str):
        def one(match):
            body = match.group(1) or match.group(2)
            for sep in (":-", "-"):
                if sep in body:
                    return body.split(sep, 1)[1]
            return ""
        return re.sub(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", one, value)
    if isinstance(value, list):
        return [substitute(v) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v) for k, v in value.items()}
    return value


def argv(value) -> list[str]:
    """A compose ``command``/``entrypoint`` (list or shell-style string) as an argv list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else shlex.split(value)


def option_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def documented_compose_runs(services: dict) -> list[tuple[str, str, list[str]]]:
    """Every ``docker compose run`` / ``docker-compose run`` line of the READMEs and the compose
    file's comments: (where, service, the argv the container runs)."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        if doc.suffix in (".yml", ".yaml"):
            text = "\n".join(re.sub(r"^\s*#", "", line) for line in text.splitlines())
        text = re.sub(r"\\\n\s*", " ", text)   # shell line continuations
        for line in text.splitlines():
            match = re.search(r"docker(?: |-)compose\s+((?:-\S+\s+)*)run\s+(.*)", line)
            if not match:
                continue
            where = f"{doc.relative_to(REPO)}: {line.strip()}"
            command = match.group(2).split("`")[0].split(" #")[0]
            words = shlex.split(command)
            entrypoint = None
            while words and words[0].startswith("-"):
                option = words.pop(0)
                if option == "--entrypoint":
                    entrypoint = [words.pop(0)]
                elif option in ("-e", "--env", "-u", "--user", "-w", "--workdir", "-v",
                                "--volume", "--name", "-p", "--publish", "-l", "--label"):
                    words.pop(0)
            assert words, where
            service = words.pop(0)
            assert service in services, f"{where}: no service {service}"
            if entrypoint is None:
                entrypoint = argv(services[service].get("entrypoint"))
            if not words:
                words = argv(services[service].get("command"))
            found.append((where, service, entrypoint + words))
    return found


def run_help(command: list[str]) -> subprocess.CompletedProcess:
    """``command --help`` with this venv's console scripts first on PATH."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    program = shutil.which(command[0], path=env["PATH"])
    assert program, f"{command[0]} is not installed in {BIN}"
    return subprocess.run([program, *command[1:], "--help"], capture_output=True, text=True,
                          env=env, timeout=120)


def dockerfile_instructions() -> list[tuple[str, str]]:
    lines = []
    for line in re.sub(r"\\\n", " ", DOCKERFILE.read_text()).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            lines.append((keyword.upper(), rest.strip()))
    return lines


def dockerignore_excludes(path: str) -> bool:
    """Whether .dockerignore keeps PATH (relative, posix) out of the build context."""
    rules = [r.strip() for r in DOCKERIGNORE.read_text().splitlines()
             if r.strip() and not r.strip().startswith("#")]
    excluded = False
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        pattern = pattern.strip("/")
        for candidate in candidates:
            if fnmatch.fnmatchcase(candidate, pattern) or (
                    pattern.startswith("**/") and fnmatch.fnmatchcase(candidate.split("/")[-1],
                                                                      pattern[3:])):
                excluded = not negate
                break
    return excluded


# --- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict:
    return substitute(yaml.safe_load(COMPOSE_FILE.read_text()))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def service_argv(service: dict) -> list[str]:
    return argv(service.get("entrypoint")) + argv(service.get("command"))


# --- the compose file -----------------------------------------------------------------------

def test_services_and_image(services):
    assert {"scheduler", "worker", "lmc-dist"} <= set(services)
    image = services["scheduler"]["image"]
    build_default = re.search(r"image=\$\{LMC_IMAGE:-([^}]+)\}", BUILD_SCRIPT.read_text()).group(1)
    for name, service in services.items():
        assert service["image"] == image == build_default, name
        build = service["build"]
        assert build["context"] == "." and (REPO / build["dockerfile"]) == DOCKERFILE, name
        assert build["args"]["BASE_IMAGE"] == "python:3.11-slim", name
    assert service_argv(services["scheduler"])[:2] == ["dask", "scheduler"]
    assert service_argv(services["worker"])[:2] == ["dask", "worker"]
    assert argv(services["lmc-dist"]["entrypoint"]) == ["lmc-dist"]


@pytest.mark.parametrize("name", ["scheduler", "worker", "lmc-dist"])
def test_service_commands_exist_with_their_options(services, name):
    command = service_argv(services[name])
    if command[-1] == "--help":
        command = command[:-1]
    result = run_help(command)
    assert result.returncode == 0, f"{name}: {shlex.join(command)} --help:\n{result.stderr}"
    assert "Usage" in result.stdout


def test_worker_scales_with_one_thread_and_a_healthcheck(services):
    worker = services["worker"]
    command = service_argv(worker)
    assert option_value(command, "--nthreads") == "1"
    # --scale worker=N: nothing that names one container or binds one host port.
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    assert worker["depends_on"]["scheduler"]["condition"] == "service_healthy"
    for name in ("scheduler", "worker"):
        service = services[name]
        test = " ".join(service["healthcheck"]["test"])
        url = re.search(r"https?://(?:localhost|127\.0\.0\.1):(\d+)/", test)
        assert url, f"{name}'s healthcheck asks no local HTTP endpoint: {test}"
        dashboard = option_value(service_argv(service), "--dashboard-address")
        assert dashboard and port_of(dashboard) == int(url.group(1)), name


def test_scheduler_address_matches(services):
    scheduler = service_argv(services["scheduler"])
    port = int(option_value(scheduler, "--port") or 8786)
    expected = f"tcp://scheduler:{port}"
    worker = service_argv(services["worker"])
    assert worker[2] == expected, worker
    runs = documented_compose_runs(services)
    with_scheduler = [(where, args) for where, _, args in runs if "--scheduler" in args]
    assert with_scheduler, "no documented `docker compose run ... --scheduler` command"
    for where, args in with_scheduler:
        assert option_value(args, "--scheduler") == expected, where


def test_published_ports_are_bound_to_localhost(compose, services):
    published = 0
    for name, service in services.items():
        assert service.get("network_mode") != "host", name
        for port in service.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:
                parts = str(port).split(":")
                assert len(parts) == 3 and parts[0] == "127.0.0.1", (name, port)
            published += 1
    assert published >= 1   # the dashboard
    scheduler_ports = [str(p).split(":")[-1] for p in services["scheduler"]["ports"]]
    dashboard = option_value(service_argv(services["scheduler"]), "--dashboard-address")
    assert str(port_of(dashboard)) in scheduler_ports


def test_volumes_are_the_same_paths_in_every_container(services):
    expected = None
    for name, service in services.items():
        workdir = PurePosixPath(service["working_dir"])
        mounts = {}
        for volume in service["volumes"]:
            source, target = volume.split(":")[:2]
            assert source.startswith("./"), (name, volume)
            # ./data on the host is WORKDIR/data in the container: relative paths agree.
            assert PurePosixPath(target) == workdir / source[2:], (name, volume)
            mounts[source[2:]] = target
        assert {"data", "runs"} <= set(mounts), name
        assert expected in (None, (workdir, mounts)), f"{name} mounts differ from the others"
        expected = (workdir, mounts)


def test_documented_runs_exist_and_use_mounted_paths(services):
    runs = documented_compose_runs(services)
    wheres = " ".join(where for where, _, _ in runs)
    for doc in DOCS:
        assert str(doc.relative_to(REPO)) + ":" in wheres, f"{doc} documents no compose run"
    assert any(command[:2] == ["lmc-dist", "run"] for _, _, command in runs)
    for where, service, command in runs:
        spec = services[service]
        workdir = PurePosixPath(spec["working_dir"])
        targets = [PurePosixPath(v.split(":")[1]) for v in spec["volumes"]]
        if command[-1] == "--help":
            command = command[:-1]
        result = run_help(command)
        assert result.returncode == 0, f"{where}: {shlex.join(command)} --help:\n{result.stderr}"
        # Relative paths in the command (and in a predictor's command line) must lie in a mount.
        words = [w for arg in command for w in shlex.split(arg)]
        for path in (w for w in words if re.match(r"^[\w.-]+/[\w./-]*$", w)):
            inside = workdir / path
            assert any(inside.is_relative_to(t) for t in targets), f"{where}: {path} is not mounted"
            if path.startswith("data/"):
                assert (REPO / path).exists(), f"{where}: {path} does not exist in the repository"


def test_compose_config_is_valid():
    """The compose tool's own validation, where one is installed (no daemon needed)."""
    for tool in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(tool[0]) and subprocess.run(
                [*tool, "version"], capture_output=True).returncode == 0:
            break
    else:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    result = subprocess.run([*tool, "-f", str(COMPOSE_FILE), "--profile", "client", "config", "-q"],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr


# --- the Dockerfile -------------------------------------------------------------------------

def test_dockerfile_base_user_path(services):
    instructions = dockerfile_instructions()
    assert instructions[0] == ("ARG", "BASE_IMAGE=python:3.11-slim")
    stages = []
    for keyword, rest in instructions:
        if keyword == "FROM":
            words = rest.split()
            assert words[0] == "${BASE_IMAGE}" or words[0] in stages, \
                f"FROM {words[0]}: every stage is built from BASE_IMAGE or an earlier stage"
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append(words[2])
    final = instructions[max(i for i, (k, _) in enumerate(instructions) if k == "FROM"):]
    users = [rest for k, rest in final if k == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the image must not run as root"
    user = users[-1].split(":")[0]
    runs = " ".join(rest for k, rest in final if k == "RUN")
    useradd = re.search(r"useradd\b[^&;]*?--uid (\d+)[^&;]*?\s" + re.escape(user) + r"\b", runs)
    assert useradd, f"the final stage does not create the user {user} with a fixed uid"
    uid = useradd.group(1)
    for name, service in services.items():
        assert service["user"].split(":")[0] == uid, f"{name} runs as another uid than the image's"
    env = " ".join(rest for k, rest in final if k == "ENV")
    path = re.search(r"PATH=(\S+)", env).group(1)
    assert path.split(":")[0] == "/opt/lmc/bin"
    for command in ("lmc", "lmc-dist", "lmc-ngram", "dask"):
        assert re.search(rf"command -v [^&]*\b{re.escape(command)}\b", runs), command
    workdirs = [rest for k, rest in final if k == "WORKDIR"]
    for name, service in services.items():
        assert service["working_dir"] == workdirs[-1], name


def test_build_context_has_what_the_dockerfile_copies():
    for kept in ("pyproject.toml", "README.md", "lmchallenge/cli.py", "lmc_dist/cli.py",
                 "deploy/image-requirements.txt", "deploy/build/wheels/x.whl"):
        assert not dockerignore_excludes(kept), kept
    for left_out in (".git/HEAD", ".venv/bin/python", "data/kjv/train.txt.gz", "runs/x",
                     "tests/test_deploy.py", "lmchallenge/__pycache__/cli.cpython-311.pyc"):
        assert dockerignore_excludes(left_out), left_out
    copies = [rest.split() for k, rest in dockerfile_instructions() if k == "COPY"]
    for words in copies:
        if words[0].startswith("--from"):
            continue
        for source in words[:-1]:
            if source != "." and "[" not in source:
                assert (REPO / source).exists() and not dockerignore_excludes(source), source


def test_scripts_are_executable_shell():
    for script in (BUILD_SCRIPT, CI_SCRIPT):
        assert os.access(script, os.X_OK), f"{script} is not executable"
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


def test_readme_has_the_compose_section():
    text = (REPO / "README.md").read_text()
    match = re.search(rf"^## {re.escape(README_SECTION)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no section '{README_SECTION}'"
    section = match.group(1)
    for needed in ("build-image.sh", "up -d --scale worker=2", "run --rm lmc-dist run",
                   "read_parquet", "down"):
        assert needed in section, needed

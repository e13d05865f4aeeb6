#!/usr/bin/env bash
# CI's docker step (.ci/run calls it after the default and slow suites):
#
#   deploy/ci-docker.sh
#
# Runs the tests marked `docker` (tests/test_docker.py): they build the image with
# deploy/build-image.sh (the base image lmc-base:bookworm, the wheels in deploy/build/ and Docker's
# layer cache are reused from earlier runs; from nothing it takes ~5 minutes), bring up the
# docker-compose cluster (scheduler + 2 workers), run the README's main job on it, compare it with
# `lmc run`, kill a worker in the middle of a second run, and tear everything down.
#
# Exits 0 with the reason printed when docker cannot be used here (no docker command, `docker info`
# fails, no compose); otherwise exits with pytest's status (non-zero when a docker test fails or
# none ran).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)

skip() { echo "== docker tests skipped: $*"; exit 0; }

command -v docker >/dev/null 2>&1 || skip "no docker command on PATH"
if ! info=$(docker info 2>&1 >/dev/null); then
  skip "\`docker info\` failed: $(printf '%s' "$info" | tail -n 3 | tr '\n' ' ')"
fi
if docker compose version >/dev/null 2>&1; then
  compose="docker compose"
elif command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; then
  compose="docker-compose"
else
  skip "neither \`docker compose\` nor \`docker-compose\` works"
fi
echo "== docker: $(docker version --format 'engine {{.Server.Version}}' 2>/dev/null || echo '?'), $($compose version 2>/dev/null | head -n 1)"

# The base image is made with debootstrap when it is not cached yet.
base=${LMC_BASE_IMAGE:-lmc-base:bookworm}
if ! docker image inspect "$base" >/dev/null 2>&1 && ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing debootstrap (to make $base)"
    t=$(date +%s)
    if ! out=$({ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } 2>&1); then
      printf '%s\n' "$out" | tail -n 20 >&2
      echo "== docker tests: installing debootstrap failed" >&2
      exit 1
    fi
    echo "== debootstrap installed in $(( $(date +%s) - t )) s"
  else
    echo "== docker tests: $base is missing and debootstrap is not installed (apt-get install debootstrap)" >&2
    exit 1
  fi
fi

# The compose project of the test cluster (tests/test_docker.py reads it). Whatever happens to the
# tests (a failure, pytest killed), its containers and network are removed on exit, and any that
# the tests' own teardown left behind make this step fail.
export LMC_COMPOSE_PROJECT=${LMC_COMPOSE_PROJECT:-lmcci$$}
leftovers() {
  docker ps -aq --filter "label=com.docker.compose.project=$LMC_COMPOSE_PROJECT"
  docker network ls -q --filter "label=com.docker.compose.project=$LMC_COMPOSE_PROJECT"
}
cleanup() {
  local containers networks
  containers=$(docker ps -aq --filter "label=com.docker.compose.project=$LMC_COMPOSE_PROJECT")
  [ -z "$containers" ] || docker rm -f $containers >/dev/null 2>&1 || true
  networks=$(docker network ls -q --filter "label=com.docker.compose.project=$LMC_COMPOSE_PROJECT")
  [ -z "$networks" ] || docker network rm $networks >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

python=${PYTHON:-.venv/bin/python}
set +e
# -s: the tests' progress lines (build, cluster up, each run, with timings) as they happen.
"$python" -m pytest -n 0 -m docker -v -s -rs -p no:cacheprovider tests/test_docker.py
rc=$?
set -e
left=$(leftovers)
if [ -n "$left" ]; then
  echo "== docker tests left containers/networks of $LMC_COMPOSE_PROJECT behind: $(echo $left | tr '\n' ' ')" >&2
  [ $rc -ne 0 ] || rc=1
fi
echo "== docker tests took $(( $(date +%s) - start )) s (pytest exit status $rc)"
# 5: no test ran, which here is a failure too (the docker tests must exist and run).
exit $rc

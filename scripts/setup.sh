#!/usr/bin/env bash
# Create (or reuse) this clone's virtual environment, `.venv`, and install irforge into it.
#
# Each clone has its own environment, so two clones on one machine never run each other's
# code. A second clone's setup is still fast: uv (https://docs.astral.sh/uv/) installs from
# its global package cache, hard-linking files instead of downloading or copying them.
# `.venv` is rebuilt when its key changes (the lock file constraints.txt, the dependency
# lists of pyproject.toml, this script, the Python, the clone's path); otherwise only the
# project itself is reinstalled (editable, seconds).
#   IRFORGE_CACHE             uv itself and the llama-cpp-python wheel (default ~/.cache/irforge)
#   UV_CACHE_DIR              uv's package cache (default ~/.cache/uv)
#   IRFORGE_COMPILE_BYTECODE  0: leave the .pyc files to the first import (saves ~1 min)
set -euo pipefail
cd "$(dirname "$0")/.."
python=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)')
cache=${IRFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irforge}
uv_version=0.13.9
export UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
mkdir -p "$cache"
# One setup at a time builds the shared tools (uv, the llama wheel) of this machine.
exec 9>"$cache/.setup.lock"
flock 9

# uv, pinned, in a small venv of its own, bootstrapped with the machine's pip.
tools="$cache/uv-$uv_version"
uv="$tools/bin/uv"
if ! "$uv" --version >/dev/null 2>&1; then
  echo "setup: installing uv $uv_version into $tools (once per machine)" >&2
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/python" -m pip install -q "uv==$uv_version" "pip>=24" 2>&1 | { grep -v "^WARNING: Location" >&2 || true; }
fi

deps() {
  "$python" - <<'PY'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
print("\n".join(p["dependencies"] + extras["local-llm"] + extras["dev"]))
PY
}

# uv does not read pip's configuration: pass on the wheel folders it names (find-links), so
# the CPU build of torch that lies on this machine's disk is the one installed, as with pip
# (other torch builds are several GB of CUDA wheels).
find_links=()
for dir in $("$python" -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u); do
  if [ -d "$dir" ]; then find_links+=(--find-links "$dir"); fi
done

# llama-cpp-python has no wheel on PyPI: build one once (minutes) into a wheel folder outside
# the clone, with the flags that avoid the default build's segfault in the AMX path.
wheels="$cache/wheels"
llama=$(grep -i '^llama-cpp-python==' constraints.txt | cut -d= -f3)
if ! ls "$wheels"/llama_cpp_python-"$llama"-*.whl >/dev/null 2>&1; then
  echo "setup: building llama-cpp-python $llama into $wheels (once; several minutes)" >&2
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    "$tools/bin/python" -m pip wheel -q --no-deps -w "$wheels" "llama-cpp-python==$llama" 2>&1 \
    | { grep -v "^WARNING: Location" >&2 || true; }
fi
flock -u 9

key=$( { echo "$uv_version $python"; "$python" -VV; pwd; cat constraints.txt scripts/setup.sh; deps; } \
  | sha256sum | cut -c1-16)
stamp=.venv/.irforge-setup
start=$SECONDS
if [ -L .venv ] || [ "$(cat "$stamp" 2>/dev/null)" != "$key" ]; then
  echo "setup: creating $PWD/.venv" >&2
  rm -rf .venv  # a symlink (older setups kept the environment in the cache) or a stale one
  # --seed: pip, setuptools and wheel, as in a `python -m venv` environment.
  "$uv" venv -q --seed --python "$python" .venv
  # Dependencies only, pinned by the lock; the project itself is installed below. Files are
  # hard links into uv's cache; the bytecode is compiled here, as pip does (about a minute),
  # so that imports stay fast where PYTHONDONTWRITEBYTECODE is set.
  compile=(--compile-bytecode)
  if [ "${IRFORGE_COMPILE_BYTECODE:-1}" = 0 ]; then compile=(); fi
  "$uv" pip install -q "${compile[@]}" --python .venv/bin/python -c constraints.txt \
    "${find_links[@]}" --find-links "$wheels" -r <(deps)
  echo "$key" >"$stamp"
  echo "setup: created .venv in $((SECONDS - start)) s" >&2
fi
# Editable install of this clone (no dependency resolution: seconds).
"$uv" pip install -q --python .venv/bin/python --no-deps --no-build-isolation --reinstall-package irforge -e .
echo "setup: ready ($PWD/.venv)" >&2

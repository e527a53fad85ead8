#!/usr/bin/env bash
# Makes (or brings up to date) the Python environment of Tandem's tests and
# benchmarks: a virtual environment of Debian's /usr/bin/python3 (from
# python3-venv) with tools/python/requirements.txt installed from PyPI.
#
#   tools/python/make_venv.sh VENV_DIR
#
# Incremental: the environment records the hash of the requirements it was
# made from (VENV_DIR/.tandem-requirements) and is left alone while they
# have not changed; a changed or broken one is made again from scratch. It
# is made for the interpreter the Python stub is built for
# (python_stub/CMakeLists.txt), so `import tandem` works in it too.
# Prints what it did, how long it took and the disk it takes.
set -euo pipefail

venv=${1:?usage: tools/python/make_venv.sh VENV_DIR}
here=$(cd "$(dirname "$0")" && pwd)
requirements=$here/requirements.txt
stamp=$venv/.tandem-requirements
want=$(sha256sum "$requirements" | cut -d' ' -f1)

# Whether VENV_DIR is an environment made from these requirements, whose
# interpreter still runs and imports what they name.
healthy() {
  [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]] &&
    "$venv/bin/python" -c 'import torch, transformers, safetensors, sentencepiece, tokenizers, numpy, jax' 2>/dev/null
}

if healthy; then
  echo "make_venv: $venv is up to date ($(du -sh "$venv" | cut -f1))"
  exit 0
fi
start=$SECONDS
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --progress-bar off -r "$requirements"
echo "$want" >"$stamp"
if ! healthy; then
  echo "make_venv: $venv was installed but does not import its packages; see pip's output above" >&2
  exit 1
fi
echo "make_venv: made $venv in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1)):" \
  "$("$venv/bin/python" -c 'import torch, transformers, jax, numpy; print(f"torch {torch.__version__}, transformers {transformers.__version__}, jax {jax.__version__}, numpy {numpy.__version__}")')"

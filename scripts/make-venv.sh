#!/usr/bin/env bash
# Create a virtualenv with the newest supported Python (>= 3.10) this machine has.
#   make-venv.sh DIR          the newest Python >= 3.10 found (Django 6.x needs 3.12; on 3.10 and
#                             3.11 pip resolves Django 5.2 LTS by itself, through Django's metadata)
#   make-venv.sh DIR 3.11     exactly that Python version, or fail (the smoke runs of `make test`)
# PYTHON=python3.12 (a name on PATH or a path) is tried first: `make package` checks the wheel on
# the oldest Python we support, and a user without one on PATH can point at theirs.
set -euo pipefail
venv=${1:-.venv}
want=${2:-}
[ -x "$venv/bin/python" ] && exit 0
if [ -n "$want" ]; then
  candidates="python$want"
  check="import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))"
else
  candidates="${PYTHON:-} python3.14 python3.13 python3.12 python3.11 python3.10 python3"
  check="import sys; sys.exit(sys.version_info < (3, 10))"
fi
for candidate in $candidates; do
  # pyenv's builds of that version (python3 stands for any), newest first; a pyenv shim of a
  # version that is not selected fails the check and the build itself is tried.
  version=${candidate##*python3}
  for python in $(command -v "$candidate" 2>/dev/null) \
      $(ls -d "$HOME"/.pyenv/versions/3${version:-.}*/bin/python3 2>/dev/null | sort -rV); do
    if "$python" -c "$check" 2>/dev/null; then
      if ! "$python" -m venv "$venv"; then
        # Debian and Ubuntu split venv and ensurepip out of python3: python3-venv (or python3.X-venv).
        echo "$python cannot create a virtualenv: install your distribution's python3-venv" >&2
        rm -rf "$venv"
        exit 1
      fi
      "$venv/bin/pip" install -q --upgrade pip
      echo "created $venv with $("$venv/bin/python" --version)"
      exit 0
    fi
  done
done
if [ -n "$want" ]; then
  echo "no Python $want found on PATH or in pyenv (pyenv install $want)" >&2
else
  echo "no Python >= 3.10 found: install one (your distribution's python3 and python3-venv, pyenv, uv," \
       "python.org) or name one: make example PYTHON=/path/to/python3.12" >&2
fi
exit 1

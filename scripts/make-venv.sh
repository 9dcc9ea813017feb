#!/usr/bin/env bash
# Create a virtualenv with the newest Python >= 3.12 this machine has (Django 6 needs 3.12).
# PYTHON=python3.12 (a name on PATH or a path) is tried first: `make package` checks the wheel on
# the oldest Python we support, and a user without one on PATH can point at theirs.
set -euo pipefail
venv=${1:-.venv}
[ -x "$venv/bin/python" ] && exit 0
for candidate in ${PYTHON:-} python3.13 python3.12 python3; do
  # pyenv's builds of that version (python3 stands for any 3.12+), newest first.
  version=${candidate##*python3}
  for python in $(command -v "$candidate" 2>/dev/null) \
      $(ls -d "$HOME"/.pyenv/versions/3${version:-.1[23]}*/bin/python3 2>/dev/null | sort -rV); do
    if "$python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      "$python" -m venv "$venv"
      "$venv/bin/pip" install -q --upgrade pip
      echo "created $venv with $("$venv/bin/python" --version)"
      exit 0
    fi
  done
done
echo "no Python >= 3.12 found: install one (your distribution's python3.12 package, pyenv, uv, python.org)" \
     "or name one: make example PYTHON=/path/to/python3.12" >&2
exit 1

#!/usr/bin/env bash
# The package as a user gets it: build the wheel and the sdist, check them as PyPI would (twine),
# install the wheel into a clean virtualenv on the oldest Python we support, and run the example
# shop against that install: `manage.py check`, migrate on a fresh SQLite file, a short drain.
set -euo pipefail
py=${1:?usage: check-wheel.sh PYTHON_WITH_BUILD_AND_TWINE}
root=$(pwd)
dist=$root/dist
rm -rf "$dist" build
"$py" -m build --outdir "$dist" . >/dev/null
"$py" -m twine check --strict "$dist"/*
wheel=$(ls "$dist"/*.whl)
sdist_files=$(tar tzf "$dist"/*.tar.gz)
for wanted in LICENSE CHANGELOG.md README.md django_dbqueue/py.typed django_dbqueue/migrations/0001_initial.py; do
  grep -q "/$wanted\$" <<<"$sdist_files" || { echo "the sdist lacks $wanted" >&2; exit 1; }
done
grep -q "django_dbqueue/templates/admin/django_dbqueue/dashboard.html" <<<"$(unzip -l "$wheel")" \
  || { echo "the wheel lacks the admin templates" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHON=${PYTHON:-python3.12} bash scripts/make-venv.sh "$work/venv"
# The wheel and what the example's settings read DATABASE_URL with; no editable path, no repo.
"$work/venv/bin/pip" install -q "$wheel" dj-database-url
cp -r example_project "$work/example"
cd "$work/example"
export DATABASE_URL="sqlite:///$work/shop.sqlite3"
"$work/venv/bin/python" - <<'PY'
import sys, django, django_dbqueue
assert "site-packages" in django_dbqueue.__file__, django_dbqueue.__file__
print(f"django_dbqueue from {django_dbqueue.__file__} on Python {sys.version.split()[0]}, Django {django.get_version()}")
PY
"$work/venv/bin/python" -m django check --settings example_project.settings --fail-level WARNING
"$work/venv/bin/python" manage.py migrate -v0
"$work/venv/bin/python" manage.py shopdemo --orders 200 | tee "$work/drain.txt"
# Every order of the short drain ends SUCCEEDED (the demo's blocked customer gets every 1000th).
grep -q "Succeeded  200" "$work/drain.txt" || { echo "the example did not drain from the wheel" >&2; exit 1; }

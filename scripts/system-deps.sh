#!/usr/bin/env bash
# System packages: headers for mysqlclient, database servers if missing, Java + the MariaDB JDBC
# driver for the Spark pipeline, Chromium for the admin browser test, Spin for the protocol model
# (protocol/queue.pml). Idempotent and quiet.
set -euo pipefail
want=(libmariadb-dev pkg-config gcc mariadb-server postgresql default-jre-headless libmariadb-java chromium chromium-driver faketime spin)
missing=()
for pkg in "${want[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# A JRE from elsewhere (e.g. java 17 on PATH) is enough for Spark.
if command -v java >/dev/null 2>&1; then
  missing=("${missing[@]/default-jre-headless}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing system packages (run as root): ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

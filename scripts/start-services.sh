#!/usr/bin/env bash
# Start the local MariaDB and PostgreSQL if they are down, and wait until they answer.
set -uo pipefail
if ! mysqladmin -uroot -h127.0.0.1 ping >/dev/null 2>&1; then
  echo "starting MariaDB"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
  for _ in $(seq 60); do mysqladmin -uroot -h127.0.0.1 ping >/dev/null 2>&1 && break; sleep 1; done
fi
mysqladmin -uroot -h127.0.0.1 ping >/dev/null || { echo "MariaDB is not reachable on 127.0.0.1:3306" >&2; exit 1; }
if ! pg_isready -h 127.0.0.1 -q 2>/dev/null; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  for _ in $(seq 60); do pg_isready -h 127.0.0.1 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -q || { echo "PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }

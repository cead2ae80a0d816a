#!/bin/sh
# Runs the load benchmark (go run ./test/bench), first installing what it
# drives from Debian when missing: wrk, nginx, redis-server, postgresql (its
# rows run initdb and postgres themselves) and taskset (from util-linux).
# Arguments go to the benchmark: run.sh -quick, run.sh -only postgres.
# Hookaido's rows run when HOOKAIDO_BIN names its binary or HOOKAIDO_SRC
# its source (built there with go build ./cmd/hookaido); nothing installs it.
set -eu
cd "$(dirname "$0")/../.."
missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$missing postgresql"
command -v taskset >/dev/null 2>&1 || missing="$missing util-linux"
if [ -n "$missing" ]; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "installing:$missing" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >&2
fi
# nginx lives in /usr/sbin, which is not on every user's PATH.
PATH="$PATH:/usr/sbin:/sbin"
export PATH
exec go run ./test/bench "$@"

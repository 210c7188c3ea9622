#!/bin/sh
# Before removing tide (not before an upgrade: the running services are left
# to the operator, docs/operating.md): stop and disable its services; a
# running head drains. dpkg passes "remove"; rpm passes 0 when the last
# version goes.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		for u in tide-head tide-worker; do
			systemctl disable --now "$u.service" >/dev/null 2>&1 || true
		done
	fi
	;;
esac
exit 0

#!/bin/sh
# Before removing tide: stop its services (a running head drains).
set -e
if [ -d /run/systemd/system ]; then
	for u in tide-head tide-worker; do
		systemctl disable --now "$u.service" >/dev/null 2>&1 || true
	done
fi
exit 0

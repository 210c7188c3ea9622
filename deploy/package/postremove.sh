#!/bin/sh
# After removing tide. On purge (Debian) the tokens the package made and the
# tide user go too; the state under /var/lib/tide stays (a head's database
# is not removed with a package).
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
	rm -f /etc/tide/admin-token /etc/tide/join-token
	rmdir /etc/tide 2>/dev/null || true
	if getent passwd tide >/dev/null; then
		userdel tide >/dev/null 2>&1 || true
	fi
	if getent group tide >/dev/null; then
		groupdel tide >/dev/null 2>&1 || true
	fi
fi
exit 0

#!/bin/sh
# After installing tide: the tide system user, and tokens for the units
# (LoadCredential reads /etc/tide/admin-token and /etc/tide/join-token), made
# once and never overwritten. The services are not started: see
# docs/operating.md.
set -e
if ! getent group tide >/dev/null; then
	groupadd --system tide
fi
if ! getent passwd tide >/dev/null; then
	useradd --system --gid tide --home-dir /var/lib/tide --no-create-home \
		--shell /usr/sbin/nologin --comment "tide head and worker" tide
fi
umask 077
for t in admin-token join-token; do
	if [ ! -e /etc/tide/$t ]; then
		# 24 random bytes, hex: 48 characters.
		od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >/etc/tide/$t
		echo >>/etc/tide/$t
		chmod 0600 /etc/tide/$t
	fi
done
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0

#!/usr/bin/env bash
# make test's first step. A machine has one real node: the kubelet serves
# device plugins at /var/lib/kubelet/device-plugins/kubelet.sock whatever
# its --root-dir. While make demo's cluster runs, its real node holds it,
# and make node-test cannot start its own; say so now, not 40 minutes in.
set -euo pipefail
root=/var/lib/kubelet
sock=$root/device-plugins/kubelet.sock
# A listening socket at that path (/proc/net/unix lists them), and the
# marker the demo's real node leaves there.
if grep -q " $sock\$" /proc/net/unix 2>/dev/null && grep -q '"detached":true' "$root/.gpushare-real-node" 2>/dev/null; then
	echo "make test: the demo's cluster is running, and its real node holds this machine's one kubelet socket ($sock)," \
		"which make node-test needs. Stop the demo with 'make demo-down' (the cluster goes; make demo starts it again in" \
		"under a minute), then run make test." >&2
	exit 1
fi

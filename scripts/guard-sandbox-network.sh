#!/usr/bin/env bash
# Keep sandboxes on the allowlist network (CELLMATE_NETWORK=allowlist) to the egress proxy's
# port on the host. The network is internal (the engine routes nothing out of it), but its
# gateway is the host itself, where every service listening on all addresses would answer;
# these rules let packets that arrive on the sandbox bridges reach only the proxy's port.
#
#   guard-sandbox-network.sh add|remove|check [PORT] [INTERFACES]
#
# PORT: the proxy's port (default 3128, CELLMATE_NETWORK_PROXY_PORT). INTERFACES: an
# iptables interface name; the default `cellmate-+` is every sandbox bridge of every instance
# (each is named cellmate-<6 hex>, see executor/egress.py). Runs as root; idempotent.
set -euo pipefail

action=${1:-add}
port=${2:-3128}
interfaces=${3:-cellmate-+}
chain="CM-${interfaces//+/ALL}"
chain=${chain:0:28}

case "$port" in ''|*[!0-9]*) echo "[cellmate] the port must be a number" >&2; exit 2;; esac

rules() {
  local tool=$1
  case "$action" in
    add)
      "$tool" -w -N "$chain" 2>/dev/null || "$tool" -w -F "$chain"
      if [ "$tool" = iptables ]; then
        "$tool" -w -A "$chain" -p tcp --dport "$port" -j RETURN
      fi
      # Everything else that a sandbox sends to the host: other ports, UDP, ICMP, and all
      # of IPv6 (the network has none; a link-local address must not reach the host either).
      "$tool" -w -A "$chain" -j DROP
      "$tool" -w -C INPUT -i "$interfaces" -j "$chain" 2>/dev/null \
        || "$tool" -w -I INPUT 1 -i "$interfaces" -j "$chain"
      ;;
    remove)
      while "$tool" -w -D INPUT -i "$interfaces" -j "$chain" 2>/dev/null; do :; done
      "$tool" -w -F "$chain" 2>/dev/null || true
      "$tool" -w -X "$chain" 2>/dev/null || true
      ;;
    check)
      "$tool" -w -C INPUT -i "$interfaces" -j "$chain"
      ;;
    *)
      echo "usage: $0 add|remove|check [PORT] [INTERFACES]" >&2
      exit 2
      ;;
  esac
}

rules iptables
if command -v ip6tables >/dev/null 2>&1; then
  rules ip6tables
fi
if [ "$action" = add ]; then
  echo "[cellmate] host rules: packets from the sandbox bridges ($interfaces) reach only port $port of this host (the egress proxy)" >&2
fi

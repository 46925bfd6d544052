#!/bin/sh
# Entry point of the compose's queue-manager hosts (qm-a, qm-b) and its exporter.
# Idempotent first start:
#   qm-a (MIQM_ROLE=create): crtmqm on the shared export once (crtmqm itself refuses a
#        second creation: AMQ8110 when the data directory is not empty), or addmqinf if
#        the queue manager exists there but not yet in this host's mqs.ini;
#   qm-b (MIQM_ROLE=add):    addmqinf once the queue manager exists on the export;
# then `strmqm -x --foreground`: active or standby, logs on stdout, SIGTERM = endmqm -i.
#   exporter (MIQM_ROLE=exporter): addmqinf once the queue manager exists, then
#        `miqm exporter` on MIQM_EXPORTER_PORT (9465): what dspmq -x sees from the shared
#        files, also when no instance runs.
# Anything else as arguments runs that command instead (e.g. `dspmq -x`, or the app).
set -eu
# Started as root (the image's default), it runs everything as MIQM_USER (mqm): root is
# needed only to pin the NFS server's address in /etc/hosts and to hand /var/mqm over.
user="${MIQM_USER:-mqm}"
drop() {  # command...: run it as $user when we are root
    if [ "$(id -u)" = 0 ] && [ "$user" != root ]; then
        exec setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --init-groups \
            env HOME="${MIQM_DATA_ROOT:-/var/mqm}" "$@"
    fi
    exec "$@"
}
if [ "$#" -gt 0 ]; then drop "$@"; fi
qm="${MIQM_QMGR:-QM1}"
base="${MIQM_SHARED:-nfs4://nfs/export}"
role="${MIQM_ROLE:-add}"
conf="${MIQM_CONFIG_DIR:-/etc/miqm}"   # ini/ (crtmqm -ii) and mqsc/ (crtmqm -ic), if there
say() { echo "entrypoint: $*"; }
# pid 1 while waiting: a shell ignores SIGTERM unless it says otherwise (`compose stop`
# would wait for its timeout); once strmqm runs (exec) it handles SIGTERM itself
trap 'say "stopped while waiting"; exit 143' TERM INT

# The NFS server's name, when the shared path is an nfs4:// URL on a server named (not
# numbered): its address is pinned in /etc/hosts, see below
server=""
case "$base" in nfs4://*)
    server="$(python3 -c "import sys; from lockfs.nfs4 import parse_nfs4_url as p; \
print(p(sys.argv[1]).server)" "$base")"
    case "$server" in *[!0-9.]*) ;; *) server="" ;; esac ;;
esac
mark="# miqm-entrypoint"

# Root phase: wait for the NFSv4 server, pin its address, hand /var/mqm (and the pin) to
# $user; then the same script again as $user (MIQM_ENTRYPOINT_PHASE=user) runs the rest.
if [ -z "${MIQM_ENTRYPOINT_PHASE:-}" ]; then
    # the NFSv4 server answers (it may still be starting); a local path or mount needs
    # nothing
    case "$base" in nfs4://*)
        tries=0
        until python3 -c "import sys; from lockfs.nfs4probe import server_lease; \
from lockfs.nfs4 import parse_nfs4_url as p; u = p(sys.argv[1]); server_lease(u.server, u.port)" \
              "$base" 2>/dev/null; do
            tries=$((tries + 1)); [ "$tries" -lt 120 ] || { say "no NFSv4 server at $base"; exit 71; }
            sleep 1
        done ;;
    esac
    # Pin the server's address at the start, as a kernel mount resolves it once: the
    # userspace client opens a fresh NFSv4 connection for every lock attempt, and a DNS
    # hiccup of the container network (seen with podman's aardvark-dns while containers
    # start) would otherwise look like a failed filesystem (AMQ6119). The pin follows the
    # server when it moves (repin, below).
    if [ -n "$server" ] && ! grep -v "$mark\$" /etc/hosts 2>/dev/null \
            | grep -Eq "[[:space:]]$server([[:space:]]|\$)"; then
        addr="$(getent ahostsv4 "$server" | awk 'NR == 1 { print $1 }')"
        if [ -n "$addr" ] && { grep -v "$mark\$" /etc/hosts; echo "$addr $server $mark"; } \
                > /tmp/hosts.$$ 2>/dev/null && cat /tmp/hosts.$$ > /etc/hosts 2>/dev/null; then
            say "NFS server $server at $addr (pinned in /etc/hosts)"
        fi
        rm -f /tmp/hosts.$$
    fi
    # /var/mqm (this host's mqs.ini, run records, error log) belongs to $user, also on a
    # volume an older image (which ran as root) filled; every file the rest makes, here
    # and on the export, is $user's. The pin is $user's to move.
    if [ "$(id -u)" = 0 ] && [ "$user" != root ]; then
        root_dir="${MIQM_DATA_ROOT:-/var/mqm}"
        mkdir -p "$root_dir"
        find "$root_dir" \( ! -user "$user" -o ! -group "$(id -g "$user")" \) \
            -exec chown -h "$user:$(id -g "$user")" {} + 2>/dev/null || true
        if grep -q "$mark\$" /etc/hosts 2>/dev/null; then chown "$user" /etc/hosts || true; fi
        export MIQM_ENTRYPOINT_PHASE=user
        drop /bin/sh "$0"
    fi
fi

# Keep the pin right while the instance runs. A restarted nfs container gets another
# address (podman 4.3 does so even for `podman restart`): the standby, which outlives the
# server's restart and polls on (docs/ha.md), polled the old address for ever, and the
# queue manager was left without a standby. Every few seconds the network's DNS (not
# /etc/hosts) is asked; an answer that differs from the pin twice running moves it, no
# answer (the hiccup the pin is for) leaves it as it is.
repin() {
    last=""
    while sleep "${MIQM_REPIN_INTERVAL:-5}"; do
        addr="$(getent -s dns ahostsv4 "$server" 2>/dev/null | awk 'NR == 1 { print $1 }')"
        pinned="$(awk -v m="$mark" -v s="$server" \
            '$2 == s && substr($0, length($0) - length(m) + 1) == m { print $1; exit }' \
            /etc/hosts)"
        if [ -z "$addr" ] || [ "$addr" = "$pinned" ]; then last=""; continue; fi
        if [ "$addr" != "$last" ]; then last="$addr"; continue; fi
        tmp="$(mktemp)" || continue
        if { grep -v "$mark\$" /etc/hosts; echo "$addr $server $mark"; } > "$tmp" \
                && cat "$tmp" > /etc/hosts; then
            say "NFS server $server moved from ${pinned:-nowhere} to $addr (pin in /etc/hosts moved)"
        fi
        rm -f "$tmp"; last=""
    done
}
if [ -n "$server" ] && [ -w /etc/hosts ] && grep -q "$mark\$" /etc/hosts; then
    repin </dev/null &
fi

registered() { dspmqinf "$qm" >/dev/null 2>&1; }
add() {
    addmqinf -s QueueManager -v "Name=$qm" -v "Directory=$qm" -v "Prefix=$MIQM_DATA_ROOT" \
        -v "DataPath=$base/data/$qm"
}
if ! registered; then
    if [ "$role" = create ]; then
        set -- -md "$base/data" -ld "$base/log"
        if [ -d "$conf/ini" ]; then set -- "$@" -ii "$conf/ini"; fi
        if [ -d "$conf/mqsc" ]; then set -- "$@" -ic "$conf/mqsc"; fi
        # crtmqm leaves nothing behind when it fails, so a transient failure (the NFS
        # server's name not resolving yet while the network's DNS reloads) is retried
        tries=0
        until out="$(crtmqm "$@" "$qm" 2>&1)"; do
            if echo "$out" | grep -q AMQ8110; then break; fi
            tries=$((tries + 1))
            [ "$tries" -lt 10 ] || { echo "$out" >&2; exit 71; }
            say "crtmqm failed, trying again in 2s: $out"
            sleep 2
        done
        if echo "$out" | grep -q AMQ8110; then
            say "$qm already exists on $base: adding it to this host"; add
        else
            echo "$out"
        fi
    else
        tries=0
        until out="$(add 2>&1)"; do
            tries=$((tries + 1))
            [ "$tries" -lt 300 ] || { echo "$out" >&2; exit 71; }
            [ "$tries" -eq 1 ] && say "waiting for $qm to be created on $base"
            sleep 1
        done
        echo "$out"
        # first start of this host: join once host A's instance runs (crtmqm on A may
        # still be writing the queue manager's files when qm.ini appears). The exporter
        # serves at once: it reports whatever it finds, no instance at all included.
        tries=0
        until [ "$role" = exporter ] || dspmq -m "$qm" | grep -q 'STATUS(Running elsewhere)'; do
            tries=$((tries + 1)); [ "$tries" -lt 300 ] || break
            sleep 1
        done
    fi
fi
if [ "$role" = exporter ]; then
    exec miqm exporter -m "$qm" --port "${MIQM_EXPORTER_PORT:-9465}" \
        --bind "${MIQM_EXPORTER_BIND:-0.0.0.0}"
fi
exec strmqm -x --foreground "$qm"

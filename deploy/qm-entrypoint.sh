#!/bin/sh
# Entry point of the compose's queue-manager hosts (qm-a, qm-b). Idempotent first start:
#   qm-a (MIQM_ROLE=create): crtmqm on the shared export once (crtmqm itself refuses a
#        second creation: AMQ8110 when the data directory is not empty), or addmqinf if
#        the queue manager exists there but not yet in this host's mqs.ini;
#   qm-b (MIQM_ROLE=add):    addmqinf once the queue manager exists on the export;
# then `strmqm -x --foreground`: active or standby, logs on stdout, SIGTERM = endmqm -i.
# Anything else as arguments runs that command instead (e.g. `dspmq -x`, or the app).
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
qm="${MIQM_QMGR:-QM1}"
base="${MIQM_SHARED:-nfs4://nfs/export}"
role="${MIQM_ROLE:-add}"
conf="${MIQM_CONFIG_DIR:-/etc/miqm}"   # ini/ (crtmqm -ii) and mqsc/ (crtmqm -ic), if there
say() { echo "entrypoint: $*"; }
# pid 1 while waiting: a shell ignores SIGTERM unless it says otherwise (`compose stop`
# would wait for its timeout); once strmqm runs (exec) it handles SIGTERM itself
trap 'say "stopped while waiting"; exit 143' TERM INT

# the NFSv4 server answers (it may still be starting); a local path or mount needs nothing
case "$base" in nfs4://*)
    tries=0
    until python3 -c "import sys; from lockfs.nfs4probe import server_lease; \
from lockfs.nfs4 import parse_nfs4_url as p; u = p(sys.argv[1]); server_lease(u.server, u.port)" \
          "$base" 2>/dev/null; do
        tries=$((tries + 1)); [ "$tries" -lt 120 ] || { say "no NFSv4 server at $base"; exit 71; }
        sleep 1
    done
    # Resolve the server's name once per container start, as a kernel mount does: the
    # userspace client opens a fresh NFSv4 connection for every lock attempt, and a DNS
    # hiccup of the container network (seen with podman's aardvark-dns while containers
    # start) would otherwise look like a failed filesystem (AMQ6119). A restarted
    # container resolves it again.
    server="$(python3 -c "import sys; from lockfs.nfs4 import parse_nfs4_url as p; \
print(p(sys.argv[1]).server)" "$base")"
    case "$server" in *[!0-9.]*)
        mark="# miqm-entrypoint"
        if ! grep -v "$mark\$" /etc/hosts 2>/dev/null \
                | grep -Eq "[[:space:]]$server([[:space:]]|\$)"; then
            addr="$(getent ahostsv4 "$server" | awk 'NR == 1 { print $1 }')"
            if [ -n "$addr" ] && { grep -v "$mark\$" /etc/hosts; echo "$addr $server $mark"; } \
                    > /tmp/hosts.$$ 2>/dev/null && cat /tmp/hosts.$$ > /etc/hosts 2>/dev/null; then
                say "NFS server $server at $addr (pinned in /etc/hosts for this start)"
            fi
            rm -f /tmp/hosts.$$
        fi ;;
    esac ;;
esac

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
        # still be writing the queue manager's files when qm.ini appears)
        tries=0
        until dspmq -m "$qm" | grep -q 'STATUS(Running elsewhere)'; do
            tries=$((tries + 1)); [ "$tries" -lt 300 ] || break
            sleep 1
        done
    fi
fi
exec strmqm -x --foreground "$qm"

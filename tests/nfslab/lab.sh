#!/usr/bin/env bash
# An NFSv4 lab on one machine: a userspace NFSv4 server (nfs-ganesha) and two network
# namespaces, miqm-a and miqm-b, each a "host" whose link to the server can be cut.
#
#   lab.sh up DIR [--lease N]   start the server (export DIR/export as /export, lease N s,
#                               default 10) on 10.77.0.1 and the two namespaces
#   lab.sh cut a|b              take that namespace's link down (a partition: packets drop)
#   lab.sh heal a|b             bring it back up
#   lab.sh restart [--grace N]  the NFS server crashes and comes back: kill -9 ganesha,
#                               start it again (grace period N s, default 0: none); every
#                               client's state is gone with the old server instance
#   lab.sh status [DIR]         what is running
#   lab.sh down [DIR]           stop everything (idempotent; nothing left behind); with
#                               DIR, refuses when the running lab is another one
#
# Clients reach the server at nfs4://10.77.0.1/export/... from the host and from inside
# the namespaces (`ip netns exec miqm-a CMD`). Needs root, iproute2 and nfs-ganesha
# (`make install-system`). Only one lab runs at a time: the network names are fixed.
set -euo pipefail

BRIDGE=miqm-br0
SERVER_ADDR=10.77.0.1
PREFIX=24
NS_NAMES=(a b)
declare -A NS_ADDR=([a]=10.77.0.2 [b]=10.77.0.3)
STATE_FILE=/run/miqm-lab.dir
HERE="$(cd "$(dirname "$0")" && pwd)"
TEMPLATE="$HERE/ganesha.conf.in"
PLUGINS_DIR="${GANESHA_PLUGINS:-/usr/lib/x86_64-linux-gnu/ganesha}"

say() { echo "lab: $*"; }
run() { echo "+ $*"; "$@"; }
quiet() { "$@" >/dev/null 2>&1 || true; }
die() { echo "lab: error: $*" >&2; exit 1; }

usage() {
    awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
    exit 2
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root"; }

ns_of() {
    case "${1:-}" in
        a | b) echo "miqm-$1" ;;
        *) die "namespace must be a or b, not '${1:-}'" ;;
    esac
}

host_veth() { echo "miqm-$1-h"; }

pid_of() {  # the ganesha pid recorded under DIR, if that process is alive
    local pidfile="$1/ganesha.pid" pid
    [ -s "$pidfile" ] || return 1
    pid="$(cat "$pidfile")"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

cmd_up() {
    local dir="" lease=10
    while [ $# -gt 0 ]; do
        case "$1" in
            --lease) lease="${2:?--lease needs a value}"; shift 2 ;;
            --lease=*) lease="${1#--lease=}"; shift ;;
            -*) die "unknown option $1" ;;
            *) [ -z "$dir" ] || die "one DIR only"; dir="$1"; shift ;;
        esac
    done
    [ -n "$dir" ] || usage
    need_root
    [[ "$lease" =~ ^[0-9]+$ ]] && [ "$lease" -ge 1 ] && [ "$lease" -le 120 ] \
        || die "lease must be 1..120 seconds (ganesha's Lease_Lifetime), not '$lease'"
    command -v ganesha.nfsd >/dev/null || die "ganesha.nfsd missing (make install-system)"
    command -v ip >/dev/null || die "ip missing (apt-get install iproute2)"
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        die "a lab is already up ($BRIDGE exists); run: $0 down"
    fi
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    mkdir -p "$dir/export" "$dir/recovery"
    echo "$dir" >"$STATE_FILE"

    say "network: bridge $BRIDGE $SERVER_ADDR/$PREFIX, namespaces miqm-a miqm-b"
    run ip link add "$BRIDGE" type bridge
    run ip addr add "$SERVER_ADDR/$PREFIX" dev "$BRIDGE"
    run ip link set "$BRIDGE" up
    local n ns hv
    for n in "${NS_NAMES[@]}"; do
        ns="miqm-$n"
        hv="$(host_veth "$n")"
        run ip netns add "$ns"
        run ip link add "$hv" type veth peer name eth0 netns "$ns"
        run ip link set "$hv" master "$BRIDGE"
        run ip link set "$hv" up
        run ip -n "$ns" addr add "${NS_ADDR[$n]}/$PREFIX" dev eth0
        run ip -n "$ns" link set eth0 up
        run ip -n "$ns" link set lo up
    done

    say "server: ganesha.nfsd on $SERVER_ADDR:2049, export $dir/export as /export, lease ${lease}s"
    sed -e "s|@ADDR@|$SERVER_ADDR|g" -e "s|@LEASE@|$lease|g" -e "s|@DIR@|$dir|g" \
        -e "s|@PLUGINS@|$PLUGINS_DIR|g" "$TEMPLATE" >"$dir/ganesha.conf"
    start_server "$dir" "up: nfs4://$SERVER_ADDR/export"
}

start_server() {  # start_server DIR WHAT: ganesha from DIR/ganesha.conf, up within 10 s
    local dir="$1" what="$2" i
    rm -f "$dir/ganesha.pid"
    run ganesha.nfsd -f "$dir/ganesha.conf" -L "$dir/ganesha.log" -p "$dir/ganesha.pid" \
        -N NIV_EVENT
    # ganesha daemonizes; wait until it listens on the lab address.
    for i in $(seq 1 100); do
        if ss -Hltn "src $SERVER_ADDR and sport = :2049" 2>/dev/null | grep -q .; then
            say "$what (pid $(cat "$dir/ganesha.pid" 2>/dev/null))"
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$dir/ganesha.log" >&2 || true
    die "ganesha did not listen on $SERVER_ADDR:2049 within 10 s (log: $dir/ganesha.log)"
}

set_link() {  # set_link a|b up|down
    need_root
    local ns hv
    ns="$(ns_of "$1")"
    hv="$(host_veth "$1")"
    ip link show "$hv" >/dev/null 2>&1 || die "no lab link $hv (is the lab up?)"
    say "$ns: link $2"
    run ip link set "$hv" "$2"
}

kill_ganesha() {
    local dir="$1" pid i
    pid="$(pid_of "$dir")" || return 0
    say "stopping ganesha.nfsd (pid $pid)"
    run kill "$pid" || true
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        run kill -9 "$pid" || true
    fi
    rm -f "$dir/ganesha.pid"
}

cmd_down() {
    need_root
    local dir="${1:-}" recorded="" n
    [ -s "$STATE_FILE" ] && recorded="$(cat "$STATE_FILE")"
    if [ -n "$dir" ] && [ -d "$dir" ]; then
        dir="$(cd "$dir" && pwd)"
    fi
    if [ -n "$dir" ] && [ -n "$recorded" ] && [ "$dir" != "$recorded" ] \
        && pid_of "$recorded" >/dev/null; then
        die "the running lab is $recorded, not $dir: run '$0 down $recorded' (or '$0 down')"
    fi
    for d in "$dir" "$recorded"; do
        [ -n "$d" ] && [ -d "$d" ] && kill_ganesha "$d"
    done
    for n in "${NS_NAMES[@]}"; do
        if ip netns list 2>/dev/null | grep -qw "miqm-$n"; then
            run ip netns delete "miqm-$n"
        fi
        if ip link show "$(host_veth "$n")" >/dev/null 2>&1; then
            # the namespace's end going away takes this end with it, asynchronously:
            # a link already gone by now is not an error
            run ip link delete "$(host_veth "$n")" 2>/dev/null \
                || ! ip link show "$(host_veth "$n")" >/dev/null 2>&1 \
                || die "cannot delete $(host_veth "$n")"
        fi
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        run ip link delete "$BRIDGE"
    fi
    rm -f "$STATE_FILE"
    say "down"
}

cmd_restart() {
    need_root
    local grace=0 dir pid i
    while [ $# -gt 0 ]; do
        case "$1" in
            --grace) grace="${2:?--grace needs a value}"; shift 2 ;;
            --grace=*) grace="${1#--grace=}"; shift ;;
            *) die "unknown argument $1" ;;
        esac
    done
    [[ "$grace" =~ ^[0-9]+$ ]] && [ "$grace" -le 600 ] || die "grace must be 0..600 s"
    [ -s "$STATE_FILE" ] || die "no lab is up"
    dir="$(cat "$STATE_FILE")"
    pid="$(pid_of "$dir")" || die "ganesha is not running (dir $dir)"
    say "crash: kill -9 ganesha.nfsd (pid $pid)"
    kill -9 "$pid"
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    rm -f "$dir/ganesha.pid"
    if [ "$grace" -gt 0 ]; then
        sed -i -e "s|^\( *Grace_Period = \).*|\1$grace;|" \
            -e "s|^\( *Graceless = \).*|\1false;|" "$dir/ganesha.conf"
    else
        sed -i -e "s|^\( *Grace_Period = \).*|\10;|" \
            -e "s|^\( *Graceless = \).*|\1true;|" "$dir/ganesha.conf"
    fi
    say "server: starting again, grace period ${grace}s"
    start_server "$dir" "up again"
}

cmd_status() {
    local dir="${1:-}" pid n state
    [ -z "$dir" ] && [ -s "$STATE_FILE" ] && dir="$(cat "$STATE_FILE")"
    if [ -n "$dir" ] && pid="$(pid_of "$dir")"; then
        echo "server: ganesha.nfsd pid $pid, dir $dir, $(grep -o 'Lease_Lifetime = [0-9]*' \
            "$dir/ganesha.conf" 2>/dev/null || echo 'lease ?')"
    else
        echo "server: not running${dir:+ (dir $dir)}"
    fi
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        echo "bridge: $BRIDGE $SERVER_ADDR/$PREFIX"
    else
        echo "bridge: absent"
    fi
    for n in "${NS_NAMES[@]}"; do
        if ip link show "$(host_veth "$n")" >/dev/null 2>&1; then
            if ip -o link show "$(host_veth "$n")" | grep -q '<\([^>]*,\)\{0,1\}UP[,>]'; then
                state="connected"
            else
                state="cut"
            fi
            echo "miqm-$n: ${NS_ADDR[$n]} $state"
        else
            echo "miqm-$n: absent"
        fi
    done
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    cut) shift; set_link "${1:-}" down ;;
    heal) shift; set_link "${1:-}" up ;;
    restart) shift; cmd_restart "$@" ;;
    status) shift; cmd_status "$@" ;;
    *) usage ;;
esac

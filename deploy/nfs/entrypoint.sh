#!/bin/sh
# Start nfs-ganesha in the foreground with the lease from MIQM_NFS_LEASE (seconds).
set -eu
lease="${MIQM_NFS_LEASE:-10}"
case "$lease" in ''|*[!0-9]*) echo "nfs: MIQM_NFS_LEASE=$lease is not a whole number of seconds" >&2; exit 2 ;; esac
plugins="$(dirname "$(find /usr/lib -name 'libfsalvfs.so*' 2>/dev/null | head -n1)")"
[ -n "$plugins" ] || { echo "nfs: the VFS FSAL of nfs-ganesha is not installed" >&2; exit 2; }
sed -e "s#@LEASE@#$lease#" -e "s#@PLUGINS@#$plugins#" /etc/miqm-nfs/ganesha.conf.in \
    > /etc/miqm-nfs/ganesha.conf
mkdir -p /export /var/lib/nfs/ganesha /var/run/ganesha
# The queue managers run as MIQM_UID:MIQM_GID (mqm, 999) and the userspace NFSv4 client
# sends that uid: the export is theirs, and nobody else's (an export an older image
# filled as root is handed over too).
uid="${MIQM_UID:-999}"; gid="${MIQM_GID:-999}"
case "$uid$gid" in ''|*[!0-9]*) echo "nfs: MIQM_UID=$uid / MIQM_GID=$gid must be numbers" >&2; exit 2 ;; esac
find /export \( ! -user "$uid" -o ! -group "$gid" \) -exec chown -h "$uid:$gid" {} +
chmod 0750 /export
echo "nfs: NFSv4 export /export, lease ${lease}s"
exec ganesha.nfsd -F -f /etc/miqm-nfs/ganesha.conf -L /dev/stdout -N NIV_EVENT \
    -p /var/run/ganesha/ganesha.pid

"""amqmfsck: validate a directory (a mount or an ``nfs4://`` URL) for multi-instance use.

Layering: this package builds on :mod:`lockfs` only (plus :mod:`miqm.config` to read a
queue manager's timings for ``-m``); the console script lives in :mod:`fsck.cli`.

* :mod:`fsck.basic` - plain mode: POSIX locking, create/write/sync/rename/remove;
* :mod:`fsck.meet` - two processes meeting through the directory (``-w``, ``--lease``);
* :mod:`fsck.concurrent` - concurrent writes under locks and the latency profile (``-c``);
* :mod:`fsck.integrity` - the logger-style integrity test (``-f``, ``-a``, ``-i``);
* :mod:`fsck.mounts` - the mount audit of ``/proc/self/mountinfo``;
* :mod:`fsck.report` - results, their causes, and how they are printed.
"""

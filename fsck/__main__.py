"""``python -m fsck``: the same as the ``amqmfsck`` console script."""

from fsck.cli import entry

entry()

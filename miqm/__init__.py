"""miqm: a multi-instance high-availability queue manager over shared NFSv4 storage."""

__version__ = "0.1.0"

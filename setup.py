"""Build hook for the optional C parts of the store: I/O machinery only (the recovery log's
append buffer with its framing, checksums and GIL-free write+fdatasync, and the force
queue). Everything else is declared in pyproject.toml.
Without a compiler the install still succeeds and the store uses the pure-Python code
each part mirrors (logbuffer.py, log.py)."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wno-unused-parameter",
         "-Wno-missing-field-initializers", "-Wno-cast-function-type"]

CPARTS = "miqm/store/_cparts.h"  # helpers every C part shares
CRC = "miqm/store/_crc32c.h"

setup(
    ext_modules=[
        Extension("miqm.store._logbuffer", ["miqm/store/_logbuffer.c"],
                  depends=[CPARTS, CRC], extra_compile_args=FLAGS, optional=True),
        Extension("miqm.store._forcequeue", ["miqm/store/_forcequeue.c"],
                  extra_compile_args=FLAGS, optional=True),
    ]
)

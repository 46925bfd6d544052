"""Build hook for the optional C parts (the recovery log's append buffer and restart's
PUT redo); everything else is declared in pyproject.toml. Without a compiler the install
still succeeds and the store uses their pure-Python twins (miqm/store/logbuffer.py,
miqm/store/recovery.py)."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wno-unused-parameter",
         "-Wno-missing-field-initializers", "-Wno-cast-function-type"]

setup(
    ext_modules=[
        Extension("miqm.store._logbuffer", ["miqm/store/_logbuffer.c"],
                  extra_compile_args=FLAGS, optional=True),
        Extension("miqm.store._redo", ["miqm/store/_redo.c"],
                  extra_compile_args=FLAGS, optional=True),
    ]
)

"""Build hook for the optional C part (the recovery log's append buffer); everything else
is declared in pyproject.toml. Without a compiler the install still succeeds and the log
uses its pure-Python twin (miqm/store/logbuffer.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "miqm.store._logbuffer",
            ["miqm/store/_logbuffer.c"],
            extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                                "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                                "-Wno-cast-function-type"],
            optional=True,
        )
    ]
)

"""A quiet Spark session: loopback only, no UI, no console progress bar, Spark's own log
lines cut down to errors (the analysis prints its own stage lines instead)."""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

from miqm.errors import AnalysisError

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n%ex{short}
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"miqm-spark-log4j2-{os.getuid()}.properties")
    try:
        with open(path) as f:
            if f.read() == _LOG4J:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(_LOG4J)
    os.replace(tmp, path)
    return path


def spark_log_path() -> str:
    """The file Spark's own (JVM) output goes to."""
    return os.path.join(tempfile.gettempdir(), f"miqm-spark-{os.getuid()}.log")


def session(master: str | None = None, app: str = "miqm-analyze",
            shuffle_partitions: int | None = None, java_options: str = "") -> Any:
    """A SparkSession on ``master`` (default ``local[*]``), or the one already running.
    ``java_options``: more JVM options for the driver and executors (the tests pass
    ``-XX:TieredStopAtLevel=1``: on small histories most of Spark's CPU goes to the JIT
    compiling Spark itself, and the quick compiler alone halves it)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or
                          __import__("sys").executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise AnalysisError("pyspark is not installed: pip install 'miqm[analysis]' (or "
                            "pip install pyspark; Java 17 must be on PATH)") from None
    master = master or "local[*]"
    java_opts = f"-Dlog4j2.configurationFile=file:{_log4j_file()} {java_options}".strip()
    if shuffle_partitions is None:
        cores = os.cpu_count() or 2
        shuffle_partitions = max(32, 4 * cores)  # adaptive execution merges small ones
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.executor.extraJavaOptions", java_opts)
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.adaptive.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.ansi.enabled", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.memory", os.environ.get("MIQM_SPARK_DRIVER_MEMORY", "4g"))
               .config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false"))
    log = spark_log_path()
    saved = os.dup(2)
    try:
        # the JVM inherits this stderr for good: its start-up lines and any later log
        # output go to the file, not to the user's terminal
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spark = builder.getOrCreate()
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AnalysisError(f"could not start Spark on {master}: {first} (is Java 17 on "
                            f"PATH and the master URL right? Spark's log: {log})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    return spark

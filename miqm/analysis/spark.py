"""A quiet Spark session: loopback only, no UI, no console progress bar, Spark's own log
lines cut down to errors (the analysis prints its own stage lines instead)."""

from __future__ import annotations

import os
import re
import shutil
import socket
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


#: the master URLs Spark takes (anything else makes its JVM exit before it says why)
_MASTER_URL = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|local-cluster\[[0-9, ]+\]"
                         r"|spark://[^\s/]+|yarn|k8s://\S+")
MASTER_FORMS = ("local[*], local[N], spark://HOST:PORT (a standalone cluster), yarn or "
                "k8s://https://HOST:PORT")


def check_master(master: str, timeout: float = 3.0) -> None:
    """One clear line, before a JVM starts, for a master URL Spark would not take, or a
    standalone master (``spark://HOST:PORT[,HOST:PORT...]``) none of whose hosts accepts
    a connection: Spark itself retries for about a minute and a half and then says only
    that a SparkSession could not be made."""
    if not _MASTER_URL.fullmatch(master):
        raise AnalysisError(f"--master {master!r} is not a Spark master URL: use "
                            f"{MASTER_FORMS}")
    if not master.startswith("spark://"):
        return
    why = ""
    for hostport in master[len("spark://"):].split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise AnalysisError(f"--master {master!r}: {hostport!r} is not HOST:PORT (a "
                                "standalone master listens on 7077 by default)")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
    raise AnalysisError(f"the Spark master {master} does not answer ({why}): start it "
                        "(docs/analysis.md, Spark) or name another with --master; without "
                        "--master the analysis runs here (local[*])")


def check_java() -> None:
    """One clear line when there is no Java for Spark's driver: PySpark finds it as
    ``$JAVA_HOME/bin/java`` or on PATH, and without it said only "Java gateway process
    exited before sending its port number"."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if os.access(os.path.join(home, "bin", "java"), os.X_OK):
            return
        raise AnalysisError(f"JAVA_HOME is {home}, which has no bin/java: point it at a "
                            "Java 17 installation, or unset it to use the java on PATH")
    if shutil.which("java") is None:
        raise AnalysisError("Spark needs Java 17 and there is no java on PATH (nor "
                            "JAVA_HOME): install it (e.g. apt-get install "
                            "openjdk-17-jre-headless) or set JAVA_HOME")


def _reason(exc: BaseException) -> str:
    """The line of a Py4J/Spark error that says what went wrong (its first line is only
    'An error occurred while calling ...')."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if "Exception: " in ln and not ln.startswith("at "):
            return ln.split("Exception: ", 1)[1]
    return lines[0] if lines else type(exc).__name__


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
    check_master(master)
    check_java()
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
        raise AnalysisError(f"could not start Spark on {master}: {_reason(exc)[:300]} (is "
                            f"Java 17 on PATH and the master URL right? Spark's log: "
                            f"{log})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    return spark

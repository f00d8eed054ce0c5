"""Builds and runs the example programs of every client language (clients/<lang>/), for the
interop tests. A missing toolchain fails the test with what to install; nothing is skipped.

Builds go where the language keeps them and git ignores them (clients/cpp/build,
clients/java/target), so a second session only relinks what changed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients"
CPP_BUILD = CLIENTS / "cpp" / "build"
JAVA_JAR = CLIENTS / "java" / "target" / "hqueue-examples.jar"
PHP_THRIFT_LIB = Path("/usr/lib/php/Transport/TSocket.php")
JAVA_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]  # short runs: start fast


def missing(what: str, install: str) -> None:
    pytest.fail(f"{what} is missing: {install} (the interop tests never skip)", pytrace=False)


def need(command: str, install: str) -> str:
    path = shutil.which(command)
    if path is None:
        missing(f"`{command}`", install)
    assert path is not None
    return path


def build(cmd: list[str], cwd: Path, what: str, install: str, timeout: float = 480) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(
            f"building the {what} failed ({' '.join(cmd)} in {cwd}); if a header or library "
            f"is missing: {install}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    return time.monotonic() - started


@dataclass
class Programs:
    """Command lines of each language's producer and scanner (same options everywhere)."""

    build_seconds: dict[str, float] = field(default_factory=dict)
    php_accel_args: list[str] = field(default_factory=list)

    def producer(self, lang: str) -> list[str]:
        return self._command(lang, "producer")

    def scanner(self, lang: str) -> list[str]:
        return self._command(lang, "scanner")

    def _command(self, lang: str, role: str) -> list[str]:
        if lang == "cpp":
            return [str(CPP_BUILD / f"hqueue_{role}")]
        if lang == "java":
            main = {"producer": "Producer", "scanner": "Scanner"}[role]
            return ["java", *JAVA_FLAGS, "-cp", str(JAVA_JAR), f"com.hqueue.examples.{main}"]
        if lang == "php":
            return ["php", str(CLIENTS / "php" / f"{role}.php")]
        if lang == "php-accel":
            return ["php", *self.php_accel_args, str(CLIENTS / "php" / f"{role}.php"), "--accel"]
        if lang == "python":
            return [sys.executable, str(CLIENTS / "python" / "examples" / f"{role}.py")]
        raise AssertionError(lang)


def build_cpp(programs: Programs) -> None:
    install = "apt-get install g++ make pkg-config libthrift-dev libboost-dev"
    need("make", install)
    need("g++", install)
    need("pkg-config", install)
    if subprocess.run(["pkg-config", "--exists", "thrift"]).returncode != 0:
        missing("libthrift-dev (pkg-config thrift)", install)
    programs.build_seconds["cpp"] = build(
        ["make", "-j2", f"BUILD={CPP_BUILD}"], CLIENTS / "cpp", "C++ examples", install
    )


def build_java(programs: Programs) -> None:
    install = "apt-get install openjdk-17-jdk-headless maven (libthrift comes from Maven Central)"
    need("java", install)
    mvn = need("mvn", install)
    programs.build_seconds["java"] = build(
        [mvn, "-q", "-B", "package"], CLIENTS / "java", "Java examples", install
    )
    assert JAVA_JAR.is_file(), f"mvn package did not make {JAVA_JAR}"


def check_php(programs: Programs) -> None:
    install = "apt-get install php-cli php-thrift"
    need("php", install)
    if not PHP_THRIFT_LIB.is_file():
        missing(f"Debian's php-thrift ({PHP_THRIFT_LIB})", install)
    probe = "exit(function_exists('thrift_protocol_write_binary') ? 0 : 1);"
    if subprocess.run(["php", "-r", probe]).returncode == 0:
        programs.php_accel_args = []  # already loaded by the PHP configuration
        return
    args = ["-d", "extension=thrift_protocol.so"]
    if subprocess.run(["php", *args, "-r", probe], capture_output=True).returncode != 0:
        missing("the thrift_protocol PHP extension (php -d extension=thrift_protocol.so)", install)
    programs.php_accel_args = args

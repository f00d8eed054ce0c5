"""The packages point one way (docs/ARCHITECTURE.md, "Packages and their direction"):

    gateway  ------------------------------>  hqueue_contract  <---  hqueue (the client)
    subscriber_runtime  --->  hqueue  ----->  (imports neither side)

Read from the sources' syntax trees, so an import inside a function counts as much as one at the
top of a module; a new import against the direction fails here with its file and line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
CLIENT = ROOT / "clients" / "python" / "hqueue"
CONTRACT = ROOT / "clients" / "python" / "hqueue_contract"
RUNTIME = ROOT / "subscriber_runtime"

# what only the gateway needs (the `gateway` extra of pyproject.toml): a client-only install
# (`pip install hqueue`) does not have them, so the client side must not import them at load
GATEWAY_ONLY = {"rocksdict", "happybase", "kazoo", "prometheus_client", "flask", "zlib_ng"}

# The one import against the direction, kept on purpose and lazily: seed 4.4's
# `queue.createSubscriber(...)` builds a subscriber_runtime.Subscriber. The client loads and
# works without the runtime; only that call needs it.
# Its signature names the runtime's types (Subscription, Subscriber, Listener) for the type
# checker only: under `if TYPE_CHECKING:`, which never runs (scope "TYPE_CHECKING" below).
ALLOWED_UPWARD = {
    ("clients/python/hqueue/queue.py", "create_subscriber", "subscriber_runtime"),
    ("clients/python/hqueue/queue.py", "TYPE_CHECKING", "subscriber_runtime"),
}


class Import(NamedTuple):
    file: str  # relative to the repository
    line: int
    module: str  # absolute dotted name
    # the innermost function it is in; None at module level; "TYPE_CHECKING" in such a block
    function: str | None

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        where = f" (in {self.function})" if self.function else ""
        return f"{self.file}:{self.line}: imports {self.module}{where}"


def imports_of(source: str, file: str, package: str) -> Iterator[Import]:
    """Every import in ``source`` with relative ones made absolute against ``package``."""
    tree = ast.parse(source, file)

    def visit(node: ast.AST, function: str | None) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(child, child.name)
                continue
            if isinstance(child, ast.If) and _type_checking(child.test):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), "TYPE_CHECKING")
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), function)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(file, child.lineno, alias.name, function)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parts = package.split(".")
                    base = parts[: len(parts) - child.level + 1]
                    module = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    module = child.module or ""
                yield Import(file, child.lineno, module, function)
            yield from visit(child, function)

    yield from visit(tree, None)


def _type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``: imports only the type checker
    makes."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def package_imports(folder: Path, package: str) -> list[Import]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        parts = [package, *rel.parts][:-1]  # the package a module (or __init__) is in
        found.extend(imports_of(path.read_text(), str(path.relative_to(ROOT)), ".".join(parts)))
    assert found, f"no imports found under {folder}"
    return found


def against(found: list[Import], tops: set[str], *, module_level_only: bool = False) -> list[str]:
    return [
        str(i)
        for i in found
        if i.top in tops
        and not (module_level_only and i.function is not None)
        and (i.file, i.function, i.top) not in ALLOWED_UPWARD
    ]


def test_the_gateway_imports_no_client_package() -> None:
    bad = against(package_imports(GATEWAY, "gateway"), {"hqueue", "subscriber_runtime"})
    assert not bad, "the gateway imports the client side; share it through hqueue_contract:\n" + (
        "\n".join(bad)
    )


def test_the_contract_imports_neither_side() -> None:
    found = package_imports(CONTRACT, "hqueue_contract")
    bad = against(found, {"hqueue", "gateway", "subscriber_runtime"})
    assert not bad, "hqueue_contract must import neither side:\n" + "\n".join(bad)
    heavy = against(found, GATEWAY_ONLY, module_level_only=True)
    assert not heavy, "the contract loads a gateway-only library:\n" + "\n".join(heavy)


def test_the_client_imports_no_gateway_and_the_runtime_only_where_allowed() -> None:
    found = package_imports(CLIENT, "hqueue")
    bad = against(found, {"gateway", "subscriber_runtime"})
    assert not bad, "the client imports the gateway or the subscriber runtime:\n" + "\n".join(bad)
    heavy = against(found, GATEWAY_ONLY, module_level_only=True)
    assert not heavy, "the client loads a gateway-only library:\n" + "\n".join(heavy)


def test_the_subscriber_runtime_builds_on_the_client_not_the_gateway() -> None:
    found = package_imports(RUNTIME, "subscriber_runtime")
    bad = against(found, {"gateway"})
    assert not bad, "the subscriber runtime imports the gateway:\n" + "\n".join(bad)
    heavy = against(found, GATEWAY_ONLY, module_level_only=True)
    assert not heavy, "the subscriber runtime loads a gateway-only library:\n" + "\n".join(heavy)


def test_the_checker_sees_every_form_of_import() -> None:
    source = textwrap.dedent(
        """
        import hqueue.protocol
        from hqueue import zk
        def f():
            from hqueue.tls import TLS
        class C:
            def g(self):
                import subscriber_runtime as s
        from .. import rowkey
        from ..store import base
        """
    )
    got = [(i.module, i.function) for i in imports_of(source, "x.py", "gateway.cluster")]
    assert got == [
        ("hqueue.protocol", None),
        ("hqueue", None),
        ("hqueue.tls", "f"),
        ("subscriber_runtime", "g"),
        ("gateway", None),
        ("gateway.store", None),
    ]
    assert len(against(list(imports_of(source, "x.py", "gateway.cluster")), {"hqueue"})) == 3


def test_the_client_side_imports_without_the_gateway_extra(tmp_path: Path) -> None:
    """`pip install hqueue` (no `gateway` extra) has no rocksdict, happybase, kazoo,
    prometheus-client or flask: the client, the toolkit and the subscriber runtime must load
    without them, and `hqueue-gateway` says which extra to install."""
    blocked = sorted(GATEWAY_ONLY)
    script = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Absent(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {blocked!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Absent())
        import hqueue, hqueue.pool, hqueue.producer, hqueue.toolkit.cli, hqueue.toolkit.bulk
        import hqueue_contract.protocol, hqueue_contract.registry, hqueue_contract.zk
        import hqueue_contract.tls, hqueue_contract.limits
        import subscriber_runtime.subscriber, subscriber_runtime.main
        hqueue_contract.protocol.hqueue_thrift()
        try:
            import gateway.app
        except ModuleNotFoundError as exc:
            print("gateway needs", exc.name)
        import gateway.main
        assert gateway.main.GATEWAY_EXTRA == frozenset({blocked!r})
        assert gateway.main.main(["--data-dir", sys.argv[1]]) == 2
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'hqueue[gateway]'" in done.stderr, done.stderr
    # and the block works: the gateway itself does need its extra
    assert "gateway needs" in done.stdout, done.stdout


def test_moved_names_keep_a_public_home() -> None:
    """hqueue.protocol still offers what scripts import from it; a subscription's RetryPolicy
    (once only hqueue.subscriptions.RetryPolicy) is subscriber_runtime.RetryPolicy;
    hqueue.MessageID stays where users import it."""
    import hqueue.protocol
    import hqueue_contract.protocol
    from hqueue_contract.registry import RetryPolicy

    import subscriber_runtime

    assert subscriber_runtime.RetryPolicy is RetryPolicy
    # one MessageID type on both sides: the client's public name, the gateway's, the contract's
    import hqueue
    from hqueue_contract.ids import MessageID

    from gateway import rowkey

    assert hqueue.MessageID is rowkey.MessageId is MessageID
    assert "RetryPolicy" in subscriber_runtime.__all__
    for name in ("hqueue_thrift", "subscriber_thrift", "parse_address", "closed_by_peer"):
        assert getattr(hqueue.protocol, name) is getattr(hqueue_contract.protocol, name)
    assert callable(hqueue.protocol.connect)


def test_the_benchmark_harness_imports_no_gateway_module() -> None:
    """loadtests/ starts the gateway as a process (``python -m gateway``) and talks to it as a
    client; what measures gateway internals in-process lives in tests/perf."""
    found = [i for i in package_imports(ROOT / "loadtests", "loadtests") if i.top == "gateway"]
    assert not found, "\n".join(map(str, found))


def test_the_harness_check_sees_a_lazy_gateway_import() -> None:
    source = "def f():\n    from gateway.rowkey import encode\n"
    (hit,) = [i for i in imports_of(source, "x.py", "loadtests") if i.top == "gateway"]
    assert hit.function == "f" and hit.module == "gateway.rowkey"

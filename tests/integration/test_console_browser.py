"""The web console in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``,
driven by Selenium; nothing downloads a browser), against a real gateway process.

Every page is loaded, screenshotted (kept as artifacts: the directory is printed) and checked
with axe-core (from npm, installed once into a cache directory); serious and critical
accessibility violations fail the test. Paging: three pages newest first, none skipped or
repeated. Truncate: through the confirmation form.

Missing tools fail the test with what to install; they are never a reason to skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift

from tests.conftest import ROOT, GatewayFactory, free_port, wait_until

CHROMIUM = Path(os.environ.get("HQUEUE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("HQUEUE_CHROMEDRIVER", "/usr/bin/chromedriver"))
AXE_VERSION = "4.14.1"
NPM_CACHE = Path(os.environ.get("HQUEUE_NPM_CACHE", Path.home() / ".cache" / "hqueue" / "npm"))
ARTIFACTS = Path(os.environ.get("HQUEUE_ARTIFACTS", ROOT / "artifacts")) / "console"


@pytest.fixture
def store() -> str:
    return "embedded"  # the console reads through the service: one store is enough here


@pytest.fixture(scope="module")
def axe_js() -> str:
    """axe-core's ``axe.min.js``, installed with npm into a cache directory once."""
    script = NPM_CACHE / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm is needed to install axe-core for the accessibility check: "
                "apt-get install -y npm (scripts/test-all installs it)",
                pytrace=False,
            )
        result = subprocess.run(
            [npm, "install", "--prefix", str(NPM_CACHE), "--no-audit", "--no-fund",
             f"axe-core@{AXE_VERSION}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if result.returncode != 0 or not script.exists():
            pytest.fail(f"npm install axe-core failed:\n{result.stdout}{result.stderr}")
    return script.read_text()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail(
            "selenium is needed for the browser tests: pip install -e '.[test]'", pytrace=False
        )
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            pytest.fail(
                f"{path} is missing: apt-get install -y chromium chromium-driver "
                f"(Debian's {package}; scripts/test-all installs them)",
                pytrace=False,
            )
    os.environ["SE_OFFLINE"] = "true"  # Selenium must never fetch a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--disable-extensions"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


class Console:
    """A browser session on one gateway's console: load, screenshot, check accessibility."""

    def __init__(self, driver: Any, base: str, axe_js: str, shots: Path) -> None:
        self.driver = driver
        self.base = base
        self.axe_js = axe_js
        self.shots = shots
        self.count = 0

    def open(self, path: str, name: str) -> None:
        self.driver.get(self.base + path)
        self.checked(name)

    def checked(self, name: str) -> None:
        """Screenshot the current page, then fail on serious/critical axe violations."""
        d = self.driver
        assert "hqueue console" in d.title, f"{name}: unexpected page {d.title!r}"
        assert not d.find_elements("css selector", "p.error"), (
            f"{name}: error page: {d.find_element('css selector', 'p.error').text}"
        )
        self.count += 1
        d.save_screenshot(str(self.shots / f"{self.count:02d}-{name}.png"))
        d.execute_script(self.axe_js)
        found = d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']})"
            "  .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact,"
            "     help: v.help, nodes: v.nodes.map(n => n.html).slice(0, 3)}))))"
            "  .catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e)}]));"
        )
        bad = [v for v in found if v["impact"] in ("serious", "critical")]
        assert not bad, f"{name}: accessibility violations:\n{json.dumps(bad, indent=1)}"

    def rows(self) -> list[str]:
        return [
            r.get_attribute("data-id")
            for r in self.driver.find_elements("css selector", "#messages tbody tr")
        ]


def newest_first(client: Any, queue: bytes) -> list[str]:
    T = hqueue_thrift()
    sid = client.queueScannerOpen(queue, T.TMessageScan(reversed=True))
    out = []
    while batch := client.messageScannerGetList(sid, 1000):
        out += [f"{m.id.timestamp}.{m.id.sequenceID}.{m.partitionID}" for m in batch]
    return out


def test_console_in_a_real_browser(
    start_gateway: GatewayFactory, browser: Any, axe_js: str, request: Any, capsys: Any
) -> None:
    shots = ARTIFACTS / request.node.name
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    with capsys.disabled():
        print(f"\nconsole screenshots: {shots}")
    port = free_port()
    gw = start_gateway("--console-port", str(port), "--stats-interval", "0.3")
    T = hqueue_thrift()
    c = gw.client()
    c.createQueue(b"orders", 3, 86400, {})
    for p in range(3):
        for _ in range(2):
            c.putMessagesWithPid(
                b"orders", p,
                [T.TMessage(topic=b"t%d" % (i % 2), value=b"order %d of %d" % (i, p))
                 for i in range(20)],
            )  # fmt: skip
    c.addSubscriber(b"orders", T.TSubscription(name=b"billing"))
    c.putMessagesWithPid(b"orders", 1, [T.TMessage(topic=b"t0", value=b"late")] * 5)
    c.putMessageWithPid(b"orders", 0, T.TMessage(topic=b"bin", value=bytes(range(256)) * 8))
    expected = newest_first(c, b"orders")
    assert len(expected) == 126

    ui = Console(browser, f"http://127.0.0.1:{port}", axe_js, shots)
    # the checker itself: a page with an unlabelled field and an image without text fails
    browser.get("data:text/html,<html><body><title>hqueue console</title><input>"
                "<img src='x.png'></body></html>")  # fmt: skip
    with pytest.raises(AssertionError, match="accessibility violations"):
        ui.checked("axe-self-check")
    ui.open("/queues", "queues")
    assert "orders" in browser.find_element("css selector", "table").text

    # create a queue through the form
    browser.find_element("id", "name").send_keys("made-in-browser")
    browser.find_element("id", "partitions").clear()
    browser.find_element("id", "partitions").send_keys("2")
    browser.find_element("css selector", "form.form button").click()
    ui.checked("created-queue")
    assert "Created queue made-in-browser" in browser.find_element("css selector", ".flash").text
    assert b"made-in-browser" in [q.name for q in c.listQueues()]

    ui.open("/queues/orders", "queue")
    wait_until(  # the lag chart needs two samples of the monitor
        lambda: (
            browser.get(ui.base + "/queues/orders/subscribers")
            or browser.find_elements("css selector", "figure.chart svg")
        ),
        20, what="the lag chart",
    )  # fmt: skip
    ui.checked("subscribers")
    assert "billing" in browser.find_element("tag name", "main").text
    ui.open("/gateways", "gateways")
    assert gw.address in browser.find_element("tag name", "main").text

    # three pages newest first, following the "next page" link
    ui.open("/queues/orders/messages?limit=20", "messages-page1")
    seen = ui.rows()
    assert "hex" in browser.find_element("id", "messages").text  # the binary value
    for n in (2, 3):
        browser.find_element("id", "next").click()
        ui.checked(f"messages-page{n}")
        seen += ui.rows()
    assert seen == expected[:60], "a page skipped or repeated messages"
    assert len(set(seen)) == 60
    ui.open("/queues/orders/messages?topic=t1&partition=2", "messages-filtered")
    assert ui.rows() and all(r.endswith(".2") for r in ui.rows())

    # truncate through the confirmation form
    ui.open("/queues/orders", "queue-before-truncate")
    browser.find_element("link text", "Truncate…").click()
    ui.checked("truncate-confirm")
    browser.find_element("id", "confirm").send_keys("orders")
    browser.find_element("css selector", "form.form button").click()
    ui.checked("truncated")
    assert "truncate done" in browser.find_element("css selector", ".flash").text
    assert newest_first(c, b"orders") == []
    ui.open("/queues/orders/messages", "messages-after-truncate")
    assert ui.rows() == []
    c.close()
    assert len(list(shots.glob("*.png"))) == ui.count

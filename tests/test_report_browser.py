"""report.html in a real browser: headless Chromium (Debian's ``chromium`` package; .ci/run
installs it) opens the page over the DevTools protocol, every figure has loaded with a size, the
page logs no error and throws nothing, and a screenshot lands in the test's tmp dir."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from analysis.report import write_report
from tests.helpers import settings_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("NORMLAB_BROWSER_TEST") == "required"  # .ci/run: never a silent skip
pytestmark = pytest.mark.slow


class DevTools:
    """The few DevTools-protocol calls the test makes, over one page's websocket."""

    def __init__(self, url: str) -> None:
        import websocket  # websocket-client (dev)

        self.ws = websocket.create_connection(url, timeout=30)
        self.next_id, self.events = 0, []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                return message.get("result", {})
            self.events.append(message)  # console calls, exceptions, log entries

    def value(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"][
            "value"
        ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def a_report(root: Path) -> Path:
    """A sweep of two connections over three rates: a table, an lr figure, the cards."""
    for conn in ("hc", "residual"):
        for lr in (1e-3, 3e-3, 1e-2):
            for seed in range(3):
                loss = 2.0 + abs(lr - 3e-3) * 20 + 0.01 * seed - 0.02 * (conn == "hc")
                settings_run(root, f"{conn}-lr{lr}-s{seed}", seed, loss,
                             **{"model.connection": conn, "optim.lr": lr})  # fmt: skip
    report = write_report(root)
    assert report["plots"], "the sweep draws figures"
    return root / "report" / "report.html"


@pytest.mark.skipif(CHROMIUM is None and not REQUIRED, reason="apt-get install chromium")
def test_the_report_page_loads_every_figure_without_an_error(tmp_path: Path) -> None:
    assert CHROMIUM, "no chromium: apt-get install chromium (Debian's package)"
    page = a_report(tmp_path / "sweep")
    port = free_port()
    browser = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--remote-debugging-port={port}", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1200,2400", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):  # the DevTools endpoint, once the browser is up
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
                    targets = json.loads(r.read())
                if any(t["type"] == "page" for t in targets):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        target = next(t for t in targets if t["type"] == "page")
        tools = DevTools(target["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            tools.call(f"{domain}.enable")
        tools.call("Page.navigate", url=page.as_uri())
        for _ in range(100):
            if tools.value("document.readyState") == "complete":
                break
            time.sleep(0.1)
        images = tools.value(
            "Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])"
        )
        shot = tools.call("Page.captureScreenshot", format="png")
        (tmp_path / "report.png").write_bytes(base64.b64decode(shot["data"]))
        tools.call("Runtime.evaluate", expression="1")  # drain the events sent so far
    finally:
        browser.terminate()
        browser.wait(timeout=30)
    figures = json.loads((page.parent / "report.json").read_text())["plots"]
    assert sorted(alt for alt, _, _ in images) == sorted(figures)
    assert all(done and width > 0 for _, done, width in images), images
    errors = [
        e for e in tools.events
        if e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]  # fmt: skip
    assert not errors, errors
    assert (tmp_path / "report.png").stat().st_size > 10_000  # a page was drawn

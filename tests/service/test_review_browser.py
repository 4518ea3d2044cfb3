"""The review page in a real browser: headless Chromium, driven over the DevTools protocol, logs in
with the token, opens a done document, corrects a field, approves it; the API then shows the
correction beside the model's value. The planted markup must not have run (the page's title is
what the page set, not what a payload would set), and the page's images must have loaded."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import llm_ocr
from llm_ocr.service.config import ServiceConfig
from llm_ocr.service.server import BackgroundService
from llm_ocr.service.spool import Spool
from llm_ocr.service.sqlite import SQLiteQueue
from tests.service.reviewed import done_document

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not on PATH (Debian: apt-get install -y chromium; scripts/test installs it when root)",
)
TOKEN = "browser-review-token"


class Tab:
    """One browser tab over the DevTools protocol: calls, and waiting for a page to load."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.ids = itertools.count(1)
        self.loaded = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        await self.socket.send_json({"id": number, "method": method, "params": params})
        while True:
            message = await self.socket.receive_json(timeout=120)
            if message.get("method") == "Page.loadEventFired":
                self.loaded += 1
            if message.get("id") == number:
                assert "error" not in message, message
                return dict(message.get("result") or {})

    async def value(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    async def load(self, action: str, **params: Any) -> None:
        """Run ``action`` (a method, or JavaScript when it is ``Runtime.evaluate``) and wait for the load it causes."""
        before = self.loaded
        await self.call(action, **params)
        while self.loaded == before:
            message = await self.socket.receive_json(timeout=120)
            if message.get("method") == "Page.loadEventFired":
                self.loaded += 1


def devtools_port(browser: subprocess.Popen[str]) -> int:
    """The port Chromium says it listens on (its stderr's ``DevTools listening on ws://...`` line,
    read as it comes); the rest of its stderr is drained so it never blocks on a full pipe."""
    assert browser.stderr is not None
    for line in browser.stderr:
        if found := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
            threading.Thread(target=browser.stderr.read, daemon=True).start()
            return int(found.group(1))
    raise AssertionError(f"chromium exited ({browser.wait()}) without listening for DevTools")


async def review_in_browser(url: str, doc_id: str, port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
            target = next(t for t in await answer.json() if t["type"] == "page")
        async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as socket:
            tab = Tab(socket)
            await tab.call("Page.enable")
            await tab.load("Page.navigate", url=f"{url}/review/{doc_id}")
            assert await tab.value("!!document.querySelector('form[action=\"/review/login\"]')"), "no login form"
            await tab.load("Runtime.evaluate", expression=(
                f"document.querySelector('input[name=token]').value = {json.dumps(TOKEN)};"
                "document.querySelector('form[action=\"/review/login\"] button').click()"))
            assert await tab.value(f"!!document.querySelector('a[href=\"/review/{doc_id}\"]')"), "not in the list"
            await tab.load("Runtime.evaluate", expression=f"document.querySelector('a[href=\"/review/{doc_id}\"]').click()")
            seen = await tab.value("""({
              title: document.title,
              images: [...document.images].map((i) => [i.complete, i.naturalWidth]),
              rects: document.querySelectorAll('.llmocr-view svg rect').length,
            })""")
            await tab.load("Runtime.evaluate", expression="""
              const form = [...document.forms].find((f) => f.elements.namedItem('path')?.value === '/total');
              form.elements.namedItem('value').value = '99.95';
              form.querySelector('button').click()""")
            await tab.load("Runtime.evaluate", expression="document.querySelector('form[action$=\"/approve\"] button').click()")
            seen["after"] = await tab.value("document.querySelector('.approved')?.textContent || ''")
            seen["title_after"] = await tab.value("document.title")
            return dict(seen)


def test_a_reviewer_corrects_a_field_and_approves_in_a_browser(tmp_path: Path) -> None:
    data = tmp_path / "service"
    config = ServiceConfig(data=str(data), port=0, worker=None, token=TOKEN)
    with BackgroundService(config) as running:
        doc_id = done_document(SQLiteQueue(config.database), Spool(str(data)), tmp_path)
        profile = tmp_path / "profile"
        browser = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1200,1600", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            seen = asyncio.run(review_in_browser(running.url, doc_id, devtools_port(browser)))
        finally:
            # SIGTERM: Chromium ends its own renderer processes and reaps them (a kill would orphan them).
            browser.terminate()
            try:
                browser.wait(timeout=60)
            except subprocess.TimeoutExpired:
                browser.kill()
                browser.wait()
        fields = llm_ocr.Service(running.url, token=TOKEN).request("GET", f"/v1/documents/{doc_id}/fields")[2]
    # Nothing planted ran: a payload would have retitled the page.
    assert seen["title"].startswith("review: ") and seen["title_after"] == seen["title"], seen
    assert len(seen["images"]) >= 2 and all(done and width > 0 for done, width in seen["images"]), seen
    assert seen["rects"] >= 2, seen
    assert seen["after"].startswith("approved"), seen
    stored = json.loads(fields)
    assert stored["fields"]["total"] == 118.5 and stored["corrected_fields"]["total"] == 99.95
    assert [(c["path"], c["model"], c["corrected"]) for c in stored["corrections"]] == [("/total", 118.5, 99.95)]
    assert stored["approved"] is True

"""A real headless Chromium, driven over the DevTools protocol on a pipe (no driver, no
websocket): open a page, collect what its console and network report, evaluate JavaScript,
take a full-page screenshot. ``scripts/test.sh`` installs Debian's ``chromium``."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


class Browser:
    """One Chromium process and one page, as a context manager."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        if not Path(CHROMIUM).is_file():
            raise AssertionError(f"{CHROMIUM} is missing: scripts/test.sh installs chromium")
        # the browser reads commands on fd 3 and writes replies on fd 4
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()

        def pipes_as_3_and_4() -> None:
            for source, target in ((to_browser, 3), (from_browser, 4)):
                os.dup2(source, target)
                os.set_inheritable(target, True)  # dup2 onto itself keeps close-on-exec

        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # hdeval's own descriptors are not inheritable; 3 and 4 are
            preexec_fn=pipes_as_3_and_4,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next_id, self.events = b"", 0, []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        os.close(self._in)
        os.close(self._out)

    # ------------------------------------------------------------------ protocol
    def call(self, method: str, session: bool = False, timeout: float = 60, **params) -> dict:
        """Send a command and wait for its reply; events that come meanwhile are kept."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise AssertionError("chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise AssertionError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        """The first event ``method`` (kept or still to come)."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(self._receive(deadline))

    # ------------------------------------------------------------------ page
    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)  # fmt: skip
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """Errors the page raised or logged: exceptions, console.error/assert, and the
        browser's own error entries (failed loads, blocked resources...)."""
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                errors.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a)) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                errors.append(params["entry"]["text"])
        return errors

    def requested(self) -> list[str]:
        """Every URL the page requested."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: Path, height: int | None = None) -> Path:
        """A PNG of the laid-out page: all of it, or its top ``height`` CSS pixels."""
        size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "scale": 1,
                "height": min(size["height"], height or size["height"])}  # fmt: skip
        data = self.call("Page.captureScreenshot", session=True, format="png", clip=clip,
                         captureBeyondViewport=True)["data"]  # fmt: skip
        path.write_bytes(base64.b64decode(data))
        return path

"""The `lmc pretty -o html` / `lmc diff -o html` pages in a real browser: headless Chromium
(Debian's `chromium`) with name resolution and proxying pointed nowhere, driven over the
DevTools protocol on a pipe (no extra Python dependency).

Checks what a person sees: every token, in order; the colours of a predicted, a
completed and a missed token; the details shown after clicking a token; and that the
page makes no request beyond its own file.  Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lmchallenge.analysis import diff as D
from lmchallenge.analysis import pretty as P
from lmchallenge.logs.jsonl import load_jsonlines

from conftest import REPO as ROOT  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "pretty"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium)")

# page.css colours (cN = ANSI colour N) as the browser reports them
GREEN = "rgb(17, 138, 46)"
RED = "rgb(208, 28, 28)"
GREY = "rgb(138, 138, 138)"
DEFAULT = "rgb(32, 32, 32)"


class DevTools:
    """A headless Chromium driven over ``--remote-debugging-pipe`` (NUL-separated JSON)."""

    def __init__(self, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipes() -> None:  # in the child: fd 3 = commands in, fd 4 = replies out
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--remote-debugging-pipe", "--no-sandbox",
             "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--mute-audio",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
             "--proxy-bypass-list=<-loopback>", f"--user-data-dir={profile}",
             "--window-size=1280,900", "about:blank"],
            preexec_fn=wire_pipes, pass_fds=(3, 4),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None

    def _send(self, method: str, params: dict | None = None, session: bool = True) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        wanted = self._send(method, params, session)
        while True:
            message = self._read()
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            if "method" in message:
                self.events.append(message)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event["method"] == method:
                    self.events.remove(event)
                    return event
            seen = len(self.events)
            message = self._read()
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(method)

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        for _ in range(100):
            if self.js("document.body.getAttribute('data-rendered')") is not None:
                return
            time.sleep(0.05)
        raise TimeoutError("the page did not render")

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element (as a person would)."""
        box = self.js(f"""(function () {{
            var e = document.querySelector({json.dumps(selector)});
            e.scrollIntoView({{block: "center"}});
            var r = e.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2];
        }})()""")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1],
                                                   "button": "left", "clickCount": 1})

    def screenshot(self, path: Path) -> None:
        self.js("window.scrollTo(0, 0)")
        shot = self.call("Page.captureScreenshot", {"format": "png"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def requested_urls(self) -> list[str]:
        for _ in range(3):  # collect events still in the pipe
            self.js("1")
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def browser(tmp_path):
    devtools = DevTools(tmp_path / "profile")
    try:
        yield devtools
    finally:
        devtools.close()


SEGMENTS_JS = """Array.from(document.querySelectorAll('#text .tok')).map(function (t) {
    return {i: Number(t.getAttribute('data-i')), text: t.textContent, title: t.title,
            segs: Array.from(t.children).map(function (s) {
                var c = getComputedStyle(s);
                return [s.textContent, c.color, c.fontWeight];
            })};
})"""


def test_pretty_wc_page_in_chromium(browser, tmp_path):
    log = DATA / "kjv.o2.wc.jsonl"
    data = list(load_jsonlines(str(log)))
    page = tmp_path / "wc.html"
    page.write_text(P.html(str(log)), encoding="utf-8")
    browser.open(page.as_uri())

    shown = browser.js(SEGMENTS_JS)
    # every token, in order, and the text of each line as the corpus has it
    assert [t["text"] for t in shown] == [d["target"] for d in data]
    assert [t["i"] for t in shown] == list(range(len(data)))
    lines = browser.js("Array.from(document.querySelectorAll('#text .words'))"
                       ".map(function (w) { return w.textContent; })")
    corpus = (DATA / "kjv6.txt").read_text(encoding="utf-8").splitlines()
    assert lines == corpus

    # colours: predicted at rank 1 ("of"), completed after typing ("The": "T" typed,
    # "he" completed) and missed ("Jesus": never offered, every character typed)
    assert shown[2]["text"] == "of" and shown[2]["segs"] == [["of", GREEN, "700"]]
    assert shown[0]["segs"] == [["T", RED, "400"], ["he", GREY, "400"]]
    jesus = next(t for t in shown if t["text"] == "Jesus")
    assert jesus["segs"] == [["Jesus", RED, "400"]]
    assert shown[2]["title"].startswith("of: next word rank 1")  # hover text

    # summary statistics at the top
    stats_rows = browser.js("Array.from(document.querySelectorAll('#stats tr[data-stat]'))"
                            ".map(function (r) { return r.getAttribute('data-stat') + '=' +"
                            " r.querySelector('td').textContent; })")
    assert f"prediction.hit1={15 / 112:.4g}" in stats_rows

    # click "book": the detail panel shows its rank and completions
    browser.click('.tok[data-i="1"]')
    detail = browser.js("document.getElementById('detail').innerText")
    assert browser.js("document.getElementById('detail').getAttribute('data-token')") == "1"
    assert "book" in detail and "characters typed\t3 of 4" in detail
    assert "next-word rank\t- (not in the predictions)" in detail
    rows = browser.js("Array.from(document.querySelectorAll('#detail table:not(.fields) tr'))"
                      ".map(function (r) { return r.innerText; })")
    assert rows[0].startswith("typed\t#1")
    assert rows[-1].split("\t")[:3] == ["boo", "book", "booths"]
    assert browser.js("document.querySelector('.tok.current').getAttribute('data-i')") == "1"
    browser.screenshot(ARTIFACTS / "pretty-wc.png")

    # nothing but the page itself was requested
    urls = browser.requested_urls()
    assert urls and all(u.startswith("file://") for u in urls), urls


def test_pretty_we_page_unselected_tokens_dimmed(browser, tmp_path):
    from lmchallenge.analysis import grep
    page = tmp_path / "we.html"
    page.write_text(P.html(grep.grep("$token=[0-4]", str(DATA / "kjv.o2.we.jsonl"))),
                    encoding="utf-8")
    browser.open(page.as_uri() + "#token=7")
    # the fragment opened token 7's details
    assert browser.js("document.getElementById('detail').getAttribute('data-token')") == "7"
    assert "logp" in browser.js("document.getElementById('detail').innerText")
    dimmed = browser.js("Array.from(document.querySelectorAll('.tok')).map(function (t) {"
                        " return getComputedStyle(t).opacity; })")
    selected = [d.get("select") for d in grep.grep("$token=[0-4]", str(DATA / "kjv.o2.we.jsonl"))]
    assert [o == "0.45" for o in dimmed] == [not s for s in selected]
    browser.screenshot(ARTIFACTS / "pretty-we-grep.png")
    assert all(u.startswith("file://") for u in browser.requested_urls())


def test_diff_wc_page_highlights_only_differing_characters(browser, tmp_path):
    page = tmp_path / "diff.html"
    page.write_text(D.html(str(DATA / "kjv.o1.wc.jsonl"), str(DATA / "kjv.o2.wc.jsonl")),
                    encoding="utf-8")
    browser.open(page.as_uri())
    shown = browser.js(SEGMENTS_JS)
    assert [t["text"] for t in shown] == [d["target"] for d in
                                          load_jsonlines(str(DATA / "kjv.o2.wc.jsonl"))]
    # "of" (token 2): the baseline typed "o", the log predicted it: only "o" is marked
    assert shown[2]["segs"] == [["o", GREEN, "700"], ["f", DEFAULT, "400"]]
    browser.click('.tok[data-i="2"]')
    detail = browser.js("document.getElementById('detail').innerText")
    assert "typed (baseline)\t1 of 2" in detail and "typed (log)\t0 of 2" in detail
    assert "baseline: completions" in detail and "log: completions" in detail
    headers = browser.js("Array.from(document.querySelectorAll('#stats th'))"
                         ".map(function (h) { return h.textContent; })")
    assert headers[:3] == ["statistic", "baseline", "log"]
    head = browser.js("Array.from(document.querySelectorAll('#stats tr:first-child th'))"
                      ".map(function (h) { return h.textContent; })")
    assert head == ["statistic", "baseline", "log", "unit"]
    units = browser.js("Array.from(document.querySelectorAll('#stats tr[data-stat=\"prediction.hit1\"] td'))"
                       ".map(function (d) { return d.textContent; })")
    assert len(units) == 3 and units[-1] == "Hit@1"
    browser.screenshot(ARTIFACTS / "diff-wc.png")
    assert all(u.startswith("file://") for u in browser.requested_urls())


def test_the_request_check_sees_external_requests(browser, tmp_path):
    # the harness itself: a page that does fetch something is caught
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/x.png">'
                    '<script>document.body.setAttribute("data-rendered", "0")</script>'
                    '</body></html>', encoding="utf-8")
    browser.open(page.as_uri())
    urls = browser.requested_urls()
    assert "http://example.invalid/x.png" in urls

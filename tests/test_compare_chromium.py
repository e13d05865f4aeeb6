"""The `lmc compare -o html` page in headless Chromium (the DevTools driver of
tests/test_html_chromium.py): the table a person sees, the significant differences
coloured, no request beyond the page itself.  A screenshot goes to test-artifacts/."""

from __future__ import annotations

import subprocess

import pytest

from conftest import BIN
from test_html_chromium import ARTIFACTS, CHROMIUM, DATA, browser  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")

TABLE_JS = """Array.from(document.querySelectorAll('#comparison tr')).map(function (r) {
    return Array.from(r.children).map(function (c) {
        return [c.textContent, getComputedStyle(c).backgroundColor];
    });
})"""


def test_compare_page_in_chromium(browser, tmp_path):  # noqa: F811
    base, log = DATA / "kjv.o1.wc.jsonl", DATA / "kjv.o2.wc.jsonl"
    page = tmp_path / "compare.html"
    page.write_bytes(subprocess.run([str(BIN / "lmc"), "compare", "-o", "html", "--resamples", "300",
                                     str(base), str(log)], capture_output=True, check=True).stdout)
    browser.open(page.as_uri())
    rows = browser.js(TABLE_JS)
    header = [text for text, _ in rows[0]]
    assert header[:3] == ["log", "prediction.hit", "prediction.hit1"]
    assert "completion.ksr (fraction of keystrokes)" in header
    assert rows[1][0][0] == f"{base} (baseline)" and rows[2][0][0] == str(log)
    cells = dict(zip(header, rows[2]))
    # Hit@1 of o2 is far above o1's (0.134 against 0): significant, green
    text, colour = cells["prediction.hit1"]
    assert text.startswith("0.1339 [") and "Δ +0.1339" in text and "p=0.00332" in text
    assert colour == "rgb(216, 245, 208)"
    # the same completion tokens in both: no difference, no colour
    text, colour = cells["completion.tokens"]
    assert "Δ +0.0000" in text and "p=1" in text and colour == "rgba(0, 0, 0, 0)"
    assert browser.requested_urls() == [page.as_uri()]
    browser.screenshot(ARTIFACTS / "compare.png")

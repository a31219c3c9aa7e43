"""The folder page (OUT/index.html) and the results root's index: written by report, deterministic,
self-contained, and working in a real browser (headless Chromium: sorting, filtering, drill-downs,
figures)."""
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench.cli.main import main
from bench.reporting import pages

GRID = ["--methods", "deep_ensemble", "single_network", "--seeds", "0", "1", "--epochs", "1", "--early-stop-acc",
        "none", "-o", "deep_ensemble.members=2", "--val-size", "50", "--no-download", "-q"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def folder(tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page") / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *GRID]) == 0
    return out


def test_report_writes_a_deterministic_self_contained_page(folder):
    page = folder / "index.html"
    first = page.read_bytes()
    assert main(["report", "--out", str(folder)]) == 0
    assert page.read_bytes() == first  # the same records give the same bytes
    html = first.decode()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from the network
    assert str(folder) not in html  # no absolute path: the page moves with its folder
    # one summary row and one drill-down per variant, each with its two seeds
    variants = pd.read_csv(folder / "summary.csv")["variant"].tolist()
    assert len(variants) == 2 and all(v in html for v in variants)
    assert html.count('<details id="') == 2 and html.count('class="drill"') == 2
    for name in ("comparison.png", "reliability.png"):
        assert f'src="{name}"' in html


def test_the_paper_table_shows_each_cells_verdict(tmp_path):
    row = {"label": "DE (NLL)", "variant": "deep_ensemble(members=5)", "quantity": "ID accuracy", "harness_mean": 89.13,
           "harness_std": 0.17, "harness_n": 5, "paper_mean": 89.2, "paper_std": 0.2, "paper_resolution": 0.05}
    pd.DataFrame([{**row, "verdict": "inside", "verdict_diff": -0.07, "verdict_low": -0.42, "verdict_high": 0.28},
                  {**row, "verdict": "outside", "verdict_diff": 25.66, "verdict_low": 17.95, "verdict_high": 33.36},
                  {**row, "verdict": "not comparable", "verdict_note": "not published", "paper_mean": None}]
                 ).to_csv(tmp_path / "paper_table.csv", index=False)
    table = pages.paper_table(tmp_path / "paper_table.csv")
    verdicts = [(r[-1].text, r[-1].css) for r in table.rows]
    assert verdicts == [("inside: Δ -0.1 [-0.4, +0.3]", "inside"), ("OUTSIDE: Δ +25.7 [+17.9, +33.4]", "outside"),
                        ("not comparable: not published", "nc")]
    assert table.rows[0][3].text == "89.1 ± 0.2 (5)" and table.rows[2][4].text == "-"


def test_the_results_index_lists_each_folder_with_its_headline_rows(folder, tmp_path):
    root = tmp_path / "results"
    shutil.copytree(folder, root / "tiny", ignore=shutil.ignore_patterns("predictions"))
    (root / "empty").mkdir(parents=True)
    assert main(["report", "--index", str(root)]) == 0
    html = (root / "index.html").read_text()
    assert 'href="tiny/index.html"' in html and "empty" not in html
    assert html.count("<tr") == 1 + 2  # a header and the two variants


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (Debian: apt-get install chromium): the browser test skips")
def test_the_page_works_in_a_real_browser(folder):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((folder / "index.html").as_uri())
        summary = page.locator("table.summary").first
        # sorting by a column reorders the rows, both ways
        header = summary.locator("th", has_text="NLL")
        nll = lambda: [float(v) for v in summary.locator("tbody td:nth-child(6)").evaluate_all(
            "cells => cells.map(c => c.dataset.sort)")]
        header.click()
        assert nll() == sorted(nll()) and header.get_attribute("aria-sort") == "ascending"
        header.click()
        assert nll() == sorted(nll(), reverse=True)
        # the filter hides the rows of other methods
        page.fill("input.filter", "single")
        assert summary.locator("tbody tr:visible").count() == 1
        page.fill("input.filter", "")
        # a row's label opens its drill-down, with a row per seed
        link = summary.locator("a.drill").first
        target = page.locator(link.get_attribute("href"))
        assert not target.evaluate("d => d.open")
        link.click()
        page.wait_for_function("id => document.getElementById(id).open", arg=link.get_attribute("href")[1:])
        assert target.locator("table").first.locator("tbody tr").count() == 2
        # every figure loads
        images = page.locator("img")
        assert images.count() >= 5
        images.evaluate_all("imgs => imgs.forEach(i => i.loading = 'eager')")
        page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
        assert images.evaluate_all("imgs => imgs.filter(i => i.naturalWidth === 0).map(i => i.src)") == []
        browser.close()
    assert errors == []
    assert requests and all(url.startswith("file://") for url in requests)

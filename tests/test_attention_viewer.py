"""Attention viewer: the HTML payload round-trips, word/subword maps, CLI, and a real browser (chromium)."""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertology.cli.attention import app
from bertology.attention.viewer import attention_for_text, render_attention_html, view_attention, write_html
from bertology.errors import DataError, UsageError


def _payload(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', html, re.S)
    assert match, "no inlined attention data"
    return json.loads(match.group(1))


def _random_attention(layers: int, heads: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.dirichlet(np.full(n, 0.1), size=(layers, heads, n)).astype(np.float32)
    return a


def test_payload_round_trips_within_quantisation_error():
    att = _random_attention(2, 3, 9)
    tokens = ["[CLS]"] + [f"w{i}" for i in range(7)] + ["[SEP]"]
    html = render_attention_html(tokens, att, title="t </script> & <b>")
    data = _payload(html)
    assert data["tokens"] == tokens and (data["n_layers"], data["n_heads"]) == (2, 3)
    assert data["layers"] == [1, 2]
    raw = np.frombuffer(zlib.decompress(base64.b64decode(data["data"])), dtype=np.uint8).reshape(att.shape)
    decoded = raw / 255.0 * np.asarray(data["scales"])[:, :, None, None]
    np.testing.assert_allclose(decoded, att, atol=att.max() / 255 + 1e-6)
    # The title is escaped in HTML and cannot close the script element.
    assert "<b>" not in html.split("<script", 1)[0] and html.count("</script>") == 2
    assert "http://" not in html and "https://" not in html  # nothing fetched from a CDN


def test_render_rejects_mismatched_input():
    with pytest.raises(DataError, match="tokens"):
        render_attention_html(["a", "b"], _random_attention(1, 1, 3))
    with pytest.raises(DataError, match="n_layers"):
        render_attention_html(["a", "b"], np.ones((2, 2)))
    with pytest.raises(DataError, match="layer numbers"):
        render_attention_html(["a", "b", "c"], _random_attention(2, 1, 3), layers=[4])


def test_word_level_map_aggregates_subwords(tiny_bert):
    text = "zebras juggled marmalade"  # words the tiny tokenizer never saw: several subwords each
    words, word_att = attention_for_text(tiny_bert, text, "word")
    tokens, token_att = attention_for_text(tiny_bert, text, "subword")
    assert words[1:-1] == text.split() and words[0] == "[CLS]" and words[-1] == "[SEP]"
    assert len(tokens) > len(words)  # the long word is split into several subwords
    assert word_att.shape == (2, 4, len(words), len(words))
    # Rows still sum to one: "to" sums over subwords, "from" averages over them.
    np.testing.assert_allclose(word_att.sum(-1), 1.0, atol=1e-5)
    html = view_attention(tiny_bert, text, "word")
    assert _payload(html)["level"] == "word" and _payload(html)["tokens"] == words


def test_viewer_leaves_an_sdpa_encoder_sdpa_and_selects_layers():
    """Regression: the viewer switched the caller's model to eager attention for good."""
    from bertology.models.tiny import tiny_encoder

    sdpa = tiny_encoder("bert", attentions=False)
    eager = tiny_encoder("bert", attentions=True)
    words, from_sdpa = attention_for_text(sdpa, "the cat sat", "word")
    assert sdpa.attention_implementation == "sdpa"
    np.testing.assert_allclose(from_sdpa, attention_for_text(eager, "the cat sat", "word")[1], atol=1e-6)
    html = view_attention(sdpa, "the cat sat", "subword", layers=[2])
    assert sdpa.attention_implementation == "sdpa"
    data = _payload(html)
    assert data["layers"] == [2] and data["n_layers"] == 1
    _, second = attention_for_text(eager, "the cat sat", "subword", layers=[2])
    np.testing.assert_allclose(second[0], attention_for_text(eager, "the cat sat", "subword")[1][1])
    with pytest.raises(DataError, match="layers"):
        attention_for_text(eager, "the cat sat", layers=[3])


def test_cli_view_writes_html(tmp_path, tiny_bert):
    model_dir = tmp_path / "tiny"
    tiny_bert.model.save_pretrained(model_dir)
    tiny_bert.tokenizer.save_pretrained(model_dir)
    out = tmp_path / "view"
    result = CliRunner().invoke(app, ["view", "-m", str(model_dir), "--text", "the cat sat", "-o", str(out),
                                      "--level", "subword", "--layers", "2"])
    assert result.exit_code == 0, result.output
    page = out / "attention_view.html"
    data = _payload(page.read_text())
    assert data["level"] == "subword" and data["layers"] == [2]
    assert page.stat().st_mode & 0o044 == 0o044  # world-readable
    bad = CliRunner().invoke(app, ["view", "--text", "x", "--level", "phrase", "--out", str(out)])
    assert bad.exit_code != 0 and isinstance(bad.exception, UsageError) and "--level" in str(bad.exception)


def _open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    page.wait_for_function("document.body.dataset.ready", timeout=120_000)
    assert page.evaluate("document.body.dataset.ready") == "true", page.inner_text("#error")
    return page, errors


@pytest.mark.browser
def test_browser_head_view_and_model_view(browser, tmp_path, tiny_bert):
    path = write_html(view_attention(tiny_bert, "the quick brown fox jumps over the lazy dog", "word"),
                      tmp_path / "view.html")
    page, errors = _open_page(browser, path)
    # Head view drew something on its canvas.
    assert page.evaluate("""() => { const c = document.getElementById('head-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let ink = 0; for (let k = 3; k < d.length; k += 4) if (d[k] > 0) ink++; return ink; }""") > 1000
    page.hover("#head-canvas", position={"x": 30, "y": 40})  # hover a token: redraw without errors
    page.screenshot(path=str(tmp_path / "head.png"))
    page.click("#tab-model")
    page.wait_for_function("document.body.dataset.thumbnails === 'ready'", timeout=60_000)
    assert page.locator("canvas.thumb").count() == 2 * 4
    page.click("canvas.thumb[data-layer='2'][data-head='3']")
    assert page.is_visible("#detail")
    assert page.get_attribute("#detail", "data-layer") == "2"
    assert page.get_attribute("#detail", "data-head") == "3"
    assert page.inner_text("#detail-title") == "L2H3: layer 2, head 3"
    page.screenshot(path=str(tmp_path / "detail.png"))
    page.keyboard.press("Escape")
    assert not page.is_visible("#detail")
    assert errors == []
    assert (tmp_path / "detail.png").stat().st_size > 10_000


@pytest.mark.browser
def test_browser_renders_512_tokens(browser, tmp_path):
    n = 512
    att = _random_attention(2, 4, n, seed=1)
    tokens = ["[CLS]"] + [f"tok{i}" for i in range(n - 2)] + ["[SEP]"]
    path = write_html(render_attention_html(tokens, att, title="512 tokens"), tmp_path / "long.html")
    page, errors = _open_page(browser, path)
    page.click("#tab-model")
    page.wait_for_function("document.body.dataset.thumbnails === 'ready'", timeout=120_000)
    page.click("canvas.thumb[data-layer='1'][data-head='0']")
    assert page.inner_text("#detail-title") == "L1H0: layer 1, head 0"
    assert errors == []


@pytest.mark.browser
def test_browser_controls_draw_a_bounded_number_of_lines_at_512_tokens(browser, tmp_path):
    """Regression: lowering the threshold on a long text drew every line (hundreds of thousands) and froze the
    page. Every control now draws at most the viewer's line cap; its timing is in benchmarks/perf/bench_viewer.py."""
    n, heads = 512, 12
    att = _random_attention(2, heads, n, seed=2)
    tokens = ["[CLS]"] + [f"tok{i}" for i in range(n - 2)] + ["[SEP]"]
    path = write_html(render_attention_html(tokens, att, title="512 tokens"), tmp_path / "long.html")
    page, errors = _open_page(browser, path)
    cap = 1000

    def lines() -> tuple[int, int]:
        return (int(page.evaluate("document.body.dataset.drawnLines")),
                int(page.evaluate("document.body.dataset.linesAbove")))

    page.eval_on_selector("#threshold", "(el) => { el.value = 0; el.dispatchEvent(new Event('input')); }")
    drawn, above = lines()
    assert 0 < drawn <= cap and above > 100_000, (drawn, above)
    assert "strongest" in page.inner_text("#line-count")
    # The lines drawn are the strongest: the threshold that keeps about `cap` lines draws the same number.
    page.select_option("#layer-select", "0")
    drawn, above = lines()
    assert 0 < drawn <= cap < above
    page.dblclick(".chip[data-head='3']")  # one head: its own cap is the whole budget
    drawn, above = lines()
    assert 0 < drawn <= cap and above > drawn
    page.click(".chip[data-head='5']")
    page.hover("#head-canvas", position={"x": 30, "y": 200})  # one token's row: at most n lines per head
    drawn, _ = lines()
    assert 0 < drawn <= 2 * n
    page.eval_on_selector("#threshold", "(el) => { el.value = 0.2; el.dispatchEvent(new Event('input')); }")
    drawn, above = lines()
    assert drawn == above <= 2 * n, "above the threshold and under the cap: every line is drawn"
    assert errors == []


def _decoded(html: str) -> tuple[np.ndarray, np.ndarray]:
    """The page's uint8 weights ``[L, H, n, n]`` and per-head scales, as the page decodes them."""
    data = _payload(html)
    n = len(data["tokens"])
    raw = np.frombuffer(zlib.decompress(base64.b64decode(data["data"])), dtype=np.uint8)
    return raw.reshape(data["n_layers"], data["n_heads"], n, n), np.asarray(data["scales"], dtype=np.float64)


def _lines_in_view(q: np.ndarray, scales: np.ndarray, layer: int, heads, threshold: float,
                   first: int, last: int) -> set[int]:
    """Every line above ``threshold`` with an end in rows ``first..last`` or crossing them (h * n * n + i * n + j)."""
    n = q.shape[-1]
    expected = set()
    for h in heads:
        scale = scales[layer, h] / 255
        q_min = min(256, max(1, math.ceil(threshold / scale - 1e-9)))
        i, j = np.nonzero(q[layer, h] >= q_min)
        keep = (np.minimum(i, j) <= last) & (np.maximum(i, j) >= first)
        expected |= {int(h * n * n + a * n + b) for a, b in zip(i[keep], j[keep])}
    return expected


@pytest.mark.browser
def test_browser_draws_only_the_rows_in_view_and_redraws_on_scroll(browser, tmp_path):
    """At 512 tokens the head view's canvas is the size of its scrolling box, not of the 512 rows; it draws the
    lines that touch the rows in view (an end in them or crossing them), and scrolling redraws the new rows."""
    n, heads, threshold = 512, 3, 0.06
    tokens = ["[CLS]"] + [f"tok{i}" for i in range(n - 2)] + ["[SEP]"]
    html = render_attention_html(tokens, _random_attention(1, heads, n, seed=3), title="512 tokens")
    q, scales = _decoded(html)
    page, errors = _open_page(browser, write_html(html, tmp_path / "long.html"))
    geometry = """() => { const c = document.getElementById('head-canvas'), s = document.getElementById('head-scroll');
        return {canvas: c.getBoundingClientRect().height, top: c.getBoundingClientRect().top - s.getBoundingClientRect().top,
                box: s.clientHeight, full: s.scrollHeight, scroll: s.scrollTop}; }"""
    g = page.evaluate(geometry)
    assert g["canvas"] <= g["box"] + 1 and g["full"] > 5 * g["canvas"], g  # the box, not 512 rows
    page.eval_on_selector("#threshold", f"(el) => {{ el.value = {threshold}; el.dispatchEvent(new Event('input')); }}")

    def drawn() -> tuple[set[int], int, int]:
        edges = set(page.evaluate("window.attentionViewer.drawnEdges()"))
        first, last = (int(page.evaluate(f"document.body.dataset.{k}")) for k in ("firstRow", "lastRow"))
        return edges, first, last

    edges, first, last = drawn()
    row, pad = page.evaluate("window.attentionViewer.rowHeight"), page.evaluate("window.attentionViewer.pad")
    assert first == 0 and last == (g["box"] - pad) // row
    expected = _lines_in_view(q, scales, 0, range(heads), threshold, first, last)
    assert edges == expected and 0 < len(edges) < int(page.evaluate("document.body.dataset.linesAbove"))
    # Scrolling redraws: the rows now in view, and the lines that cross them with both ends out of view.
    page.evaluate("document.getElementById('head-scroll').scrollTop = 3000")
    page.wait_for_function("+document.body.dataset.firstRow > 0")
    edges, first, last = drawn()
    assert first == (3000 - pad) // row and last == (3000 + g["box"] - pad) // row
    expected = _lines_in_view(q, scales, 0, range(heads), threshold, first, last)
    assert edges == expected
    crossing = {e for e in expected if min(divmod(e % (n * n), n)) < first and max(divmod(e % (n * n), n)) > last}
    assert crossing, "some lines cross the view with both ends outside it"
    g = page.evaluate(geometry)
    assert g["scroll"] == 3000 and abs(g["top"]) <= 2, g  # the canvas stays over the scrolling box
    ink = page.evaluate("""() => { const c = document.getElementById('head-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let k = 0; for (let a = 3; a < d.length; a += 4) if (d[a] > 0) k++; return k; }""")
    assert ink > 5000
    # Hover after scrolling: the token under the pointer is the scrolled row; scrolling again moves it.
    page.hover("#head-canvas", position={"x": 30, "y": 200})
    hovered = (3000 + 200 - pad) // row
    page.wait_for_function(f"document.body.dataset.hover === 'left {hovered}'")
    edges, _, _ = drawn()
    row_lines = {h * n * n + hovered * n + j for h in range(heads)
                 for j in np.nonzero(q[0, h, hovered] >= min(256, max(1, math.ceil(threshold / (scales[0, h] / 255) - 1e-9))))[0]}
    assert edges == row_lines and edges
    page.evaluate("document.getElementById('head-scroll').scrollTop = 3140")
    page.wait_for_function(f"document.body.dataset.hover === 'left {hovered + 10}'")
    assert errors == []

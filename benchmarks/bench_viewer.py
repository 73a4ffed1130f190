"""Attention viewer responsiveness at 512 tokens: time of each control's handler, measured inside the page.

The same page twice in one chromium (Debian's, /usr/bin/chromium): ``?maxlines=0`` draws every line above
the threshold (the viewer before the line cap: the threshold slider at 0 froze the page for seconds), the
default draws the strongest 1,000 (sorted once per head by a counting sort over the uint8 weights). Each
control is exercised ``--repeats`` times; the page records ``document.body.dataset.drawMs`` (the draw the
handler triggers, synchronous, so it is the handler's time). Prints the machine, medians, the ratio.

    .venv/bin/python benchmarks/bench_viewer.py [--tokens 512] [--heads 12] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bertology.attention.viewer import render_attention_html, write_html

#: In-page: the handler (dispatching the event runs it synchronously), then a one-pixel read-back, which
#: forces the canvas to rasterise what was stroked (software canvases defer it to the next paint otherwise).
TIMED = """([selector, value, kind]) => {
  const el = document.querySelector(selector), canvas = document.getElementById('head-canvas');
  const t0 = performance.now();
  el.value = value; el.dispatchEvent(new Event(kind));
  canvas.getContext('2d').getImageData(0, 0, 1, 1);
  return performance.now() - t0;
}"""
CONTROLS = {"threshold -> 0": ("#threshold", "0", "input"), "threshold -> 0.01": ("#threshold", "0.01", "input")}


def measure(page, repeats: int) -> dict[str, float]:
    results = {}
    for name, (selector, value, kind) in CONTROLS.items():
        times = []
        for _ in range(repeats):
            page.evaluate(TIMED, ["#threshold", "0.2", "input"])
            times.append(page.evaluate(TIMED, [selector, value, kind]))
        results[name] = statistics.median(times)
        results[name + " lines"] = float(page.evaluate("document.body.dataset.drawnLines"))
    times = [page.evaluate(TIMED, ["#layer-select", str(repeat % 2), "change"]) for repeat in range(repeats)]
    results["layer select (threshold 0.01)"] = statistics.median(times)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ours-only", action="store_true", help="skip the uncapped page (it can take minutes)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    rng = np.random.default_rng(0)
    n = args.tokens
    att = rng.dirichlet(np.full(n, 0.1), size=(2, args.heads, n)).astype(np.float32)
    tokens = ["[CLS]"] + [f"tok{i}" for i in range(n - 2)] + ["[SEP]"]
    folder = Path(tempfile.mkdtemp(prefix="bench-viewer-"))
    path = write_html(render_attention_html(tokens, att, title=f"{n} tokens"), folder / "view.html")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; chromium /usr/bin/chromium; {n} tokens, 2 layers x {args.heads} heads")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        rows = {}
        pages = (("capped (ours)", ""),) if args.ours_only else (("all lines (before)", "?maxlines=0"), ("capped (ours)", ""))
        for label, query in pages:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(path.resolve().as_uri() + query)
            page.wait_for_function("document.body.dataset.ready === 'true'", timeout=120_000)
            rows[label] = measure(page, args.repeats)
            page.close()
        browser.close()
    ours = rows["capped (ours)"]
    before = rows.get("all lines (before)", {k: float("nan") for k in ours})
    print(f"{'control':34s} {'before ms':>10s} {'ours ms':>9s} {'ratio':>7s}   lines before / ours")
    for name in [k for k in ours if not k.endswith(" lines")]:
        lines = f"{before.get(name + ' lines', float('nan')):,.0f} / {ours.get(name + ' lines', float('nan')):,.0f}"
        print(f"{name:34s} {before[name]:10.1f} {ours[name]:9.1f} {before[name] / max(ours[name], 1e-3):6.1f}x   "
              f"{lines if name + ' lines' in ours else ''}")


if __name__ == "__main__":
    main()

"""Attention viewer responsiveness at 512 tokens: time of each control, handler plus drawing, inside the page.

The same page three times in one chromium (Debian's, /usr/bin/chromium): ``?viewport=0&thin=0`` is the viewer
before (a canvas as tall as all N rows: lines up to 7,000 px long rasterised on a 7,188-px canvas, 1.2 px
wide); ``?thin=0`` a canvas the size of the scrolling box, with only the rows in view and the lines that touch
them; the default adds one-device-pixel lines when more than 250 are drawn (software rasterisers draw those as
hairlines, ~10x faster). All draw at most 1,000 lines (the strongest; ``--uncapped`` adds
``?maxlines=0&viewport=0&thin=0``, every line above the threshold, which can take minutes). Each control is
exercised ``--repeats`` times and the median printed.

Time of a control = its event handler (dispatching the event runs it synchronously) + the draw + a one-pixel
read-back of the canvas, which forces the canvas to rasterise what was stroked (software canvases defer it to
the next paint otherwise). Hover and scroll redraw in the next animation frame: their time is the handler +
that draw (``document.body.dataset.drawMs``) + the read-back, not the wait for the frame.

    .venv/bin/python -m benchmarks.perf.bench_viewer [--tokens 512] [--heads 12] [--repeats 5]

The run is stored as ``benchmarks/results/viewer_controls_cpu.json`` (``--name``) with the load average before
and after: timings on a shared machine vary with load, the ratios within one run much less.
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

from benchmarks.stored import save_run, table  # noqa: E402

#: What this benchmark times ours against, in the same process (tests/test_benchmarks_layout.py: every
#: perf script declares one).
BASELINE = "the viewer before: a canvas as tall as all rows, 1.2 px lines (?viewport=0&thin=0)"

#: The published row label of each control.
LABELS = {"threshold -> 0": "threshold slider -> 0", "threshold -> 0.01": "threshold slider -> 0.01",
          "layer select": "layer select (layer already sorted)",
          "layer select, first visit": "layer select, first visit (one sample)",
          "head chip click": "head chip click", "head chip double-click": "head chip double-click (one head)",
          "hover a token": "hover a token", "scroll (rows in view)": "scroll (rows in view redrawn)"}

#: In-page, synchronous controls: the handler, then the read-back.
TIMED = """([selector, value, kind]) => {
  const el = document.querySelector(selector), canvas = document.getElementById('head-canvas');
  const t0 = performance.now();
  if (value !== null) el.value = value;
  el.dispatchEvent(new Event(kind));
  canvas.getContext('2d').getImageData(0, 0, 1, 1);
  return performance.now() - t0;
}"""
#: In-page, controls that redraw in the next animation frame (hover, scroll): handler + draw + read-back.
TIMED_FRAME = """([kind, arg]) => new Promise((resolve) => {
  const canvas = document.getElementById('head-canvas'), scroller = document.getElementById('head-scroll');
  const ds = document.body.dataset, draws = +ds.draws;
  const observer = new MutationObserver(() => {
    if (+ds.draws === draws) return;
    observer.disconnect();
    const t1 = performance.now();
    canvas.getContext('2d').getImageData(0, 0, 1, 1);
    resolve(handler + +ds.drawMs + (performance.now() - t1));
  });
  observer.observe(document.body, {attributes: true, attributeFilter: ['data-draws']});
  setTimeout(() => { observer.disconnect(); resolve(NaN); }, 10000);  // no redraw came
  const t0 = performance.now();
  if (kind === 'scroll') scroller.scrollTop = arg;
  else {
    const r = canvas.getBoundingClientRect();
    canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + 30, clientY: r.top + arg, bubbles: true}));
  }
  const handler = performance.now() - t0;
})"""
SET_THRESHOLD = "(v) => { const el = document.getElementById('threshold'); el.value = v; el.dispatchEvent(new Event('input')); }"


def measure(page, repeats: int, viewport: bool) -> dict[str, float]:
    results = {}
    page.evaluate("document.getElementById('head-scroll').scrollTop = 0")
    for name, value in (("threshold -> 0", "0"), ("threshold -> 0.01", "0.01")):
        times = []
        for _ in range(repeats):
            page.evaluate(TIMED, ["#threshold", "0.2", "input"])
            times.append(page.evaluate(TIMED, ["#threshold", value, "input"]))
        results[name] = statistics.median(times)
        results[name + " lines"] = float(page.evaluate("document.body.dataset.drawnLines"))
    page.evaluate(SET_THRESHOLD, "0")  # the worst case from here on: every control draws up to the cap
    times = [page.evaluate(TIMED, ["#layer-select", str(repeat % 2), "change"]) for repeat in range(repeats)]
    results["layer select, first visit"] = times[0]  # sorts the new layer's heads (once per layer)
    results["layer select"] = statistics.median(times[1:])
    times = [page.evaluate(TIMED, [".chip[data-head='5']", None, "click"]) for _ in range(repeats)]
    results["head chip click"] = statistics.median(times)
    times = [page.evaluate(TIMED, [f".chip[data-head='{3 + repeat % 2}']", None, "dblclick"]) for repeat in range(repeats)]
    results["head chip double-click"] = statistics.median(times)
    for chip in range(12):  # every head on again
        page.evaluate("(h) => { const c = document.querySelector(`.chip[data-head='${h}']`); "
                      "if (c && !c.classList.contains('on')) c.click(); }", chip)
    times = [page.evaluate(TIMED_FRAME, ["hover", 100 + 40 * repeat]) for repeat in range(repeats)]
    results["hover a token"] = statistics.median(times)
    results["hover a token lines"] = float(page.evaluate("document.body.dataset.drawnLines"))
    page.evaluate("document.getElementById('head-canvas').dispatchEvent(new MouseEvent('mouseleave'))")
    page.wait_for_timeout(200)  # let the frame with the hover cleared run
    if not viewport:  # the full-height canvas is not redrawn on scroll: the browser moves the whole bitmap
        results["scroll (rows in view)"] = float("nan")
        return results
    times = [page.evaluate(TIMED_FRAME, ["scroll", 700 * (repeat + 1)]) for repeat in range(repeats)]
    results["scroll (rows in view)"] = statistics.median(times)
    results["scroll (rows in view) lines"] = float(page.evaluate("document.body.dataset.drawnLines"))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ours-only", action="store_true", help="only the viewport canvas")
    parser.add_argument("--uncapped", action="store_true", help="also every line (?maxlines=0; can take minutes)")
    parser.add_argument("--name", default="viewer_controls_cpu", help="stored run's name")
    args = parser.parse_args()
    load_before = os.getloadavg()
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
        pages = [("full-height canvas (before)", "?viewport=0&thin=0"), ("viewport canvas, 1.2 px", "?thin=0"),
                 ("viewport canvas (ours)", "")]
        if args.uncapped:
            pages.insert(0, ("every line, full canvas", "?maxlines=0&viewport=0&thin=0"))
        if args.ours_only:
            pages = pages[-1:]
        for label, query in pages:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(path.resolve().as_uri() + query)
            page.wait_for_function("document.body.dataset.ready === 'true'", timeout=120_000)
            rows[label] = measure(page, args.repeats, viewport="viewport=0" not in query)
            page.close()
        browser.close()
    ours = rows["viewport canvas (ours)"]
    nan = {k: float("nan") for k in ours}
    columns = [label for label, _ in pages]
    print(f"{'control':26s} " + " ".join(f"{label[:26]:>26s}" for label in columns) + "   ratio   lines before / ours")
    for name in [k for k in ours if not k.endswith(" lines")]:
        before = rows.get("full-height canvas (before)", nan)
        cells = " ".join(f"{rows[label][name]:23.1f} ms" for label in columns)
        lines = (f"{before.get(name + ' lines', float('nan')):,.0f} / {ours[name + ' lines']:,.0f}"
                 if name + " lines" in ours else "")
        print(f"{name:26s} {cells} {before[name] / max(ours[name], 1e-3):6.1f}x   {lines}")
    load_after = os.getloadavg()
    print(f"load average (1 min) before {load_before[0]:.1f}, after {load_after[0]:.1f}")
    if args.ours_only or args.uncapped:
        return  # the published table compares exactly the three pages
    before, viewport = rows["full-height canvas (before)"], rows["viewport canvas, 1.2 px"]

    def shown(value: float) -> str:
        return "not redrawn" if value != value else f"{value:.1f} ms"

    def lines(row: dict, name: str) -> str:
        value = row.get(f"{name} lines")
        return "–" if value is None or value != value else f"{value:,.0f}"

    published = [[LABELS[name], shown(before[name]), shown(viewport[name]), f"**{shown(ours[name])}**",
                  "–" if before[name] != before[name] else f"{before[name] / ours[name]:.0f}x",
                  f"{lines(before, name)} / {lines(ours, name)}"]
                 for name in LABELS]
    save_run(args.name, raw={"ms": rows, "tokens": n, "heads": args.heads, "repeats": args.repeats,
                             "load_average_before": load_before, "load_average_after": load_after},
             tables={"controls": table(["control", "before", "viewport, 1.2 px", "**ours**", "ratio",
                                        "lines drawn, before / ours"], published)})


if __name__ == "__main__":
    main()

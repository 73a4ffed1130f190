"""`bertology report`: the battery on one model as a self-contained HTML report."""

from bertology._lazy import lazy_exports

# Imported on first use (bertology._lazy), so `bertology report --help` does not load torch or matplotlib.
__getattr__ = lazy_exports(__name__, {
    "cache": ("ResultCache",),
    "context": ("ReportContext",),
    "document": ("Figure", "Link", "Section", "Table", "Text", "render"),
    "run": ("ReportOutcome", "build_comparison", "build_report", "run_report", "section_names"),
})

__all__ = ["Figure", "Link", "ReportContext", "ReportOutcome", "ResultCache", "Section", "Table", "Text",
           "build_comparison", "build_report", "render", "run_report", "section_names"]

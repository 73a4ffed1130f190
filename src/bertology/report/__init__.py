"""`bertology report`: the battery on one model as a self-contained HTML report."""

from bertology.report.cache import ResultCache
from bertology.report.context import ReportContext
from bertology.report.document import Figure, Link, Section, Table, Text, render
from bertology.report.run import build_comparison, build_report, section_names

__all__ = ["Figure", "Link", "ReportContext", "ResultCache", "Section", "Table", "Text", "build_comparison",
           "build_report", "render", "section_names"]

"""`bertology report`: the battery on one model as a self-contained HTML report."""

from bertology.report.cache import ResultCache
from bertology.report.document import Figure, Link, Section, Table, Text, render
from bertology.report.run import ReportContext, build_report

__all__ = ["Figure", "Link", "ReportContext", "ResultCache", "Section", "Table", "Text", "build_report", "render"]

"""memaudit: what a layer keeps alive for backward, per tensor, and a CI gate on it."""

from memaudit.recorder import Capture, capture
from memaudit.report import CaseReport, Report, Row, Totals

__version__ = "0.1.0"

__all__ = ["Capture", "CaseReport", "Report", "Row", "Totals", "__version__", "capture"]

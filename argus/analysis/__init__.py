"""Static verification of Argus kernels: tags, tag assertions and hazards, proved with Z3."""

from argus.analysis.findings import UNKNOWN, VERIFIED, VIOLATED, Finding, Report
from argus.analysis.verify import verify

__all__ = ["UNKNOWN", "VERIFIED", "VIOLATED", "Finding", "Report", "verify"]

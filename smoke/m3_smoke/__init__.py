"""m3_smoke: the smoke-test suite shipped inside every m3-image build.

Runs with the image's own Python, torch and patched vLLM only (no pytest, no
numpy, no network). Entry point: ``python3 -m m3_smoke run|record-golden``.
"""

__version__ = "1.0.0"

# Stable check names: the JSON report, the JUnit XML and the failure tests use them.
CHECK_NAMES = (
    "fingerprints",
    "tables_installed",
    "tables_lookup",
    "backend_marker_gfx942",
    "backend_marker_gfx950",
    "swiglu_params",
    "numerics_vs_native",
)

"""Fixtures for tests/builder; helpers and fixture bodies live in m3_builder_testlib (beside this
file)."""

import sys
from pathlib import Path

# pytest puts this folder on sys.path for the test modules, but not always before loading
# this conftest (e.g. `pytest tests/builder/test_x.py`); make the helper module importable.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from m3_builder_testlib import pristine_vllm_site, project, tree, write_series, write_spec  # noqa: E402,F401

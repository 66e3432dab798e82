"""Fast unit tests, one file per module: pure functions only, no engine, no registry, no network.

`make unit` runs this folder alone (seconds). A test that needs dockerd, a registry, the
vLLM sources or a GPU belongs in the other folders (see docs/development.md).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

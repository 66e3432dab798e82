import sys

from m3_smoke.cli import main

sys.exit(main())

"""`python -m harvester_quota.testbench`: the test bench's command line (see .cli)."""

import sys

from .cli import main

sys.exit(main())

"""`python -m sampleforge ...`: the command line, as the `sampleforge` script (torchrun
launches `-m sampleforge train ... --distributed true` this way)."""

import sys

from sampleforge.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

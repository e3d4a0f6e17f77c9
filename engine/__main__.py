"""``python -m engine`` is the ``npu-studio`` command."""

import sys

from engine.cli import main

sys.exit(main())

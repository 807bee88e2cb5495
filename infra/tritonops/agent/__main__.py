"""``python -m tritonops.agent`` (in the checkout) or ``python3 tritonops-agent.pyz`` (the shipped file)."""

import sys

from .cli import main

sys.exit(main())

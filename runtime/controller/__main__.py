"""`python -m runtime.controller`: the controller process (runtime/controller/main.py)."""

import sys

from runtime.controller.main import main

sys.exit(main())

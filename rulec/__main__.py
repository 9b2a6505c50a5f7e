"""`python -m rulec`: the same command as `rulec`."""
import sys

from rulec.cli import main

sys.exit(main())

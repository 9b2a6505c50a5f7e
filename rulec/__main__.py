"""`python -m rulec`: the same command as `rulec`."""
import sys

from rulec.commands.cli import main

sys.exit(main())

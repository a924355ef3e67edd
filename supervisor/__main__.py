import sys

from supervisor.cli import main

sys.exit(main())

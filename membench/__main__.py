import sys

from membench.cli import main

sys.exit(main())

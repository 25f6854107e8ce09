import sys

from egressproxy.cli import main

sys.exit(main())

import sys

from dockerproxy.cli import main

sys.exit(main())

import sys

from bot.ops.cli import main

sys.exit(main())

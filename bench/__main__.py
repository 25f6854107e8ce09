import sys

from bench.executor_bench import main

sys.exit(main())

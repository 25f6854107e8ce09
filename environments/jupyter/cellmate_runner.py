"""The sandbox's entry point (its PID 1): `python -I /opt/cellmate/cellmate_runner.py`.

The runner is the package `runner` beside this file, and the protocol it speaks is
`executor/wire/`, copied beside it into the image (/opt/cellmate/executor/wire/), the
same files the host imports. `-I` leaves this folder off the path (and everything the
environment could add to it), so it joins the path here, first.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from runner.runner import main

    main()

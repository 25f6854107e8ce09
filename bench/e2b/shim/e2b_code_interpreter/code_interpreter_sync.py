"""`e2b_code_interpreter.code_interpreter_sync` (see bench/e2b/sandbox.py)."""

from bench.e2b.sandbox import Sandbox

__all__ = ["Sandbox"]

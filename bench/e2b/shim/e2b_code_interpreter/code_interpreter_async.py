"""`e2b_code_interpreter.code_interpreter_async` (see bench/e2b/sandbox.py)."""

from bench.e2b.sandbox import AsyncSandbox

__all__ = ["AsyncSandbox"]

"""`e2b_code_interpreter.models` (see bench/e2b/models.py)."""

from bench.e2b.models import (
    Context,
    Execution,
    ExecutionError,
    Logs,
    MIMEType,
    OutputMessage,
    Result,
)

__all__ = ["Context", "Execution", "ExecutionError", "Logs", "MIMEType", "OutputMessage", "Result"]

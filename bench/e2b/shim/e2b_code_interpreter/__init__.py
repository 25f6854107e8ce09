"""`e2b_code_interpreter` for E2B's test suite, over Cellmate (see bench/e2b)."""

from bench.e2b.charts import (
    BarChart,
    BoxAndWhiskerChart,
    Chart,
    ChartType,
    LineChart,
    PieChart,
    ScaleType,
    ScatterChart,
    SuperChart,
)
from bench.e2b.models import (
    Context,
    Execution,
    ExecutionError,
    Logs,
    MIMEType,
    OutputMessage,
    Result,
)
from bench.e2b.sandbox import AsyncSandbox, CommandResult, EntryInfo, Sandbox

__all__ = [
    "AsyncSandbox",
    "BarChart",
    "BoxAndWhiskerChart",
    "Chart",
    "ChartType",
    "CommandResult",
    "Context",
    "EntryInfo",
    "Execution",
    "ExecutionError",
    "LineChart",
    "Logs",
    "MIMEType",
    "OutputMessage",
    "PieChart",
    "Result",
    "Sandbox",
    "ScaleType",
    "ScatterChart",
    "SuperChart",
]

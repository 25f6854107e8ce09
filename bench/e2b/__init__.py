"""E2B's code-interpreter SDK surface over Cellmate's executor, to run E2B's own Python test
suite against Cellmate: `python -m bench e2b --suite PATH` (see bench/e2b/suite.py).

`shim/` holds the importable names (`e2b_code_interpreter`, `e2b`) as thin re-exports of
this package; the suite runs with `shim/` first on `sys.path`. The mapping itself lives
here: `models` (mime bundles to E2B's results), `charts` (chart JSON to chart classes),
`sandbox` (sandboxes, contexts, files and commands over `Executor` sessions).
"""

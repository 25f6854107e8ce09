"""Running the bot: the `cellmate` command and everything an operator starts or checks.

The composition root is here (`cli.py`, `services.py`, `serve.py`): settings become
storage (`storage_setup.py`), the model client (`model_setup.py`), the executor, the agent
and the conversations, and every configured chat platform (`front_ends.py`, one `Platform`
seam for Discord and Slack) is served in one process beside the HTTP server (`http.py`:
links, /healthz from `health.py`, /metrics). `doctor.py` checks a set-up (with
`cluster_enforcement.py` on Kubernetes, `database_check.py` for the bot's tables),
`images.py` builds the bot's images, and `exec_output.py` shows `cellmate exec` results.
"""

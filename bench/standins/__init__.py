"""Stand-ins for the services the bot talks to: Discord (gateway and REST), Slack (Web API,
Socket Mode and HTTP events) and an OpenAI-compatible model server, each on loopback. The
tests and `python -m bench turns` drive the real platform clients against them."""

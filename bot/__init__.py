"""Cellmate's chat side: settings, the command line, and (later) the agent and platforms."""

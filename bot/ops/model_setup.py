"""Building the model client the settings ask for: OpenAI, Azure OpenAI, or any
OpenAI-compatible server."""

from __future__ import annotations

import openai

from bot.settings import ModelSettings


def build_model_client(settings: ModelSettings) -> openai.AsyncOpenAI | None:
    """None when no model is configured (the bot then runs code blocks directly)."""
    if not settings.configured:
        return None
    if settings.azure_endpoint:
        return openai.AsyncAzureOpenAI(
            azure_endpoint=settings.azure_endpoint,
            api_key=settings.azure_api_key or settings.api_key,
            api_version=settings.api_version,
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )
    return openai.AsyncOpenAI(
        # Local servers such as Ollama need no key, but the client insists on one.
        api_key=settings.api_key or "not-needed",
        base_url=settings.base_url or None,
        timeout=settings.timeout_s,
        max_retries=settings.max_retries,
    )

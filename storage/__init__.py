"""Artifact storage (Azure Blob and local files) for what sandboxes produce."""

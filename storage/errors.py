"""Storage failures.

StorageError(Exception)
├── StorageUnavailable(StorageError, ConnectionError)   the store does not answer
├── StorageAuthError(StorageError, PermissionError)     the credentials are refused
└── InvalidKey(StorageError, ValueError)                a key that could leave its place
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage failure."""


class StorageUnavailable(StorageError, ConnectionError):
    """The store did not answer (after the bounded retries)."""


class StorageAuthError(StorageError, PermissionError):
    """The store refused the configured credentials."""


class InvalidKey(StorageError, ValueError):
    """A key with a part that is empty, `..`, or not made of safe characters."""

"""What the proxy lets a sandbox be: the operator's choices, with safe defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SANDBOX_LABEL = "cellmate.sandbox"
"""Every container and volume the proxy creates carries it, and only those can be touched."""
INSTANCE_LABEL = "cellmate.instance"
"""With the proxy's instance as its value: the proxy serves one bot instance's sandboxes."""
INSTANCE = re.compile(r"[A-Za-z0-9_.:@+=-]{1,128}")

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Policy:
    instance: str = "default"
    """The bot instance whose sandboxes this proxy serves (the bot's CELLMATE_INSTANCE)."""
    image_repository: str = "cellmate-sandbox"
    """Containers start only from tags of this repository (the operator builds them)."""
    uid: int = 61000
    gid: int = 61000
    """The one user sandboxes run as; never 0, and best one that no host account has."""
    runtimes: frozenset[str] = field(default_factory=lambda: frozenset({"runc", "runsc"}))
    allow_network: bool = False
    """Bridge networking for sandboxes; off unless the operator also enables it for the bot."""
    egress_network: bool = False
    """The instance's sandbox network (CELLMATE_NETWORK=allowlist): sandboxes may join it,
    and the executor may make it, exactly as executor/egress.py describes it."""
    egress_proxy_port: int = 3128
    """The egress proxy's port on that network's gateway (the bot's
    CELLMATE_NETWORK_PROXY_PORT)."""
    max_packages_mb: int = 4096
    max_memory_mb: int = 16 * 1024
    max_cpus: float = 8.0
    max_pids: int = 4096
    max_tmp_mb: int = 4096
    max_data_mb: int = 16 * 1024
    max_file_size_mb: int = 4096
    max_open_files: int = 65536
    max_log_mb: int = 100
    max_shm_mb: int = 1024
    max_upload_mb: int = 1024
    """Largest tar stream put into a sandbox in one request (the volume's size caps it too)."""
    max_upload_members: int = 100_000
    """Most files and folders in one tar stream put into a sandbox."""
    min_api_version: tuple[int, int] = (1, 40)
    """Older API versions read bodies differently (start-time HostConfig, top-level limits)."""

    def __post_init__(self) -> None:
        if self.uid <= 0 or self.gid <= 0:
            raise ValueError("the sandbox user and group must be numeric and not 0 (root)")
        if not INSTANCE.fullmatch(self.instance):
            raise ValueError(f"the instance name {self.instance!r} is not a valid label value")
        if not self.runtimes:
            raise ValueError("at least one container runtime must be allowed")

    @property
    def user(self) -> str:
        return f"{self.uid}:{self.gid}"

    @property
    def labels(self) -> dict[str, str]:
        """The labels every object the proxy creates or touches carries, exactly."""
        return {SANDBOX_LABEL: "1", INSTANCE_LABEL: self.instance}

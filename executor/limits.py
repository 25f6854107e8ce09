"""Resource and safety limits for one sandbox; the defaults are the safe ones."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from executor.egress import DEFAULT_PIP_INDEX_URL, DEFAULT_PROXY_PORT, NetworkMode, check_index_url
from executor.languages import configured_languages, offered, parse_languages

Runtime = Literal["runc", "runsc"]
PRELOADABLE = ("numpy", "pandas", "matplotlib")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
BOT_VARIABLES = frozenset(
    {
        "DISCORD_TOKEN",
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "DOCKER_HOST",
        "KUBECONFIG",
    }
)


def is_bot_variable(name: str) -> bool:
    """Whether a variable is one of the bot's own settings or secrets."""
    upper = name.upper()
    return upper in BOT_VARIABLES or upper.startswith(("CELLMATE_", "AZURE_", "SLACK_"))


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    memory_mb: int = 1024
    """Memory limit; swap is set equal, so the sandbox cannot page out past it."""
    cpus: float = 1.0
    pids: int = 256
    timeout_s: float = 60.0
    """Wall-clock limit for one run, enforced by the host."""
    interrupt_grace_s: float = 3.0
    """After the time limit, how long an interrupted kernel may take before it is killed."""
    startup_timeout_s: float = 60.0
    output_bytes: int = 1_000_000
    """Text output (stdout + stderr) kept per run; the rest is cut with a note."""
    rich_output_bytes: int = 20_000_000
    """Rich outputs (images, HTML, JSON) kept per run."""
    max_rich_results: int = 100
    """Rich results (displays, charts, the last value) kept per run; the rest are counted."""
    background_processes: bool = False
    """Whether processes a run starts may keep running after it; by default the sandbox
    ends them when the run ends (the kernel and its threads stay)."""
    tmp_mb: int = 256
    data_mb: int = 512
    """Size of /mnt/data, the only place where files persist during a run."""
    file_size_mb: int = 256
    """Largest file a process may write (RLIMIT_FSIZE)."""
    open_files: int = 1024
    log_mb: int = 1
    network: bool = False
    """The whole network (Docker's bridge, runc only): unsafe, every address the host reaches.
    `egress="allowlist"` is the safe door."""
    egress: NetworkMode = "off"
    """CELLMATE_NETWORK: `off`, no network at all; `allowlist`, a network whose only
    reachable address is the egress proxy (see executor/egress.py)."""
    pip_index_url: str = DEFAULT_PIP_INDEX_URL
    """CELLMATE_PIP_INDEX_URL: the index pip uses through the proxy in allowlist mode."""
    proxy_port: int = DEFAULT_PROXY_PORT
    """CELLMATE_NETWORK_PROXY_PORT: the egress proxy's port on the sandbox network."""
    packages_mb: int = 512
    """Size of the place `pip install` writes to in allowlist mode."""
    trusted_ca: str = field(default="", metadata={"derived": True})
    """Not a setting (the bot derives it): a CA certificate (PEM) the sandbox trusts besides
    the usual ones, in allowlist mode: the installation's own, with which the egress proxy
    terminates TLS to add a host's secret. Public; its key stays with the proxy."""
    runtime: Runtime = "runc"
    uid: int = 61000
    """The user that code runs as, and that owns /mnt/data: one that no host account has."""
    gid: int = 61000
    max_output_files: int = 100
    max_output_file_mb: int = 50
    max_output_total_mb: int = 100
    max_output_depth: int = 8
    max_input_files: int = 20
    max_input_total_mb: int = 100
    preload: str = "auto"
    """What a new sandbox's kernel imports in the background once it starts, so that a first
    chart or DataFrame does not wait for it: some of numpy, pandas, matplotlib
    (comma-separated), or `none`. `auto`: all three under runc; numpy and matplotlib under
    runsc, where pandas (which brings pyarrow) costs every idle sandbox about 30 MB more."""
    env_allowed: tuple[str, ...] = ()
    """Environment variables a session may set (`Session.set_env`), by name; never the
    bot's own (its tokens and keys, CELLMATE_*)."""
    languages: tuple[str, ...] = field(default_factory=configured_languages)
    """The languages besides Python that the sandbox image has kernels for, and that runs
    and chat offer: some of r, javascript, typescript (which comes with javascript) and
    bash, or none (`CELLMATE_SANDBOX_LANGUAGES`, which the image is built with too)."""

    def container_spec(self) -> tuple[object, ...]:
        """The limits fixed when a container is created; the rest apply per run."""
        return (
            self.memory_mb,
            self.cpus,
            self.pids,
            self.tmp_mb,
            self.data_mb,
            self.file_size_mb,
            self.open_files,
            self.log_mb,
            self.network,
            self.egress,
            self.pip_index_url if self.egress == "allowlist" else "",
            self.proxy_port if self.egress == "allowlist" else 0,
            self.packages_mb if self.egress == "allowlist" else 0,
            self.trusted_ca if self.egress == "allowlist" else "",
            self.runtime,
            self.uid,
            self.gid,
            self.preloaded(),
        )

    @property
    def image_languages(self) -> tuple[str, ...]:
        """The language packages the sandbox image has (what its tag is computed from)."""
        return parse_languages(",".join(self.languages))

    @property
    def other_languages(self) -> tuple[str, ...]:
        """The languages besides Python that runs may be in (TypeScript with JavaScript)."""
        return offered(self.image_languages)

    def preloaded(self) -> tuple[str, ...]:
        """The modules named by `preload`, in the order the warm-up imports them."""
        if self.preload == "auto":
            return PRELOADABLE if self.runtime == "runc" else ("numpy", "matplotlib")
        named = self._preload_names()
        return tuple(name for name in PRELOADABLE if name in named)

    def _preload_names(self) -> set[str]:
        return {part.strip() for part in self.preload.split(",")} - {"", "none"}

    def __post_init__(self) -> None:
        positive = {
            "memory_mb": self.memory_mb,
            "cpus": self.cpus,
            "pids": self.pids,
            "timeout_s": self.timeout_s,
            "output_bytes": self.output_bytes,
            "tmp_mb": self.tmp_mb,
            "data_mb": self.data_mb,
            "packages_mb": self.packages_mb,
            "max_rich_results": self.max_rich_results,
            "uid": self.uid,
            "gid": self.gid,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"sandbox limit {name} must be positive, got {value}")
        if self.memory_mb < 128:
            raise ValueError("sandbox limit memory_mb must be at least 128 (a kernel needs ~80 MB)")
        for name in self.env_allowed:
            if not ENV_NAME.fullmatch(name) or is_bot_variable(name):
                raise ValueError(
                    f"{name!r} cannot be allowed in sandboxes: give plain names that are not "
                    "the bot's own settings or secrets"
                )
        parse_languages(",".join(self.languages))  # ValueError names what it does not know
        if self.preload != "auto":
            unknown = self._preload_names() - set(PRELOADABLE)
            if unknown:
                raise ValueError(
                    f"sandbox preload {self.preload!r} names {', '.join(sorted(unknown))}: "
                    f"use auto, none, or some of {', '.join(PRELOADABLE)}"
                )
        if self.runtime not in ("runc", "runsc"):
            raise ValueError(f"unknown container runtime {self.runtime!r} (use runc or runsc)")
        if self.egress not in ("off", "allowlist"):
            raise ValueError(f"unknown network mode {self.egress!r} (use off or allowlist)")
        if self.network and self.egress == "allowlist":
            raise ValueError(
                "the whole network (network) and the allowlist network cannot both be on: "
                "allowlist mode gives sandboxes the proxy only"
            )
        if not 0 < self.proxy_port < 65536:
            raise ValueError(f"the egress proxy port must be 1-65535, got {self.proxy_port}")
        check_index_url(self.pip_index_url)
        if self.network and self.runtime == "runsc":
            raise ValueError(
                "network access is not available under runsc here: its runtime is registered "
                "with --network=none; use runtime runc to enable the sandbox network, or the "
                "allowlist network (CELLMATE_NETWORK=allowlist), which works under runsc"
            )

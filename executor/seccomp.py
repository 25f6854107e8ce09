"""The seccomp profile Docker sandboxes run under: the system calls their code may make.

It follows the Docker engine's default profile (an allowlist: every call not named is
refused with EPERM) as it applies to a container with no capabilities, and refuses more:

- `io_uring_setup`, `io_uring_enter`, `io_uring_register` (ENOSYS, as on a kernel without
  io_uring, so a library falls back to ordinary reads and writes): the default allows
  them, and io_uring has been the source of a long run of kernel privilege escalations;
  nothing a notebook imports needs it.
- `ptrace`, `process_vm_readv`, `process_vm_writev`: the default allows them on kernels
  from 4.8. The user's code runs as the same user as the runner, which holds the key that
  seals the protocol; these calls would read and write its memory. No notebook debugs or
  traces other processes.
- `personality` keeps only PER_LINUX (0) and the query (0xffffffff): the default also
  allows PER_LINUX32 and UNAME26 (uname then reports a 2.6 kernel to old programs; it once
  leaked kernel memory, CVE-2012-0957). A notebook needs neither; ADDR_NO_RANDOMIZE (no
  address randomisation) stays refused, as in the default.
- `modify_ldt` (x86 only): 16-bit segments for Wine and DOS emulators; a history of
  kernel bugs.
- `name_to_handle_at`: file handles are only good for `open_by_handle_at`, which needs a
  capability the sandbox never has.

The calls the default gates on capabilities stay refused, and the profile does not carry
those rules at all, so adding a capability to a sandbox would never open them: among them
`bpf`, `perf_event_open`, `userfaultfd`, `keyctl`/`add_key`/`request_key`,
`kexec_load`/`kexec_file_load`, `mount`/`umount2`, `unshare`/`setns` and `clone` or
`clone3` with namespace flags (`clone3` answers ENOSYS so that the C library falls back to
`clone`, whose flags the profile can check), module loading, `reboot`, `swapon`, `acct`,
`syslog` and setting the clock. `socket` refuses AF_VSOCK (40) as the default does.

Under gVisor (runsc) the engine hands this profile to the runtime, which ignores it unless
it runs with `--oci-seccomp`: gVisor's own kernel answers the sandbox's system calls, has
no io_uring unless started with `--iouring`, and meets the host through its own, far
smaller, filter. Sandboxes under runsc start and run the same either way.

The profile is data (seccomp_profile.json beside this module); the engine, not our code,
enforces it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

PROFILE_FILE = "seccomp_profile.json"


@cache
def _text() -> str:
    loaded = json.loads(resources.files(__package__).joinpath(PROFILE_FILE).read_text("utf-8"))
    return json.dumps(loaded, sort_keys=True, separators=(",", ":"))


def profile() -> dict[str, Any]:
    """The profile as the engine reads it (a fresh copy: callers may change it)."""
    loaded: dict[str, Any] = json.loads(_text())
    return loaded


def profile_json() -> str:
    """The profile as compact JSON with sorted keys: the same text for the same profile, so
    that `seccomp=` + this text is a stable security option."""
    return _text()

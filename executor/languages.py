"""The languages a sandbox image may have beside Python, which it always has.

Which ones an image gets is CELLMATE_SANDBOX_LANGUAGES (a comma list of r, javascript,
typescript and bash, where TypeScript comes in JavaScript's kernel package, or `none` for
Python only; unset or empty: all of them), read by `configured_languages` when the image is
built and when the bot computes the tag it looks for; the bot's settings (`.env` included)
give the same to the executor as `SandboxLimits.languages`. Everything here that goes into
the image (the Debian package names, the kernelspecs, the digest of the JavaScript kernel's
npm lock file) is part of the image's tag, and lives in this module rather than in files beside the
Dockerfile, so that the bot's own image, which carries the executor package, computes the
same tag.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

LANGUAGES = ("r", "javascript", "bash")
"""In the order the image's label lists them."""
VARIABLE = "CELLMATE_SANDBOX_LANGUAGES"
LABEL = "org.cellmate.languages"

DEBS: dict[str, tuple[str, ...]] = {
    "r": ("r-base-core", "r-cran-irkernel", "r-cran-ggplot2"),
    "javascript": ("nodejs",),
    "bash": (),
}
"""Debian bookworm packages per language (apt adds what they depend on)."""

TSLAB = "/opt/cellmate/npm/node_modules/tslab/bin/tslab"
TSLAB_RESULT = "/opt/cellmate/runner/tslab_result.js"
"""Loaded by Node before tslab: what turns a cell's last value into its result (TSLAB_PATCH)."""


def _tslab(*flags: str) -> list[str]:
    """tslab's kernel command (its JavaScript mode takes `--js`)."""
    command = ["/usr/bin/node", "--require", TSLAB_RESULT, TSLAB, "kernel"]
    return [*command, "--config-path", "{connection_file}", *flags]


KERNELSPECS: dict[str, dict[str, dict[str, object]]] = {
    "r": {
        "r": {
            "argv": [
                "/usr/bin/R",
                "--slave",
                "--no-save",
                "--no-restore",
                "-e",
                "IRkernel::main()",
                "--args",
                "{connection_file}",
            ],
            "display_name": "R",
            "language": "R",
        },
    },
    "javascript": {
        "javascript": {
            "argv": _tslab("--js"),
            "display_name": "JavaScript",
            "language": "javascript",
        },
        "typescript": {
            "argv": _tslab(),
            "display_name": "TypeScript",
            "language": "typescript",
        },
    },
    "bash": {
        "bash": {
            "argv": ["/opt/venv/bin/python", "-m", "bash_kernel", "-f", "{connection_file}"],
            "display_name": "Bash",
            "language": "bash",
            "codemirror_mode": "shell",
        },
    },
}
"""Each language's kernelspecs by name, installed under /opt/venv/share/jupyter/kernels."""

NPM_DIR = "npm"
"""Beside the Dockerfile: package.json and package-lock.json of the JavaScript kernel (tslab);
node_modules is installed there on the host."""
NPM_LOCK_SHA256 = "c538dfa1a1bb055fbfc960d6971c24ea9fb77de91b5778ad13e028c8e69c40c4"
"""npm/package-lock.json's digest, which the tag follows: a build refuses a lock file that
does not match (after changing it, put its new digest here)."""
TSLAB_PATCH_FILE = "tslab/dist/executor.js"
"""Under node_modules: tslab's executor, which prints a cell's last value."""
TSLAB_PATCH = (
    "delete exports[converted.lastExpressionVar];\n            console.log(ret);",
    "delete exports[converted.lastExpressionVar];\n"
    '            const show = globalThis[Symbol.for("cellmate.result")];\n'
    '            if (typeof show === "function") show(ret); else console.log(ret);',
)
"""The one change the image makes to tslab (exact text, before and after): a cell's last
value goes to the function runner/tslab_result.js sets, which returns it as the cell's
result as Python's kernel does, rather than to stdout. The build applies it to the freshly
installed node_modules and fails if the text is not found exactly once (a new tslab)."""


NAMES = ("r", "javascript", "typescript", "bash", "none")
"""What the setting may name: TypeScript comes in JavaScript's kernel package."""


def parse_languages(value: str) -> tuple[str, ...]:
    """The image's languages (in `LANGUAGES` order) a setting names; ValueError otherwise.
    `none` (alone) is Python only."""
    names = {part.strip().lower() for part in value.split(",") if part.strip()}
    unknown = sorted(names - set(NAMES))
    if unknown:
        raise ValueError(
            f"unknown sandbox language(s) {', '.join(unknown)}: choose from {', '.join(NAMES)}"
        )
    if "typescript" in names:
        names.add("javascript")
    return tuple(name for name in LANGUAGES if name in names)


def configured_languages(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """CELLMATE_SANDBOX_LANGUAGES; all languages when it is unset or empty (as every
    setting's empty value means its default)."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    return LANGUAGES if not value else parse_languages(value)


def offered(languages: tuple[str, ...]) -> tuple[str, ...]:
    """The languages besides Python that runs may be in, for an image's `languages`."""
    kernels = {name for language in languages for name in KERNELSPECS[language]}
    return tuple(name for name in ("r", "javascript", "typescript", "bash") if name in kernels)


def deb_packages(languages: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(deb for language in languages for deb in DEBS[language])


def kernelspec_files(languages: tuple[str, ...]) -> dict[str, bytes]:
    """kernels/<name>/kernel.json for each kernelspec of `languages`, by build-context name."""
    return {
        f"kernels/{name}/kernel.json": (json.dumps(spec, indent=1) + "\n").encode()
        for language in languages
        for name, spec in KERNELSPECS[language].items()
    }


def digest_input(languages: tuple[str, ...]) -> bytes:
    """What the tag hashes for `languages` (nothing for Python only)."""
    if not languages:
        return b""
    parts = [f"languages={','.join(languages)}", f"debs={','.join(deb_packages(languages))}"]
    if "javascript" in languages:
        parts.append(f"npm-lock={NPM_LOCK_SHA256}")
        parts.append(f"tslab-patch={TSLAB_PATCH_FILE}={TSLAB_PATCH[0]}={TSLAB_PATCH[1]}")
    for name, content in kernelspec_files(languages).items():
        parts.append(f"{name}={content.decode()}")
    return "\0".join(parts).encode()

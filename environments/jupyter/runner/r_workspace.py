"""R's variables in a workspace: written with R's `save` and read back with `load`, in R's
own kernel, as Python's are pickled in Python's (kernel_scripts SNAPSHOT_CODE). Each
variable is checked on its own, so one that cannot be kept (a connection, a pointer into
memory, a getpass() answer, past the cap) is named with why and the rest are kept. The
packages attached with `library()` are recorded beside them and attached again on load,
so restored data frames and models find their methods.

Every call is `base::` qualified: the scripts run in the user's global environment, where
a variable of theirs may be called `save` or `ls`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.languages import LanguageKernel

RDATA = "variables.RData"
REPORT = "report.json"
WORKSPACE_TIMEOUT_S = 120
PACKAGES = ".cellmate.packages"
"""The hidden name the attached packages are saved under, beside the variables."""

SAVE_R = r"""
base::local({
  folder <- FOLDER
  limit <- LIMIT
  secrets <- base::lapply(SECRETS, function(h) {
    base::as.raw(base::strtoi(base::substring(h, base::seq(1, base::nchar(h), 2),
                                              base::seq(2, base::nchar(h), 2)), 16L))
  })
  holds_secret <- function(blob) {
    for (secret in secrets) {
      if (base::length(base::grepRaw(secret, blob, fixed = TRUE)) > 0) return(TRUE)
    }
    FALSE
  }
  kept <- base::new.env()
  saved <- base::character()
  skipped <- base::list()
  total <- 0
  for (name in base::ls(base::globalenv())) {
    value <- base::get(name, envir = base::globalenv())
    why <- NULL
    if (base::inherits(value, "connection")) {
      why <- "an open connection"
    } else if (base::typeof(value) == "externalptr") {
      why <- "a pointer into memory"
    } else {
      blob <- base::tryCatch(base::serialize(value, NULL), error = function(e) e)
      if (base::inherits(blob, "error")) {
        why <- base::paste("cannot be saved:", base::conditionMessage(blob))
      } else if (holds_secret(blob)) {
        why <- "holds an answer to getpass(), which is never saved"
      } else if (total + base::length(blob) > limit) {
        why <- base::sprintf("too large (%.1f MB, past the workspace cap)",
                             base::length(blob) / 1e6)
      } else {
        total <- total + base::length(blob)
        saved <- base::c(saved, name)
        base::assign(name, value, envir = kept)
      }
    }
    if (!base::is.null(why)) skipped[[name]] <- why
  }
  always <- base::c("stats", "graphics", "grDevices", "utils", "datasets", "methods", "base")
  base::assign("PACKAGES", base::setdiff(base::.packages(), always), envir = kept)
  # gzip's fastest level: the save is on the way to ending the session, and the file is
  # stored once and read once.
  base::save(list = base::ls(kept, all.names = TRUE), envir = kept,
             file = base::file.path(folder, "RDATA"), compress = "gzip",
             compression_level = 1)
  jsonlite::write_json(base::list(saved = base::I(saved), skipped = skipped),
                       base::file.path(folder, "REPORT"), auto_unbox = TRUE)
})
"""

LOAD_R = r"""
base::local({
  folder <- FOLDER
  found <- base::new.env()
  names <- base::load(base::file.path(folder, "RDATA"), envir = found)
  failed <- base::list()
  packages <- base::get0("PACKAGES", envir = found, inherits = FALSE, ifnotfound = NULL)
  for (package in base::as.character(packages)) {
    if (!base::grepl("^[A-Za-z][A-Za-z0-9.]*$", package)) next
    attached <- base::suppressWarnings(base::suppressPackageStartupMessages(
      base::require(package, character.only = TRUE, quietly = TRUE)))
    if (!attached) failed[[base::sprintf("library(%s)", package)]] <- "not installed here"
  }
  restored <- base::character()
  for (name in base::setdiff(names, "PACKAGES")) {
    base::assign(name, base::get(name, envir = found), envir = base::globalenv())
    restored <- base::c(restored, name)
  }
  jsonlite::write_json(base::list(restored = base::I(restored), failed = failed),
                       base::file.path(folder, "REPORT"), auto_unbox = TRUE)
})
"""


def _script(template: str, folder: Path, **values: str) -> str:
    # JSON's string literals are R's too: the folder cannot become code.
    script = template.replace("FOLDER", json.dumps(str(folder)))
    for name, value in values.items():
        script = script.replace(name, value)
    return script.replace("PACKAGES", PACKAGES).replace("RDATA", RDATA).replace("REPORT", REPORT)


async def save_r(
    kernel: LanguageKernel, folder: Path, limit: int, secrets: list[str]
) -> dict[str, Any]:
    """Save R's variables (at most `limit` bytes of them) into `folder`; the report names
    the saved and the skipped. The .RData file is at `folder / RDATA`."""
    listed = "base::c(" + ", ".join(json.dumps(secret) for secret in secrets) + ")"
    script = _script(
        SAVE_R,
        folder,
        LIMIT=str(max(limit, 0)),
        SECRETS=listed if secrets else "base::character()",
    )
    await kernel.quietly(script, WORKSPACE_TIMEOUT_S)
    return _report(folder)


async def load_r(kernel: LanguageKernel, folder: Path) -> dict[str, Any]:
    """Load the .RData file at `folder / RDATA` into R's global environment (starting the
    kernel); the report names what came back and what failed."""
    await kernel.quietly(_script(LOAD_R, folder), WORKSPACE_TIMEOUT_S)
    return _report(folder)


def _report(folder: Path) -> dict[str, Any]:
    report = json.loads((folder / REPORT).read_text())
    return report if isinstance(report, dict) else {}


def names(found: object) -> tuple[str, ...]:
    """A report's list of names."""
    return tuple(str(name) for name in found) if isinstance(found, list) else ()


def reasons(found: object) -> dict[str, str]:
    """A report's names with why (jsonlite writes an empty one as [])."""
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}

"""The process inside a Cellmate sandbox: it owns one Jupyter kernel and answers the host.

It speaks the runner protocol (executor/wire/, copied into the image beside it: the
contract, its messages and its sealing) over the container's attached stdin/stdout, so it
works under runc and gVisor alike and needs no socket, port or shared folder. It is the
sandbox's init (PID 1), so nothing else holds the event stream's descriptors, and it makes
itself non-dumpable before it reads a request, so the user's code, though it runs as the
same user, cannot read this process's memory (the key); under runc it cannot open its
descriptors through /proc either (gVisor lets it, which is why every line is sealed). The
host still caps and validates everything it reports.

Nothing runs between requests, where nothing would count it: when a run (or a restore,
snapshot or `env`) ends, the runner stops the kernel with SIGSTOP, every thread of it, and
only then ends every other process, so that nothing the kernel left running can start one
in between; the next request that needs the kernel continues it (SIGCONT). Not where the
run allows background work, which carries on by design; nor during a new sandbox's warm-up
until code has run in it. The kernel's stderr, like the runner's own, is a pipe of which the
runner keeps a 16 KiB tail: only the protocol reaches the host. Nothing in /mnt/data can
stand in for a module the kernel or the runner imports (see kernel_scripts.DATA_OFF).

Modules: `runner` (the request loop and the kernel's rest between requests), `client` (the
capped notebook client, the stderr tail), `kernel_scripts` (what runs in the kernel),
`results` (a JavaScript or TypeScript cell's last value as its result, with
tslab_result.js), `files` (/mnt/data), `system` (processes, limits, input).
"""

"""Death-watch for broker JVMs owned by a Python process (a test run, ``handoff demo``).

Run as a script (``python -I _supervisor.py GRACE_S LOGFILE CLEANUP_DIR -- java ...``); it imports
nothing from the package so that it starts fast.  It starts the JVM as its child, prints the JVM's pid
on stdout, then waits.  Its stdin is a pipe whose write end only the owner holds:

* owner gone (stdin reaches EOF: the owner exited, crashed or was SIGKILLed; or our parent pid changed)
  -> SIGTERM to the JVM, SIGKILL after GRACE_S seconds; then, unless CLEANUP_DIR is ``-``, delete
  CLEANUP_DIR (the node's directory of a temporary broker) and its parent once no ``node-*`` directory
  is left in it, as the owner can no longer do so; exit;
* supervisor itself sent SIGTERM/SIGINT/SIGHUP -> the same, without deleting anything;
* JVM exits by itself (or the owner stopped it by pid) -> exit with the JVM's status.

The JVM is started with ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux): should the supervisor itself be
SIGKILLed, the kernel kills the JVM.  The supervisor is single-threaded, so the "parent thread exited"
caveat of PDEATHSIG does not apply here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: _supervisor.py GRACE_S LOGFILE CLEANUP_DIR|- -- COMMAND...", file=sys.stderr)
        return 2
    grace = float(argv[0])
    logfile = argv[1]
    cleanup = argv[2] if argv[2] != "-" else None
    command = argv[4:]
    parent = os.getppid()

    stop_requested = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    with open(logfile, "ab") as log:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_set_pdeathsig,
        )
    # The JVM must not survive a parent that died between fork and prctl.
    if os.getppid() != parent:
        child.kill()
    sys.stdout.write(f"{child.pid}\n")
    sys.stdout.flush()

    owner_gone = False
    while True:
        code = child.poll()
        if code is not None:
            return code
        if stop_requested:
            break
        if os.getppid() != parent:
            owner_gone = True
            break
        try:
            ready, _, _ = select.select([0], [], [], 0.5)
        except InterruptedError:
            continue
        if ready:
            try:
                data = os.read(0, 4096)
            except OSError:
                data = b""
            if not data:
                owner_gone = True
                break

    code = child.poll()
    if code is not None:  # the JVM ended first (stopped by the owner): nothing to clean up
        return code
    child.send_signal(signal.SIGTERM)
    try:
        code = child.wait(grace)
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
    if owner_gone and cleanup:
        _cleanup(cleanup)
    return code


def _cleanup(node_dir: str) -> None:
    shutil.rmtree(node_dir, ignore_errors=True)
    root = os.path.dirname(os.path.abspath(node_dir))
    with contextlib.suppress(OSError):
        if not any(name.startswith("node-") for name in os.listdir(root)):
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

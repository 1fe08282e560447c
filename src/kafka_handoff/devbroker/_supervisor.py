"""Death-watch for broker JVMs owned by a Python process (a test run, ``handoff demo``).

Run as a script (``python -I _supervisor.py GRACE_S LOGFILE -- java ...``); it imports nothing from the
package so that it starts fast.  It starts the JVM as its child, prints the JVM's pid on stdout, then
waits.  Its stdin is a pipe whose write end only the owner holds:

* owner gone (stdin reaches EOF: the owner exited, crashed or was SIGKILLed; or our parent pid changed)
  -> SIGTERM to the JVM, SIGKILL after GRACE_S seconds, then exit;
* supervisor itself sent SIGTERM/SIGINT/SIGHUP -> the same;
* JVM exits by itself (or the owner stopped it by pid) -> exit with the JVM's status.

The JVM is started with ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux): should the supervisor itself be
SIGKILLed, the kernel kills the JVM.  The supervisor is single-threaded, so the "parent thread exited"
caveat of PDEATHSIG does not apply here.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: _supervisor.py GRACE_S LOGFILE -- COMMAND...", file=sys.stderr)
        return 2
    grace = float(argv[0])
    logfile = argv[1]
    command = argv[3:]
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

    stdin_open = True
    while True:
        code = child.poll()
        if code is not None:
            return code
        if stop_requested or os.getppid() != parent:
            break
        if stdin_open:
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
                    stdin_open = False
                    break  # owner gone
        else:
            time.sleep(0.5)

    child.send_signal(signal.SIGTERM)
    try:
        return child.wait(grace)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A stand-in for a server that does a cell's work in processes of its own (a kept vLLM server): it burns a set
amount of CPU time when told, and can run outside the test's process tree, as a kept server does for every process
but the one that started it.

:meth:`Burner.start` starts it (``detach``: through a middle process that exits, so that it is no descendant of
the test); :meth:`Burner.burn` tells it to burn and waits until it has; :meth:`Burner.stop` ends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# FOLDER CPU_S: write the pid, wait for FOLDER/go, burn CPU_S of CPU time, write FOLDER/done, wait to be stopped
BURN = """
import os, sys, time
from pathlib import Path
folder, cpu_s = Path(sys.argv[1]), float(sys.argv[2])
(folder / "pid.tmp").write_text(str(os.getpid()))
os.replace(folder / "pid.tmp", folder / "pid")
while not (folder / "go").exists():
    time.sleep(0.01)
start = time.process_time()
while time.process_time() - start < cpu_s:
    pass
(folder / "done").write_text("")
time.sleep(600)
"""
# the same, started in a session of its own by a middle process that exits at once
DETACH = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
WAIT_S = 60.0  # for the burner to start, or to burn on a loaded machine: a hang guard, never a timed assertion


@dataclass(frozen=True)
class Burner:
    folder: Path
    pid: int
    child: subprocess.Popen[bytes] | None  # when it is this process's own child

    @classmethod
    def start(cls, folder: Path, cpu_s: float, detach: bool) -> Burner:
        folder.mkdir(parents=True, exist_ok=True)
        child = None
        if detach:
            subprocess.run([sys.executable, "-c", DETACH, BURN, str(folder), str(cpu_s)], check=True, timeout=WAIT_S)
        else:
            child = subprocess.Popen([sys.executable, "-c", BURN, str(folder), str(cpu_s)])
        _wait(lambda: (folder / "pid").exists(), "to start")
        return cls(folder, int((folder / "pid").read_text()), child)

    def burn(self) -> None:
        (self.folder / "go").write_text("")
        _wait(lambda: (self.folder / "done").exists(), "to burn its CPU time")

    def stop(self) -> None:
        """End it (a detached one is reaped by whoever adopted it)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.child is not None:
            self.child.wait()


def _wait(condition, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the CPU burner took over {WAIT_S:g} s {what}")
        time.sleep(0.01)

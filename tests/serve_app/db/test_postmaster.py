"""A crashed embedded server is detected (zombie included) and restarted in place."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from serve_app.db.postmaster import clear_dead_pidfile, postmaster_pid

ROOT = Path(__file__).resolve().parents[3]


def _pidfile(pgdata: Path, pid: int) -> None:
    pgdata.mkdir(parents=True, exist_ok=True)
    # The 8 lines PostgreSQL writes; line 7 is "<shm key> <shm id>" (no segment here).
    lines = [str(pid), str(pgdata), "0", "5432", str(pgdata), "", "0 999999999", "ready"]
    (pgdata / "postmaster.pid").write_text("\n".join(lines) + "\n")


def test_live_process_is_kept(tmp_path):
    _pidfile(tmp_path / "pg", os.getpid())
    assert postmaster_pid(tmp_path / "pg") == os.getpid()
    assert clear_dead_pidfile(tmp_path / "pg") is False
    assert (tmp_path / "pg" / "postmaster.pid").exists()


def test_zombie_and_dead_pids_are_cleared(tmp_path):
    zombie = subprocess.Popen(["true"])  # exits; not waited for, so it stays a zombie
    try:
        for _ in range(100):
            if postmaster_pid(tmp_path / "z") is None and (tmp_path / "z").exists():
                break
            _pidfile(tmp_path / "z", zombie.pid)
            os.sched_yield()
        assert postmaster_pid(tmp_path / "z") is None
        assert clear_dead_pidfile(tmp_path / "z") is True
        assert not (tmp_path / "z" / "postmaster.pid").exists()
    finally:
        zombie.wait()
    _pidfile(tmp_path / "gone", zombie.pid)  # reaped: no such process
    assert clear_dead_pidfile(tmp_path / "gone") is True
    assert clear_dead_pidfile(tmp_path / "none") is False


@pytest.mark.slow
def test_killed_server_left_as_zombie_is_restarted(tmp_path):
    """The CI situation: an ancestor that never reaps orphans keeps the SIGKILLed
    postmaster as a zombie. ensure_running still restarts the server, same DSN."""
    script = textwrap.dedent(
        """
        import ctypes, os, signal, sys, time
        from pathlib import Path
        import psutil, psycopg
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, never reaps
        from serve_app.db.embedded import EmbeddedPostgres
        pg = EmbeddedPostgres(Path(sys.argv[1]))
        dsn = pg.start()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE t (x int)")
            c.execute("INSERT INTO t VALUES (42)")
        old = pg.pid
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while psutil.Process(old).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert pg.ensure_running() is True
        assert pg.ensure_running() is False  # healthy now: nothing to do
        with psycopg.connect(dsn) as c:
            print("ROW", c.execute("SELECT x FROM t").fetchone()[0], old != pg.pid)
        pg.stop()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ROW 42 True" in out.stdout


@pytest.mark.slow
def test_owner_killed_earlier_does_not_keep_the_server_alive(tmp_path):
    """A launcher killed before its exit hook ran leaves its pid in the library's
    handle list; the next launcher must still stop the server when it exits."""
    data = tmp_path / "data"
    start = "from pathlib import Path; import os, sys\n" + (
        "from serve_app.db.embedded import EmbeddedPostgres\n"
        "pg = EmbeddedPostgres(Path(sys.argv[1])); pg.start(); print('PID', pg.pid)\n"
    )
    killed = start + "os._exit(0)  # like SIGKILL: no atexit, no stop\n"
    clean = start + "print('STOPPED', pg.stop())\n"

    def run(script: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", script, str(data)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    first = run(killed)
    server = int(first.split("PID ")[1].split()[0])
    try:
        assert postmaster_pid(data / "pg") == server  # orphaned, still serving
        second = run(clean)
        assert f"PID {server}" in second  # the next owner attached to the same server
        assert "STOPPED True" in second
        assert postmaster_pid(data / "pg") is None
    finally:
        if postmaster_pid(data / "pg") is not None:
            os.kill(server, 15)

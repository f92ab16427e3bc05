"""CPU time of a server's whole process tree, read from /proc and grouped by role.

A benchmark's "server CPU per request" must count every process that works for the
server: Ray's daemons and replicas, the HTTP proxy, PostgreSQL's backends (whose
postmaster is daemonised, so it is not a descendant of the launcher and is found
by its data directory instead). Take a :func:`snapshot` before and after a
workload; :func:`cpu_by_role` turns the pair into CPU seconds per role.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK")

Classifier = Callable[[str], str]


@dataclass(frozen=True)
class ProcSample:
    """One process at one moment: identity (pid + start time) and CPU seconds so far."""

    pid: int
    ppid: int
    start: int  # clock ticks after boot; tells a reused pid from the old one
    cmdline: str
    cpu_s: float  # own utime+stime plus that of its exited, reaped children


def _stat(pid: int) -> tuple[str, list[str]] | None:
    """comm and the fields after it (state onwards) of /proc/<pid>/stat; None if gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its last ')'.
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of process ``pid`` alone so far,
    without its children's; NaN once it has exited."""
    parsed = _stat(pid)
    if parsed is None:
        return float("nan")
    fields = parsed[1]
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def _read(pid: int) -> ProcSample | None:
    parsed = _stat(pid)
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:  # exited meanwhile
        return None
    if parsed is None:  # exited meanwhile
        return None
    comm, fields = parsed
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{comm}]"
    cpu = (utime + stime + cutime + cstime) / TICKS_PER_S
    return ProcSample(pid, ppid, int(fields[19]), cmdline, cpu)


def all_processes() -> dict[int, ProcSample]:
    out = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (sample := _read(int(entry.name))) is not None:
            out[sample.pid] = sample
    return out


def snapshot(roots: Iterable[int], match: Callable[[str], bool] | None = None) -> dict:
    """The processes under ``roots`` (inclusive) and under any process whose command
    line satisfies ``match`` (e.g. a daemonised postmaster of a known data dir)."""
    procs = all_processes()
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    stack = [pid for pid in roots if pid in procs]
    if match is not None:
        stack += [p.pid for p in procs.values() if match(p.cmdline)]
    tree: dict[int, ProcSample] = {}
    while stack:
        pid = stack.pop()
        if pid not in tree:
            tree[pid] = procs[pid]
            stack.extend(children.get(pid, ()))
    return tree


def cpu_by_role(before: dict, after: dict, classify: Classifier) -> dict[str, float]:
    """CPU seconds spent between two snapshots, summed per ``classify(cmdline)``.

    A process that started in between counts from zero; one that exited in between
    counts only where its parent reaped it (its CPU lands in the parent's children
    time). Roles are read from the later snapshot: Ray renames a worker when it
    becomes a replica.
    """
    roles: dict[str, float] = {}
    for pid, now in after.items():
        then = before.get(pid)
        base = then.cpu_s if then is not None and then.start == now.start else 0.0
        role = classify(now.cmdline)
        roles[role] = roles.get(role, 0.0) + max(0.0, now.cpu_s - base)
    return roles


_POSTGRES = re.compile(r"^postgres(:|\s|$)|/bin/postgres\b")
_MEMSERVE_ROLES: list[tuple[str, re.Pattern[str]]] = [
    ("postgres", _POSTGRES),
    ("proxy", re.compile(r"ProxyActor|(^|/)haproxy\b")),
    (
        "ray-infra",
        re.compile(
            r"ServeController|gcs_server|raylet|dashboard|log_monitor|monitor\.py|"
            r"runtime_?env|serve_app run|ray::IDLE|default_worker",
            re.IGNORECASE,
        ),
    ),
]
_REPLICA = re.compile(r"ServeReplica:[^:\s]+:([A-Za-z0-9_]+)")


def memserve_role(cmdline: str) -> str:
    """proxy, one role per Serve deployment (Ingress, Embedder, ...), ray-infra, postgres."""
    if m := _REPLICA.search(cmdline):
        return m.group(1)
    for role, pattern in _MEMSERVE_ROLES:
        if pattern.search(cmdline):
            return role
    return "other"


def mem0_role(cmdline: str) -> str:
    """server (the uvicorn process and anything it spawned) or postgres."""
    return "postgres" if _POSTGRES.search(cmdline) else "server"

"""PDF and HTML parsed in a child process that is killed over its CPU or memory limit.

A hostile PDF of 2 kB (a content stream shared by every page, form XObjects drawing
each other) made pypdf work for minutes inside the Ingress, holding a document slot and
the GIL from other tenants' requests. Here each such parse is a fresh
``python -m serve_app.documents.sandbox`` (nothing of Ray, the event loop or the
connection pools is inherited), which sets ``RLIMIT_CPU`` and ``RLIMIT_AS`` on itself
before it reads a byte of the document: the kernel stops it at its CPU seconds
(SIGXCPU), an allocation past its address space fails (MemoryError, answered as a
413). The caller waits in a worker thread with a wall-clock bound on top (a child that
sleeps or is starved still ends). What the parse cost (its CPU seconds, the limit when
it was killed) comes back with the result or the refusal, so the caller can charge by
the work done.

Plain text and Markdown are linear scans and stay in the calling thread.

Protocol: argv[1] is a JSON header (content type, :class:`Limits`, the CPU seconds and
memory bytes); stdin the document (UTF-8 text, surrogates passed, or the file's bytes);
stdout one JSON object: ``{"text", "blocks": [[start, end, [path...]]], "title",
"cpu_s"}`` or ``{"refused": [status, message], "cpu_s"}``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serve_app.documents.parse import Block, DocumentRefused, Limits, Parsed, parse

__all__ = ["Box", "Refused", "parse_bounded", "units"]

ISOLATED = frozenset({"application/pdf", "text/html"})  # parsers that are not linear scans
_ROOT = str(Path(__file__).resolve().parents[2])  # where ``serve_app`` is importable from
_STARTUP_S = 10.0  # wall-clock slack over the CPU limit: interpreter start on a busy host


@dataclass(frozen=True)
class Box:
    """The child's limits: CPU seconds and address space (bytes)."""

    cpu_s: int = 10
    memory_bytes: int = 1024 * 1024 * 1024


class Refused(DocumentRefused):
    """A refusal that says what the parse cost (``cpu_s``), to be charged all the same."""

    def __init__(self, status: int, message: str, cpu_s: float) -> None:
        super().__init__(status, message)
        self.cpu_s = cpu_s


def parse_bounded(
    content_type: str, *, text: str | None, data: bytes | None, limits: Limits, box: Box
) -> tuple[Parsed, float]:
    """``parse(...)`` and the CPU seconds the child spent on it: PDF and HTML in a
    limited child process, other types here (0.0: a linear scan, paid for by its
    chunks). Blocks the calling thread (run it in a worker thread); a refusal is a
    :class:`Refused` carrying the CPU seconds spent."""
    if content_type not in ISOLATED:
        try:
            return parse(content_type, text=text, data=data, limits=limits), 0.0
        except DocumentRefused as exc:
            raise Refused(exc.status, str(exc), 0.0) from None
    if content_type == "application/pdf" and data is None:
        raise Refused(422, "a PDF is sent as a file upload", 0.0)
    payload = text.encode("utf-8", "surrogatepass") if text is not None else data or b""
    header = {
        "content_type": content_type,
        "is_text": text is not None,
        "limits": dataclasses.asdict(limits),
        "cpu_s": box.cpu_s,
        "memory_bytes": box.memory_bytes,
    }
    # Only what the interpreter needs: the child reads hostile bytes, so it gets none of
    # the replica's secrets (database URL, API keys) in its environment.
    path = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": path, "LC_ALL": "C.UTF-8"}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "serve_app.documents.sandbox", json.dumps(header)],
            input=payload,
            capture_output=True,
            timeout=box.cpu_s * 2 + _STARTUP_S,
            env=env,
            cwd=_ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() killed it
        raise Refused(
            413,
            f"parsing the document took over {box.cpu_s * 2 + _STARTUP_S:.0f} s"
            " (MEMSERVE_DOC_PARSE_CPU_S)",
            float(box.cpu_s),
        ) from None
    return _outcome(done, box, time.monotonic() - started)


def units(cpu_s: float, unit_cpu_s: float) -> float:
    """Rate units a parse of ``cpu_s`` CPU seconds costs: one per ``unit_cpu_s`` begun."""
    return float(max(1, math.ceil(cpu_s / unit_cpu_s)))


def _outcome(
    done: subprocess.CompletedProcess[bytes], box: Box, wall_s: float
) -> tuple[Parsed, float]:
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise Refused(
            413,
            f"parsing the document took over {box.cpu_s} s of CPU (MEMSERVE_DOC_PARSE_CPU_S)",
            float(box.cpu_s),
        )
    try:
        out = json.loads(done.stdout)
    except ValueError:
        out = None
    if done.returncode != 0 or not isinstance(out, dict):
        # A crash of the parser's C code (lexbor, zlib) on an allocation it could not get.
        raise Refused(
            422,
            f"the document could not be parsed (the parser exited with {done.returncode})",
            min(wall_s, float(box.cpu_s)),
        )
    cpu_s = float(out.get("cpu_s", 0.0))
    if "refused" in out:
        status, message = out["refused"]
        raise Refused(int(status), str(message), cpu_s)
    blocks = [Block(s, e, tuple(path)) for s, e, path in out["blocks"]]
    return Parsed(out["text"], blocks, out["title"]), cpu_s


def _limit_self(cpu_s: int, memory_bytes: int) -> None:
    """The kernel's bounds on this process, set before the document is read: SIGXCPU at
    ``cpu_s`` (SIGKILL a second later), no allocation past ``memory_bytes``, no core file."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(header: dict[str, Any], payload: bytes) -> dict[str, Any]:
    limits = Limits(**header["limits"])
    text = payload.decode("utf-8", "surrogatepass") if header["is_text"] else None
    data = None if header["is_text"] else payload
    try:
        parsed = parse(header["content_type"], text=text, data=data, limits=limits)
    except DocumentRefused as exc:
        return {"refused": [exc.status, str(exc)], "cpu_s": _cpu_s()}
    except MemoryError:
        mb = header["memory_bytes"] // (1024 * 1024)
        message = f"parsing the document needs over {mb} MB (MEMSERVE_DOC_PARSE_MEMORY_MB)"
        return {"refused": [413, message], "cpu_s": _cpu_s()}
    except RecursionError:
        return {"refused": [422, "the document nests too deep to read"], "cpu_s": _cpu_s()}
    blocks = [[b.start, b.end, list(b.heading_path)] for b in parsed.blocks]
    return {"text": parsed.text, "blocks": blocks, "title": parsed.title, "cpu_s": _cpu_s()}


def main() -> None:
    header = json.loads(sys.argv[1])
    _limit_self(int(header["cpu_s"]), int(header["memory_bytes"]))
    payload = sys.stdin.buffer.read()
    out = _child(header, payload)
    try:
        encoded = json.dumps(out).encode()
    except MemoryError:
        encoded = json.dumps(
            {"refused": [413, "the parsed text is too large"], "cpu_s": _cpu_s()}
        ).encode()
    sys.stdout.buffer.write(encoded)
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()

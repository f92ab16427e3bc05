"""A real browser for the console tests: Debian's chromium driven by Playwright.

No browser is downloaded from Playwright's CDN: the test setup installs the distribution's
``chromium`` with apt-get when it is missing (CI runs as root with apt reachable) and
Playwright launches that binary. Screenshots go to the test's output folder and are
copied to /tmp/console-shots/ for people to look at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path(os.environ.get("MEMSERVE_TEST_CHROMIUM", "/usr/bin/chromium"))
SHOTS_COPY = Path("/tmp/console-shots")


def ensure_chromium() -> Path:
    """The chromium binary, installed with apt-get first if it is not there."""
    if CHROMIUM.exists():
        return CHROMIUM
    found = shutil.which("chromium")
    if found:
        return Path(found)
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run([*sudo, *cmd], env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}"
            )
    found = shutil.which("chromium")
    if not found:
        raise RuntimeError("apt-get installed chromium but no chromium binary is on PATH")
    return Path(found)


@contextmanager
def chromium_browser() -> Iterator[Browser]:
    path = ensure_chromium()
    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
        browser = pw.chromium.launch(executable_path=str(path), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


class Shots:
    """Screenshots named by view, in ``folder`` and copied to /tmp/console-shots/."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.taken: list[Path] = []
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page: Page, name: str, full_page: bool = True) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        self.taken.append(path)
        try:
            SHOTS_COPY.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, SHOTS_COPY / path.name)
        except OSError:  # the copy is a convenience; the test's own folder has them
            pass
        return path

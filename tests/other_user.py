"""A throwaway second local user for tests of what another user of a shared host can
reach: created with `useradd` when the suite runs as root, its probes run through
`runuser`; the fixture skips, with the reason, where neither is possible."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

PROBE_PYTHON = "/usr/bin/python3"  # the system interpreter: the other user needs no venv


@dataclass(frozen=True)
class OtherUser:
    """A local user that is not the one running the tests."""

    name: str
    uid: int

    def probe(self, code: str, timeout_s: float = 60.0) -> object:
        """Run Python `code` as this user (system python3, stdlib only) and return the
        JSON value it prints on its last stdout line. Raises AssertionError with its
        stderr when it exits non-zero."""
        done = subprocess.run(
            ["runuser", "-u", self.name, "--", PROBE_PYTHON, "-c", code],
            capture_output=True,
            check=False,
            text=True,
            timeout=timeout_s,
            cwd="/",
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def other_user() -> Iterator[OtherUser]:
    """A fresh local user (no home, no login shell), deleted after the test."""
    if os.geteuid() != 0:
        pytest.skip("creating a second local user needs root (useradd); run as root to test another user's reach")
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: cannot create a second local user")
    if not os.path.exists(PROBE_PYTHON):
        pytest.skip(f"{PROBE_PYTHON} is missing: the second user's probes need a system Python")
    name = f"bmprobe{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
        check=False,
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd failed here: {made.stderr.strip()}")
    try:
        import pwd

        yield OtherUser(name, pwd.getpwnam(name).pw_uid)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)

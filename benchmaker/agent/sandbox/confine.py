"""Confinement of a local sandbox's processes with bubblewrap (`bwrap`, Debian package
`bubblewrap`, https://github.com/containers/bubblewrap).

    conf = confinement()                                  # probes bwrap once; ConfinementError
    argv = conf.wrap(["bash", "-c", "ls"], workdir=ws, home=home)
    # ['/usr/bin/bwrap', '--unshare-pid', ..., '--', '/usr/bin/setpriv', ..., 'bash', '-c', 'ls']

What a wrapped command sees (the task's copy and a private HOME read-write, a read-only
system, /etc list (SYSTEM_ETC) and Python, a private /tmp, its own /proc and a minimal
/dev, no network), the user it runs as (as root: bwrap with CAP_SETUID/CAP_SETGID only,
then `setpriv` (util-linux) to SANDBOX_USER, else `nobody`; otherwise the caller's uid in
a user namespace; `no_new_privs` either way) and what it costs per command:
docs/execute-mode-sandbox.md.

Every process of the command lives in the sandbox's PID namespace: when the command
(PID 2 under bwrap's init) exits or bwrap is killed, all of them die
(`--die-with-parent`, the namespace's init exiting).

The bwrap (and, as root, setpriv) exec is inside the measured tool time (LocalSandbox.exec
times from the call to the result); benchmarks/bwrap_overhead.py measures it.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from benchmaker.agent.sandbox import SandboxError
from benchmaker.engine.exit_cleanup import on_exit

__all__ = [
    "INSTALL_STEP",
    "SANDBOX_USER",
    "STAGED_ETC_PREFIX",
    "SYSTEM_ETC",
    "Confinement",
    "ConfinementError",
    "check_sandbox_choice",
    "confinement",
    "remove_stale_staged_etc",
    "staged_etc",
]

SANDBOX_USER = "benchmaker-sandbox"
"""The user confined commands run as when the caller is root (`make install` creates it
as a system user); `nobody` when it does not exist."""

INSTALL_STEP = "make install (as root it runs apt-get install -y bubblewrap)"

SYSTEM_ETC = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "environment",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "profile.d",
    "protocols",
    "services",
    "ssl",
    "timezone",
)
"""The /etc entries a confined command sees (read-only, those that exist): what libc,
bash, git and Python look up. Not /etc/shadow, /etc/ssh, /etc/sudoers."""

_MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MOUNTED = {"/usr", "/proc", "/dev", "/tmp", "/var", "/var/tmp", *_MERGED_USR}


class ConfinementError(SandboxError):
    """bwrap is absent or cannot create a sandbox on this host; the message is one line
    naming the reason and the install step."""


@dataclass(frozen=True, slots=True)
class Confinement:
    """How to wrap a command (module docstring). `bwrap`, `setpriv`: absolute paths
    (`setpriv` None when the caller is not root); `uid`/`gid`: the user commands run as
    (None: the caller's own, in a user namespace); `ro_paths`: host paths bound
    read-only beside the system (the Python prefixes); `etc`: the directory bound
    read-only as /etc (a copy of the SYSTEM_ETC entries, `staged_etc()`)."""

    bwrap: str
    setpriv: str | None
    uid: int | None
    gid: int | None
    ro_paths: tuple[str, ...]
    etc: str

    def wrap(
        self,
        argv: Sequence[str],
        *,
        workdir: str,
        home: str,
        rw_paths: Sequence[str] = (),
        ro_paths: Sequence[str] = (),
    ) -> list[str]:
        """The argv that runs `argv` confined with `workdir` as its cwd. `workdir`,
        `home` and `rw_paths` are bound read-write at their host paths (they must
        exist), `ro_paths` read-only beside the Python; everything else per the
        module docstring."""
        ro = [*self.ro_paths, *ro_paths]
        out = [
            self.bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--unshare-net",
            "--hostname",
            "sandbox",
        ]
        if self.uid is None:
            out.append("--unshare-user")
        else:
            out += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        out += ["--ro-bind", "/usr", "/usr"]
        for top in _MERGED_USR:
            if os.path.islink(top):
                out += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                out += ["--ro-bind", top, top]
        out += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "1777",
            "--tmpfs",
            "/tmp",
            "--perms",
            "0755",
            "--dir",
            "/var",
            "--perms",
            "1777",
            "--tmpfs",
            "/var/tmp",
        ]
        rw = [home, workdir, *rw_paths]
        # bwrap makes missing mount points 0700 when run as root: every parent of a bind
        # is made 0755 first (after /tmp's tmpfs, which a workspace under /tmp lives in),
        # so the unprivileged user can walk to what is bound
        parents = {os.path.dirname(p.rstrip("/")) for p in ["/etc/x", *ro, *rw]}
        for parent in sorted({a for p in parents for a in _ancestors(p)} - _MOUNTED):
            out += ["--perms", "0755", "--dir", parent]
        out += ["--ro-bind", self.etc, "/etc"]
        for path in ro:
            out += ["--ro-bind", path, path]
        for path in rw:
            out += ["--bind", path, path]
        if self.setpriv is None:
            return out + ["--chdir", workdir, "--", *argv]
        # bwrap's root holds no CAP_DAC_*: the user changes into its own workdir itself
        return out + [
            "--chdir",
            "/",
            "--",
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "/usr/bin/env",
            f"--chdir={workdir}",
            "--",
            *argv,
        ]


def _ancestors(path: str) -> list[str]:
    """`path` and its parents, without "/" ("/a/b" -> ["/a", "/a/b"])."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _python_paths() -> tuple[str, ...]:
    """The Python prefixes to bind (outside /usr, deduplicated, real paths)."""
    seen: list[str] = []
    for p in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        real = os.path.realpath(p)
        if real.startswith("/usr/") or real == "/usr" or not os.path.isdir(real):
            continue
        if not any(real == s or real.startswith(s + os.sep) for s in seen):
            seen = [s for s in seen if not s.startswith(real + os.sep)] + [real]
    # the venv's bin holds symlinks to the base interpreter: both prefixes are bound
    for p in (sys.prefix, sys.base_prefix):
        if p != os.path.realpath(p) and os.path.isdir(p) and not p.startswith("/usr/"):
            seen.append(p)
    return tuple(dict.fromkeys(seen))


STAGED_ETC_PREFIX = "bm-sandbox-etc-"
"""Name of a staged /etc: this prefix, the creating process's pid, "-", a random part."""


def remove_stale_staged_etc(into: str | None = None) -> list[str]:
    """Remove the staged /etc copies under `into` (default: the temp dir) that this user
    owns and whose creating process is gone: a process killed by SIGKILL or the OOM
    killer runs no exit handler. A copy whose pid is alive (its own, or a reused pid) is
    kept. Returns the paths removed."""
    base = into or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        pid_text, sep, _ = name.removeprefix(STAGED_ETC_PREFIX).partition("-")
        if not name.startswith(STAGED_ETC_PREFIX) or not sep or not pid_text.isdigit():
            continue
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:  # gone already, or a live process of another user: kept
            continue
    return removed


def staged_etc(into: str | None = None) -> str:
    """A copy of the SYSTEM_ETC entries of /etc that exist (files copied, symlinks kept
    as symlinks, directories copied without a `private` subdirectory; an entry this
    user cannot read is left out) in a new 0755 directory under `into` (default: the
    temp dir), removed when the process exits (benchmaker.engine.exit_cleanup: also by a
    fast exit); the copies of killed processes are removed first
    (`remove_stale_staged_etc`). One bind of it replaces ~28 binds of
    single entries: ~25 ms less per confined command on the 2-core development host."""
    remove_stale_staged_etc(into)
    root = tempfile.mkdtemp(prefix=f"{STAGED_ETC_PREFIX}{os.getpid()}-", dir=into)
    os.chmod(root, 0o755)
    on_exit(shutil.rmtree, root, True)
    for name in SYSTEM_ETC:
        src, dst = os.path.join("/etc", name), os.path.join(root, name)
        try:
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("private"))
            elif os.path.isfile(src):
                shutil.copy2(src, dst)
        except (OSError, shutil.Error):  # unreadable here: left out, as a confined user could not read it
            shutil.rmtree(dst, ignore_errors=True)
    return root


def _sandbox_ids() -> tuple[int, int]:
    for name in (SANDBOX_USER, "nobody"):
        try:
            ent = pwd.getpwnam(name)
        except KeyError:
            continue
        if ent.pw_uid != 0:
            return ent.pw_uid, ent.pw_gid
    return 65534, 65534


@functools.cache
def confinement() -> Confinement:
    """This host's Confinement, probed once per process: bwrap and setpriv found on
    PATH, then `true` run confined (10 s deadline). Raises ConfinementError (one
    line: what failed and INSTALL_STEP, or `--sandbox none`) when bwrap is absent,
    setpriv is absent while the caller is root, or the probe fails (e.g. user
    namespaces disabled: its stderr is quoted)."""
    path = os.environ.get("PATH", os.defpath)
    bwrap = shutil.which("bwrap", path=path)
    if bwrap is None:
        raise ConfinementError(
            f"local sandboxes confine commands with bubblewrap, and bwrap is not installed: "
            f"run {INSTALL_STEP}, or pass --sandbox none to run them unconfined"
        )
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv", path=path)
        if setpriv is None:
            raise ConfinementError(
                "running as root, execute mode switches to an unprivileged user with setpriv "
                "(util-linux), which is not installed: apt-get install -y util-linux"
            )
        uid, gid = _sandbox_ids()
        conf = Confinement(bwrap, setpriv, uid, gid, _python_paths(), staged_etc())
    else:
        conf = Confinement(bwrap, None, None, None, _python_paths(), staged_etc())
    with tempfile.TemporaryDirectory(prefix="bm-bwrap-probe-") as tmp:
        if conf.uid is not None:
            os.chown(tmp, conf.uid, conf.gid or 0)
        argv = conf.wrap(["true"], workdir=tmp, home=tmp)
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfinementError(
                f"bwrap could not start a sandbox ({exc}); run {INSTALL_STEP}, "
                f"or pass --sandbox none to run commands unconfined"
            ) from exc
    if res.returncode != 0:
        why = res.stderr.decode(errors="replace").strip().splitlines()
        raise ConfinementError(
            f"bwrap cannot create a sandbox here ({why[-1] if why else f'exit {res.returncode}'}); "
            f"check that user namespaces are enabled, or pass --sandbox none to run "
            f"commands unconfined"
        )
    return conf


def check_sandbox_choice(kind: str) -> str | None:
    """Check the sandbox an execute- or command-mode run asked for, before any work:
    "local" (confined) probes `confinement()` and returns None; "none" (a local
    sandbox, unconfined) and "flash" (the Flash Sandbox service, confined or not by
    that service, not by benchmaker) return the one warning line to print. Raises
    ConfinementError for "local" where bwrap is absent or unusable, ValueError for
    another kind."""
    if kind == "local":
        confinement()
        return None
    if kind == "none":
        user = pwd.getpwuid(os.geteuid()).pw_name
        return (
            f"warning: --sandbox none: tool commands and the verifier run unconfined as {user} on this host "
            f"(its files, its network); use it only for recordings you trust"
        )
    if kind == "flash":
        return (
            "warning: --sandbox flash: tool commands run in the Flash sandbox service, confined only as that "
            "service confines them"
        )
    raise ValueError(f"sandbox: unknown sandbox {kind!r} (expected local, none, flash)")

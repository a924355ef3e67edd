"""Local PostgreSQL for tests and `punchclock up`: find server binaries (of the major a data
directory was initialised by), init, start and stop one cluster on 127.0.0.1 with scram auth.
A watchdog process (watchdog.py) stops the server when the launcher dies however it dies; no
SQL or pools here."""

from __future__ import annotations

import fcntl
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from supervisor.core.secretfile import load_or_create
from supervisor.local.pgbin import (
    IncompatibleDataDir,
    PgServerError,
    _as_user,
    _server_user,
    default_data_dir,
    find_bindir,
    servers,
)
from supervisor.local.watchdog import forget_line, watch_line
from supervisor.proc import parentwatch

__all__ = [  # with what tests and pgchain import from here
    "DATABASE", "SUPERUSER", "IncompatibleDataDir", "LocalPostgres", "PgServerError",
    "default_data_dir", "find_bindir",
]  # fmt: skip

SUPERUSER = "punchclock"
DATABASE = "punchclock"
_POLL = 0.05
# Throwaway clusters trade durability for speed; a persistent one keeps PostgreSQL's defaults.
_THROWAWAY = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "32MB",
}
_PERSISTENT = {"max_connections": "200"}
# The watchdog's stop: fast shutdown (roll back, disconnect, checkpoint), then immediate.
_STOP_STEPS = [(signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0)]


def _postgres_alive(pid: int) -> bool:
    """Whether pid is a live (not zombie) postgres process; pid reuse by others reads as dead."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # we (same uid, or root) can signal ours
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # no procfs (macOS): trust kill()
        return not Path("/proc/self").exists()
    comm, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
    return state not in "ZX" and comm in ("postgres", "postmaster")


class LocalPostgres:
    """One cluster in `data_dir`, run by this process; its state files sit beside the dir:
    `<name>.password` (0600, reused on restart), `.port` (last port, persistent only), `.lock`
    (held by launcher and watchdog while a server may run), `.log` (both's output).
    `persistent=False` gives the fast, non-durable settings.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        persistent: bool = True,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.persistent = persistent
        self.settings = dict(settings or {})  # server settings over the defaults below
        self._wanted_port = port
        self._port: int | None = None
        self._password: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        self._user: str | None = None
        self._bindir: Path | None = None  # chosen by start(): the data dir's major
        self._password_file = self._beside(".password")
        self._port_file = self._beside(".port")
        self._lock_file = self._beside(".lock")
        self._log_file = self._beside(".log")

    def _beside(self, suffix: str) -> Path:
        return self.data_dir.with_name(self.data_dir.name + suffix)

    @property
    def dsn(self) -> str:
        if self._password is None or self._port is None:
            raise PgServerError("the local PostgreSQL is not started")
        return f"postgresql://{SUPERUSER}:{self._password}@127.0.0.1:{self._port}/{DATABASE}"

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> str:
        if self._proc is not None:
            if self._proc.poll() is None:
                return self.dsn
            self.stop()  # the server died under us: clean up, then start afresh
        deadline = time.monotonic() + timeout
        self._user = _server_user()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock(deadline)
            self._check_reachable()
            bindir = self._bindir = self._find_bindir()
            self._password = self._load_password()
            self._stop_stale(bindir, deadline)
            if not self.data_dir.exists():
                self._initdb(bindir, deadline)
            self._spawn_watchdog()
            self._launch(bindir, deadline)
        except BaseException:
            self.stop()
            raise
        return self.dsn

    def stop(self) -> None:
        proc, self._proc, self._port = self._proc, None, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # fast shutdown: roll back, disconnect, checkpoint
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGQUIT)  # immediate: crash recovery at next start
                proc.wait(timeout=30)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            try:  # nothing left to stop; then EOF lets it exit
                watchdog.communicate(forget_line(proc.pid) if proc else b"", timeout=10)
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait()
        if self._lock_fd is not None:  # last: the lock says "a server may be running here"
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise PgServerError("the local PostgreSQL is not started")
        return self._port

    def make_standby(
        self, data_dir: Path, *, settings: dict[str, str] | None = None, timeout: float = 60.0
    ) -> LocalPostgres:
        """A streaming standby of this running cluster, returned unstarted: `pg_basebackup -R`
        into `data_dir` (its primary_conninfo points here, application_name is the dir's
        name, for synchronous_standby_names), with this cluster's password. For tests."""
        deadline = time.monotonic() + timeout
        standby = LocalPostgres(data_dir, persistent=self.persistent, settings=settings)
        standby._user, standby._bindir = self._user, self._bindir
        target = standby.data_dir
        target.mkdir(mode=0o700)  # pg_basebackup fills an empty dir the server user owns
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(target, entry.pw_uid, entry.pw_gid)
        fd = os.open(standby._password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{self._password}\n")
        conninfo = f"host=127.0.0.1 port={self.port} user={SUPERUSER} password={self._password}"
        conninfo += f" application_name={target.name}"
        argv = [str(self._started_bindir() / "pg_basebackup"), "-D", str(target), "-d", conninfo]
        self._run([*argv, "-R", "-X", "stream", "-c", "fast"], deadline)
        return standby

    def promote(self, timeout: float = 60.0) -> None:
        """End recovery (`pg_ctl promote -w`): a standby becomes a primary. For tests."""
        argv = [str(self._started_bindir() / "pg_ctl"), "promote", "-D", str(self.data_dir), "-w"]
        self._run([*argv, "-t", str(int(timeout))], time.monotonic() + timeout + 5)

    def _started_bindir(self) -> Path:
        if self._bindir is None:
            raise PgServerError("the local PostgreSQL is not started")
        return self._bindir

    def _run(self, argv: list[str], deadline: float, stdin: str = "") -> None:
        timeout = max(deadline - time.monotonic(), 1.0)
        out = subprocess.run(
            argv, check=False, input=stdin, capture_output=True, text=True, timeout=timeout,
            **_as_user(self._user),
        )  # fmt: skip
        # Single-user mode reports a failed statement on stderr but still exits 0.
        if out.returncode != 0 or "ERROR:" in out.stderr:
            raise PgServerError(f"{Path(argv[0]).name} failed ({out.returncode}): {out.stderr}")

    def _find_bindir(self) -> Path:
        """Binaries of the major that initialised data_dir (PG_VERSION), else the preferred."""
        try:
            major = (self.data_dir / "PG_VERSION").read_text().strip()
        except FileNotFoundError:
            if self.data_dir.exists():
                raise PgServerError(
                    f"{self.data_dir} is not a PostgreSQL data directory (no PG_VERSION): "
                    "remove it, or choose another directory"
                ) from None
            return find_bindir()
        found = []
        for version, bindir in servers():
            if version == major:
                return bindir
            found.append((version, bindir))
        if not found:
            return find_bindir()  # raises: no server at all
        raise IncompatibleDataDir(self.data_dir, major, found)

    def _lock(self, deadline: float) -> None:
        # Held by us and inherited by the watchdog: while either lives, a server may be running,
        # so a new launcher waits here instead of racing a watchdog that is still stopping it.
        if self._lock_fd is not None:
            return
        fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    msg = f"{self.data_dir} is in use (lock {self._lock_file})"
                    raise PgServerError(msg) from None
                time.sleep(_POLL)

    def _check_reachable(self) -> None:
        if self._user is None:
            return
        probe = ["test", "-x", str(self.data_dir.parent)]  # as the user: every ancestor counts
        if subprocess.run(probe, check=False, timeout=10, **_as_user(self._user)).returncode:
            raise PgServerError(
                f"user {self._user!r} cannot reach {self.data_dir.parent}: as root, choose a "
                "data directory whose parents it may traverse but not write (chmod 711), such "
                "as the default /var/lib/punchclock/pg"
            )

    def _load_password(self) -> str:
        # As OpenSSH checks a key: a planted (other owner, symlink) or exposed file is refused
        # (secretfile.InsecureFile), never used. The parent may be traversable (root's server
        # user must reach the cluster) but not writable by others.
        if self.data_dir.exists() and not os.path.lexists(self._password_file):
            raise PgServerError(f"{self._password_file} is missing; remove {self.data_dir}")
        new = lambda: secrets.token_urlsafe(24)  # noqa: E731 - URL-safe: the DSN needs no quoting
        return load_or_create(self._password_file, new, private_dir=False)

    def _stop_stale(self, bindir: Path, deadline: float) -> None:
        # We hold the lock, so no live launcher or watchdog owns a postmaster found here: it is
        # an orphan (its watchdog was killed too). Stop it rather than adopt it, so every running
        # server has a watchdog and the settings and port of this start.
        pidfile = self.data_dir / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return
        if _postgres_alive(pid):
            pg_ctl = [str(bindir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w"]
            self._run(pg_ctl, deadline)
        else:  # postgres would refuse a pid file whose pid was reused by a process it cannot signal
            pidfile.unlink(missing_ok=True)

    def _initdb(self, bindir: Path, deadline: float) -> None:
        # Initialise beside the target and rename at the end, so an existing data_dir is always
        # complete: a crash mid-init leaves only the staging dir, removed on the next start.
        staging = self._beside(".init")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=0o700)
        pwfile = self._beside(".init.pw")
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if self._user is not None:  # initdb runs as the server user and must read both
            entry = pwd.getpwnam(self._user)
            os.chown(staging, entry.pw_uid, entry.pw_gid)
            os.fchown(fd, entry.pw_uid, entry.pw_gid)
        with os.fdopen(fd, "w") as f:
            f.write(str(self._password) + "\n")
        initdb = [str(bindir / "initdb"), "-D", str(staging), "-U", SUPERUSER, "-E", "UTF8"]
        initdb += ["--no-locale", "-A", "scram-sha-256", f"--pwfile={pwfile}"]
        try:
            self._run(initdb + ([] if self.persistent else ["--no-sync"]), deadline)
        finally:
            pwfile.unlink(missing_ok=True)
        # Single-user mode creates the database before anything listens: no auth round trip.
        single = [str(bindir / "postgres"), "--single", "-D", str(staging), "postgres"]
        if not self.persistent:
            single.insert(2, "-F")  # fsync off, like --no-sync above
        self._run(single, deadline, stdin=f"CREATE DATABASE {DATABASE};\n")
        staging.rename(self.data_dir)

    def _spawn_watchdog(self) -> None:
        # Spawned before the postmaster so that no instant exists where a server runs unwatched.
        # Own session: a Ctrl-C on the terminal must not reach it (nor the server, see _launch).
        assert self._lock_fd is not None
        with open(self._log_file, "ab") as log:
            self._watchdog = parentwatch.spawn(
                "supervisor.local.watchdog",
                [],
                stdout=log,
                stderr=log,
                start_new_session=True,
                pass_fds=(self._lock_fd,),
            )

    def _launch(self, bindir: Path, deadline: float) -> None:
        settings = {"listen_addresses": "127.0.0.1"}
        settings.update(_PERSISTENT if self.persistent else _THROWAWAY)
        settings.update(self.settings)
        # The socket lives in the data dir (owned by the server user). A path that would pass
        # the 107-byte sun_path limit gets no unix socket at all: we only use TCP anyway.
        short = len(str(self.data_dir)) + len("/.s.PGSQL.65535") <= 107
        settings["unix_socket_directories"] = str(self.data_dir) if short else ""
        # Settings go on the command line, not into postgresql.conf, so the same data dir can
        # be started either way and a port never goes stale in a file.
        for _ in range(5):
            port = self._choose_port()
            settings["port"] = str(port)
            argv = [str(bindir / "postgres"), "-D", str(self.data_dir)]
            argv += [arg for k, v in settings.items() for arg in ("-c", f"{k}={v}")]
            with open(self._log_file, "ab") as log:
                offset = log.tell()
                # Own session: Ctrl-C must reach `punchclock up` alone, which drains its work
                # before stopping the database.
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.data_dir,
                    start_new_session=True,
                    **_as_user(self._user),
                )
            assert self._watchdog is not None and self._watchdog.stdin is not None
            self._watchdog.stdin.write(watch_line(self._proc.pid, _STOP_STEPS))
            if self._wait_ready(self._proc, deadline):
                self._port = port
                if self.persistent:
                    self._port_file.write_text(f"{port}\n")
                return
            with open(self._log_file, "rb") as log:
                log.seek(offset)
                output = log.read().decode(errors="replace")
            if self._wanted_port is None and "could not bind" in output:
                continue  # someone took the free port between our probe and the bind
            raise PgServerError(f"postgres exited with {self._proc.returncode}:\n{output[-2000:]}")
        raise PgServerError("could not find a free TCP port for postgres")

    def _choose_port(self) -> int:
        if self._wanted_port is not None:
            return self._wanted_port
        if self.persistent and self._port_file.exists():  # a stable DSN for `punchclock up`
            last = int(self._port_file.read_text().strip() or 0)
            if last and _bindable(last):
                return last
        return _bindable(0) or 0

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> bool:
        # The postmaster writes "ready" as the 8th line of postmaster.pid once it accepts
        # connections (what `pg_ctl start -w` polls too); the pid line proves it is this one.
        pidfile = self.data_dir / "postmaster.pid"
        while proc.poll() is None:
            try:
                lines = pidfile.read_text().splitlines()
            except FileNotFoundError:
                lines = []
            if len(lines) >= 8 and lines[0] == str(proc.pid) and lines[7].strip() == "ready":
                return True
            if time.monotonic() > deadline:
                raise PgServerError(f"postgres did not become ready in time; see {self._log_file}")
            time.sleep(_POLL)
        return False


def _bindable(port: int) -> int | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As postgres does: else our own last connections (TIME_WAIT) would hide a free port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return None
        return int(s.getsockname()[1])

"""An unprivileged supervisor granted AmbientCapabilities= (deploy/README.md) switches a
child's identity, and its children inherit none of its capabilities (CAP_SETUID is root)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import os
from supervisor.proc import spawn

def run(argv, **kw):
    p = spawn.start_process(argv, {"PATH": "/usr/bin:/bin"}, None, **kw)
    os.waitpid(p.pid, 0)  # the output fits the pipe; the read end is non-blocking
    out = os.read(p.stdout, 4096)
    return out.decode()

print("self", open("/proc/self/status").read().split("CapAmb:")[1].split()[0])
print("plain", run(["/bin/grep", "CapEff", "/proc/self/status"]).split()[1])
print("switched", run(["/usr/bin/id", "-u"], user=1, group=1, extra_groups=(1,)).strip())
"""


def test_children_drop_the_supervisors_ambient_capabilities() -> None:
    # Run as nobody: neither this interpreter nor the checkout may be readable to it, so
    # use the system Python and a world-readable copy of the modules involved.
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("__init__.py", "proc/__init__.py", "proc/spawn.py", "proc/isolation.py"):
            (Path(tmp) / "supervisor" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "supervisor" / name, Path(tmp) / "supervisor" / name)
        (Path(tmp) / "supervisor" / "proc").chmod(0o755)
        (Path(tmp) / "supervisor").chmod(0o755)
        Path(tmp).chmod(0o755)
        caps = "+setuid,+setgid,+kill"
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             f"--inh-caps={caps}", f"--ambient-caps={caps}",
             "env", f"PYTHONPATH={tmp}", python, "-S", "-c", PROBE],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert seen["self"] == "00000000000000e0", done.stdout  # the premise: it holds them
    assert seen["plain"] == "0000000000000000", done.stdout  # its child holds none
    assert seen["switched"] == "1", done.stdout  # and it can still switch identity

"""Starting one child the safe way round: its cgroup made first (with its limits), the keeper
told before the process exists (a supervisor frozen right after the spawn must not leave it
without a deadline), then the process itself (spawn.py). Watching it is runner.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from supervisor.proc.cgchild import ChildCgroup
from supervisor.proc.child import ChildSpec
from supervisor.proc.keeperd import CHILD_ID_ENV, INSTANCE_ENV
from supervisor.proc.spawn import Started, spawn_error_text, start_process

if TYPE_CHECKING:
    from supervisor.proc.keeper import Keeper


def launch(
    spec: ChildSpec, child_id: str, keeper: Keeper | None
) -> tuple[Started, ChildCgroup | None] | str:
    """The started process and its cgroup (`spec.cgroup`: one of its own), or why it could not
    start (nothing is left behind then: no cgroup, no keeper entry)."""
    env = {**spec.env, CHILD_ID_ENV: child_id}
    cgroup = None
    if spec.cgroup is not None:
        try:
            cgroup = ChildCgroup.create(spec.cgroup, child_id[:16], spec.cgroup_limits)
        except OSError as exc:
            return f"cannot create the handler's cgroup: {exc}"
    dirs = () if cgroup is None else cgroup.dirs
    if keeper is not None:
        env[INSTANCE_ENV] = keeper.instance_id
        announced = spec.announced != "" and cgroup is None
        if (spec.kill_by is not None and not announced) or cgroup is not None:
            keeper.announce(child_id, spec.kill_by or 0.0, dirs)
    try:
        proc = start_process(
            spec.argv,
            env,
            spec.cwd,
            user=spec.user,
            group=spec.group,
            extra_groups=spec.extra_groups,
            umask=spec.umask,
            limits=spec.limits,
            cgroup=cgroup,
            stdin=spec.stdin,
        )
    except (OSError, ValueError) as exc:
        if keeper is not None:
            keeper.unregister(0, child_id)
        if cgroup is not None:
            cgroup.remove()
        return spawn_error_text(spec.argv, spec.cwd, exc)
    return proc, cgroup

"""Releases on a node or in a pod: install (verified), activate (atomic symlink switch), mark, prune.

Layout (paths come from the caller)::

    <releases>/<release-id>/...              one folder per release, MANIFEST.sha256.json inside
    <releases>/.staging-<release-id>/        an install in progress (renamed when verified)
    <releases>/current.json                  {"current": id, "digest": ..., "served": {...}, "history": [...]}
    <releases>/.lock                         the node folder's lock while a command changes it (lock.py)
    <releases>/.journal.json                 a multi-step change in progress (install's two renames)
    <link> -> releases/<release-id>          what tritonserver --model-repository points at

Every function here that changes the folder or the link holds the node folder's lock
(:mod:`lock`), and the first taker of the lock finishes or undoes what a killed process left in the
journal, so a kill at any point leaves the last gated release installed and linked.

``active`` (where the link points) and ``current`` (the last release that passed its golden gate)
differ only while a release is being switched; ``recover`` puts the link back on ``current`` when
whoever switched it died before the gate (the node stays safe without its controller).

``served`` records that a gate passed against what Triton answered with the link as it is now: the
release, its digest and the link's identity (inode and mtime of the symlink, which every switch
renames anew). Any move of the link (a switch, a rollback, ``recover``) voids it without a write, so a
release pointed back at is reported gated (:func:`served`) only after its models were reloaded and
gated again (the pull agent's ``gate_active`` and rollback, ``recover --triton``), never because the
link matches ``current`` while Triton still holds the models of a refused release.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import shutil
import signal
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ..core import lock
from ..core.errors import ReleaseError, UsageError
from ..core.fsio import write_atomic
from ..core.names import JOURNAL_FILE, MANIFEST_FILE, STAGING_PREFIX, STATE_FILE, check_path, check_release_id
from ..release_format import manifest, records

# A staging entry changed less than this long ago may be a push in progress (the role copies the
# tarball before it runs install): prune leaves it alone. Older ones are leftovers of a killed run.
STAGING_GRACE = float(os.environ.get("TRITONOPS_STAGING_GRACE", 3600))

F = TypeVar("F", bound=Callable[..., Any])


# install's repair, in order: journal written, installed copy renamed aside, verified copy renamed into
# place, the copy aside removed (the journal is cleared after). A kill at any of them is finished or
# undone by the next taker of the lock (replay).
INSTALL_STEPS = ("install-journal", "install-aside", "install-swap", "install-cleanup")
# Every point a test may kill a process at: install's, and the pull agent's after it loaded a release
# into Triton and before its gate (pull.Agent.apply).
CRASH_POINTS = (*INSTALL_STEPS, "apply-loaded")


def crash_point(step: str) -> None:
    """Tests only: die here (SIGKILL, no cleanup) when TRITONOPS_TEST_CRASH_AT names this step."""
    assert step in CRASH_POINTS, step
    if os.environ.get("TRITONOPS_TEST_CRASH_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _write_journal(releases: Path, doc: dict[str, Any]) -> None:
    write_atomic(Path(releases) / JOURNAL_FILE, json.dumps(doc, sort_keys=True) + "\n")


def _clear_journal(releases: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (Path(releases) / JOURNAL_FILE).unlink()


def replay(releases: Path) -> dict[str, Any] | None:
    """Finish or undo the change a killed process left in the journal (the lock held); what was done.

    install's repair is: journal -> rename dest aside -> rename staging to dest -> remove aside ->
    clear. A verified copy at dest means it got through (only the leftovers go); no dest means it died
    between the renames: the verified staging copy goes in (finished), else the aside copy comes back
    (undone). Either way the link names an installed release again.
    """
    releases = Path(releases)
    path = releases / JOURNAL_FILE
    if not path.is_file():
        # An agent from before the journal, killed between the renames: its copy aside goes back.
        back = []
        for aside in releases.glob(f"{STAGING_PREFIX}damaged-*"):
            name = aside.name[len(f"{STAGING_PREFIX}damaged-"):]
            with contextlib.suppress(UsageError):
                gone = not (releases / check_release_id(name)).exists()
                if gone and aside.is_dir() and (aside / MANIFEST_FILE).is_file():
                    os.rename(aside, releases / name)
                    back.append(name)
        return {"done": "undone (copies aside renamed back)", "restored": back} if back else None
    try:
        doc = json.loads(path.read_text())
        release = check_release_id(str(doc["release"]))
        assert doc.get("op") == "install"
    except (OSError, ValueError, KeyError, AssertionError):
        _clear_journal(releases)
        return {"journal": str(path), "done": "unreadable: removed"}
    dest = releases / release
    staging, aside = releases / f"{STAGING_PREFIX}{release}", releases / f"{STAGING_PREFIX}damaged-{release}"
    done = "nothing to finish"
    if not dest.is_dir():
        try:
            manifest.verify(staging)
            os.rename(staging, dest)
            done = "finished (the verified copy renamed into place)"
        except (ReleaseError, OSError):
            if aside.is_dir():
                os.rename(aside, dest)
                done = "undone (the previous copy renamed back)"
    for p in (aside, staging):
        _remove(p)
    _clear_journal(releases)
    return {"journal": str(path), "release": release, "done": done}


@contextlib.contextmanager
def locked(releases: Path, command: str, timeout: float | None = None) -> Iterator[None]:
    """Hold the node folder's lock (:func:`lock.held`); the outermost taker replays the journal first."""
    with lock.held(releases, command, timeout) as first:
        if first:
            try:
                replay(releases)
            except OSError as e:
                raise ReleaseError(f"{Path(releases) / JOURNAL_FILE}: cannot finish or undo the interrupted change "
                                   f"({e.strerror or e}); {command}: nothing was changed") from None
        yield


def _locked(command: str) -> Callable[[F], F]:
    """The function runs holding the lock of its ``releases`` argument's folder."""
    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with locked(Path(sig.bind(*args, **kwargs).arguments["releases"]), command):
                return fn(*args, **kwargs)
        return inner  # type: ignore[return-value]
    return wrap


def state(releases: Path) -> dict[str, Any]:
    """The node's gated state, ``current.json`` (records.parse_state)."""
    path = Path(releases) / STATE_FILE
    try:
        raw: bytes | None = path.read_bytes()
    except FileNotFoundError:
        raw = None
    except OSError as e:
        # Unknown state, not a crash: no release counts as gated until the next one is marked.
        return {**records.parse_state(None, str(path)), "error": f"{path}: unreadable ({e}); ignored"}
    return records.parse_state(raw, str(path))


def _write_state(releases: Path, doc: dict[str, Any]) -> None:
    write_atomic(Path(releases) / STATE_FILE, records.state_text(doc))


def active_release(link: Path, releases: Path) -> str | None:
    """The release the models symlink points at (None when absent or not a link into ``releases``)."""
    link = Path(link)
    if not link.is_symlink():
        return None
    target = (link.parent / os.readlink(link)).resolve()
    if target.parent != Path(releases).resolve():
        return None
    return target.name


def link_id(link: Path) -> str | None:
    """The models symlink's identity (inode and mtime of the link itself): new at every switch."""
    try:
        st = os.lstat(link)
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}" if os.path.islink(link) else None


def served(link: Path, releases: Path) -> bool:
    """The link names ``current`` and a gate passed against Triton since the link last moved."""
    st = state(releases)
    current, rec = st.get("current"), st.get("served")
    return (bool(current) and active_release(link, releases) == current and isinstance(rec, dict)
            and rec.get("release") == current and rec.get("digest") == st.get("digest")
            and rec.get("link") == link_id(link))


def list_releases(releases: Path) -> list[str]:
    """Release folders: those that carry a manifest (nothing else is ever pruned)."""
    releases = Path(releases)
    if not releases.is_dir():
        return []
    return sorted(p.name for p in releases.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_FILE).is_file())


def local_copies(releases: Path) -> dict[str, Path]:
    """sha256 -> a file of an installed release with that content (a file to copy instead of downloading)."""
    out: dict[str, Path] = {}
    for name in list_releases(releases):
        with contextlib.suppress(ReleaseError):
            for rel, h in manifest.read(releases / name).items():
                out.setdefault(h, releases / name / rel)
    return out


def release_digest(releases: Path, release: str) -> str | None:
    """The digest a store names the installed release by: the sha256 of its manifest file as written
    (for a push-mode manifest, which lists files only, the same as ``manifest.digest`` of its files)."""
    try:
        manifest.read(Path(releases) / release)  # a readable manifest, or None
        return manifest.file_digest(Path(releases) / release)
    except ReleaseError:
        return None


def status(link: Path, releases: Path, release: str | None = None, digest: str | None = None) -> dict[str, Any]:
    link, releases = Path(link), Path(releases)
    active = active_release(link, releases)
    st = state(releases)
    out: dict[str, Any] = {
        "link": str(link),
        "link_kind": "symlink" if link.is_symlink() else ("directory" if link.is_dir() else "absent"),
        "active": active,
        "current": st.get("current"),
        "current_digest": st.get("digest"),
        "served": served(link, releases),
        "releases": list_releases(releases),
        "active_models": {},
    }
    if (releases / JOURNAL_FILE).is_file():
        out["journal"] = (f"{releases / JOURNAL_FILE}: a change was interrupted (a kill); the next command that "
                          "changes this folder finishes or undoes it first")
    if active:
        try:
            out["active_models"] = manifest.model_digests(manifest.read(releases / active))
        except ReleaseError as e:
            out["active_error"] = str(e)
    if release is not None:
        check_release_id(release)
        rdir = releases / release
        out.update(release=release, release_present=rdir.is_dir(), release_verified=False, release_conflict=False)
        if rdir.is_dir():
            try:
                files = manifest.verify(rdir)
                out["release_verified"] = True
                if digest and manifest.digest(files) != digest:
                    out["release_verified"] = False
                    out["release_conflict"] = True
                    out["release_error"] = (f"{rdir}: release id {release!r} is installed with other content "
                                            f"(digest {manifest.digest(files)[:16]}, wanted {digest[:16]})")
            except ReleaseError as e:
                out["release_error"] = str(e)
    return out


def safe_extract(tarball: Path, dest: Path) -> None:
    """Unpack a release tarball: regular files and folders only, nothing outside ``dest``."""
    root = Path(dest).resolve()
    try:
        with tarfile.open(tarball) as tf:
            members = tf.getmembers()
            need = sum(m.size for m in members) + (16 << 20)
            free = shutil.disk_usage(root.parent if not root.exists() else root).free
            if need > free:
                raise ReleaseError(f"{tarball}: unpacking needs {need >> 20} MiB, {free >> 20} MiB free on "
                                   f"{root.parent}; nothing was changed")
            for m in members:
                target = (root / m.name).resolve()
                if not (m.isfile() or m.isdir()) or (target != root and root not in target.parents):
                    raise ReleaseError(f"{tarball}: member {m.name!r} is not a plain file inside the release")
                m.uid = m.gid = 0
                m.uname = m.gname = "root"
                m.mode = 0o750 if m.isdir() else 0o640
            tf.extractall(dest, members=members)  # noqa: S202 - members checked above
    except (tarfile.TarError, EOFError) as e:
        raise ReleaseError(f"{tarball}: not a readable tar archive ({e})") from None


def own(root: Path, owner: str | None = None, group: str | None = None) -> None:
    """Folders 0750, files 0640, owner:group: the service's group reads, nobody else does."""
    for p in [Path(root), *Path(root).rglob("*")]:
        os.chmod(p, 0o750 if p.is_dir() else 0o640)
        if owner or group:
            shutil.chown(p, user=owner, group=group)  # type: ignore[arg-type]  # either may be None


def _remove(path: Path | None) -> None:
    if path is None:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _refuse_reuse(dest: Path, files: dict[str, str]) -> None:
    old = manifest.read(dest)
    if old != files:
        raise ReleaseError(f"{dest}: release id {dest.name!r} is already installed with other content "
                           f"(digest {manifest.digest(old)[:16]}, new {manifest.digest(files)[:16]}); "
                           "a release id names one content for ever: publish the new content under a new id")


def _check_push(releases: Path, staging: Path, tarball: Path | None) -> None:
    """What install consumes (and removes) must be a push area of ``releases``, never anything else."""
    if staging.parent.resolve() != releases.resolve() or staging.name in (*list_releases(releases), STATE_FILE):
        raise UsageError(f"--staging {staging}: must be a push folder directly inside {releases} (such as "
                         f"{releases / (STAGING_PREFIX + 'ID')}), not a release; nothing was changed")
    if tarball is not None and (Path(tarball).exists() or Path(tarball).is_symlink()) and (
            Path(tarball).is_symlink() or not Path(tarball).is_file()):
        raise UsageError(f"--tarball {tarball}: not a regular file; nothing was changed")


@_locked("install")
def install(releases: Path, staging: Path, release: str, tarball: Path | None = None,
            owner: str | None = None, group: str | None = None,
            verified: dict[str, str] | None = None) -> dict[str, Any]:
    """Verify a pushed or fetched release in ``staging`` and rename it to releases/<release>.

    The push is either a folder (``staging``) or a tarball unpacked into ``staging`` first; either
    way every file is checked against the release's manifest before the rename. An installed copy
    whose files were changed on the node is replaced; one with another manifest is refused.
    ``verified``: the files (path -> sha256) the caller wrote into ``staging`` itself, hashing each on the
    way (the pull agent's fetch, in its own staging folder, under the lock): not read a second time.
    """
    check_release_id(release)
    releases, staging = Path(releases), Path(staging)
    dest = releases / release
    _check_push(releases, staging, tarball)
    try:
        if tarball is not None and Path(tarball).is_file():
            _remove(staging)
            staging.mkdir(parents=True)
            safe_extract(Path(tarball), staging)
        if not staging.is_dir():
            if not dest.is_dir():
                raise ReleaseError(f"{staging}: nothing was pushed and {dest} is not installed")
            manifest.verify(dest)
            return {"changed": False, "release": release, "path": str(dest)}
        files = manifest.read(staging)
        if dest.is_dir():
            _refuse_reuse(dest, files)
            try:
                manifest.verify(dest)
                return {"changed": False, "release": release, "path": str(dest)}
            except ReleaseError:
                pass  # files of the installed copy were changed on the node (drift): replace it
        own(staging, owner, group)
        manifest.verify(staging, checked=verified if tarball is None else None)
        repaired = dest.is_dir()
        if repaired:
            aside = releases / f"{STAGING_PREFIX}damaged-{release}"
            _remove(aside)
            _write_journal(releases, {"op": "install", "release": release, "pid": os.getpid()})
            crash_point("install-journal")
            os.rename(dest, aside)
            crash_point("install-aside")
            os.rename(staging, dest)
            crash_point("install-swap")
            shutil.rmtree(aside)
            crash_point("install-cleanup")
            _clear_journal(releases)
        else:
            os.rename(staging, dest)
    except OSError as e:
        raise ReleaseError(f"{dest}: install failed ({e.strerror or e}); the active release is untouched") from None
    finally:
        _remove(staging)
        _remove(Path(tarball) if tarball is not None else None)
    out = {"changed": True, "release": release, "path": str(dest), "files": len(files)}
    if repaired:
        out["repaired"] = True
    return out


def touch_models(release_dir: Path, models: list[str]) -> list[str]:
    """Set the mtime of each model folder (and everything in it) to now.

    Triton re-reads a model on load only when its folder is newer than what it loaded; a release
    switched back to (rollback) would otherwise keep the model in memory. Content is unchanged.
    """
    touched = []
    for m in models:
        folder = Path(release_dir) / m
        if folder.is_dir():
            for p in [*sorted(folder.rglob("*"), reverse=True), folder]:
                os.utime(p, None)
            touched.append(m)
    return touched


@_locked("activate")
def activate(link: Path, releases: Path, release: str, touch: list[str] | None = None) -> dict[str, Any]:
    """Point the models symlink at releases/<release> by renaming a fresh symlink over it.

    A hand-made model folder found at the link path is moved beside it (``<link>.preexisting-<time>``),
    outside ``releases`` so that pruning never removes it.
    """
    check_release_id(release)
    link, releases = Path(link), Path(releases)
    if not (releases / release).is_dir():
        raise UsageError(f"{releases / release}: no such release on this node")
    for m in touch or []:
        if "/" in check_path(m, "--touch", UsageError):
            raise UsageError(f"--touch {m!r}: a model folder name, not a path")
    touched = touch_models(releases / release, touch or [])
    previous = active_release(link, releases)
    if previous == release:
        return {"changed": bool(touched), "previous": previous, "active": release, "touched": touched}
    target = os.path.relpath(releases / release, link.parent)
    if link.is_dir() and not link.is_symlink():
        if any(link.iterdir()):
            os.rename(link, link.with_name(f"{link.name}.preexisting-{time.strftime('%Y%m%dT%H%M%S')}"))
        else:
            link.rmdir()
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.parent / f".{link.name}.tmp-{os.getpid()}"
    _remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return {"changed": True, "previous": previous, "active": release, "touched": touched}


@_locked("mark")
def mark(releases: Path, release: str, digest: str | None = None, link: Path | None = None) -> dict[str, Any]:
    """Record the release as current (after the golden gate) and append it to the history.

    With ``link`` (the models symlink, pointing at the release), also record that the gate passed
    against what Triton serves through the link as it is now (``served``; voided when the link moves).
    Marking the current release again only records that (its place in the history is kept)."""
    check_release_id(release)
    if release not in list_releases(releases):
        raise UsageError(f"{Path(releases) / release}: no such release on this node (only an installed one is marked)")
    st = state(releases)
    digest = digest or release_digest(releases, release)
    rec = None
    if link is not None and active_release(link, releases) == release:
        rec = {"release": release, "digest": digest, "link": link_id(link),
               "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    same = st.get("current") == release and st.get("digest") == digest
    if same and (rec is None or {**(st.get("served") or {}), "at": rec["at"]} == rec):
        return {"changed": False, "current": release, "served": rec is not None}
    history = st.get("history", [])
    if not same:
        history = [h for h in history if h.get("release") != release]
        history.append({"release": release, "digest": digest,
                        "activated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    st.pop("error", None)
    st.pop("served", None)
    _write_state(releases, {**st, "current": release, "digest": digest, "history": history[-records.STATE_HISTORY:],
                            **({"served": rec} if rec else {})})
    return {"changed": True, "previous": st.get("current"), "current": release, "served": rec is not None}


def _last_change(path: Path) -> float:
    """The newest ctime in ``path`` (a file or a folder tree): when anything was last written or renamed there."""
    newest = 0.0
    for p in [path, *(path.rglob("*") if path.is_dir() and not path.is_symlink() else [])]:
        with contextlib.suppress(OSError):
            newest = max(newest, os.lstat(p).st_ctime)
    return newest


@_locked("prune")
def prune(link: Path, releases: Path, keep: int) -> dict[str, Any]:
    """Keep the ``keep`` most recently current releases (always the active and current ones).

    Only release folders (with a manifest) and this module's staging folders are ever removed, and a
    staging entry only once nothing has changed in it for ``STAGING_GRACE`` seconds: the lock is held,
    so no install or fetch is filling it, and a push still on its way (the role copies its tarball
    before it runs install) is younger than that.
    """
    if keep < 1:
        raise UsageError(f"--keep {keep}: must be at least 1")
    releases = Path(releases)
    st = state(releases)
    order = [h["release"] for h in reversed(st.get("history", []))]
    protect = {r for r in (active_release(link, releases), st.get("current")) if r}
    present = list_releases(releases)
    ranked = [r for r in order if r in present] + sorted(set(present) - set(order))  # never-current go last
    kept = protect | set(ranked[:keep])
    removed = []
    for name in present:
        if name not in kept:
            shutil.rmtree(releases / name)
            removed.append(name)
    for p in releases.glob(STAGING_PREFIX + "*") if releases.is_dir() else []:
        if time.time() - _last_change(p) < STAGING_GRACE:
            continue  # someone's push in progress
        _remove(p)
        removed.append(p.name)
    return {"changed": bool(removed), "removed": removed, "kept": sorted(kept & set(present))}


@_locked("recover")
def recover(link: Path, releases: Path, grace: float = 0.0) -> dict[str, Any]:
    """Deadman: the link names a release that never passed its gate -> point it back at ``current``.

    Run at boot before Triton starts (and by the pull agent when it starts): a controller or agent
    that died between ``activate`` and ``mark`` must not leave Triton loading an un-gated release.
    With ``grace``, a running node (a timer) reverts only a switch older than that many seconds.
    """
    active = active_release(link, releases)
    current = state(releases).get("current")
    if not current or active == current or not (Path(releases) / current).is_dir():
        return {"changed": False, "active": active, "current": current}
    switched = time.time() - os.lstat(link).st_mtime
    if switched < grace:  # a switch in progress: its gate may still pass
        return {"changed": False, "active": active, "current": current, "ungated_for": round(switched)}
    activate(link, releases, current)  # a new link: ``served`` no longer holds until a gate passes again
    return {"changed": True, "active": current, "reverted": active}

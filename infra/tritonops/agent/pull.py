"""Pull mode: keep one target (a pod, an edge node) on its channel, by itself.

Each poll reads the channel pointer with a conditional request (an idle poll is one small request
answered 304). When the pointer names a new release the agent applies it, step by step:

    fetch manifest + signature -> verify (digest, trusted key) -> fetch files (reusing local copies
    and the node cache) -> install (sha256 of every file) -> activate (atomic symlink) -> load
    (repository API, admin header) -> golden gate -> unload dropped models -> mark -> prune

Any failure rolls back to the last gated release (symlink back, its models reloaded side by side,
models only the failed release had unloaded) and counts the step in the metrics. A release that
failed verification, its install, load or golden gate is refused until the pointer moves again; a
fetch that failed (store unreachable, an object missing or damaged) is retried with backoff. A
release not signed by a trusted key never reaches Triton: nothing is downloaded before the
manifest's signature verifies. Every store read has a deadline and a byte cap (store, netio); in
``run`` the stop event (SIGTERM) ends a download at once, and ``/ready`` turns false when no poll has
completed in ``missed_polls`` intervals (a loop stuck on something the deadlines do not cover).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import manifest, releases, signing
from .errors import ReleaseError, StoreError
from .fsio import write_atomic
from .golden import golden_gate
from .manifest import MANIFEST_FILE
from .metrics import Metrics
from .store import POINTER_MAX, SIGNATURE_MAX, Store, blob_key, channel_key, manifest_key
from .triton import Triton

# Steps whose failure says the store or Triton did not answer (retried), not that the release is bad.
TRANSIENT_STEPS = ("fetch", "triton")


class StepFailed(ReleaseError):
    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step, self.reason = step, reason


def _step(name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except StepFailed:
        raise
    except (ReleaseError, OSError) as e:
        raise StepFailed(name, str(e)) from None


def parse_pointer(raw: bytes, where: str) -> dict[str, Any]:
    """A channel pointer read from a store; anything else is the store's fault (StoreError, exit 3)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
        release, digest = str(doc["release"]), str(doc["digest"])
    except (ValueError, RecursionError, KeyError, TypeError):
        raise StoreError(f"{where}: expected a channel pointer {{'release': ID, 'digest': SHA256}}") from None
    try:
        releases.check_release_id(release)
    except ReleaseError as e:
        raise StoreError(f"{where}: {e}") from None
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise StoreError(f"{where}: digest {digest[:80]!r} is not a sha256 hex digest")
    history = doc.get("history", [])
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise StoreError(f"{where}: history is not a list of {{'release', 'digest'}} entries")
    return dict(doc)


class Agent:
    def __init__(self, store: Store, channel: str, link: Path, releases_dir: Path, trusted_keys: list[Path],
                 triton: Triton | None = None, keep: int = 3, cache: Path | None = None,
                 owner: str | None = None, group: str | None = None, load_timeout: float = 600.0,
                 golden_timeout: float = 120.0, log: Callable[[str], None] = print, missed_polls: int = 3) -> None:
        self.store, self.channel = store, channel
        self.link, self.releases = Path(link), Path(releases_dir)
        self.trusted_keys = [signing.check_public_key(Path(k)) for k in trusted_keys]  # a bad key: exit 2
        self.triton, self.keep, self.cache = triton, keep, Path(cache) if cache else None
        self.owner, self.group = owner, group
        self.load_timeout, self.golden_timeout = load_timeout, golden_timeout
        self.log = log
        self.metrics = Metrics()
        self.refused: dict[str, str] = {}
        self.retry_at: dict[str, tuple[int, float]] = {}  # digest -> (failed fetches, monotonic time of next try)
        self.pointer: dict[str, Any] | None = None
        self.polled = False
        self.missed_polls = missed_polls  # /ready turns false when no poll completed in this many intervals
        self.last_poll_done: float | None = None  # monotonic time the last poll returned
        self.switching = False
        self.interval = 0.0  # set by run(); one-shot polls retry a failed fetch on the next call
        self.lock = threading.Lock()
        channel_key(channel)

    # --- state ------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        st = releases.state(self.releases)
        return {"channel": self.channel, "pointer": self.pointer, "current": st.get("current"),
                "active": releases.active_release(self.link, self.releases), "digest": st.get("digest"),
                "refused": self.refused}

    def gated(self) -> bool:
        st = releases.state(self.releases)
        return bool(st.get("current")) and releases.active_release(self.link, self.releases) == st.get("current")

    def up_to_date(self) -> bool:
        if not self.pointer or not self.gated():
            return False
        digest = self.pointer["digest"]
        return releases.state(self.releases).get("digest") == digest or digest in self.refused

    def ready(self) -> bool:
        """The channel tried, a gated release serving (also while the next one is being switched in:
        the old models serve until the new ones pass), and Triton answering."""
        serving = self.gated() or (self.switching and bool(releases.state(self.releases).get("current")))
        return self.polled and serving and not self.stale() and (self.triton is None or self.triton.ready())

    def stale(self) -> bool:
        """No poll completed in ``missed_polls`` intervals: the loop is stuck (a hung store, Triton), so
        /ready says so even while the last gated release serves. Never stale outside ``run``."""
        if not self.interval or self.last_poll_done is None:
            return False
        return time.monotonic() - self.last_poll_done > self.missed_polls * self.interval

    def _export(self) -> None:
        st = releases.state(self.releases)
        if self.gated():
            self.metrics.replace("tritonops_release_info", 1, channel=self.channel, release=str(st["current"]),
                                 digest=str(st.get("digest") or ""))
        if self.pointer:
            self.metrics.replace("tritonops_release_channel_info", 1, channel=self.channel,
                                 release=self.pointer["release"], digest=self.pointer["digest"])
        ok = self.up_to_date()
        self.metrics.set("tritonops_release_up_to_date", 1 if ok else 0, channel=self.channel)
        if ok:
            self.metrics.set("tritonops_release_last_success_timestamp_seconds", time.time(), channel=self.channel)
        self.metrics.set("tritonops_release_store_requests_total", self.store.requests)
        creds = getattr(self.store, "credentials", None)  # None: a folder, HTTP, or an anonymous S3 read
        if creds is not None:
            self.metrics.set("tritonops_release_credentials_errors_total", creds.errors, source=creds.source)
            if creds.expiry is not None:
                self.metrics.set("tritonops_release_credentials_expiry_timestamp_seconds", creds.expiry,
                                 source=creds.source)

    # --- fetch and install ------------------------------------------------------------------------

    def _local_copies(self) -> dict[str, Path]:
        """sha256 -> a file of an installed release with that content (no download needed)."""
        out: dict[str, Path] = {}
        for name in releases.list_releases(self.releases):
            try:
                for rel, h in manifest.read(self.releases / name).items():
                    out.setdefault(h, self.releases / name / rel)
            except ReleaseError:
                continue
        return out

    def _copy_checked(self, src: Path, dest: Path, sha256: str) -> bool:
        h = hashlib.sha256()
        try:
            with open(src, "rb") as f, open(dest, "wb") as out:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
        except OSError:
            return False
        return h.hexdigest() == sha256

    def _cache_put(self, src: Path, cached: Path) -> None:
        """Keep a copy for the next pod on this node; best effort (a cache never fails a release)."""
        tmp = None
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{cached.name}.", dir=str(cached.parent))
            os.close(fd)
            shutil.copyfile(src, tmp)
            os.replace(tmp, cached)
        except OSError as e:
            self.log(f"node cache {cached.parent}: not written ({e.strerror or e})")
            if tmp and os.path.exists(tmp):
                os.unlink(tmp)

    def fetch(self, release: str, digest: str) -> dict[str, Any]:
        """Verify the signed manifest, then fetch and install the release's files. Nothing reaches the
        releases folder (let alone Triton) before the signature verifies."""
        where = f"{self.store}/{manifest_key(digest)}"
        raw = _step("fetch", lambda: self.store.get(manifest_key(digest)))
        sig = _step("fetch", lambda: self.store.get(manifest_key(digest) + signing.SIGNATURE_SUFFIX,
                                                    limit=SIGNATURE_MAX))
        if hashlib.sha256(raw).hexdigest() != digest:
            raise StepFailed("verify", f"{where}: sha256 of the manifest is not the digest the channel names")
        key = _step("verify", lambda: signing.verify(raw, sig, self.trusted_keys, where))
        files = _step("verify", lambda: manifest.parse(raw, where))
        dest = self.releases / release
        if dest.is_dir():
            _step("verify", lambda: releases._refuse_reuse(dest, files))
        staging = self.releases / f"{releases.STAGING_PREFIX}{release}"
        downloaded = reused = 0
        try:
            if dest.is_dir():
                try:
                    manifest.verify(dest)
                    return {"release": release, "downloaded": 0, "reused": len(files), "key": str(key)}
                except ReleaseError:
                    pass  # damaged on disk: fetch again and replace
            releases._remove(staging)
            staging.mkdir(parents=True)
            local = self._local_copies()
            for rel, h in files.items():
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                cached = self.cache / h if self.cache else None
                if (h in local and self._copy_checked(local[h], out, h)) or (
                        cached and cached.is_file() and self._copy_checked(cached, out, h)):
                    reused += 1
                    continue
                # TODO(issue 21 item 1): pass the file's signed length (size=) once the manifest states it.
                n = _step("fetch", lambda: self.store.download(blob_key(h), out, h))  # noqa: B023
                local[h] = out  # a second file with this content is copied, not downloaded again
                downloaded += n
                self.metrics.inc("tritonops_release_downloaded_bytes_total", n)
                if cached is not None:
                    self._cache_put(out, cached)
            (staging / MANIFEST_FILE).write_bytes(raw)
            _step("install", lambda: releases.install(self.releases, staging, release, owner=self.owner,
                                                      group=self.group))
        except OSError as e:
            raise StepFailed("fetch", f"{staging}: {e.strerror or e}") from None
        finally:
            releases._remove(staging)
        return {"release": release, "downloaded": downloaded, "reused": reused, "key": str(key)}

    # --- switch -----------------------------------------------------------------------------------

    def apply(self, release: str, digest: str) -> dict[str, Any]:
        """Activate, load, gate, unload, mark, prune; on failure roll back and raise StepFailed."""
        prev = releases.active_release(self.link, self.releases)
        if prev and not releases.state(self.releases).get("current"):
            prev = None  # never gated: nothing to go back to
        prev_models = manifest.model_digests(manifest.read(self.releases / prev)) if prev else {}
        new_dir = self.releases / release
        new_models = manifest.model_digests(manifest.read(new_dir))
        ready = set(_step("load", self.triton.ready_models)) if self.triton else set()
        changed = {m for m in new_models if prev_models.get(m) != new_models[m]} | (set(new_models) - ready)
        want = sorted(changed) if self.triton else []  # without Triton (an init step) nothing is loaded
        ens = set(manifest.ensembles(new_dir))
        to_load = [m for m in want if m not in ens] + [m for m in want if m in ens]
        to_unload = sorted(ready - set(new_models))
        try:
            _step("activate", lambda: releases.activate(self.link, self.releases, release, touch=to_load))
            if self.triton:
                for m in to_load:
                    _step("load", lambda: self.triton.load(m, timeout=self.load_timeout))  # type: ignore  # noqa: B023
                gate = _step("golden", lambda: golden_gate(self.triton, new_dir, sorted(new_models),  # type: ignore
                                                           timeout=self.golden_timeout))
                if not gate["ok"]:
                    raise StepFailed("golden", "; ".join(gate["failed"]))
                for m in to_unload:
                    _step("unload", lambda: self.triton.unload(m))  # type: ignore  # noqa: B023
            _step("mark", lambda: releases.mark(self.releases, release, digest))
        except StepFailed:
            self._rollback(prev, to_load, prev_models)
            raise
        pruned = releases.prune(self.link, self.releases, self.keep)
        return {"release": release, "loaded": to_load, "unloaded": to_unload, "pruned": pruned["removed"]}

    def _rollback(self, prev: str | None, loaded: list[str], prev_models: dict[str, str]) -> None:
        """Back to the last gated release: link, its models reloaded side by side, new-only models unloaded."""
        try:
            if prev:
                back = [m for m in loaded if m in prev_models]
                releases.activate(self.link, self.releases, prev, touch=back)
                if self.triton:
                    for m in back:
                        self.triton.load(m, timeout=self.load_timeout)
            if self.triton:
                for m in loaded:
                    if m not in prev_models:
                        self.triton.unload(m)
        except (ReleaseError, OSError) as e:
            self.log(f"rollback to {prev} incomplete: {e}")

    # --- one poll, the loop, and the pod's init step -----------------------------------------------

    def poll(self) -> dict[str, Any]:
        """Read the pointer; apply a new release. Returns what happened (never raises on a failed step)."""
        with self.lock:
            self.metrics.set("tritonops_release_last_poll_timestamp_seconds", time.time(), channel=self.channel)
            try:
                raw = self.store.get(channel_key(self.channel), limit=POINTER_MAX, conditional=True)
                if raw is not None:
                    self.pointer = parse_pointer(raw, f"{self.store}/{channel_key(self.channel)}")
            except ReleaseError as e:
                self.metrics.inc("tritonops_release_polls_total", channel=self.channel, result="error")
                self._export()
                return {"result": "error", "error": str(e)}
            finally:
                self.polled = True
            result = "not_modified" if raw is None else "unchanged"
            out: dict[str, Any] = {"result": result}
            pointer = self.pointer or {}
            digest = pointer.get("digest")
            if (digest and not self.up_to_date() and digest not in self.refused
                    and time.monotonic() >= self.retry_at.get(digest, (0, 0.0))[1]):
                try:  # the whole change holds the node folder (releases.locked; lock.py), waiting a bounded time
                    with releases.locked(self.releases, f"pull {self.channel}"):
                        out = self._attempt(pointer["release"], digest)
                except releases.lock.LockBusy as e:  # another command holds it: try again next poll
                    out = {"result": "failed", "release": pointer["release"], "step": "lock", "error": str(e)}
                result = "changed"
            elif digest and self.gated():
                out.update(self._reconcile())
            self.metrics.inc("tritonops_release_polls_total", channel=self.channel, result=result)
            self._export()
            return out

    def _reconcile(self) -> dict[str, Any]:
        """Load what the gated release has and Triton lacks (a Triton restarted in explicit mode)."""
        if self.triton is None or not self.triton.live():
            return {}
        current = releases.state(self.releases)["current"]
        try:
            missing = sorted(set(manifest.models(manifest.read(self.releases / current)))
                             - set(self.triton.ready_models()))
            if not missing:
                return {}
            ens = set(manifest.ensembles(self.releases / current))
            for m in [m for m in missing if m not in ens] + [m for m in missing if m in ens]:
                self.triton.load(m, timeout=self.load_timeout)
        except ReleaseError as e:
            self.log(f"reloading the models of {current}: {e}")
            return {"reconcile_error": str(e)}
        self.log(f"Triton had lost {', '.join(missing)} of {current}: loaded again")
        return {"reloaded": missing}

    def _attempt(self, release: str, digest: str) -> dict[str, Any]:
        start = time.monotonic()
        try:
            fetched = self.fetch(release, digest)
            if self.triton and not self.triton.live():
                raise StepFailed("triton", f"{self.triton.url} does not answer; the release waits for it")
            self.switching = True
            applied = self.apply(release, digest)
        except StepFailed as e:
            cancel = getattr(self.store, "cancel", None)
            if cancel is not None and cancel.is_set():  # shutting down (SIGTERM): nothing was decided
                self.log(f"release {release} ({digest[:12]}) not applied: stopped")
                return {"result": "stopped", "release": release, "step": e.step, "error": e.reason}
            self.metrics.inc("tritonops_release_failures_total", channel=self.channel, step=e.step)
            # Transient: the store, the link or Triton itself (not ready, restarting) may come back.
            if e.step in TRANSIENT_STEPS or (self.triton is not None and not self.triton.live()):
                # The store or the link may come back: retry with backoff (1, 2, 4 ... 32 intervals of
                # this poll), staying "behind" meanwhile so that TritonopsReleaseBehindChannel can fire.
                tries = self.retry_at.get(digest, (0, 0.0))[0] + 1
                self.retry_at[digest] = (tries, time.monotonic() + self.interval * 2 ** min(tries - 1, 5))
                self.log(f"release {release} ({digest[:12]}) not applied (try {tries}, will retry): {e}")
            else:
                self.refused[digest] = str(e)
                self.log(f"release {release} ({digest[:12]}) refused at {e}")
            return {"result": "failed", "release": release, "step": e.step, "error": e.reason}
        finally:
            self.switching = False
        seconds = time.monotonic() - start
        self.metrics.set("tritonops_release_apply_seconds", seconds, channel=self.channel)
        self.log(f"release {release} ({digest[:12]}) serving after {seconds:.1f}s: "
                 f"{json.dumps({**fetched, **applied}, sort_keys=True)}")
        return {"result": "applied", "seconds": round(seconds, 3), **fetched, **applied}

    def gate_active(self) -> dict[str, Any]:
        """At start: revert an un-gated switch (deadman); gate what an init step installed but nobody gated."""
        with self.lock:
            recovered = releases.recover(self.link, self.releases)
            if recovered["changed"]:
                self.log(f"reverted the un-gated release {recovered['reverted']} to {recovered['active']}")
                if self.triton:
                    # Triton may have loaded the un-gated files: reload what the gated release has.
                    self.triton.wait_ready(self.load_timeout)
                    for m in manifest.models(manifest.read(self.releases / recovered["active"])):
                        self.triton.load(m, timeout=self.load_timeout)
            active = releases.active_release(self.link, self.releases)
            if not active or self.gated() or self.triton is None:
                return {"gated": self.gated(), **recovered}
            try:
                self.triton.wait_ready(self.load_timeout)
                models = manifest.models(manifest.read(self.releases / active))
                gate = golden_gate(self.triton, self.releases / active, models, timeout=self.golden_timeout)
                if not gate["ok"]:
                    raise StepFailed("golden", "; ".join(gate["failed"]))
                releases.mark(self.releases, active)
            except (StepFailed, ReleaseError) as e:
                step = e.step if isinstance(e, StepFailed) else "golden"
                self.metrics.inc("tritonops_release_failures_total", channel=self.channel, step=step)
                self.refused[releases.release_digest(self.releases, active) or active] = str(e)
                self.log(f"release {active} installed at start failed its gate: {e}")
                return {"gated": False, "error": str(e)}
            self._export()
            return {"gated": True, "release": active}

    def sync(self) -> dict[str, Any]:
        """The pod's init step: put the channel's release in place (fetched, verified, activated).

        Triton is not running yet; the sidecar gates the release once Triton has loaded it.
        """
        raw = self.store.get(channel_key(self.channel), limit=POINTER_MAX)
        assert raw is not None
        self.pointer = parse_pointer(raw, f"{self.store}/{channel_key(self.channel)}")
        release, digest = self.pointer["release"], self.pointer["digest"]
        fetched = self.fetch(release, digest)
        releases.activate(self.link, self.releases, release)
        return {"result": "synced", **fetched}

    def run(self, interval: float, jitter: float = 0.2, stop: threading.Event | None = None,
            textfile: Path | None = None) -> None:
        """Poll once at start (readiness waits for it), then every ``interval`` seconds (+- ``jitter`` of
        it, after a random delay that spreads a fleet started together over one interval) until ``stop``."""
        stop = stop or threading.Event()
        self.interval = interval
        self.store.cancel = stop  # SIGTERM ends a download at once, not after it (netio)
        self.last_poll_done = time.monotonic()  # the first poll has missed_polls intervals too
        self.gate_active()
        self._write_textfile(textfile)
        # Not behind the random delay: a pod was not ready for up to one interval after its gate passed,
        # which every scale-from-zero cold start paid too.
        self._poll_and_log(textfile)
        stop.wait(random.uniform(0, interval))
        while not stop.is_set():
            self._poll_and_log(textfile)
            stop.wait(interval * random.uniform(1 - jitter, 1 + jitter))

    def _poll_and_log(self, textfile: Path | None) -> None:
        out = self.poll()
        self.last_poll_done = time.monotonic()
        if out["result"] not in ("not_modified", "unchanged"):
            self.log(json.dumps(out, sort_keys=True))
        self._write_textfile(textfile)

    def _write_textfile(self, textfile: Path | None) -> None:
        if textfile:
            write_atomic(Path(textfile) / "tritonops_release.prom", self.metrics.render())

"""Pull mode: keep one target (a pod, an edge node) on its channel, by itself.

Each poll reads the channel pointer with a conditional request (an idle poll is one small request
answered 304). When the pointer names a new release the agent applies it, step by step:

    fetch manifest + signature -> verify (digest, trusted key) -> fetch files (reusing local copies
    and the node cache) -> install (sha256 of every file) -> activate (atomic symlink) -> load
    (repository API, admin header) -> golden gate -> unload dropped models -> mark -> prune

Any failure rolls back to the last gated release (symlink back, its models reloaded side by side,
models only the failed release had unloaded, its golden gate run again) and counts the step and the
failure's class in the metrics. "Gated" means served: the node reports a release gated (``/ready``,
``tritonops_release_info``) only after a gate passed against what Triton answers since the link last
moved (releases.served), so one pointed back at by a rollback or ``recover`` is reloaded and gated
again first. Failures are classed by cause (failures.py): what may pass later (the store, a full disk,
Triton down, the lock) is retried with backoff; what never will (a bad signature or digest, a release
that cannot be laid out, a model config Triton refused, a failed gate) is refused until the pointer
moves again; ``/status`` shows the class, the cause and the next retry. A release not signed by a
trusted key never reaches Triton: nothing is downloaded before the manifest's signature verifies.
Every store read has a deadline and a byte cap (store, netio); in ``run`` the stop event (SIGTERM)
ends a download at once, and ``/ready`` turns false when no poll has completed in ``missed_polls``
intervals (a loop stuck on something the deadlines do not cover).
"""

from __future__ import annotations

import errno
import functools
import json
import random
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from ..core import metric_names
from ..core.errors import ReleaseError, StoreError, TooLong
from ..core.fsio import write_atomic
from ..core.keys import POINTER_MAX, blob_key, channel_key
from ..core.names import MANIFEST_FILE, TRUSTED_FILE
from ..core.triton_http import Triton
from ..release_format import manifest, metadata, producer, signing, waves
from ..release_format.golden_gate import golden_gate
from ..stores import Store
from . import failures, releases, reporting, trusted_state
from .cache import fetch_through, open_cache
from .exporter import Metrics
from .serve import StepFailed, _step, serve_release


class Agent:
    def __init__(self, store: Store, channel: str, link: Path, releases_dir: Path, trusted_keys: list[Path],
                 triton: Triton | None = None, keep: int = 3, cache: Path | None = None,
                 owner: str | None = None, group: str | None = None, load_timeout: float = 600.0,
                 golden_timeout: float = 120.0, log: Callable[[str], None] = print, missed_polls: int = 3,
                 agent_id: str | None = None, group_labels: list[str] | tuple[str, ...] = (), report: bool = False,
                 report_key: Path | None = None, store_name: str | None = None, cache_quota: int | None = None,
                 mirror: Store | None = None) -> None:
        self.store, self.channel = store, channel
        self.link, self.releases = Path(link), Path(releases_dir)
        self.trusted_keys = [signing.check_public_key(Path(k)) for k in trusted_keys]  # a bad key: exit 2
        # The root and channel versions this node trusts (<releases>/.trusted.json; --trusted-key files at first).
        self.trusted = trusted_state.load(self.releases, self.trusted_keys, store_name)
        self.frozen = False  # the channel's signed pointer has expired: nothing new is applied
        self.triton, self.keep = triton, keep
        # The node cache (cache.py): a folder shared by the node's agents, or ``mirror``, a node's ``cache serve``.
        self.cache = open_cache(Path(cache), cache_quota, log) if cache else None
        self.mirror, self._pinned = mirror, None
        self.owner, self.group = owner, group
        self.load_timeout, self.golden_timeout = load_timeout, golden_timeout
        self.log = log
        # Every --trusted-key holds every role, other fleets' keys look alike; with --store-name nothing installs
        # before the store's named root is followed (metadata.check_pointer), so no warning then.
        if self.trusted.root.version == 0 and store_name is None:
            log(f"warning: channel {channel}: no signed root trusted yet: each --trusted-key signs every role and "
                "a release signed by any one of them installs (tritonops release root init sets roles and thresholds)")
        self.metrics = Metrics()
        self.refused: dict[str, str] = {}
        self.failures: dict[str, dict[str, Any]] = {}  # digest -> its last failure: class, cause, next retry
        self.retry_at: dict[str, tuple[int, float]] = {}  # digest -> (failed fetches, monotonic time of next try)
        self.pointer: dict[str, Any] | None = None
        self.polled = False
        self.missed_polls = missed_polls  # /ready turns false when no poll completed in this many intervals
        self.last_poll_done: float | None = None  # monotonic time the last poll returned
        self.switching = False
        self.interval = 0.0  # set by run(); one-shot polls retry a failed fetch on the next call
        self.lock = threading.Lock()
        channel_key(channel)
        # Staged rollouts (release_format.waves, reporting): who this agent is, its groups, its reports.
        self.agent_id, self.group_labels = waves.identity(agent_id, group_labels)  # a bad one: exit 2
        self.report, self.report_key = report, report_key
        self.rollout_state: str | None = None  # why the channel's release is (not) for this agent yet

    # --- state ------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        st = releases.state(self.releases)
        return {"channel": self.channel, "pointer": self.pointer, "current": st.get("current"),
                "active": releases.active_release(self.link, self.releases), "digest": st.get("digest"),
                "refused": self.refused, "failure": self.failures.get(str((self.pointer or {}).get("digest"))),
                "served": self.gated(), "agent": self.agent_id, "rollout": self.rollout_state,
                "trusted": {"root_version": self.trusted.root.version, "expired": self.frozen,
                            **self.trusted.channels.get(self.channel, {})}}

    def gated(self) -> bool:
        """The link names the last gated release and its gate passed against Triton since the link last
        moved (releases.served): never only because the link matches ``current.json``."""
        return releases.served(self.link, self.releases)

    def up_to_date(self) -> bool:
        if not self.pointer or not self.gated():
            return False
        digest = self.pointer["digest"]
        waiting = (self.rollout_state or "").startswith(("not targeted", "halted"))  # the rollout keeps it here
        return releases.state(self.releases).get("digest") == digest or digest in self.refused or waiting

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
            self.metrics.replace(metric_names.RELEASE_INFO, 1, channel=self.channel, release=str(st["current"]),
                                 digest=str(st.get("digest") or ""))
        else:  # not served (re-pointed, not gated again yet): claim no release
            self.metrics.clear(metric_names.RELEASE_INFO)
        if self.pointer:
            self.metrics.replace(metric_names.CHANNEL_INFO, 1, channel=self.channel,
                                 release=self.pointer["release"], digest=self.pointer["digest"])
        ok = self.up_to_date() and not self.frozen  # an expired pointer: the channel may have moved unseen
        self.metrics.set(metric_names.UP_TO_DATE, 1 if ok else 0, channel=self.channel)
        self.metrics.set(metric_names.METADATA_EXPIRED, 1 if self.frozen else 0, channel=self.channel)
        if ok:
            self.metrics.set(metric_names.LAST_SUCCESS, time.time(), channel=self.channel)
        self.metrics.set(metric_names.STORE_REQUESTS, self.store.requests)
        creds = getattr(self.store, "credentials", None)  # None: a folder, HTTP, or an anonymous S3 read
        if creds is not None:
            self.metrics.set(metric_names.CREDENTIALS_ERRORS, creds.errors, source=creds.source)
            if creds.expiry is not None:
                self.metrics.set(metric_names.CREDENTIALS_EXPIRY, creds.expiry,
                                 source=creds.source)

    # --- fetch and install ------------------------------------------------------------------------

    def _pin(self, fetching: Collection[str] = ()) -> None:
        """Pin the gated release's files in the node cache (its eviction spares them), and those of a release
        being fetched (the files filled first are not evicted by the last); touch the pin each poll: a pin
        untouched for the cache's pin_ttl (a pod gone) expires."""
        current = releases.state(self.releases).get("current") if self.gated() else None
        if self.cache is None or not (current or fetching):
            return
        try:
            if fetching or self._pinned != current or not self.cache.touch_pin(self.agent_id):
                served = set(manifest.read(self.releases / str(current)).values()) if current else set()
                self.cache.pin(self.agent_id, served | set(fetching))
                self._pinned = None if fetching else current
        except (ReleaseError, OSError) as e:
            self.log(f"node cache {self.cache}: release {current} not pinned ({e})")

    def _rejected(self, reason: str, message: str) -> None:
        """Count and log metadata the node refuses to act on (metadata.REASONS)."""
        self.metrics.inc(metric_names.METADATA_REJECTED, channel=self.channel, reason=reason)
        self.log(f"channel {self.channel}: metadata refused ({reason}): {message}")

    def fetch(self, release: str, digest: str, length: int | None = None) -> dict[str, Any]:
        """Verify the signed manifest, then fetch and install the release's files. Nothing reaches the
        releases folder (let alone Triton) before the signatures verify; the manifest is read under the
        length its signed pointer states (``length``, else the trusted pointer's when it names ``digest``),
        and each file under the length the manifest states. ``fetch_seconds``: from the manifest's read to the release
        installed (what a fetch costs, the agent's start-up not in it)."""
        started = time.monotonic()
        if length is None and self.pointer and (self.pointer.get("digest"), self.pointer.get("release")) == (
                digest, release):
            length = int(self.pointer["length"])
        try:
            raw, doc, signers = trusted_state.fetch_manifest(self.store, digest, length, release, self.channel,
                                                             self.trusted.root)
        except metadata.Rejected as e:
            self._rejected(e.reason, str(e))  # a short read (Truncated, a StoreError too) may pass on retry
            raise StepFailed("fetch" if isinstance(e, StoreError) else "verify", str(e), e) from None
        except ReleaseError as e:  # the store did not answer, or lost the object: retried
            raise StepFailed("fetch", str(e), e) from None
        files, lengths = doc["files"], doc["lengths"]
        key = ",".join(k[:16] for k in signers)
        dest = self.releases / release
        if dest.is_dir():
            _step("verify", lambda: releases._refuse_reuse(dest, files))
        staging = self.releases / f"{releases.STAGING_PREFIX}{release}"
        downloaded = reused = mirrored = 0
        try:
            if dest.is_dir():
                try:
                    manifest.verify(dest)
                except ReleaseError:
                    pass  # damaged on disk: fetch again and replace
                else:  # installed before: the producer signature the trusted root asks for, checked all the same
                    _step("verify", lambda: producer.require(self.trusted.root, dest, files, f"release {release}"))
                    return {"release": release, "downloaded": 0, "reused": len(files), "key": str(key)}
            releases._remove(staging)
            staging.mkdir(parents=True)
            local = releases.local_copies(self.releases)
            self._pin(fetching=set(files.values()))
            for rel, h in files.items():
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                if h in local and _copied(local[h], out, h):
                    reused += 1
                    continue
                source, n = fetch_through(self.cache, self.mirror, h, out, lengths[rel],
                                          functools.partial(self._download, h, length=lengths[rel]), self.log)
                local[h] = out  # a second file with this content is copied, not downloaded again
                reused += source == "cached"
                mirrored += source == "mirrored"
                downloaded += n
                self.metrics.inc(metric_names.DOWNLOADED_BYTES, n)
            _step("verify", lambda: producer.require(self.trusted.root, staging, files, f"release {release}"))
            (staging / MANIFEST_FILE).write_bytes(raw)
            # Every file was hashed as it was written into staging (a download, the cache's verified copy, a
            # local copy): install checks the folder holds exactly these files without reading them again.
            _step("install", lambda: releases.install(self.releases, staging, release, owner=self.owner,
                                                      group=self.group, verified=files))
        except OSError as e:
            raise StepFailed("fetch", f"{staging}: {e.strerror or e}") from None
        finally:
            releases._remove(staging)
        return {"release": release, "downloaded": downloaded, "reused": reused, "mirrored": mirrored, "key": str(key),
                "fetch_seconds": round(time.monotonic() - started, 3)}

    def _download(self, sha256: str, out: Path, length: int) -> int:
        """One file of a release under the length its signed manifest states. More bytes than that is a
        refusal of what the store served (``length``, step verify: exit 1, not retried), as for a manifest
        longer than its pointer states; a store that did not answer, or cut the file short, is retried."""
        try:
            return int(self.store.download(blob_key(sha256), out, sha256, size=length))
        except TooLong as e:
            self._rejected("length", str(e))
            raise StepFailed("verify", str(e), e) from None
        except ReleaseError as e:
            raise StepFailed("fetch", str(e), e) from None

    # --- switch -----------------------------------------------------------------------------------

    def apply(self, release: str, digest: str) -> dict[str, Any]:
        """Activate, load, gate, unload, mark, prune; on failure roll back and raise StepFailed."""
        prev = releases.state(self.releases).get("current")  # the last gated release: what a rollback returns to
        if prev and not (self.releases / prev).is_dir():
            prev = None
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
                releases.crash_point("apply-loaded")
                gate = _step("golden", lambda: golden_gate(self.triton, new_dir, sorted(new_models),  # type: ignore
                                                           timeout=self.golden_timeout))
                if not gate["ok"]:
                    raise StepFailed("golden", "; ".join(gate["failed"]))
                for m in to_unload:
                    _step("unload", lambda: self.triton.unload(m))  # type: ignore  # noqa: B023
            _step("mark", lambda: releases.mark(self.releases, release, digest, link=self.link))
        except StepFailed:
            self._rollback(prev, to_load, prev_models)
            raise
        pruned = releases.prune(self.link, self.releases, self.keep)
        return {"release": release, "loaded": to_load, "unloaded": to_unload, "pruned": pruned["removed"]}

    def _rollback(self, prev: str | None, loaded: list[str], prev_models: dict[str, str]) -> None:
        """Back to the last gated release: the link, every one of its models loaded again (those the
        failed release had loaded re-read from its files, side by side), new-only models unloaded, and its
        golden gate run again against what Triton answers: only a passing gate marks it served."""
        try:
            if prev:
                back = [m for m in loaded if m in prev_models]
                releases.activate(self.link, self.releases, prev, touch=back)
            if self.triton:
                for m in loaded:
                    if m not in prev_models:
                        self.triton.unload(m)
            if prev:
                self._serve(prev, touch=False)
        except (ReleaseError, OSError) as e:
            self.log(f"rollback to {prev} incomplete: {e}")

    def _serve(self, release: str, touch: bool = True) -> dict[str, Any]:
        """Make Triton serve ``release`` (the link points at it) and gate it: mark it served on a pass,
        raise StepFailed otherwise. ``touch``: every model re-read from its files (Triton keeps a model
        whose folder is not newer than what it loaded: after a rollback or ``recover`` it may still hold
        the refused release's)."""
        out = serve_release(self.triton, self.link, self.releases, release, load_timeout=self.load_timeout,
                            golden_timeout=self.golden_timeout, touch=touch)
        self.log(f"release {release} served again and gated: {json.dumps(out, sort_keys=True)}")
        return out

    def _failed(self, release: str, digest: str, e: StepFailed) -> dict[str, Any]:
        """Count, class (failures.py) and remember a failed step: retried with backoff or refused."""
        live = None
        if self.triton is not None and e.step in failures.TRITON_STEPS:
            live = self.triton.live()
        klass, cause = e.classify(live)
        labels = {"channel": self.channel, "step": e.step, "class": klass}  # "class": not a keyword argument
        self.metrics.inc(metric_names.FAILURES, 1.0, **labels)
        tries = self.retry_at.get(digest, (0, 0.0))[0] + 1
        if klass == failures.RETRY:
            # It may pass later: retry with backoff (1, 2, 4 ... 32 intervals of this poll), staying
            # "behind" meanwhile so that TritonopsReleaseBehindChannel can fire.
            delay = self.interval * 2 ** min(tries - 1, 5)
            self.retry_at[digest] = (tries, time.monotonic() + delay)
            self.failures[digest] = failures.record(e.step, e.reason, klass, cause, tries, time.time() + delay)
            self.log(f"release {release} ({digest[:12]}) not applied (try {tries}, {cause}, will retry): {e}")
        else:
            self.refused[digest] = str(e)
            self.retry_at.pop(digest, None)
            self.failures[digest] = failures.record(e.step, e.reason, klass, cause, tries)
            self.log(f"release {release} ({digest[:12]}) refused at {e.step} ({cause}): {e.reason}")
        return {"result": "failed", "release": release, "step": e.step, "error": e.reason, "class": klass,
                "cause": cause}

    # --- one poll, the loop, and the pod's init step -----------------------------------------------

    def _read_pointer(self, conditional: bool = True) -> bool:
        """Read the channel pointer and trust it only once it verifies against the trusted root (following
        a root rotation it names first) and is no rollback, no other channel's, not expired (metadata).
        True when a new pointer was read and trusted, False when unchanged (304); raises when refused
        (metadata.Rejected, counted) or unreadable. An expired pointer freezes the channel."""
        key = channel_key(self.channel)
        where = f"{self.store}/{key}"
        raw = self.store.get(key, limit=POINTER_MAX, conditional=conditional)
        if raw is None:
            why = None if not self.pointer or self.frozen else self.trusted.frozen_reason(self.channel)
            if why:  # the pointer, or the root it was verified with, expired since it was read
                self.frozen = True
                self._rejected("expired", f"{where}: {why}; the gated release keeps serving")
            return False
        try:
            checked = trusted_state.check_pointer(self.trusted, raw, self.channel, self.store, where)
        except metadata.Rejected as e:
            self._log_resets()
            self.frozen = self.frozen or e.reason == "expired"
            self._rejected(e.reason, str(e))
            raise
        except ReleaseError:
            self.store.forget(key)  # a root could not be read: read the pointer again next poll
            raise
        self._log_resets()
        self.trusted.accept(self.channel, checked)  # saved under the folder's lock: with the release, or alone
        self.pointer, self.frozen = checked.pointer, False
        return True

    def _log_resets(self) -> None:
        """What a root rotation made the node forget (TUF 5.3.11), logged once."""
        for message in self.trusted.resets:
            self.log(f"channel {self.channel}: {message}")
        self.trusted.resets.clear()

    def _save_trust(self) -> None:
        """Persist the trusted state under the node folder's lock; when busy, on the next poll."""
        try:
            with releases.locked(self.releases, f"pull {self.channel}"):
                trusted_state.save(self.releases, self.trusted)
        except (releases.lock.LockBusy, OSError) as e:
            self.log(f"{self.releases / TRUSTED_FILE}: not written yet ({e}); trying again on the next poll")

    def poll(self) -> dict[str, Any]:
        """Read the pointer; apply a new release. Returns what happened (never raises on a failed step)."""
        with self.lock:
            self.metrics.set(metric_names.LAST_POLL, time.time(), channel=self.channel)
            try:
                new = self._read_pointer()
            except ReleaseError as e:
                self.metrics.inc(metric_names.POLLS, channel=self.channel, result="error")
                if self.trusted.dirty:  # a root rotation followed before the refusal (an expired root)
                    self._save_trust()
                self._export()
                out_err: dict[str, Any] = {"result": "error", "error": str(e)}
                if isinstance(e, metadata.Rejected):
                    out_err["rejected"] = e.reason
                return out_err
            finally:
                self.polled = True
            result = "unchanged" if new else "not_modified"
            out: dict[str, Any] = {"result": result}
            pointer = self.pointer or {}
            digest = pointer.get("digest")
            # A staged rollout may not be for us yet (keep what serves), or hold a new node on its previous release.
            pick = reporting.choose(self, pointer) if digest else None
            if (pick and not self.frozen and not self.up_to_date() and pick[1] not in self.refused
                    and time.monotonic() >= self.retry_at.get(pick[1], (0, 0.0))[1]):
                try:  # the whole change holds the node folder (releases.locked; lock.py), waiting a bounded time
                    with releases.locked(self.releases, f"pull {self.channel}"):
                        self._save_trust()  # what the pointer taught us, under the same lock as the release
                        out = self._attempt(*pick)
                except releases.lock.LockBusy as e:  # another command holds it: try again next poll
                    out = {"result": "failed", "release": pick[0], "step": "lock", "error": str(e)}
                reporting.report(self, out)  # --report: the result into reports/<channel>/<agent>.json
                result = "changed"
            elif digest:
                out.update(self._reconcile())
            if digest and (pick is None or pick[1] != digest):
                out["rollout"] = self.rollout_state
            if self.trusted.dirty:  # a pointer trusted without a release to apply (refresh, a refusal)
                self._save_trust()
            self.metrics.inc(metric_names.POLLS, channel=self.channel, result=result)
            self._pin()
            self._export()
            return out

    def _reconcile(self) -> dict[str, Any]:
        """The gated release: load what it has and Triton lacks (a Triton restarted in explicit mode).
        The last gated release linked but not served (a rollback whose gate did not pass, a kill between
        the switch back and the gate): reload it and gate it again, with the backoff of its class."""
        if not self.gated():
            st = releases.state(self.releases)
            current, digest = st.get("current"), str(st.get("digest") or "")
            if (not current or releases.active_release(self.link, self.releases) != current
                    or digest in self.refused or time.monotonic() < self.retry_at.get(digest, (0, 0.0))[1]):
                return {}
            try:
                with releases.locked(self.releases, f"pull {self.channel}"):
                    return self._regate(str(current), digest)
            except releases.lock.LockBusy as e:
                return {"regate_error": str(e)}
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

    def _regate(self, release: str, digest: str) -> dict[str, Any]:
        """Serve the linked, last gated release again (every model re-read) and gate it (the lock held)."""
        try:
            if self.triton is not None and not self.triton.live():
                raise StepFailed("triton", f"{self.triton.url} does not answer; the gate of {release} waits for it")
            out = self._serve(release)
        except StepFailed as e:
            return {**self._failed(release, digest, e), "regated": False}
        self.retry_at.pop(digest, None)
        self.failures.pop(digest, None)
        return {"result": "regated", "release": release, "regated": True, **out}

    def _attempt(self, release: str, digest: str, length: int | None = None) -> dict[str, Any]:
        start = time.monotonic()
        st = releases.state(self.releases)
        if (st.get("current") == release and st.get("digest") == digest and not self.gated()
                and releases.active_release(self.link, self.releases) == release):
            return self._regate(release, digest)  # the channel's release is linked but not served: gate it again
        try:
            fetched = self.fetch(release, digest, length)
            if self.triton and not self.triton.live():
                raise StepFailed("triton", f"{self.triton.url} does not answer; the release waits for it")
            self.switching = True
            applied = self.apply(release, digest)
        except StepFailed as e:
            cancel = getattr(self.store, "cancel", None)
            if cancel is not None and cancel.is_set():  # shutting down (SIGTERM): nothing was decided
                self.log(f"release {release} ({digest[:12]}) not applied: stopped")
                return {"result": "stopped", "release": release, "step": e.step, "error": e.reason}
            return self._failed(release, digest, e)
        finally:
            self.switching = False
        self.retry_at.pop(digest, None)
        self.failures.pop(digest, None)
        seconds = time.monotonic() - start
        self.metrics.set(metric_names.APPLY_SECONDS, seconds, channel=self.channel)
        self.log(f"release {release} ({digest[:12]}) serving after {seconds:.1f}s: "
                 f"{json.dumps({**fetched, **applied}, sort_keys=True)}")
        return {"result": "applied", "seconds": round(seconds, 3), **fetched, **applied}

    def gate_active(self) -> dict[str, Any]:
        """At start: revert an un-gated switch (deadman), then make Triton serve what the link names and
        gate it. The last gated release re-pointed at (by ``recover`` here or at boot, or a kill between a
        rollback's switch and its gate) has every model reloaded from its files first; a release an init
        step installed and nobody gated is gated as Triton loaded it at its start."""
        with self.lock, releases.locked(self.releases, f"pull {self.channel} (start)"):
            recovered = releases.recover(self.link, self.releases)
            if recovered["changed"]:
                self.log(f"reverted the un-gated release {recovered['reverted']} to {recovered['active']}")
            active = releases.active_release(self.link, self.releases)
            st = releases.state(self.releases)
            if not active or self.gated():
                self._export()
                return {"gated": self.gated(), **recovered}
            digest = str(st.get("digest") or "") if active == st.get("current") else (
                releases.release_digest(self.releases, active) or active)
            try:
                if active == st.get("current"):  # re-pointed, or never gated since the link last moved
                    if self.triton is not None and not self.triton.live():  # the polls gate it once Triton is up
                        raise StepFailed("triton", f"{self.triton.url} does not answer; the gate of {active} waits")
                    out = self._serve(active)
                elif self.triton is None:
                    return {"gated": False, **recovered}  # an init step: the sidecar gates it
                else:  # an init step's release, never gated: gated as Triton loaded it at its start
                    _step("triton", lambda: self.triton.wait_ready(self.load_timeout))  # type: ignore[union-attr]
                    out = self._serve(active, touch=False)
            except StepFailed as e:
                failed = self._failed(active, digest, e)
                self.log(f"release {active} at start: not gated ({failed['class']}, {failed['cause']}): {e}")
                self._export()
                return {"gated": False, "error": str(e), **recovered, **failed}
            self._export()
            return {"gated": True, "release": active, **recovered, **out}

    def sync(self) -> dict[str, Any]:
        """The pod's init step: put the channel's release in place (fetched, verified, activated).

        Triton is not running yet; the sidecar gates the release once Triton has loaded it.
        """
        self._read_pointer(conditional=False)  # verified against the trusted root, as in poll
        assert self.pointer is not None
        pick = reporting.choose(self, self.pointer)  # a pod recreated mid-rollout, not targeted: the previous release
        current = releases.state(self.releases).get("current")
        if pick is None and current:  # the rollout is not for this pod yet: it keeps what it has (a rerun)
            releases.activate(self.link, self.releases, str(current))
            self._save_trust()
            return {"result": "synced", "release": current, "downloaded": 0, "rollout": self.rollout_state}
        if pick is None:
            raise ReleaseError(f"channel {self.channel}: {self.rollout_state}")
        release, digest, length = pick
        fetched = self.fetch(release, digest, length)
        releases.activate(self.link, self.releases, release)
        self._save_trust()
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
        """node-exporter's textfile; a full disk (or any write error) is logged and counted, never fatal."""
        if not textfile:
            return
        path = Path(textfile) / "tritonops_release.prom"
        try:
            write_atomic(path, self.metrics.render())
        except OSError as e:
            reason = errno.errorcode.get(e.errno or 0, "error")
            self.metrics.inc(metric_names.TEXTFILE_ERRORS, reason=reason)
            self.log(f"{path}: not written ({e.strerror or e}); the agent goes on")


def _copied(src: Path, dest: Path, sha256: str) -> bool:
    """``src`` copied into ``dest`` with the content ``sha256`` (else False: unreadable, or changed since)."""
    try:
        return manifest.copy_verified(src, dest) == sha256
    except OSError:
        return False

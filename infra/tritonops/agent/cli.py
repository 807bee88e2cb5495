"""tritonops-agent: the release agent's command line (one JSON object on stdout per command).

Push mode (the model_repository role runs these on a node): status, install, activate, mark, prune,
verify, recover (with ``--triton``: the release pointed back at is reloaded in a running Triton and
gated again before ``status`` reports it ``served``). Pull mode: ``sync`` (a pod's init container)
and ``pull`` (the sidecar, or an edge node's service). Drift: probe, check. Exit codes (exitcodes.py):
0 ok, 1 a release step failed and was refused (the message names the file and the step) or drift
found, 2 usage error (a bad argument, or a file or folder named that cannot be used; nothing was
changed), 3 the store, the disk or Triton did not answer or answered with something unusable (a
failure of class ``retry``, failures.py: a check or pull that could not run), or another command held
the node folder (releases/.lock, lock.py) for longer than --lock-timeout (the message names it).
Secrets come from the environment only:
TRITONOPS_ADMIN_SECRET (Triton's admin header) and, for an S3 store, the first of (aws_credentials.py):
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (static: MinIO, Ceph);
AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+ AWS_ROLE_SESSION_NAME, AWS_ENDPOINT_URL_STS) (IRSA);
AWS_CONTAINER_CREDENTIALS_FULL_URI + AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN (EKS Pod Identity).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Any

from ..core import lock
from ..core.errors import ReleaseError, StoreError, UsageError
from ..core.exitcodes import ExitCode
from ..core.keys import BLOB_TIMEOUT, METADATA_TIMEOUT
from ..core.triton_cli import HTTP_PORT
from ..core.triton_http import DEFAULT_HEADER, Triton
from ..release_format import manifest, records
from ..stores import forms, open_store
from . import argtypes, failures, releases
from . import drift_probe as drift
from .cache import Cache
from .exporter import serve
from .pull import Agent
from .serve import StepFailed, serve_release


def _layout(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--link", type=argtypes.path, required=True,
                    help="the models symlink (tritonserver --model-repository)")
    sp.add_argument("--releases", type=argtypes.path, required=True, help="folder holding one folder per release")
    sp.add_argument("--lock-timeout", type=argtypes.number(0), default=None,
                    help="seconds to wait for another command holding the releases folder "
                         f"(default TRITONOPS_LOCK_TIMEOUT or {lock.DEFAULT_TIMEOUT:g})")


def _pull_args(sp: argparse.ArgumentParser) -> None:
    _layout(sp)
    sp.add_argument("--store", required=True,
                    help=f"{forms()} (a registry's credentials: TRITONOPS_REGISTRY_AUTH, its CA: "
                         "TRITONOPS_REGISTRY_CA)")
    sp.add_argument("--channel", required=True)
    sp.add_argument("--store-name",
                    help="the store's name its signed root carries (tritonops release root init --name): metadata "
                         "of any other store is refused, even under the same keys")
    sp.add_argument("--trusted-key", type=argtypes.path, action="append", default=[], required=True,
                    help="a public key (PEM) whose signature a release must carry; repeat while rotating")
    sp.add_argument("--s3-endpoint", help="an S3-compatible endpoint (default: AWS, or AWS_ENDPOINT_URL_S3)")
    sp.add_argument("--cache", type=argtypes.path, help="a node-local blob cache shared by the pods on a node")
    sp.add_argument("--cache-quota", type=argtypes.count, help="bytes the --cache folder keeps (least recently used "
                    "evicted; blobs a serving release pins never)")
    sp.add_argument("--cache-url", type=argtypes.url,
                    help="the node's cache daemon (tritonops-agent cache serve): each file read from it first, "
                         "the store when it does not answer")
    sp.add_argument("--keep", type=argtypes.count, default=3, help="releases to keep (default 3)")
    sp.add_argument("--owner")
    sp.add_argument("--group")
    sp.add_argument("--metadata-timeout", type=argtypes.number(0, low_ok=False), default=METADATA_TIMEOUT,
                    help="seconds for one read of a pointer, manifest or signature, connect to last byte "
                         f"(default {METADATA_TIMEOUT:g})")
    sp.add_argument("--blob-timeout", type=argtypes.number(0, low_ok=False), default=BLOB_TIMEOUT,
                    help=f"seconds for one file's download, connect to last byte (default {BLOB_TIMEOUT:g})")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tritonops-agent", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("status", help="what is active, current and present (read only)")
    _layout(sp)
    sp.add_argument("--release")
    sp.add_argument("--digest", help="the content the release id must have (a reused id is reported)")
    sp = sub.add_parser("install", help="verify a pushed copy (folder or tarball) and rename it into place")
    _layout(sp)
    sp.add_argument("--staging", type=argtypes.path, required=True,
                    help="the pushed copy: a folder directly in --releases")
    sp.add_argument("--release", required=True)
    sp.add_argument("--tarball", type=argtypes.path,
                    help="a pushed tarball, unpacked into --staging (both removed after)")
    sp.add_argument("--owner")
    sp.add_argument("--group")
    sp = sub.add_parser("activate", help="switch the models symlink to a release (atomic rename)")
    _layout(sp)
    sp.add_argument("--release", required=True)
    sp.add_argument("--touch", action="append", default=[], help="a model about to be (re)loaded from it")
    sp = sub.add_parser("mark", help="record a release as current (after the golden gate)")
    _layout(sp)
    sp.add_argument("--release", required=True)
    sp = sub.add_parser("prune", help="keep the last N releases")
    _layout(sp)
    sp.add_argument("--keep", type=argtypes.count, required=True)
    sp = sub.add_parser("recover", help="point the link back at the last gated release (boot, before Triton)")
    _layout(sp)
    sp.add_argument("--grace", type=argtypes.number(0), default=0.0,
                    help="only revert a switch older than this many seconds (a timer on a running node)")
    sp.add_argument("--triton", type=argtypes.url,
                    help="a running Triton (HTTP endpoint): reload every model of the release the link points "
                         "at and gate it again (recorded as served only when the gate passes)")
    sp.add_argument("--header", default=DEFAULT_HEADER, help="the admin header's name (value from the env)")
    sp.add_argument("--no-load", action="store_true",
                    help="with --triton, in model control mode poll or none (Triton loaded the repository itself, "
                         "after the link last moved): load nothing, gate the models Triton serves")
    sp.add_argument("--load-timeout", type=argtypes.number(0, low_ok=False), default=600.0)
    sp.add_argument("--golden-timeout", type=argtypes.number(0, low_ok=False), default=120.0)
    sp = sub.add_parser("verify", help="check a release folder against its manifest")
    sp.add_argument("path", type=argtypes.path)
    sp = sub.add_parser("sync", help="pull: put the channel's release in place (a pod's init container)")
    _pull_args(sp)
    sp = sub.add_parser("pull", help="pull: keep this target on its channel (sidecar or node service)")
    _pull_args(sp)
    sp.add_argument("--triton", type=argtypes.url, default=f"http://127.0.0.1:{HTTP_PORT}",
                    help="Triton's HTTP endpoint")
    sp.add_argument("--header", default=DEFAULT_HEADER, help="the admin header's name (value from the env)")
    sp.add_argument("--interval", type=argtypes.number(0, low_ok=False), default=30.0,
                    help="seconds between polls (default 30)")
    sp.add_argument("--jitter", type=argtypes.number(0, 1), default=0.2,
                    help="fraction of the interval to randomise (0.2)")
    sp.add_argument("--listen", type=argtypes.listen, help="HOST:PORT for /metrics, /ready and /status")
    sp.add_argument("--textfile", type=argtypes.path, help="write the metrics into this node-exporter textfile folder")
    sp.add_argument("--load-timeout", type=argtypes.number(0, low_ok=False), default=600.0)
    sp.add_argument("--golden-timeout", type=argtypes.number(0, low_ok=False), default=120.0)
    sp.add_argument("--once", action="store_true", help="poll once and exit (1 when the release failed)")
    sp.add_argument("--missed-polls", type=argtypes.count, default=3,
                    help="/ready turns 503 when no poll has completed in this many intervals (default 3)")
    # Staged rollouts (release_format.waves, reporting.py): the agent's identity, its groups, its status reports.
    sp.add_argument("--agent-id",
                    help="this agent's id in rollouts and reports (default: POD_NAME, else the host name)")
    sp.add_argument("--group-label", action="append", default=[],
                    help="a group this agent belongs to, for rollout waves that name groups (repeatable)")
    sp.add_argument("--report", action="store_true",
                    help="write a status report to the store (reports/CHANNEL/AGENT.json) after each release "
                         "(a folder or s3:// store the agent may write)")
    sp.add_argument("--report-key", type=argtypes.path,
                    help="a private key (PEM) to sign the reports with (the root's 'report' role); none: unsigned")
    sp = sub.add_parser("cache", help="the node cache daemon: serve the cache to the node's pods, prefetch channels")
    csub = sp.add_subparsers(dest="cache_cmd", required=True)
    for name, text in (("serve", "serve the node cache over HTTP (a read-through mirror) and prefetch --channel"),
                       ("prefetch", "fill the node cache with the channels' current and staged releases")):
        cp = csub.add_parser(name, help=text)
        cp.add_argument("--cache", type=argtypes.path, required=True, help="the node cache folder")
        cp.add_argument("--quota", type=argtypes.count, help="bytes of blobs to keep (default: no limit)")
        cp.add_argument("--store", required=True, help="the release store (as for pull)")
        cp.add_argument("--s3-endpoint")
        cp.add_argument("--store-name")
        cp.add_argument("--trusted-key", type=argtypes.path, action="append", default=[], required=name == "prefetch")
        cp.add_argument("--channel", action="append", default=[], required=name == "prefetch",
                        help="a channel whose releases to prefetch (repeatable)")
        cp.add_argument("--max-rate", type=argtypes.number(0, low_ok=False),
                        help="bytes per second the prefetcher reads at most (default: no bound)")
        cp.add_argument("--interval", type=argtypes.number(0, low_ok=False), default=30.0,
                        help="seconds between reads of the channel pointers (default 30)")
        cp.add_argument("--metadata-timeout", type=argtypes.number(0, low_ok=False), default=METADATA_TIMEOUT)
        cp.add_argument("--blob-timeout", type=argtypes.number(0, low_ok=False), default=BLOB_TIMEOUT)
    cp.add_argument("--once", action="store_true", help="one pass, then exit (JSON: each channel's warm state)")
    cp = csub.choices["serve"]
    cp.add_argument("--listen", type=argtypes.listen, required=True, help="HOST:PORT the node's pods read from")
    cp.add_argument("--max-blob", type=argtypes.count, default=64 << 30,
                    help="bytes a blob filled on a pod's miss may have at most (default 64 GiB)")
    drift.add_commands(sub)
    return p


def _agent(args: argparse.Namespace, triton: Triton | None = None) -> Agent:
    store = open_store(args.store, s3_endpoint=args.s3_endpoint, timeout=args.metadata_timeout,
                  blob_timeout=args.blob_timeout)
    mirror = (open_store(args.cache_url, timeout=args.metadata_timeout, blob_timeout=args.blob_timeout)
              if args.cache_url else None)
    return Agent(store, args.channel, args.link, args.releases,
                 args.trusted_key, triton=triton, keep=args.keep, cache=args.cache, owner=args.owner,
                 group=args.group, log=lambda m: print(m, file=sys.stderr, flush=True), store_name=args.store_name,
                 cache_quota=args.cache_quota, mirror=mirror,
                 **({"load_timeout": args.load_timeout, "golden_timeout": args.golden_timeout,
                     "missed_polls": args.missed_polls, "agent_id": args.agent_id,
                     "group_labels": args.group_label, "report": args.report,
                     "report_key": args.report_key} if triton else {}))


def _cache(args: argparse.Namespace) -> int:
    """``cache serve`` / ``cache prefetch`` (cache_daemon.py)."""
    from . import cache_daemon

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    store = open_store(args.store, s3_endpoint=args.s3_endpoint, timeout=args.metadata_timeout,
                  blob_timeout=args.blob_timeout)
    cache = Cache(args.cache, args.quota, log=log)
    prefetchers = [cache_daemon.Prefetcher(cache, open_store(args.store, s3_endpoint=args.s3_endpoint,
                                                             timeout=args.metadata_timeout,
                                                             blob_timeout=args.blob_timeout),
                                           ch, args.trusted_key, args.max_rate, args.store_name, log)
                   for ch in args.channel]
    if args.cache_cmd == "prefetch" and args.once:
        out = [p.once() for p in prefetchers]
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    for p in prefetchers:
        threading.Thread(target=p.run, args=(args.interval, stop), name=f"prefetch-{p.channel}", daemon=True).start()
    if args.cache_cmd == "serve":
        server = cache_daemon.serve(args.listen, cache, store, args.max_blob,
                                    lambda: records.cache_status(str(cache), cache.usage(), cache.quota,
                                                                 [p.warm for p in prefetchers]))
        threading.Thread(target=server.serve_forever, name="cache", daemon=True).start()
    stop.wait()
    return 0


def _pull(args: argparse.Namespace) -> int:
    agent = _agent(args, Triton(args.triton, args.header))
    if args.listen:
        serve(args.listen, agent.metrics, agent.ready, agent.status)
    if args.once:
        start = agent.gate_active()
        out = agent.poll()
        if (start.get("class") and out["result"] != "error" and not out.get("class")
                and not agent.gated()):  # what serves failed its gate (a store error is said as such)
            out = {**out, "result": "failed", "step": start["step"], "class": start["class"],
                   "cause": start["cause"], "error": start["error"]}
        print(json.dumps(out, indent=2, sort_keys=True))
        if out["result"] == "error" or out.get("class") == failures.RETRY or out.get("step") == "lock":
            return ExitCode.FAILED  # the store, the disk or Triton did not answer: nothing was decided
        return ExitCode.FINDINGS if out["result"] == "failed" else ExitCode.OK
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agent.run(args.interval, args.jitter, stop=stop, textfile=args.textfile)
    return 0


def _check_args(args: argparse.Namespace) -> None:
    """What argparse cannot see: the kind of the files and folders named (before anything is changed)."""
    releases = getattr(args, "releases", None)
    if releases is not None and releases.exists() and not releases.is_dir():
        raise UsageError(f"--releases {releases}: not a folder")
    if args.cmd == "verify" and not args.path.is_dir():
        raise UsageError(f"{args.path}: not a release folder")
    for key in getattr(args, "trusted_key", []):
        if not key.is_file():
            raise UsageError(f"--trusted-key {key}: not found, or not a regular file")
    if getattr(args, "no_load", False) and not args.triton:
        raise UsageError("--no-load: gates what a running Triton serves; give --triton URL")
    report_key = getattr(args, "report_key", None)
    if report_key is not None and not report_key.is_file():
        raise UsageError(f"--report-key {report_key}: not found, or not a regular file")


def _change(args: argparse.Namespace) -> Any:
    """A command that changes the node folder (the caller holds its lock)."""
    if args.cmd == "install":
        return releases.install(args.releases, args.staging, args.release, args.tarball, args.owner, args.group)
    if args.cmd == "activate":
        return releases.activate(args.link, args.releases, args.release, args.touch)
    if args.cmd == "mark":  # after the controller's gate: what the link serves now is gated
        return releases.mark(args.releases, args.release, link=args.link)
    if args.cmd == "prune":
        return releases.prune(args.link, args.releases, args.keep)
    if args.cmd == "recover":
        out = releases.recover(args.link, args.releases, args.grace)
        current = releases.state(args.releases).get("current")
        if (args.triton and current and releases.active_release(args.link, args.releases) == current
                and not releases.served(args.link, args.releases)):
            out["served"] = serve_release(Triton(args.triton, args.header), args.link, args.releases, current,
                                          load_timeout=args.load_timeout, golden_timeout=args.golden_timeout,
                                          load=not args.no_load)
        else:
            out["served"] = releases.served(args.link, args.releases)
        return out
    return _agent(args).sync()


def exit_code(e: ReleaseError) -> int:
    """UsageError 2; StoreError, a held lock, or a step whose failure may pass on retry (failures.py: the
    store, the disk, Triton) 3; any other failure (refused) 1."""
    if isinstance(e, UsageError):
        return ExitCode.USAGE
    if isinstance(e, (StoreError, lock.LockBusy)):
        return ExitCode.FAILED
    if isinstance(e, StepFailed):
        return ExitCode.FAILED if e.classify()[0] == failures.RETRY else ExitCode.FINDINGS
    return ExitCode.FINDINGS


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd in ("probe", "check"):
        return drift.run(args)
    out: Any
    try:
        _check_args(args)
        if args.cmd == "status":
            out = releases.status(args.link, args.releases, args.release, args.digest)
        elif args.cmd == "verify":
            out = {"files": len(manifest.verify(args.path)), "path": str(args.path)}
        elif args.cmd == "cache":
            return _cache(args)
        elif args.cmd == "pull":
            if args.lock_timeout is not None:  # the daemon takes the lock per poll cycle (pull.py)
                os.environ["TRITONOPS_LOCK_TIMEOUT"] = str(args.lock_timeout)
            return _pull(args)
        else:
            with releases.locked(args.releases, f"tritonops-agent {args.cmd}", args.lock_timeout):
                out = _change(args)
    except ReleaseError as e:
        print(json.dumps({"error": str(e)}))
        print(f"error: {e}", file=sys.stderr)
        return exit_code(e)
    except OSError as e:  # the node's file system (a full disk at mark): named, classed, never a traceback
        klass, cause = failures.classify(args.cmd, e)
        msg = f"{e.filename or getattr(args, 'releases', '')}: {args.cmd}: {e.strerror or e} ({klass}: {cause})"
        print(json.dumps({"error": msg, "class": klass, "cause": cause}))
        print(f"error: {msg}", file=sys.stderr)
        return ExitCode.FAILED if klass == failures.RETRY else ExitCode.FINDINGS
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0

"""Every network read of the agent ends: deadlines, byte caps, same-origin redirects, SIGTERM (issue 21 item 2).

The hostile servers are http.server instances on 127.0.0.1 in threads: one that sends an endless body,
one that trickles a byte every 0.1 s (no socket timeout ever fires), one that redirects to another port
(another origin) and one that records what it was sent. Deadlines are fractions of a second. Also here:
a manifest path with a trailing newline is refused (agent and publish), and an unusable --trusted-key is
a usage error (exit 2).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tritonops.agent import cli
from tritonops.agent.pull import Agent
from tritonops.core import triton_http as triton
from tritonops.core.errors import ReleaseError, StoreError
from tritonops.core.triton_http import Triton
from tritonops.release import canary
from tritonops.release import publish as pub
from tritonops.release import status as release_status
from tritonops.release_format import manifest
from tritonops.stores import Store, open_store
from tritonops.stores import aws_credentials as ac

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
TRICKLE = 0.1  # seconds between two bytes of a trickling server
TRICKLE_BYTES = 40  # it gives up after 4 s: the code before this change returned then, instead of failing


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 whose GET and POST call ``answer(handler)``; records each request."""

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None],
                 directory: Path | None = None) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.started = threading.Event()
        seen, started = self.seen, self.started

        class Handler(http.server.SimpleHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append((self.path, dict(self.headers.items())))
                started.set()
                answer(self)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        handler = functools.partial(Handler, directory=str(directory)) if directory else Handler
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_port}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(answer: Callable[[Any], None], directory: Path | None = None) -> Server:
        servers.append(Server(answer, directory))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def endless(h: Any) -> None:
    """200, no length, then data until the client goes away (the 400 MiB case of the issue)."""
    h.send_response(200)
    h.end_headers()
    block = b"x" * (64 << 10)
    try:
        while True:
            h.wfile.write(block)
    except OSError:
        pass


def trickle_body(h: Any) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.end_headers()
    _trickle(h, b'{"release": "r1", "digest": "' + b"0" * (TRICKLE_BYTES - 31) + b'"}')


def trickle_headers(h: Any) -> None:
    h.wfile.write(b"HTTP/1.0 200 OK\r\nX-Slow: ")
    _trickle(h, b"a" * TRICKLE_BYTES + b"\r\n\r\n{}")


def _trickle(h: Any, data: bytes) -> None:
    try:
        for i in range(len(data)):
            h.wfile.write(data[i:i + 1])
            h.wfile.flush()
            time.sleep(TRICKLE)
    except OSError:
        pass


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> Path:
    """A folder store holding release r1 on channel stable (served read-only by the tests' servers)."""
    d = tmp_path_factory.mktemp("mirror")
    src = d / "src"
    shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
    pub.publish(src, str(d / "store"), "stable", keys["key"], target="cpu", version="r1")
    return d / "store"


def _agent(tmp_path: Path, store: Store, keys: dict[str, Path], **kwargs: Any) -> Agent:
    (tmp_path / "node" / "releases").mkdir(parents=True, exist_ok=True)
    return Agent(store, "stable", tmp_path / "node" / "models", tmp_path / "node" / "releases", [keys["pub"]],
                 log=lambda m: None, **kwargs)


def _mirror_with(mirror: Path, blobs: Callable[[Any], None]) -> Callable[[Any], None]:
    """Serve the mirror's files, except that every blob is answered by ``blobs``."""
    def answer(h: Any) -> None:
        if h.path.startswith("/blobs/"):
            blobs(h)
        else:
            http.server.SimpleHTTPRequestHandler.do_GET(h)
    return answer


# --- endless bodies ------------------------------------------------------------------------------


def test_an_endless_blob_of_a_stated_length_fails_fast(tmp_path: Path, serve: Callable[..., Server]) -> None:
    srv = serve(endless)
    start = time.monotonic()
    with pytest.raises(StoreError, match=r"blobs/sha256/ab: the answer is larger than the 1235 bytes allowed"):
        open_store(srv.url).download("blobs/sha256/ab", tmp_path / "out", "ab" * 32, size=1235)
    assert time.monotonic() - start < 1.0
    assert not (tmp_path / "out").exists()


def test_an_endless_blob_ends_at_its_signed_length_long_before_the_deadline(
        tmp_path: Path, serve: Callable[..., Server], mirror: Path, keys: dict[str, Path]) -> None:
    # The manifest states each file's length (issue 21 item 1): that, not the 30 s deadline, ends it.
    srv = serve(_mirror_with(mirror, endless), directory=mirror)
    agent = _agent(tmp_path, open_store(srv.url, blob_timeout=30.0), keys)
    start = time.monotonic()
    out = agent.poll()
    assert (out["result"], out["step"], out["class"]) == ("failed", "verify", "refused")  # more than was signed
    assert "bytes allowed; stopped reading" in out["error"]
    assert time.monotonic() - start < 2.0
    assert not (agent.releases / "r1").exists()


@pytest.mark.parametrize("call", ["triton", "kube-status"])
def test_an_endless_answer_from_triton_or_a_sidecar_is_cut_at_its_cap(
        serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    from tritonops.agent import kube

    monkeypatch.setattr(triton, "ANSWER_MAX", 1 << 20)
    monkeypatch.setattr(kube, "ANSWER_MAX", 1 << 20)
    srv = serve(endless)
    start = time.monotonic()
    with pytest.raises(ReleaseError, match=r"larger than the 1048576 bytes allowed"):
        if call == "triton":
            Triton(srv.url, timeout=5).ready_models()
        else:
            kube.agent_status("127.0.0.1", srv.srv.server_port)
    assert time.monotonic() - start < 2.0


# --- trickles: one overall deadline --------------------------------------------------------------


@pytest.mark.parametrize("answer", [trickle_body, trickle_headers], ids=["body", "headers"])
@pytest.mark.parametrize("reader", ["store", "triton", "sts"])
def test_a_trickling_server_ends_at_the_deadline(serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, answer: Any, reader: str) -> None:
    srv = serve(answer)
    start = time.monotonic()
    with pytest.raises(ReleaseError, match=r"no complete answer within the 0.5s deadline"):
        if reader == "store":
            open_store(srv.url, timeout=0.5).get("channels/stable.json")
        elif reader == "triton":
            Triton(srv.url, timeout=0.5).index()
        else:
            monkeypatch.setattr(ac, "STS_TIMEOUT", 0.5)
            (tmp_path / "token").write_text("jwt")
            ac.WebIdentityProvider({"AWS_WEB_IDENTITY_TOKEN_FILE": str(tmp_path / "token"),
                                    "AWS_ROLE_ARN": "arn:aws:iam::1:role/r", "AWS_ENDPOINT_URL_STS": srv.url}).get()
    assert 0.4 < time.monotonic() - start < 1.5



@pytest.mark.parametrize("reader", ["promote --prometheus", "release status"])
def test_the_controllers_reads_end_at_their_deadline_too(serve: Callable[..., Server], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    """The issue's trickle also held `promote --prometheus` and `release status` with no end."""
    srv = serve(trickle_body)
    start = time.monotonic()
    if reader == "promote --prometheus":
        with pytest.raises(canary.GateError, match=r"no complete answer within the 0.5s deadline"):
            canary.query(srv.url, "up", timeout_s=0.5)
    else:
        monkeypatch.setattr(release_status, "TARGET_TIMEOUT", 0.5)
        (tmp_path / "store").mkdir()
        row = release_status.status(str(tmp_path / "store"), [], [srv.url + "/metrics"])["targets"][0]
        assert "no complete answer within the 0.5s deadline" in row["error"]
    assert 0.4 < time.monotonic() - start < 1.5

# --- redirects -----------------------------------------------------------------------------------


def _redirect_to(target: Callable[[], str], code: int = 302) -> Callable[[Any], None]:
    def answer(h: Any) -> None:
        h.send_response(code)
        h.send_header("Location", target() + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return answer


def _record(h: Any) -> None:
    body = b'{"release": "r1", "digest": "' + b"0" * 64 + b'"}'
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


@pytest.mark.parametrize("code", [301, 302, 307])
def test_an_s3_endpoint_redirecting_to_another_origin_never_sends_it_credentials(
        serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    other = serve(_record)  # the same host on another port: another origin
    endpoint = serve(_redirect_to(lambda: other.url, code))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token")
    store = open_store("s3://bucket/prefix", s3_endpoint=endpoint.url)
    with pytest.raises(StoreError, match=rf"redirected to {other.url}/bucket/prefix/channels/stable.json, "
                                         r"another origin: not followed"):
        store.get("channels/stable.json")
    sent = endpoint.seen[0][1]
    assert "Authorization" in sent and "X-Amz-Security-Token" in sent  # the endpoint itself was asked, signed
    leaked = [k for _, headers in other.seen for k in headers if k.lower() == "authorization"
              or k.lower().startswith("x-amz-")]
    assert leaked == []


def test_triton_redirecting_to_another_origin_never_gets_the_admin_header(serve: Callable[..., Server]) -> None:
    other = serve(_record)
    fake = serve(_redirect_to(lambda: other.url, 307))
    with pytest.raises(ReleaseError, match="another origin: not followed"):
        Triton(fake.url, secret="admin-secret").index()
    assert not [h for _, hs in other.seen for h in hs if h.lower() == triton.DEFAULT_HEADER]


def test_a_redirect_within_the_origin_is_followed(serve: Callable[..., Server], mirror: Path, tmp_path: Path,
                                                   keys: dict[str, Path]) -> None:
    def answer(h: Any) -> None:  # /old/... moved to /store/... on the same host and port
        if h.path.startswith("/old/"):
            h.send_response(301)
            h.send_header("Location", "/store/" + h.path[len("/old/"):])
            h.send_header("Content-Length", "0")
            h.end_headers()
        else:
            http.server.SimpleHTTPRequestHandler.do_GET(h)

    srv = serve(answer, directory=mirror.parent)
    agent = _agent(tmp_path, open_store(f"{srv.url}/old"), keys)
    out = agent.poll()
    assert (out["result"], out["release"]) == ("applied", "r1")
    assert all(path.startswith("/old/") or path.startswith("/store/") for path, _ in srv.seen)


# --- /ready and SIGTERM --------------------------------------------------------------------------


def test_ready_turns_false_after_missed_polls_and_back_when_one_completes(
        tmp_path: Path, mirror: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _agent(tmp_path, open_store(str(mirror)), keys, missed_polls=2)
    stuck, release = threading.Event(), threading.Event()
    real_get = agent.store.get

    def get(key: str, **kwargs: Any) -> bytes | None:
        if stuck.is_set():
            release.wait(10)  # a store that hangs (what the deadline bounds; here the poll loop's view)
        return real_get(key, **kwargs)

    monkeypatch.setattr(agent.store, "get", get)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(0.1,), kwargs={"stop": stop, "jitter": 0.0}, daemon=True)
    runner.start()
    try:
        assert _within(2.0, agent.ready), "never ready after the first poll"
        stuck.set()
        assert _within(2.0, lambda: not agent.ready()), "still ready with the poll loop stuck"
        release.set()
        stuck.clear()
        assert _within(2.0, agent.ready), "not ready again after a poll completed"
    finally:
        release.set()
        stop.set()
        runner.join(timeout=10)


def _within(seconds: float, cond: Callable[[], bool]) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_sigterm_during_a_trickled_download_ends_the_agent_at_once(
        tmp_path: Path, serve: Callable[..., Server], mirror: Path, keys: dict[str, Path]) -> None:
    blob_started = threading.Event()

    def slow_blob(h: Any) -> None:
        blob_started.set()
        h.send_response(200)
        h.end_headers()
        _trickle(h, b"x" * 200)  # 20 s at one byte every 0.1 s

    srv = serve(_mirror_with(mirror, slow_blob), directory=mirror)
    node = tmp_path / "node"
    (node / "releases").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(Path(triton.__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tritonops.agent", "pull", "--link", str(node / "models"), "--releases",
         str(node / "releases"), "--store", srv.url, "--channel", "stable", "--trusted-key", str(keys["pub"]),
         "--triton", "http://127.0.0.1:9", "--interval", "30"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert blob_started.wait(15), "the agent never started a download"
        time.sleep(0.3)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=5)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
    assert took < 2.0
    assert not (node / "releases" / "r1").exists()


# --- a trailing newline in a manifest path --------------------------------------------------------


@pytest.mark.parametrize("path", ["m/notes.txt\n", "m\n/notes.txt", "notes.txt\n"])
def test_a_manifest_path_with_a_trailing_newline_is_refused_by_the_agent(path: str) -> None:
    raw = json.dumps({"algorithm": "sha256", "files": {path: "0" * 64}}).encode()
    with pytest.raises(ReleaseError, match=r"file path .* is not allowed"):
        manifest.parse(raw, "manifest")


def test_a_manifest_digest_with_a_trailing_newline_is_refused() -> None:
    raw = json.dumps({"algorithm": "sha256", "files": {"m/notes.txt": "0" * 64 + "\n"}}).encode()
    with pytest.raises(ReleaseError, match=r"files\['m/notes.txt'\] is not a sha256 hex digest"):
        manifest.parse(raw, "manifest")


def test_publish_refuses_a_file_whose_name_ends_in_a_newline(tmp_path: Path, keys: dict[str, Path]) -> None:
    src = tmp_path / "src"
    shutil.copytree(SAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "mlp" / "notes.txt\n").write_text("hello\n")
    with pytest.raises(ReleaseError, match=r"mlp/notes.txt\n: \[name.unsafe\] .* file path 'notes.txt\\n' is not allowed"):
        pub.publish(src, str(tmp_path / "store"), "stable", keys["key"], target="cpu", version="r1")
    assert not (tmp_path / "store").exists()


# --- an unusable --trusted-key is a usage error -----------------------------------------------------


def _bad_key(kind: str, d: Path, keys: dict[str, Path]) -> Path:
    out = d / f"{kind}.pub"
    if kind == "private":
        shutil.copyfile(keys["key"], out)
    elif kind == "garbage":
        out.write_bytes(b"\x00\x01not a key at all\n")
    elif kind == "empty":
        out.write_bytes(b"")
    elif kind in ("rsa", "ec"):
        algo = ["-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:1024"] if kind == "rsa" else \
            ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
        subprocess.run(["openssl", "genpkey", *algo, "-out", str(d / f"{kind}.key")], check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", str(d / f"{kind}.key"), "-pubout", "-out", str(out)], check=True,
                       capture_output=True)
    elif kind == "truncated":
        text = keys["pub"].read_text().splitlines()
        out.write_text("\n".join([text[0], text[1][:20], text[-1]]) + "\n")
    return out


@pytest.mark.parametrize("kind, says", [
    ("private", "a private key"), ("garbage", "not PEM"), ("empty", "empty"), ("rsa", "an RSA public key"),
    ("ec", "an EC public key"), ("truncated", "not an Ed25519 public key"),
])
def test_an_unusable_trusted_key_is_a_usage_error(tmp_path: Path, mirror: Path, keys: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str], kind: str, says: str) -> None:
    bad = _bad_key(kind, tmp_path, keys)
    rc = cli.main(["sync", "--link", str(tmp_path / "models"), "--releases", str(tmp_path / "releases"),
                   "--store", str(mirror), "--channel", "stable", "--trusted-key", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--trusted-key {bad}: {says}" in err
    assert "does not verify" not in err
    assert not (tmp_path / "releases" / "r1").exists()

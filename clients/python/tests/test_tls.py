"""The client against batcherd over TLS, with a certificate made in the
test (openssl) and a bearer token from a tenants file."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess

import grpc
import pytest

import batcher_client as bc
from conftest import Daemon, wait_serving


class Token(grpc.AuthMetadataPlugin):
    """Sends Authorization: Bearer <token> with every call."""

    def __init__(self, token: str):
        self.token = token

    def __call__(self, context, callback):
        callback((("authorization", "Bearer " + self.token),), None)


@pytest.fixture(scope="module")
def tls_batcherd(batcherd_exe, tmp_path_factory):
    """batcherd serving TLS with a self-signed certificate for 127.0.0.1
    and one tenant, team-a, allowed sim-chat only. Yields (address, the
    certificate's PEM, team-a's token)."""
    if shutil.which("openssl") is None:
        if os.environ.get("BATCHER_REQUIRE_TOOLS") == "1":  # CI: nothing may be skipped
            pytest.fail("openssl is not installed (clients/tools.sh install python) and BATCHER_REQUIRE_TOOLS=1")
        pytest.skip("openssl is not installed: it makes the test's certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=batcherd", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    token = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    tenants = d / "tenants.yaml"
    tenants.write_text("tenants:\n  - name: team-a\n    tokens: [sha256:%s]\n    routes: [sim-chat]\n"
                       % hashlib.sha256(token.encode()).hexdigest())
    daemon = Daemon(batcherd_exe, "--tls-cert", str(cert), "--tls-key", str(key), "--tenants", str(tenants))
    pem = cert.read_bytes()
    with grpc.secure_channel(daemon.addr, grpc.ssl_channel_credentials(root_certificates=pem)) as ch:
        wait_serving(ch)
    yield daemon.addr, pem, token
    daemon.stop()
    assert token not in "".join(daemon.log), "the token reached batcherd's log"


def credentials(pem: bytes, token: str | None) -> grpc.ChannelCredentials:
    tls = grpc.ssl_channel_credentials(root_certificates=pem)
    if token is None:
        return tls
    return grpc.composite_channel_credentials(tls, grpc.metadata_call_credentials(Token(token)))


def test_tls_with_token(tls_batcherd):
    addr, pem, token = tls_batcherd
    with bc.Client(addr, credentials=credentials(pem, token), timeout=30) as c:
        assert c.submit(bc.chat("sim-chat", "Hello over TLS", max_tokens=8)).text
        with c.stream() as s:
            for i in range(3):
                s.send(bc.chat("sim-chat", f"stream {i}", max_tokens=4, id=f"s{i}"))
            s.close()
            done = {item.id for item in s if isinstance(item, bc.pb.Completion)}
        assert done == {"s0", "s1", "s2"}


def test_tls_without_token_is_unauthenticated(tls_batcherd):
    addr, pem, _ = tls_batcherd
    with bc.Client(addr, credentials=credentials(pem, None), timeout=30, max_attempts=1) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.chat("sim-chat", "hi"))
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert info.value.message == "unauthenticated"


def test_tls_forbidden_route(tls_batcherd):
    addr, pem, token = tls_batcherd
    with bc.Client(addr, credentials=credentials(pem, token), timeout=30) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.embed("sim-embed", "not team-a's route"))
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_tls_refuses_an_untrusted_server(tls_batcherd):
    addr, _, token = tls_batcherd
    with bc.Client(addr, credentials=credentials(None, token), timeout=5, max_attempts=1) as c:
        with pytest.raises(bc.BatcherError) as info:
            c.submit(bc.chat("sim-chat", "hi"))
    assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

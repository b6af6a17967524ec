"""Standard Webhooks signatures: what the dispatcher signs, the standardwebhooks package verifies."""

from __future__ import annotations

import base64
import time
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from workers.dispatcher import auth_headers, outcome_of, webhook_id
from workers.webhook_signing import WebhookSigner, new_secret, secret_key

SECRETS = st.binary(min_size=16, max_size=64).map(lambda key: "whsec_" + base64.b64encode(key).decode())


@given(
    secret=SECRETS,
    body=st.binary(max_size=2000).map(lambda b: b.decode("latin-1").encode()),
    message_id=st.from_regex(r"msg_[0-9a-f]{1,32}", fullmatch=True),
)
def test_every_signature_verifies_with_the_standard_library(
    secret: str, body: bytes, message_id: str
) -> None:
    now = int(time.time())
    headers = WebhookSigner(default=secret).headers(message_id, "acme", now, body)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-signature"].startswith("v1,")
    Webhook(secret).verify(body, headers, json_parse=False)


@given(secret=SECRETS, other=SECRETS, body=st.text(max_size=200).map(str.encode))
def test_another_key_or_a_changed_body_does_not_verify(secret: str, other: str, body: bytes) -> None:
    headers = WebhookSigner(default=secret).headers("msg_1", "acme", int(time.time()), body)
    if secret_key(other) != secret_key(secret):
        with pytest.raises(WebhookVerificationError):
            Webhook(other).verify(body, headers, json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body + b"x", headers, json_parse=False)


def test_each_tenant_signs_with_its_own_secret_and_others_with_the_default() -> None:
    default, acme = new_secret(), new_secret()
    signer = WebhookSigner(default=default, per_tenant={"acme": acme})
    now = int(time.time())
    Webhook(acme).verify(b"{}", signer.headers("msg_1", "acme", now, b"{}"), json_parse=False)
    Webhook(default).verify(b"{}", signer.headers("msg_1", "zeta", now, b"{}"), json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(default).verify(b"{}", signer.headers("msg_1", "acme", now, b"{}"), json_parse=False)


@pytest.mark.parametrize("bad", ["", "secret", "whsec_", "whsec_not base64!", "whsec_c2hvcnQ="])
def test_a_malformed_secret_is_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(ValueError, match="webhook secret"):
        WebhookSigner(default=bad)


def test_a_new_secret_is_accepted_and_differs_each_time() -> None:
    assert len(secret_key(new_secret())) == 32
    assert new_secret() != new_secret()


def test_the_webhook_id_is_stable_per_event_and_config() -> None:
    task = uuid4()
    assert webhook_id(task, "c", 3) == webhook_id(task, "c", 3)
    assert len({webhook_id(task, "c", 3), webhook_id(task, "d", 3), webhook_id(task, "c", 4)}) == 3


def test_authorization_and_token_come_from_the_config() -> None:
    config = {"id": "c", "url": "u", "token": "t", "authentication": {"scheme": "Bearer", "credentials": "x"}}
    assert auth_headers(config) == {"Authorization": "Bearer x", "X-A2A-Notification-Token": "t"}
    assert auth_headers({"id": "c", "url": "u", "authentication": {"scheme": "Basic"}}) == {
        "Authorization": "Basic"
    }
    assert auth_headers({"id": "c", "url": "u"}) == {}


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, "delivered"), (204, "delivered"), (301, "retry"), (400, "gave_up"), (401, "gave_up"),
     (404, "gave_up"), (410, "gave_up"), (408, "retry"), (429, "retry"), (500, "retry"), (503, "retry"),
     (None, "retry")],
)  # fmt: skip
def test_what_an_answer_leads_to(status: int | None, outcome: str) -> None:
    assert outcome_of(status) == outcome

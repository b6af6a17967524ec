"""C2SP tlog-checkpoint bodies: rendered and parsed strictly; longhaul's origin.

Vector: the example of C2SP ``tlog-checkpoint.md`` (commit 5ba5ee83).
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.evidence.checkpoints import Checkpoint, CheckpointError, longhaul_origin, parse_checkpoint

C2SP_BODY = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
ROOT = base64.b64encode(bytes(range(32))).decode()


def test_the_c2sp_example_parses_and_renders_back() -> None:
    checkpoint = parse_checkpoint(C2SP_BODY)
    assert checkpoint.origin == "example.com/behind-the-sofa"
    assert checkpoint.size == 20852163
    assert checkpoint.root_hash == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert checkpoint.extensions == ()
    assert checkpoint.body() == C2SP_BODY


def test_extension_lines_are_kept_in_order() -> None:
    body = f"longhaul/demo\n0\n{ROOT}\nfirst extension\nsecond\n"
    assert parse_checkpoint(body).extensions == ("first extension", "second")
    assert parse_checkpoint(body).body() == body


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (f"longhaul/demo\n7\n{ROOT}", "ends in a newline"),
        (f"longhaul/demo\n7\n{ROOT}\n\n", "extension lines are not empty"),
        ("longhaul/demo\n7\n", "at least 3 lines"),
        (f"\n7\n{ROOT}\n", "origin line is not empty"),
        (f"longhaul/demo\n07\n{ROOT}\n", "without leading zeros"),
        (f"longhaul/demo\n+7\n{ROOT}\n", "decimal number"),
        (f"longhaul/demo\n 7\n{ROOT}\n", "decimal number"),
        (f"longhaul/demo\n\u0667\n{ROOT}\n", "decimal number"),  # an Arabic-Indic seven
        (f"longhaul/demo\n-1\n{ROOT}\n", "decimal number"),
        (f"longhaul/demo\n{2**64}\n{ROOT}\n", "2\\*\\*64"),
        (f"longhaul/demo\n{'9' * 5000}\n{ROOT}\n", "decimal number"),
        (f"longhaul/demo\n7\n{ROOT.rstrip('=')}\n", "base64"),
        (f"longhaul/demo\n7\n{base64.b64encode(bytes(31)).decode()}\n", "32 bytes"),
        ("longhaul/demo\n7\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=\n", "canonical base64"),
        (f"longhaul/demo\r\n7\n{ROOT}\n", "control character"),
    ],
)
def test_anything_but_the_exact_format_is_refused(body: str, reason: str) -> None:
    with pytest.raises(CheckpointError, match=reason):
        parse_checkpoint(body)


def test_a_checkpoint_cannot_be_made_that_would_not_parse() -> None:
    with pytest.raises(CheckpointError):
        Checkpoint("two\nlines", 1, bytes(32))
    with pytest.raises(CheckpointError):
        Checkpoint("longhaul/demo", -1, bytes(32))
    with pytest.raises(CheckpointError):
        Checkpoint("longhaul/demo", 1, bytes(32), ("",))


def test_longhauls_origin_names_the_deployment() -> None:
    assert longhaul_origin("acme.example.com") == "longhaul/acme.example.com"
    for bad in ("", "Acme", "a b", "a+b", "a/b", "-edge", "edge."):
        with pytest.raises(CheckpointError, match="deployment name"):
            longhaul_origin(bad)


origins = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=30)
extensions = st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF), min_size=1), max_size=3)


@given(
    origin=origins, size=st.integers(0, 2**64 - 1), root=st.binary(min_size=32, max_size=32), ext=extensions
)
def test_every_checkpoint_renders_to_a_body_that_parses_back(
    origin: str, size: int, root: bytes, ext: list[str]
) -> None:
    checkpoint = Checkpoint(origin, size, root, tuple(ext))
    assert parse_checkpoint(checkpoint.body()) == checkpoint


@given(body=st.text(max_size=200))
def test_any_text_parses_or_is_refused_with_a_checkpoint_error(body: str) -> None:
    try:
        checkpoint = parse_checkpoint(body)
    except CheckpointError:
        return
    assert checkpoint.body() == body

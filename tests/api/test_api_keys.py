"""API keys: minting, the two ways to configure them, and the lookup of a presented key."""

from __future__ import annotations

import hashlib
import hmac
import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.api_keys import (
    ApiKey,
    ApiKeyError,
    KeyRing,
    digest_of,
    key_id_of,
    mint_key,
    parse_key_file,
    parse_pairs,
)

TENANTS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
KEYS = st.text(string.ascii_letters + string.digits + "_-.~+/=", min_size=16, max_size=60)


class TestMinting:
    def test_a_minted_key_is_accepted_by_its_file_line_alone(self) -> None:
        minted = mint_key("acme")

        ring = KeyRing(parse_key_file(minted.line + "\n"))

        found = ring.find(minted.key)
        assert found is not None
        assert found.tenant == "acme"
        assert minted.line.startswith(found.key_id + " acme sha256:")
        assert minted.key not in minted.line
        assert re.fullmatch(r"lh_[A-Za-z0-9_-]{43}", minted.key)

    def test_a_minted_key_is_named_by_its_key_id_the_start_of_its_digest(self) -> None:
        minted = mint_key("acme")

        name, _, digest = minted.line.split()
        assert name == key_id_of(digest_of(minted.key)) == digest.removeprefix("sha256:")[:8]
        assert re.fullmatch(r"[0-9a-f]{8}", name)

    def test_every_minted_key_is_new(self) -> None:
        minted = [mint_key("acme") for _ in range(50)]

        assert len({m.key for m in minted}) == 50
        assert len({m.line.split()[0] for m in minted}) == 50

    @pytest.mark.parametrize("tenant", ["", "has space", "a=b", "-leading", "x" * 65, "ünï"])
    def test_a_tenant_name_must_be_plain(self, tenant: str) -> None:
        with pytest.raises(ApiKeyError, match="tenant"):
            mint_key(tenant)


class TestPairs:
    def test_pairs_map_keys_to_tenants_in_order(self) -> None:
        keys = parse_pairs(" acme = aaaaaaaaaaaaaaaa1 ,globex=gggggggggggggggg1,, acme=aaaaaaaaaaaaaaaa2 ")

        assert [(k.name, k.tenant) for k in keys] == [
            ("env-1", "acme"),
            ("env-2", "globex"),
            ("env-3", "acme"),
        ]
        assert keys[0].digest == hashlib.sha256(b"aaaaaaaaaaaaaaaa1").digest()

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("acme", "pair 1 has no '='"),
            ("acme=aaaaaaaaaaaaaaaa,globex", "pair 2 has no '='"),
            ("=aaaaaaaaaaaaaaaa", "pair 1: tenant ''"),
            ("acme=short", "at least 16 characters"),
            ("acme=has a space in the key", "at least 16 characters without spaces"),
        ],
    )
    def test_bad_pairs_name_the_pair_and_never_the_key(self, text: str, says: str) -> None:
        with pytest.raises(ApiKeyError, match=re.escape(says)) as raised:
            parse_pairs(text)

        assert "aaaaaaaaaaaaaaaa" not in str(raised.value)
        assert "short" not in str(raised.value).replace("at least", "")

    @given(st.lists(st.tuples(TENANTS, KEYS), min_size=1, max_size=8, unique_by=lambda pair: pair[1]))
    def test_any_well_formed_pairs_parse_to_their_tenants(self, pairs: list[tuple[str, str]]) -> None:
        text = ",".join(f"{tenant}={key}" for tenant, key in pairs)

        ring = KeyRing(parse_pairs(text))

        for tenant, key in pairs:
            found = ring.find(key)
            assert found is not None
            assert found.tenant == tenant

    @given(st.text(max_size=80))
    def test_any_text_parses_or_is_refused_with_a_key_error(self, text: str) -> None:
        try:
            keys = parse_pairs(text)
        except ApiKeyError:
            return
        assert all(isinstance(key, ApiKey) for key in keys)


class TestKeyFile:
    def test_comments_and_blank_lines_are_skipped(self) -> None:
        digest = "ab" * 32
        text = (
            f"# the production keys\n\n  k1  acme  sha256:{digest}  # rotated 2026-12\n"
            f"\t\nk2 globex sha256:{'cd' * 32}\n"
        )

        keys = parse_key_file(text)

        assert [(k.name, k.tenant, k.digest.hex()) for k in keys] == [
            ("k1", "acme", digest),
            ("k2", "globex", "cd" * 32),
        ]

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("k1 acme\n", "line 1: expected 3 fields"),
            ("\n\nk1 acme sha256:" + "ab" * 32 + " extra\n", "line 3: expected 3 fields"),
            ("k1 acme " + "ab" * 32 + "\n", "line 1: the digest must be sha256:"),
            ("k1 acme sha256:" + "AB" * 32 + "\n", "lower-case hex"),
            ("k1 acme sha256:" + "ab" * 31 + "\n", "64 lower-case hex"),
            ("k1 acme md5:" + "ab" * 16 + "\n", "sha256:"),
            ("k1 'acme' sha256:" + "ab" * 32 + "\n", "line 1: tenant \"'acme'\""),
            ("-k1 acme sha256:" + "ab" * 32 + "\n", "line 1: key name '-k1'"),
            ("k1 acme lh_this_is_a_key_in_the_clear\n", "a key itself never goes in the file"),
        ],
    )
    def test_a_bad_line_is_named_by_its_number(self, text: str, says: str) -> None:
        with pytest.raises(ApiKeyError, match=re.escape(says)):
            parse_key_file(text)

    @given(st.lists(st.text(max_size=100), max_size=6))
    def test_any_file_parses_or_is_refused_with_a_key_error(self, lines: list[str]) -> None:
        try:
            keys = parse_key_file("\n".join(lines))
        except ApiKeyError as error:
            refusal = str(error)
        else:
            assert all(len(key.digest) == 32 for key in keys)
            return
        assert refusal.startswith("line ")

    @given(st.lists(st.tuples(TENANTS, KEYS), min_size=1, max_size=6, unique_by=lambda pair: pair[1]))
    def test_a_file_of_digests_accepts_exactly_its_keys(self, pairs: list[tuple[str, str]]) -> None:
        text = "".join(
            f"k{n} {tenant} sha256:{digest_of(key).hex()}\n" for n, (tenant, key) in enumerate(pairs)
        )

        ring = KeyRing(parse_key_file(text))

        for tenant, key in pairs:
            found = ring.find(key)
            assert found is not None
            assert found.tenant == tenant
            assert ring.find(key + "x") is None
            assert ring.find(key[:-1]) is None


class TestKeyIds:
    def test_a_key_has_the_same_id_from_a_pair_and_from_its_file_line(self) -> None:
        key = "lh_" + "s3cret" * 6
        (from_pair,) = parse_pairs(f"acme={key}")
        (from_file,) = parse_key_file(f"prod-1 acme sha256:{digest_of(key).hex()}\n")

        assert from_pair.name != from_file.name
        assert from_pair.key_id == from_file.key_id == hashlib.sha256(key.encode()).hexdigest()[:8]

    def test_two_keys_with_one_key_id_are_refused(self) -> None:
        digest = bytes.fromhex("3f2a9c1d" + "00" * 28)
        other = bytes.fromhex("3f2a9c1d" + "11" * 28)

        with pytest.raises(ApiKeyError, match="same key id 3f2a9c1d as another key"):
            KeyRing([ApiKey("k1", "acme", digest), ApiKey("k2", "globex", other)])


class TestKeyRing:
    def test_no_keys_is_refused(self) -> None:
        with pytest.raises(ApiKeyError, match="no API keys"):
            KeyRing([])

    def test_a_key_name_or_a_key_given_twice_is_refused(self) -> None:
        one = ApiKey("k1", "acme", digest_of("a" * 16))

        with pytest.raises(ApiKeyError, match="key name 'k1' appears twice"):
            KeyRing([one, ApiKey("k1", "acme", digest_of("b" * 16))])
        with pytest.raises(ApiKeyError, match="'k2' is the same key as another"):
            KeyRing([one, ApiKey("k2", "globex", digest_of("a" * 16))])

    @pytest.mark.parametrize("presented", ["key-number-0000", "key-number-0004", "not-a-key-at-all", ""])
    def test_every_digest_is_compared_in_constant_time_wherever_the_key_is(
        self, presented: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ring = KeyRing(ApiKey(f"k{n}", "acme", digest_of(f"key-number-000{n}")) for n in range(5))
        compared: list[bytes] = []
        real = hmac.compare_digest

        def spy(a: bytes, b: bytes) -> bool:  # calls through: the real comparison decides
            compared.append(a)
            return real(a, b)

        monkeypatch.setattr(hmac, "compare_digest", spy)

        found = ring.find(presented)

        assert compared == [key.digest for key in ring.keys]  # no early exit, no other comparison
        assert (found.name if found else None) == {"key-number-0000": "k0", "key-number-0004": "k4"}.get(
            presented
        )

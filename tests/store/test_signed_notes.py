"""C2SP signed notes with Ed25519, checked against the vectors of Go's note package and the spec.

Vectors: golang/mod ``sumdb/note/note_test.go`` (BSD-3-Clause, commit fe2ec04f): the PeterNeumann
signer and verifier keys, the note ``TestSign`` expects, the EnochRoot key and signature of
``TestOpen`` and its list of malformed notes; and C2SP ``signed-note.md`` (commit 5ba5ee83), whose
example verifier key ``example.com/foo`` verifies its example note.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.evidence.signed_notes import (
    MAX_SIGNATURES,
    NoteError,
    SignerKey,
    VerifierKey,
    key_id,
    open_note,
    parse_note,
    sign_note,
)

PETER_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = (
    "\u2014 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot "
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)
C2SP_KEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n\u2014 example.com/foo "
    "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)


class TestKeys:
    def test_the_go_signer_key_gives_the_go_verifier_key(self) -> None:
        signer = SignerKey.parse(PETER_SIGNER)
        assert str(signer) == PETER_SIGNER
        assert str(signer.verifier()) == PETER
        assert signer.key_id == 0xC74F20A3

    def test_a_verifier_key_round_trips(self) -> None:
        for text in (PETER, ENOCH, C2SP_KEY):
            assert str(VerifierKey.parse(text)) == text

    def test_the_key_id_is_the_hash_of_name_type_and_key(self) -> None:
        verifier = VerifierKey.parse(PETER)
        assert key_id("PeterNeumann", verifier.public_key) == 0xC74F20A3

    def test_a_new_key_verifies_its_own_signatures(self) -> None:
        signer = SignerKey.generate("longhaul/test")
        assert SignerKey.parse(str(signer)) == signer
        assert VerifierKey.parse(str(signer.verifier())).verify(b"hi", signer.sign(b"hi"))
        assert not signer.verifier().verify(b"ho", signer.sign(b"hi"))

    def test_a_signer_key_never_shows_its_seed(self) -> None:
        signer = SignerKey.parse(PETER_SIGNER)
        secret = PETER_SIGNER.rsplit("+", 1)[1]
        assert secret not in repr(signer)
        for mangled in (PETER_SIGNER[:-2], PETER_SIGNER.replace("c74f20a3", "c74f20a4"), PETER_SIGNER + "A"):
            with pytest.raises(NoteError) as refused:
                SignerKey.parse(mangled)
            assert secret[:8] not in str(refused.value)

    def test_every_mangled_verifier_key_is_refused(self) -> None:
        # As Go's TestNewVerifier: every proper substring, and every one-character change.
        mangled = {PETER[i:j] for i in range(len(PETER)) for j in range(i + 1, len(PETER) + 1)} - {PETER}
        mangled |= {PETER[:i] + chr(ord(PETER[i]) + 1) + PETER[i + 1 :] for i in range(len(PETER))}
        accepted = []
        for text in mangled:
            try:
                VerifierKey.parse(text)
            except NoteError:
                continue
            accepted.append(text)
        assert accepted == []

    @pytest.mark.parametrize(
        "text",
        [
            "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",  # key too long
            "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown algorithm
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        ],
    )
    def test_go_s_bad_verifier_keys_are_refused(self, text: str) -> None:
        with pytest.raises(NoteError):
            VerifierKey.parse(text)

    @pytest.mark.parametrize("name", ["", "a+b", "a b", "a\u2003b", "tab\tname"])
    def test_bad_key_names_are_refused(self, name: str) -> None:
        with pytest.raises(NoteError, match="key name"):
            SignerKey.generate(name)


class TestSigning:
    def test_signing_gives_go_s_note(self) -> None:
        assert sign_note(TEXT, SignerKey.parse(PETER_SIGNER)) == TEXT + "\n" + PETER_SIG

    def test_several_signers_sign_the_same_text(self) -> None:
        other = SignerKey.generate("witness.example")
        note = sign_note(TEXT, SignerKey.parse(PETER_SIGNER), other)
        assert note.startswith(TEXT + "\n" + PETER_SIG)
        assert open_note(note, [other.verifier()]) == (TEXT, [other.verifier()])

    @pytest.mark.parametrize("text", ["abc", "", "line\rwith a carriage return\n"])
    def test_a_text_without_final_newline_or_with_control_characters_is_refused(self, text: str) -> None:
        with pytest.raises(NoteError):
            sign_note(text, SignerKey.parse(PETER_SIGNER))


class TestOpening:
    def test_the_c2sp_example_verifies(self) -> None:
        text, verified = open_note(C2SP_NOTE, [VerifierKey.parse(C2SP_KEY)])
        assert text == "This is an example message.\n"
        assert [str(key) for key in verified] == [C2SP_KEY]

    def test_signatures_of_unknown_keys_are_ignored(self) -> None:
        note = TEXT + "\n" + PETER_SIG + ENOCH_SIG
        assert open_note(note, [VerifierKey.parse(PETER)])[1] == [VerifierKey.parse(PETER)]
        assert open_note(note.encode(), [VerifierKey.parse(ENOCH)])[1] == [VerifierKey.parse(ENOCH)]
        both = open_note(note, [VerifierKey.parse(ENOCH), VerifierKey.parse(PETER)])[1]
        assert both == [VerifierKey.parse(PETER), VerifierKey.parse(ENOCH)]

    def test_a_note_no_known_key_signed_is_refused(self) -> None:
        with pytest.raises(NoteError, match="no signature by a known key"):
            open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [VerifierKey.parse(C2SP_KEY)])
        with pytest.raises(NoteError, match="no signature by a known key"):
            open_note(TEXT + "\n" + PETER_SIG, [])

    def test_a_known_key_whose_signature_fails_refuses_the_note(self) -> None:
        forged = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
        with pytest.raises(NoteError, match="PeterNeumann\\+c74f20a3 does not verify"):
            open_note(forged, [VerifierKey.parse(PETER)])

    def test_repeated_signatures_count_once(self) -> None:
        note = TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG
        assert open_note(note, [VerifierKey.parse(PETER)])[1] == [VerifierKey.parse(PETER)]

    def test_two_different_keys_with_one_name_and_id_are_ambiguous(self) -> None:
        real = VerifierKey.parse(PETER)
        impostor = VerifierKey(real.name, real.key_id, bytes(32))
        with pytest.raises(NoteError, match="two different verifier keys"):
            open_note(TEXT + "\n" + PETER_SIG, [real, impostor])

    def test_too_many_signatures_make_a_note_malformed(self) -> None:
        with pytest.raises(NoteError, match=f"at most {MAX_SIGNATURES}"):
            open_note(TEXT + "\n" + PETER_SIG * (MAX_SIGNATURES + 1), [VerifierKey.parse(PETER)])

    @pytest.mark.parametrize(
        "note",
        [
            # Go's TestOpen "badMsgs"
            TEXT,
            TEXT + "\n",
            TEXT + "\n" + PETER_SIG[:-1],
            "\x01" + TEXT + "\n" + PETER_SIG,
            TEXT + "\n" + "\u2014 Bad Name " + PETER_SIG.rsplit(" ", 1)[-1].removesuffix("\n"),
            TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
            # and more
            TEXT + "\n" + PETER_SIG.replace("=\n", "\n"),  # unpadded base64
            TEXT + "\n" + "\u2014 PeterNeumann AAAA\n",  # no room for a signature
            TEXT + "\n- PeterNeumann " + PETER_SIG.rsplit(" ", 1)[-1],  # a hyphen, not an em dash
        ],
    )
    def test_malformed_notes_are_refused(self, note: str) -> None:
        with pytest.raises(NoteError):
            open_note(note, [VerifierKey.parse(PETER)])

    def test_bytes_that_are_not_utf8_are_refused(self) -> None:
        with pytest.raises(NoteError, match="UTF-8"):
            parse_note(b"\xff" + (TEXT + "\n" + PETER_SIG).encode())

    def test_the_text_ends_at_the_last_blank_line(self) -> None:
        signer = SignerKey.generate("example.com/blank")
        text = "first paragraph\n\nsecond paragraph\n"
        assert open_note(sign_note(text, signer), [signer.verifier()])[0] == text


SIGNER = SignerKey.parse(PETER_SIGNER)
SIGNED = sign_note(TEXT, SIGNER)


@settings(max_examples=200, deadline=None)
@given(
    position=st.integers(0, len(TEXT) - 1), replacement=st.characters(min_codepoint=32, max_codepoint=0x2FFF)
)
def test_any_change_to_the_text_fails_the_signature(position: int, replacement: str) -> None:
    if TEXT[position] == replacement or TEXT[position] == "\n":
        return
    altered = SIGNED[:position] + replacement + SIGNED[position + 1 :]
    with pytest.raises(NoteError, match="does not verify"):
        open_note(altered, [SIGNER.verifier()])


@given(note=st.text(max_size=300) | st.builds(lambda text: text + "\n\n" + PETER_SIG, st.text(max_size=50)))
def test_any_text_parses_back_to_itself_or_is_refused_with_a_note_error(note: str) -> None:
    try:
        parsed = parse_note(note)
    except NoteError:
        return
    assert parsed.text + "\n" + "".join(f"{s.line()}\n" for s in parsed.signatures) == note

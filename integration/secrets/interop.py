"""The Python half of the secrets interoperability test (interop.sh).

    interop.py make DIR    keyrings and tokens made by flechtctl, for Go to open
    interop.py check DIR   open what Go made (go-*.json) with flechtctl

Every key kind (oct, X25519, Ed25519), scoped and unscoped tokens, a rotated
primary, sign-then-encrypt, a password-protected keyring, and refusals.
"""
import json
import sys
from dataclasses import replace
from pathlib import Path

from flechtctl import Keyring, KeyringError, SecretError
from flechtctl import tokens as t
from flechtwerk.attribute import STR
from flechtwerk.secrets import ENCRYPTED, SIGNED, install_keyring

PASSWORD = "correct horse battery staple 0.17"


def sign_then_encrypt(scope: str):
    return ENCRYPTED(SIGNED(STR, scope=scope), scope=scope)


def make(d: Path) -> None:
    x = t.generate_x25519_key()
    s = t.generate_ed25519_key()
    old = Keyring.of(
        {"o-old": t.generate_oct_key(), "o-new": t.generate_oct_key(), "o-db": t.generate_oct_key()},
        primary="o-old",
        primaries={"db": "o-db", "api_key": "x-api"},
        recipients={"x-api": x},
        signers={"s-api": s},
        scopes={"o-db": {"db"}, "x-api": {"api_key"}, "s-api": {"api_key", "db"}},
        signing={"api_key": "s-api", "db": "s-api"},
    )
    rotated = replace(old, primary="o-new")  # rotation: o-new seals, o-old still opens
    (d / "password.txt").write_text(PASSWORD + "\n")
    (d / "keyring.json").write_text(rotated.to_json())
    (d / "keyring.protected").write_text(t.encrypt_keyring(rotated, PASSWORD) + "\n")

    cases = []

    def seal(name, keyring, value, scope=""):
        cases.append({"name": name, "op": "open", "scope": scope, "value": value,
                      "token": t.encrypt(keyring, value, scope=scope)})

    def sign(name, value, scope):
        cases.append({"name": name, "op": "verify", "scope": scope, "value": value,
                      "token": t.sign(rotated, value, scope=scope)})

    seal("oct unscoped, old primary (rotated away)", old, "before rotation")
    seal("oct unscoped, new primary", rotated, "s3cret")
    seal("oct unscoped, object value", rotated, {"user": "ü", "n": 3, "list": [1, 2]})
    seal("oct scoped db", rotated, "db-password", scope="db")
    seal("x25519 scoped api_key", rotated, "api-key-123", scope="api_key")
    sign("ed25519 scoped api_key", {"who": "writer"}, "api_key")
    sign("ed25519 scoped db", "signed-db", "db")
    # flechtwerk's own codec: ENCRYPTED(SIGNED(STR, scope=s), scope=s).
    install_keyring(rotated)
    cases.append({"name": "sign-then-encrypt api_key (flechtwerk ENCRYPTED(SIGNED))", "op": "open-verify",
                  "scope": "api_key", "value": "sign-then-encrypt",
                  "token": sign_then_encrypt("api_key").encode("sign-then-encrypt")})

    # Tokens the Go side must refuse, with the reason it must give.
    gone = Keyring.of({"o-gone": t.generate_oct_key()}, primary="o-gone")
    twin = Keyring.of({"o-new": t.generate_oct_key()}, primary="o-new")  # same kid, other bytes
    good = t.encrypt(rotated, "x")
    head, ek, iv, ct, tag = good.removeprefix(t.PREFIX).split(".")
    tampered = t.PREFIX + ".".join([head, ek, iv, ("A" if ct[0] != "A" else "B") + ct[1:], tag])
    refusals = [
        {"name": "wrong scope", "op": "open", "scope": "api_key", "reason": "scope_refused",
         "token": t.encrypt(rotated, "x", scope="db")},
        {"name": "scoped token, unscoped reader", "op": "open", "scope": "", "reason": "scope_refused",
         "token": t.encrypt(rotated, "x", scope="db")},
        {"name": "unknown kid", "op": "open", "scope": "", "reason": "unknown_kid", "token": t.encrypt(gone, "x")},
        {"name": "same kid, other bytes", "op": "open", "scope": "", "reason": "authentication_failed",
         "token": t.encrypt(twin, "x")},
        {"name": "tampered ciphertext", "op": "open", "scope": "", "reason": "authentication_failed",
         "token": tampered},
        {"name": "signature for another scope", "op": "verify", "scope": "db", "reason": "scope_refused",
         "token": t.sign(rotated, "x", scope="api_key")},
    ]
    (d / "refusals.json").write_text(json.dumps(refusals, indent=1))

    # Tokens flechtctl accepts that its own writer never makes: registered
    # header members beyond alg/enc/kid (typ, cty) are admitted.
    from joserfc import jwe, jws
    from joserfc.jwk import OctKey, OKPKey
    oct_key = OctKey.import_key(rotated.keys["o-new"])
    extra = jwe.encrypt_compact({"alg": "dir", "enc": "A256GCM", "kid": "o-new", "typ": "flenc", "cty": "json"},
                                t.canonical_json("typ and cty"), oct_key, registry=t._REGISTRY)
    signer = t._okp_private_key("s-api", "Ed25519", s.public, s.private)
    extra_sig = jws.serialize_compact({"alg": "Ed25519", "kid": "s-api", "flenc_scope": "api_key", "typ": "flsig"},
                                      t.canonical_json("typ"), signer, registry=t._SIGNATURE_REGISTRY)
    cases.append({"name": "registered extra header members", "op": "open", "scope": "", "value": "typ and cty",
                  "token": t.PREFIX + extra})
    cases.append({"name": "registered extra header member (signature)", "op": "verify", "scope": "api_key",
                  "value": "typ", "token": t.SIGNATURE_PREFIX + extra_sig})
    (d / "cases.json").write_text(json.dumps(cases, indent=1))


def check(d: Path) -> None:
    password = (d / "go-password.txt").read_text().removesuffix("\n")
    plain = Keyring.from_json((d / "go-keyring.json").read_text())
    protected = t.decrypt_keyring((d / "go-keyring.protected").read_text(), password)
    assert protected == plain, "the protected keyring holds the same keys as the plain one"
    try:
        t.decrypt_keyring((d / "go-keyring.protected").read_text(), password + "x")
        raise AssertionError("a wrong password opened the keyring")
    except KeyringError:
        pass
    n = 0
    for keyring in (plain, protected):
        for c in json.loads((d / "go-cases.json").read_text()):
            if c["op"] == "open":
                got = t.decrypt(keyring, c["token"], scope=c["scope"])
            elif c["op"] == "verify":
                got = t.verify(keyring, c["token"], scope=c["scope"])
            else:
                got = t.verify(keyring, t.decrypt(keyring, c["token"], scope=c["scope"]), scope=c["scope"])
                if keyring is plain:  # and through flechtwerk's codec, under the process keyring
                    install_keyring(plain)
                    assert sign_then_encrypt(c["scope"]).decode(c["token"]) == c["value"], c["name"]
            assert got == c["value"], f"{c['name']}: got {got!r}, want {c['value']!r}"
            n += 1
    for c in json.loads((d / "go-refusals.json").read_text()):
        try:
            if c["op"] == "open":
                t.decrypt(plain, c["token"], scope=c["scope"])
            else:
                t.verify(plain, c["token"], scope=c["scope"])
        except (SecretError, KeyringError):
            n += 1
            continue
        raise AssertionError(f"{c['name']}: flechtctl accepted a token Go refuses")
    print(f"interop.py: flechtctl opened, verified or refused {n} Go-made tokens as expected")


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](Path(sys.argv[2]))

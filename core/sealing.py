"""Secrets at rest, sealed with a key derived from COMPANION_SECRET_KEY.

    Sealer(secret, previous)   seal(text) -> "sealed:v1:<Fernet token>", open(sealed) -> text
    Sealer.reseal(text)        the same text sealed with the current key (rotation; a value
                               stored before sealing existed is sealed for the first time)

The key is HKDF-SHA256 of the secret for one purpose (`PURPOSE`), so the link-signing key and
this one never coincide. Fernet is AES-128-CBC with HMAC-SHA256 (authenticated: a changed
value does not open). Rotation: set COMPANION_SECRET_KEY to the new secret and
COMPANION_PREVIOUS_SECRET_KEY to the old one; values open with either and are sealed again
with the new one at the next start (then the previous one may go).
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from core.errors import ConfigError

PREFIX = "sealed:v1:"
PURPOSE = b"companion: tokens at rest v1"


def _fernet(secret: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(
        secret.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


class Sealer:
    def __init__(self, secret: str, previous: str | None = None) -> None:
        keys = [_fernet(secret)] + ([_fernet(previous)] if previous else [])
        self._keys = MultiFernet(keys)

    def seal(self, text: str) -> str:
        return PREFIX + self._keys.encrypt(text.encode()).decode()

    def open(self, stored: str) -> str:
        """The text of a sealed value; a value stored unsealed (before 0029) as it is."""
        if not stored.startswith(PREFIX):
            return stored
        try:
            return self._keys.decrypt(stored.removeprefix(PREFIX).encode()).decode()
        except InvalidToken:
            raise ConfigError(
                "a stored token does not open with COMPANION_SECRET_KEY (nor "
                "COMPANION_PREVIOUS_SECRET_KEY): it was sealed with another secret; set the "
                "one it was sealed with as COMPANION_PREVIOUS_SECRET_KEY"
            ) from None

    def reseal(self, stored: str) -> str:
        return self.seal(self.open(stored))

    @staticmethod
    def is_sealed(stored: str) -> bool:
        return stored.startswith(PREFIX)

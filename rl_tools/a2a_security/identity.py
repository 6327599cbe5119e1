"""Asymmetric card signatures with a key registry: every organisation registers an Ed25519 key under its own
`kid`, and a card is signed as a JWS (alg EdDSA, `kid` in the protected header) through the SDK's signing extra.

An attacker can register legitimately too (under its own organisation), so its look-alike cards carry valid
signatures: signature verification alone no longer separates them from the genuine ones. `verifier(registry,
bind_provider=True)` additionally requires the signing key to be registered to the organisation the card
names as its provider; a spoof that claims the genuine provider fails that, one that names the attacker's
own (look-alike) organisation passes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import jwt
from a2a.types import a2a_pb2 as pb
from a2a.utils import signing
from cryptography.hazmat.primitives.asymmetric import ed25519

ALGORITHM = "EdDSA"


@dataclasses.dataclass(frozen=True)
class Registration:
    kid: str
    organisation: str
    public_key: ed25519.Ed25519PublicKey


class KeyRegistry:
    """kid -> (organisation, public key). Keys are derived from (organisation, seed), so runs are reproducible."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.entries: dict[str, Registration] = {}
        self._private: dict[str, ed25519.Ed25519PrivateKey] = {}

    def register(self, organisation: str) -> str:
        """Register `organisation` (idempotent); returns its kid. The private key stays with the registrant."""
        kid = f"{organisation}#k1"
        if kid not in self.entries:
            secret = hashlib.sha256(f"a2a-lab-{self.seed}-{organisation}".encode()).digest()
            private = ed25519.Ed25519PrivateKey.from_private_bytes(secret)
            self._private[kid] = private
            self.entries[kid] = Registration(kid, organisation, private.public_key())
        return kid

    def sign(self, card: pb.AgentCard, organisation: str) -> pb.AgentCard:
        """Sign `card` with `organisation`'s registered key (registering it first): what that party can do."""
        kid = self.register(organisation)
        header = {"alg": ALGORITHM, "kid": kid, "typ": "JOSE"}
        return signing.create_agent_card_signer(self._private[kid], header)(card)


def verifier(registry: KeyRegistry, *, bind_provider: bool = True) -> Callable[[pb.AgentCard], None]:
    """A card verifier for `A2ACardResolver.get_agent_card(signature_verifier=...)`: some signature must verify
    under a registered key (EdDSA only: no algorithm confusion), and with `bind_provider` that key must belong
    to the organisation named in the card's `provider`."""

    def verify(card: pb.AgentCard) -> None:
        def key_for(kid: str | None, jku: str | None):
            del jku  # keys come from the registry only, never from a URL the card names
            entry = registry.entries.get(kid or "")
            if entry is None:
                raise jwt.exceptions.InvalidKeyError(f"kid={kid!r}: not in the registry")
            if bind_provider and entry.organisation != card.provider.organization:
                raise jwt.exceptions.InvalidKeyError(
                    f"kid={kid!r} belongs to {entry.organisation!r}, the card claims {card.provider.organization!r}")
            return entry.public_key

        signing.create_signature_verifier(key_for, algorithms=[ALGORITHM])(card)

    return verify

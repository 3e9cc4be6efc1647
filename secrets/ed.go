package secrets

import "crypto/ed25519"

func edPrivate(p *pair) ed25519.PrivateKey { return p.edPriv }

func edPublic(p *pair) ed25519.PublicKey { return ed25519.PublicKey(p.public) }

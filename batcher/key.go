package batcher

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// Identity is the SHA-256 digest of everything that changes a request's
// answer: its route, the backend and model of the route's first target,
// the operation, the whole input and every generation parameter (max_tokens
// resolved against the route's default). Dedup and the response cache both
// key on it, so a field that changes an answer is added once, here, and
// both honour it. The tenant is not part of it: dedup and the cache add it
// beside it (a route's cache may be shared between tenants, dedup never is).
//
// TestIdentityCoversEveryField fails when Request, Input, Message or Params
// gains a field that neither changes the identity nor is listed as one that
// does not change the answer.
type Identity [sha256.Size]byte

// identityBufSize is the encoding's stack buffer: most requests' identities
// encode within it and cost no allocation.
const identityBufSize = 1024

// identity returns r's Identity on route rc.
func identity(r *Request, rc *routeConfig) Identity {
	var buf [identityBufSize]byte
	return sha256.Sum256(appendIdentity(buf[:0], r, rc))
}

// appendIdentity appends the canonical encoding that identity digests:
// every string length-prefixed, every optional field behind a presence
// byte, so that no two different requests encode alike.
func appendIdentity(dst []byte, r *Request, rc *routeConfig) []byte {
	t := &rc.targets[0]
	dst = appendString(dst, rc.Name)
	dst = appendString(dst, t.be.cfg.Name)
	dst = appendString(dst, t.model)

	in := &r.Input
	dst = append(dst, byte(in.Op))
	dst = binary.AppendUvarint(dst, uint64(len(in.Messages)))
	for i := range in.Messages {
		m := &in.Messages[i]
		dst = appendString(dst, m.Role)
		dst = appendString(dst, m.Content)
		dst = m.appendKey(dst)
	}
	dst = appendString(dst, in.Prompt)
	dst = appendString(dst, in.Text)

	p := &r.Params
	mt := p.MaxTokens
	if mt == 0 {
		mt = rc.DefaultMaxTokens
	}
	dst = binary.AppendVarint(dst, int64(mt))
	dst = appendFloat32(dst, p.Temperature)
	dst = appendFloat32(dst, p.TopP)
	if p.Seed == nil {
		dst = append(dst, 0)
	} else {
		dst = binary.AppendVarint(append(dst, 1), *p.Seed)
	}
	dst = binary.AppendUvarint(dst, uint64(len(p.Stop)))
	for _, s := range p.Stop {
		dst = appendString(dst, s)
	}
	return appendRich(dst, r) // chat.go: tools, response format, the other parameters
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func appendFloat32(dst []byte, f *float32) []byte {
	if f == nil {
		return append(dst, 0)
	}
	return binary.BigEndian.AppendUint32(append(dst, 1), math.Float32bits(*f))
}

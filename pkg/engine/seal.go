package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// ErrSealBroken says that what a Driver reads back from a child does not
// verify against its seal: someone else changed it.
var ErrSealBroken = errors.New("the child was changed after opr8r built it")

// Seals seals and verifies the children of Sealer engines with an HMAC
// under a key only the manager holds (a Secret in its own namespace), so
// that nothing a tenant may write into a child decides what opr8r makes of
// it.
type Seals struct {
	// Key is the HMAC key; at least 32 bytes.
	Key []byte
}

// Seal writes the seal of a child of e into its SealAnnotation; a child of
// an engine that is not a Sealer is left as it is.
func (s Seals) Seal(e Engine, child client.Object) error {
	sealer, ok := e.(Sealer)
	if !ok {
		return nil
	}
	mac, err := s.mac(sealer, child)
	if err != nil {
		return err
	}
	a := child.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[infrav1.SealAnnotation] = mac
	child.SetAnnotations(a)
	return nil
}

// Verifier returns what checks the seal of a child of e, for DriveInput.
func (s Seals) Verifier(e Engine) func(client.Object) error {
	sealer, ok := e.(Sealer)
	if !ok {
		return nil
	}
	return func(child client.Object) error {
		want, err := s.mac(sealer, child)
		if err != nil {
			return err
		}
		got := child.GetAnnotations()[infrav1.SealAnnotation]
		if !hmac.Equal([]byte(got), []byte(want)) {
			return ErrSealBroken
		}
		return nil
	}
}

func (s Seals) mac(sealer Sealer, child client.Object) (string, error) {
	if len(s.Key) < 32 {
		return "", fmt.Errorf("the manager has no seal key (at least 32 bytes)")
	}
	b, err := sealer.Sealed(child)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, s.Key)
	m.Write([]byte("opr8r seal v1\x00" + child.GetNamespace() + "/" + child.GetName() + "\x00"))
	m.Write(b)
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)), nil
}

// MAC is an HMAC-SHA256, under the manager's seal key, of parts in a
// domain of their own: each part is length-prefixed, so no two lists of
// parts share a MAC, and a MAC of one domain verifies in no other. It
// seals what the manager writes where tenants may write too (a preview's
// annotations), so that the manager acts only on what it wrote itself.
func (s Seals) MAC(domain string, parts ...string) (string, error) {
	if len(s.Key) < 32 {
		return "", fmt.Errorf("the manager has no seal key (at least 32 bytes)")
	}
	m := hmac.New(sha256.New, s.Key)
	m.Write([]byte("opr8r mac v1\x00" + domain + "\x00"))
	for _, p := range parts {
		m.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		m.Write([]byte(p))
	}
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)), nil
}

// VerifyMAC says whether mac is the MAC of parts in domain; false without
// a seal key.
func (s Seals) VerifyMAC(mac, domain string, parts ...string) bool {
	want, err := s.MAC(domain, parts...)
	return err == nil && hmac.Equal([]byte(mac), []byte(want))
}

package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// standardWebhooksPrefix starts Standard Webhooks (and Svix) secrets; the
// base64 key follows it.
const standardWebhooksPrefix = "whsec_"

// standardWebhooks verifies webhook-id, webhook-timestamp and
// webhook-signature (or their svix- twins) as the reference library does:
// the signature header is a space-separated list of "<version>,<base64>";
// entries of versions other than v1 (such as v1a, Ed25519) are skipped.
type standardWebhooks struct {
	keys keyring
	// signers is how many keys, from the first, sign a request again
	// (Resign): 1, the first secret's; 2 for GitLab, the two readings of
	// its first signing token.
	signers   int
	tolerance time.Duration
}

// StandardWebhooks verifies the Standard Webhooks scheme (Svix, Clerk,
// Resend, …). Each secret is "whsec_" followed by the base64 key; like the
// reference library, the bare base64 key is accepted too.
func StandardWebhooks(o Options) (Verifier, error) {
	secrets, tolerance, err := settings("standardwebhooks", o)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		if keys[i], err = decodeStandardSecret(s); err != nil {
			return nil, fmt.Errorf("signature: standardwebhooks: secret %d of %d: %w", i+1, len(secrets), err)
		}
	}
	return &standardWebhooks{keys: newKeyring(sha256.New, keys), signers: 1, tolerance: tolerance}, nil
}

// decodeStandardSecret returns the HMAC key of a "whsec_<base64>" secret.
// The error never quotes the secret.
func decodeStandardSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, standardWebhooksPrefix))
	if err != nil {
		return nil, fmt.Errorf("not %s followed by base64 (%v)", standardWebhooksPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("empty key after %s", standardWebhooksPrefix)
	}
	return key, nil
}

// standardHeaders returns the message ID, timestamp and signature list, from the
// webhook- headers or, when those are incomplete, from the svix- ones.
func standardHeaders(h http.Header) (id, ts, sigs string) {
	id, ts, sigs = h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id != "" && ts != "" && sigs != "" {
		return id, ts, sigs
	}
	if sid, sts, ssigs := h.Get("Svix-Id"), h.Get("Svix-Timestamp"), h.Get("Svix-Signature"); sid != "" && sts != "" && ssigs != "" {
		return sid, sts, ssigs
	}
	return id, ts, sigs
}

// standardSets are the two spellings of the scheme's headers: ID,
// timestamp and signature.
var standardSets = [2][3]string{
	{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"},
	{"Svix-Id", "Svix-Timestamp", "Svix-Signature"},
}

// standardHeaderNames are the headers standardHeaders reads.
var standardHeaderNames = []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "Svix-Id", "Svix-Timestamp", "Svix-Signature"}

func (v *standardWebhooks) Headers() []string { return slices.Clone(standardHeaderNames) }

func (v *standardWebhooks) Verify(h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := standardHeaders(h)
	sec, err := parseStandard(id, ts, sigs)
	if err != nil {
		return err
	}
	if err := checkAge(time.Unix(sec, 0), now, v.tolerance); err != nil {
		return err
	}
	return v.match(id, sec, sigs, body)
}

// Resign renews each complete set of headers that verifies, webhook- and
// svix- (an app's library may read either): its timestamp becomes now, its
// signature one "v1,<base64>" entry per signing key. Other entries, v1a
// (Ed25519) ones too, are dropped: the proxy holds no private key. A set
// that does not verify is left as it is; at least one must verify.
func (v *standardWebhooks) Resign(h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := standardHeaders(h)
	sec, err := parseStandard(id, ts, sigs)
	if err != nil {
		return err
	}
	if err := v.match(id, sec, sigs, body); err != nil {
		return err
	}
	for _, set := range standardSets {
		id, ts, sigs := h.Get(set[0]), h.Get(set[1]), h.Get(set[2])
		if sec, err := parseStandard(id, ts, sigs); err != nil || v.match(id, sec, sigs, body) != nil {
			continue
		}
		h.Set(set[1], strconv.FormatInt(now.Unix(), 10))
		h.Set(set[2], v.sign(id, now.Unix(), body))
	}
	return nil
}

// parseStandard checks that the three headers are there and returns the
// timestamp.
func parseStandard(id, ts, sigs string) (sec int64, err error) {
	switch {
	case sigs == "":
		return 0, fail(ErrMissing, "no webhook-signature header")
	case id == "":
		return 0, fail(ErrMissing, "no webhook-id header")
	case ts == "":
		return 0, fail(ErrMissing, "no webhook-timestamp header")
	}
	if sec, err = strconv.ParseInt(ts, 10, 64); err != nil {
		return 0, fail(ErrMalformed, "webhook-timestamp is not an integer")
	}
	return sec, nil
}

// standardPrefix is what the scheme signs before the body:
// "<id>.<timestamp>.". The reference library signs the parsed timestamp,
// not the header's text.
func standardPrefix(buf *[128]byte, id string, sec int64) []byte {
	prefix := append(buf[:0], id...)
	prefix = append(prefix, '.')
	prefix = strconv.AppendInt(prefix, sec, 10)
	return append(prefix, '.')
}

// match reports ErrMismatch unless a v1 entry of sigs is the MAC of the
// signed string under some configured key.
func (v *standardWebhooks) match(id string, sec int64, sigs string, body []byte) error {
	var pb [128]byte
	prefix := standardPrefix(&pb, id, sec)
	var out [maxMACSize]byte
	for _, k := range v.keys {
		mac := k.sum(&out, prefix, body)
		for entry := range strings.SplitSeq(sigs, " ") {
			version, rest, _ := strings.Cut(entry, ",")
			if version != "v1" {
				continue
			}
			encoded, _, _ := strings.Cut(rest, ",")
			var buf [maxMACSize]byte
			if sig, ok := base64MAC.decode(&buf, encoded, sha256.Size); ok && hmac.Equal(mac, sig) {
				return nil
			}
		}
	}
	return fail(ErrMismatch, "no webhook-signature v1 entry matches a secret")
}

// sign returns the signature header of a request signed at sec: one
// "v1,<base64>" entry per signing key, space-separated.
func (v *standardWebhooks) sign(id string, sec int64, body []byte) string {
	var pb [128]byte
	prefix := standardPrefix(&pb, id, sec)
	var out [maxMACSize]byte
	entries := make([]string, v.signers)
	for i, k := range v.keys[:v.signers] {
		entries[i] = "v1," + base64MAC.encode(k.sum(&out, prefix, body))
	}
	return strings.Join(entries, " ")
}

// gitLab verifies GitLab's two forms. A delivery carrying webhook-signature
// is checked in Standard Webhooks form against the signing tokens, with
// the timestamp tolerance; otherwise X-Gitlab-Token must equal one of the
// plain secret tokens (compared in constant time).
type gitLab struct {
	signed *standardWebhooks // nil when no secret is a signing token
	tokens [][]byte
}

// GitLab verifies GitLab webhooks. Secrets starting with "whsec_" are
// signing tokens (GitLab requires that form for them); the others are
// legacy secret tokens sent verbatim in X-Gitlab-Token.
//
// GitLab's docs do not say whether the key is the base64-decoded part
// after "whsec_" (as Standard Webhooks does) or the whole string; each
// signing token is therefore tried both ways. Both keys derive from the
// same secret, so this widens nothing an attacker could use.
func GitLab(o Options) (Verifier, error) {
	secrets, tolerance, err := settings("gitlab", o)
	if err != nil {
		return nil, err
	}
	v := &gitLab{}
	var signing [][]byte
	for i, s := range secrets {
		if !strings.HasPrefix(s, standardWebhooksPrefix) {
			v.tokens = append(v.tokens, []byte(s))
			continue
		}
		key, err := decodeStandardSecret(s)
		if err != nil {
			return nil, fmt.Errorf("signature: gitlab: secret %d of %d: %w", i+1, len(secrets), err)
		}
		signing = append(signing, key, []byte(s))
	}
	if len(signing) > 0 {
		// The first signing token's two readings sign a request again:
		// whichever one GitLab uses, the app's library finds its entry.
		v.signed = &standardWebhooks{keys: newKeyring(sha256.New, signing), signers: 2, tolerance: tolerance}
	}
	return v, nil
}

func (v *gitLab) Headers() []string {
	return append(slices.Clone(standardHeaderNames), "X-Gitlab-Token")
}

func (v *gitLab) Verify(h http.Header, body []byte, now time.Time) error {
	signed := h.Get("Webhook-Signature") != ""
	if signed && v.signed != nil {
		return v.signed.Verify(h, body, now)
	}
	token := h.Get("X-Gitlab-Token")
	if token == "" {
		if signed {
			return fail(ErrMismatch, "webhook-signature present but no secret is a whsec_ signing token")
		}
		return fail(ErrMissing, "no X-Gitlab-Token or webhook-signature header")
	}
	for _, t := range v.tokens {
		if subtle.ConstantTimeCompare([]byte(token), t) == 1 {
			return nil
		}
	}
	return fail(ErrMismatch, "X-Gitlab-Token matches no secret")
}

// Resign renews a request signed with a signing token (webhook-signature)
// with both readings of the first one. The legacy X-Gitlab-Token form
// signs no timestamp: such a request is left as it is.
func (v *gitLab) Resign(h http.Header, body []byte, now time.Time) error {
	if h.Get("Webhook-Signature") == "" {
		return nil
	}
	if v.signed == nil {
		return fail(ErrMismatch, "webhook-signature present but no secret is a whsec_ signing token")
	}
	return v.signed.Resign(h, body, now)
}

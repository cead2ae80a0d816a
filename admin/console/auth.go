package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// cookieName is the session cookie's name.
const cookieName = "webhook_dedup_console"

// sessionTTL is how long a sign-in lasts.
const sessionTTL = 8 * time.Hour

// sessions issues and checks the session cookie's value: an expiry and a
// random nonce, signed with HMAC-SHA256 under a key derived from the
// token. The token itself is never in the cookie; every replica sharing
// the token accepts the others' sessions, and changing ADMIN_TOKEN ends
// them all. A session cannot be revoked before it expires, except by
// changing the token.
type sessions struct {
	key []byte
	now func() time.Time
}

func newSessions(token string, now func() time.Time) sessions {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("webhook-dedup console session v1"))
	return sessions{key: m.Sum(nil), now: now}
}

func (s sessions) sign(payload string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a new session's cookie value and its expiry.
func (s sessions) issue() (string, time.Time) {
	exp := s.now().Add(sessionTTL)
	payload := strconv.FormatInt(exp.Unix(), 10) + "." + rand.Text()
	return payload + "." + s.sign(payload), exp
}

// valid reports whether v is a session this token signed, not expired.
func (s sessions) valid(v string) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	payload, mac := v[:i], v[i+1:]
	if !hmac.Equal([]byte(mac), []byte(s.sign(payload))) {
		return false
	}
	exp, _, _ := strings.Cut(payload, ".")
	unix, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && s.now().Before(time.Unix(unix, 0))
}

// tokenMatches compares a presented token with the configured one in
// constant time; hashing both first keeps the token's length from
// showing in the time taken too.
func (c *Console) tokenMatches(got string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(c.cfg.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// bearer reports whether r carries the token as a bearer token (scheme
// case-insensitive, RFC 9110), as the admin API takes it.
func (c *Console) bearer(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && c.tokenMatches(token)
}

// cookieSession reports whether r carries a valid session cookie.
func (c *Console) cookieSession(r *http.Request) bool {
	ck, err := r.Cookie(cookieName)
	return err == nil && c.sessions.valid(ck.Value)
}

// signedIn lets through the requests that carry a session or the bearer
// token. Others are sent to sign in (a page) or refused (a write).
func (c *Console) signedIn(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.cookieSession(r) || c.bearer(r) {
			next(w, r)
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			http.Redirect(w, r, "/ui/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="webhook-dedup"`)
		c.fail(w, r, http.StatusUnauthorized, "Sign in first.")
	}
}

type loginData struct{ Next string }

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: loginData{Next: localPath(r.URL.Query().Get("next"))}})
}

// login checks the token from the form and, if right, sets the session
// cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's
// request carries it), Secure when the admin port is served over TLS.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	next := localPath(r.PostFormValue("next"))
	if !c.tokenMatches(r.PostFormValue("token")) {
		c.cfg.Logger.Warn("console sign-in refused: wrong token", zap.String("remote", r.RemoteAddr))
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Error: "Wrong token.", Data: loginData{Next: next}})
		return
	}
	value, exp := c.sessions.issue()
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: "/ui/", Expires: exp, MaxAge: int(sessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	c.cfg.Logger.Info("console: signed in", zap.String("remote", r.RemoteAddr))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// localPath is p if it is a path of the console, else the overview: a
// redirect after sign-in or an action never leads off the console.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/ui/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n") {
		return "/ui/"
	}
	return p
}

package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// spaceBeforeRoute and semicolonBeforeRoute find the separator written
// where a comma belongs: before the "/" that starts the next route.
var (
	spaceBeforeRoute     = regexp.MustCompile(`\s+/`)
	semicolonBeforeRoute = regexp.MustCompile(`\s*;\s*/`)
)

// separatorError reports an entry of ROUTES that holds several routes
// separated by spaces (or newlines, from a YAML block) or by ';' instead
// of commas: "/a=stripe /b=github" would otherwise be read as one route
// whose source is "stripe /b=github". source is what follows the entry's
// first "=". A ';' after a source that names a delivery mode (;sync,
// ;async) or an option (;rate=20/s) is no separator.
func separatorError(entry, source string) error {
	if semicolonBeforeRoute.MatchString(source) {
		return fmt.Errorf("routes are separated by commas, not ';' (after a source, ';' names its delivery, ;sync or ;async, or an option, ;rate=…): %q (write %s)", entry, semicolonBeforeRoute.ReplaceAllString(entry, ",/"))
	}
	if loc := spaceBeforeRoute.FindStringIndex(source); loc != nil {
		what := "spaces"
		if ws := source[loc[0] : loc[1]-1]; strings.Contains(ws, "\n") {
			what = "newlines"
		} else if strings.Contains(ws, "\t") {
			what = "tabs"
		}
		return fmt.Errorf("routes are separated by commas, not %s: %q (write %s)", what, entry, spaceBeforeRoute.ReplaceAllString(entry, ",/"))
	}
	return nil
}

// reachesListener reports whether a request to u would arrive at a
// listener of this process on addr (LISTEN_ADDR, ADMIN_ADDR): the same port,
// and u's host a name or address of this machine that the listener
// serves. Only what is certain without a DNS lookup counts: a loopback or
// unspecified address, "localhost", or addr's own host written out. A
// pod's own IP or a Service name pointing back at the pod is not caught.
func reachesListener(u *url.URL, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	uport := u.Port()
	if uport == "" {
		uport = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	p, err1 := strconv.Atoi(port)
	up, err2 := strconv.Atoi(uport)
	if err1 != nil || err2 != nil || p == 0 || p != up {
		return false
	}
	uhost := u.Hostname()
	if host != "" && (strings.EqualFold(uhost, host) || sameIP(uhost, host)) {
		return true
	}
	local := isLoopback(uhost) || isUnspecified(uhost)
	switch {
	case host == "" || isUnspecified(host):
		// The listener serves every address of the machine.
		return local
	case isLoopback(host):
		// Listening on one loopback address: a name that may resolve to
		// it, or an unspecified address (which dials the local host).
		return isLocalhostName(uhost) || isUnspecified(uhost)
	}
	return false
}

func sameIP(a, b string) bool {
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	return ia != nil && ia.Equal(ib)
}

func isLocalhostName(h string) bool {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

func isLoopback(h string) bool {
	if isLocalhostName(h) {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func isUnspecified(h string) bool {
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

// listenError is what is wrong with addr, LISTEN_ADDR or ADMIN_ADDR, that
// only binding it would otherwise tell (exit status 1, after the store was
// opened): not host:port, or a port that is neither a number nor a
// service name. A host that does not resolve is left to the bind.
func listenError(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. :8080 or 127.0.0.1:8080)", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	return nil
}

// listenersClash reports whether LISTEN_ADDR and ADMIN_ADDR would take the
// same port: the same fixed port, on the same host or with either on every
// address of the machine (the second bind fails).
func listenersClash(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" || pa == "" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || isUnspecified(h) }
	return strings.EqualFold(ha, hb) || sameIP(ha, hb) || wildcard(ha) || wildcard(hb)
}

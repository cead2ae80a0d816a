package proxy

import (
	"errors"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// dropsCheckedHeader refuses (400 invalid-id) a webhook whose Connection
// header names a header the proxy checks (the event ID's, one auto
// recognised the sender by, or the signature's), and reports whether it
// did. A proxy removes the headers Connection names, as hop-by-hop, before
// forwarding (RFC 9110, section 7.6.1): the proxy would deduplicate and
// verify on a header the app never receives, and the app would see
// another request than the one checked.
func (h *Handler) dropsCheckedHeader(w http.ResponseWriter, r *http.Request, wh *webhook) (result, bool) {
	name := connectionNames(r.Header, wh.ext.Headers)
	if name == "" {
		return result{}, false
	}
	return h.answer(w, wh.id, http.StatusBadRequest, outcomeInvalidID, "the Connection header names "+name+", which would not reach the app", errHopByHopID), true
}

var errHopByHopID = errors.New("proxy: the Connection header names a header the event ID or signature is read from")

// connectionNames returns the first of checked (canonical names) that the
// Connection header lists, or "". Most requests have no Connection header,
// or only keep-alive or close: they cost a map lookup or a short scan.
func connectionNames(hdr http.Header, checked []string) string {
	for _, v := range hdr["Connection"] {
		for token := range strings.SplitSeq(v, ",") {
			token = textproto.TrimString(token)
			if token == "" || strings.EqualFold(token, "close") || strings.EqualFold(token, "keep-alive") {
				continue
			}
			if name := textproto.CanonicalMIMEHeaderKey(token); slices.Contains(checked, name) {
				return name
			}
		}
	}
	return ""
}

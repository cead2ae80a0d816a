package admin

import "net/http"

// MountConsole serves the operator console at /ui/ (admin/console). The
// console signs in with the token itself (a session cookie or the bearer
// header); without a token it does not exist, like the API.
func (s *Server) MountConsole(h http.Handler) {
	s.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token == "" {
			notFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

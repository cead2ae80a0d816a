package proxy_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// TestWebhookLogLevelFollowsTheApp: a sync webhook's line is at warn when
// the app failed it (a 5xx relayed, or no answer: the proxy's 502), at
// info when it answered otherwise, a 4xx included (the app refused that
// one event, it is not failing).
func TestWebhookLogLevelFollowsTheApp(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := newFixture(t, "/gh=github", proxy.Config{Logger: zap.New(core)})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		status, _ := strconv.Atoi(r.Header.Get("X-Answer"))
		w.WriteHeader(status)
	})
	for _, tc := range []struct {
		status int
		want   zapcore.Level
	}{
		{200, zapcore.InfoLevel},
		{302, zapcore.InfoLevel},
		{404, zapcore.InfoLevel},
		{500, zapcore.WarnLevel},
		{503, zapcore.WarnLevel},
	} {
		id := "level-" + strconv.Itoa(tc.status)
		resp := f.post(t, "/gh", map[string]string{"X-GitHub-Delivery": id, "X-Answer": strconv.Itoa(tc.status)}, "{}")
		wantAnswer(t, resp, tc.status, "forwarded")
		if e := awaitWebhookLine(t, logs, id); e.Level != tc.want {
			t.Errorf("the app answered %d: logged at %v, want %v", tc.status, e.Level, tc.want)
		}
	}

	f.up.Close()
	resp := f.post(t, "/gh", gh("level-gone"), "{}")
	wantAnswer(t, resp, http.StatusBadGateway, "upstream-error")
	if e := awaitWebhookLine(t, logs, "level-gone"); e.Level != zapcore.WarnLevel {
		t.Errorf("the app unreachable: logged at %v, want warn", e.Level)
	}
}

// awaitWebhookLine waits for the per-webhook line of event id, which is
// written once the handler returns, after the sender has its answer.
func awaitWebhookLine(t *testing.T, logs *observer.ObservedLogs, id string) observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(loadMargin)
	for {
		if lines := logs.FilterMessage("webhook").FilterField(zap.String("event_id", id)).All(); len(lines) > 0 {
			return lines[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line for event %s within %s", id, loadMargin)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

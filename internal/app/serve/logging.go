package serve

import (
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhook-dedup/webhook-dedup/config"
)

// logFlushInterval bounds how long a log line waits in the buffer.
const logFlushInterval = time.Second

// newLogger returns the process's logger and stop, which writes out the
// lines it still holds; call it before exiting.
//
// Lines are buffered and written out when 256 KiB have gathered, at least
// every logFlushInterval, and by stop: one write for a whole batch of
// webhooks instead of one system call in every request's path, which costs
// more than encoding the line. The price: a process killed outright
// (SIGKILL, out of memory) loses at most that last second of lines.
func newLogger(cfg *config.Config, w io.Writer) (log *zap.Logger, stop func() error, err error) {
	level, err := logLevel(cfg)
	if err != nil {
		return nil, nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if cfg.LogFormat == "console" {
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	// struct{ io.Writer } hides an *os.File's Sync: each flush would
	// otherwise fsync a log file to disk, and fail on a pipe.
	buffered := &zapcore.BufferedWriteSyncer{
		WS:            zapcore.AddSync(struct{ io.Writer }{w}),
		FlushInterval: logFlushInterval,
	}
	return zap.New(zapcore.NewCore(enc, buffered, level)), buffered.Stop, nil
}

// logLevel is LOG_LEVEL as zap reads it; Check runs it too, so that a
// level zap refuses fails the check as it would fail serving.
func logLevel(cfg *config.Config) (zapcore.Level, error) {
	level, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return level, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	return level, nil
}

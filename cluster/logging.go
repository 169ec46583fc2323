package cluster

// dragonboat logs through a process-wide logger factory that may be set only
// once (a second SetLoggerFactory panics). This file installs it exactly
// once and points it at a replaceable target: the logger and level of the
// most recently started Node. In a process running one node (the broker)
// that is simply the node's logger; tests that run several nodes in one
// process get every node's Raft lines on the last node's logger.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	dragonlogger "github.com/lni/dragonboat/v4/logger"
)

type raftLogTarget struct {
	logger *slog.Logger
	level  slog.Level
}

var (
	raftLogOnce    sync.Once
	currentRaftLog atomic.Pointer[raftLogTarget]
)

// installRaftLogging routes dragonboat's log lines at or above level to
// logger, for every NodeHost in the process.
func installRaftLogging(logger *slog.Logger, level slog.Level) {
	currentRaftLog.Store(&raftLogTarget{logger: logger, level: level})
	raftLogOnce.Do(func() {
		dragonlogger.SetLoggerFactory(func(packageName string) dragonlogger.ILogger {
			return &raftLogger{packageName: packageName}
		})
	})
}

func parseLogLevel(text string) (slog.Level, error) {
	switch strings.ToLower(text) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("want debug, info, warn or error, got %q", text)
}

// raftLogger adapts one dragonboat package's logger to slog. dragonboat's
// own per-package SetLevel is honoured on top of the target's level.
type raftLogger struct {
	packageName  string
	packageLevel atomic.Int64 // slog level; 0 (info) until SetLevel
	levelSet     atomic.Bool
}

var _ dragonlogger.ILogger = (*raftLogger)(nil)

func (l *raftLogger) SetLevel(level dragonlogger.LogLevel) {
	mapped := map[dragonlogger.LogLevel]slog.Level{
		dragonlogger.CRITICAL: slog.LevelError + 4,
		dragonlogger.ERROR:    slog.LevelError,
		dragonlogger.WARNING:  slog.LevelWarn,
		dragonlogger.INFO:     slog.LevelInfo,
		dragonlogger.DEBUG:    slog.LevelDebug,
	}[level]
	l.packageLevel.Store(int64(mapped))
	l.levelSet.Store(true)
}

func (l *raftLogger) log(level slog.Level, format string, args []any) {
	target := currentRaftLog.Load()
	if target == nil || level < target.level {
		return
	}
	if l.levelSet.Load() && level < slog.Level(l.packageLevel.Load()) {
		return
	}
	target.logger.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "raft", "package", l.packageName)
}

func (l *raftLogger) Debugf(format string, args ...any)   { l.log(slog.LevelDebug, format, args) }
func (l *raftLogger) Infof(format string, args ...any)    { l.log(slog.LevelInfo, format, args) }
func (l *raftLogger) Warningf(format string, args ...any) { l.log(slog.LevelWarn, format, args) }
func (l *raftLogger) Errorf(format string, args ...any)   { l.log(slog.LevelError, format, args) }

func (l *raftLogger) Panicf(format string, args ...any) {
	l.log(slog.LevelError, format, args)
	panic(fmt.Sprintf(format, args...))
}

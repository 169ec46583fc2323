package admin

// The sync-interval setting. PUT /api/settings/sync-interval takes one of:
//
//	250ms                 a duration with its unit ("0" turns background sync off)
//	"250ms"               the same, as a JSON string
//	{"interval_ms": 250}  a JSON object with a whole number of milliseconds
//
// Changing it needs the HTTP token even on loopback: a longer interval
// (or 0) weakens durability, and any local user can reach a loopback
// port. Without a token configured, the PUT is refused, unless the node
// has a users file: then a user with admin on the pattern "*" may too
// (credentials.go).
//
// The interval must be a whole number of milliseconds (every report gives it
// in milliseconds, and 0 there means off) and at most MaxSyncInterval.
// Anything else is answered 400 with what was wrong and what is accepted.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// MaxSyncInterval is the longest background sync interval the endpoint
// sets. The interval is a target for how long written records may wait for
// an fsync, so anything longer is almost surely a mistake in units.
const MaxSyncInterval = time.Hour

// errBadSyncInterval is wrapped by every parse failure.
var errBadSyncInterval = errors.New(`bad sync interval; send a duration such as 250ms ("0" turns background sync off) ` +
	`or {"interval_ms": 250}`)

// syncIntervalView is the body of GET and PUT answers.
type syncIntervalView struct {
	SyncIntervalMs         uint64  `json:"sync_interval_ms"` // 0 = background sync off
	PreviousSyncIntervalMs *uint64 `json:"previous_sync_interval_ms,omitempty"`
}

func (s *Server) handleGetSyncInterval(ctx *fasthttp.RequestCtx, _ string) {
	writeJSON(ctx, fasthttp.StatusOK, syncIntervalView{SyncIntervalMs: durationMs(s.node.NodeInfo().SyncInterval)})
}

// ErrDurabilityWriteNeedsToken is the refusal of a write that can weaken
// durability on a node without an HTTP token.
var ErrDurabilityWriteNeedsToken = errors.New("this setting can weaken durability (a longer interval, or 0, leaves " +
	"written data unsynced for longer), so changing it needs the HTTP token even on loopback, and this node has none: " +
	"start it with --http-token-file FILE (or $FIBRIL_HTTP_TOKEN) and send Authorization: Bearer <token>")

func (s *Server) handlePutSyncInterval(ctx *fasthttp.RequestCtx, _ string) {
	if s.options.Token == "" && s.users() == nil { // with either, maybeAdmit has checked the credential
		writeError(ctx, fasthttp.StatusForbidden, "%v", ErrDurabilityWriteNeedsToken)
		return
	}
	interval, err := parseSyncInterval(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "%v", err)
		return
	}
	previous := durationMs(s.node.NodeInfo().SyncInterval)
	if err := s.node.SetSyncInterval(interval); err != nil {
		status := fasthttp.StatusInternalServerError
		if errors.Is(err, ErrInvalidSetting) {
			status = fasthttp.StatusBadRequest
		}
		writeError(ctx, status, "setting the sync interval failed: %v", err)
		return
	}
	current := durationMs(s.node.NodeInfo().SyncInterval)
	s.logger.Info("admin: sync interval changed", "previous_ms", previous, "current_ms", current,
		"remote", ctx.RemoteAddr().String())
	writeJSON(ctx, fasthttp.StatusOK, syncIntervalView{SyncIntervalMs: current, PreviousSyncIntervalMs: &previous})
}

// parseSyncInterval reads a PUT body; see the file comment.
func parseSyncInterval(body []byte) (time.Duration, error) {
	text := bytes.TrimSpace(body)
	var interval time.Duration
	var err error
	switch {
	case len(text) == 0:
		return 0, fmt.Errorf("%w: the body is empty", errBadSyncInterval)
	case text[0] == '{':
		interval, err = parseSyncIntervalObject(text)
	case text[0] == '"':
		var quoted string
		if err = json.Unmarshal(text, &quoted); err != nil {
			return 0, fmt.Errorf("%w: %v", errBadSyncInterval, err)
		}
		interval, err = parseDuration(quoted)
	default:
		interval, err = parseDuration(string(text))
	}
	if err != nil {
		return 0, err
	}
	switch {
	case interval < 0:
		return 0, fmt.Errorf("%w: %v is negative", errBadSyncInterval, interval)
	case interval > MaxSyncInterval:
		return 0, fmt.Errorf("%w: %v is longer than the most, %v", errBadSyncInterval, interval, MaxSyncInterval)
	case interval%time.Millisecond != 0:
		return 0, fmt.Errorf("%w: %v is not a whole number of milliseconds", errBadSyncInterval, interval)
	}
	return interval, nil
}

// parseDuration reads a duration with its unit; a bare number other than
// 0 is refused, because its unit would be a guess.
func parseDuration(text string) (time.Duration, error) {
	if _, err := strconv.ParseFloat(text, 64); err == nil && text != "0" {
		return 0, fmt.Errorf("%w: %q has no unit", errBadSyncInterval, clip(text))
	}
	interval, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a duration", errBadSyncInterval, clip(text))
	}
	return interval, nil
}

// parseSyncIntervalObject reads {"interval_ms": N}: exactly that key, a
// whole non-negative number.
func parseSyncIntervalObject(text []byte) (time.Duration, error) {
	var object struct {
		IntervalMs *json.Number `json:"interval_ms"`
	}
	decoder := json.NewDecoder(bytes.NewReader(text))
	decoder.DisallowUnknownFields()
	decoder.UseNumber()
	if err := decoder.Decode(&object); err != nil {
		return 0, fmt.Errorf("%w: %v", errBadSyncInterval, err)
	}
	if decoder.More() {
		return 0, fmt.Errorf("%w: text after the JSON object", errBadSyncInterval)
	}
	if object.IntervalMs == nil {
		return 0, fmt.Errorf("%w: the object has no interval_ms", errBadSyncInterval)
	}
	milliseconds, err := strconv.ParseInt(object.IntervalMs.String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: interval_ms %s is not a whole number", errBadSyncInterval, clip(object.IntervalMs.String()))
	}
	if milliseconds < 0 || milliseconds > int64(MaxSyncInterval/time.Millisecond) {
		return 0, fmt.Errorf("%w: interval_ms %d is outside 0..%d", errBadSyncInterval, milliseconds,
			int64(MaxSyncInterval/time.Millisecond))
	}
	return time.Duration(milliseconds) * time.Millisecond, nil
}

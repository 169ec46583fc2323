package actors

// The table of client sessions the HTTP endpoint lists (GET
// /api/connections, the dashboard): one row per session, written by the
// session actor whenever it publishes its summary (at start, after hello,
// on subscribe and unsubscribe, when closing) and removed when it stops.
// Readers get a copy; nothing here touches a session's own state.

import (
	"crypto/tls"
	"sort"
	"sync"
	"time"
)

// ConnectionInfo is one client session as the endpoint shows it.
type ConnectionInfo struct {
	SessionID     string    // as hello-ok named it
	ClientName    string    // from the client's hello; empty before it
	RemoteAddress string    // the client's address
	ConnectedAt   time.Time // when the connection was accepted
	State         string    // "awaiting hello", "open" or "closing"
	Subscriptions int       // live subscriptions
	User          string    // the authenticated user (with a users file); empty otherwise
	TLS           string    // the TLS version of the connection ("TLS 1.3"), empty for plain TCP
}

type sessionTable struct {
	mu   sync.Mutex
	rows map[string]ConnectionInfo
}

// note records the session's current row.
func (t *sessionTable) note(s *session, state string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		t.rows = make(map[string]ConnectionInfo)
	}
	row, known := t.rows[s.id]
	if !known {
		row = ConnectionInfo{SessionID: s.id, ConnectedAt: s.core.now()}
		if s.conn != nil && s.conn.conn != nil {
			row.RemoteAddress = s.conn.conn.RemoteAddr().String()
			if tlsState, ok := tlsConnectionState(s.conn.conn); ok {
				row.TLS = tls.VersionName(tlsState.Version)
			}
		}
	}
	row.ClientName, row.State, row.Subscriptions = s.clientName, state, len(s.subscriptions)
	row.User = s.identity.User
	t.rows[s.id] = row
}

// forget removes a stopped session's row.
func (t *sessionTable) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.rows, id)
}

// Connections returns every live client session, oldest first.
func (b *Broker) Connections() []ConnectionInfo {
	table := &b.core.sessions
	table.mu.Lock()
	rows := make([]ConnectionInfo, 0, len(table.rows))
	for _, row := range table.rows {
		rows = append(rows, row)
	}
	table.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].ConnectedAt.Equal(rows[j].ConnectedAt) {
			return rows[i].ConnectedAt.Before(rows[j].ConnectedAt)
		}
		return rows[i].SessionID < rows[j].SessionID
	})
	return rows
}

package admin

// Credentials on a node with a users file (docs/security.md, "The HTTP
// endpoint"). Such a node tells apart who may read and change what over
// the client protocol, so the endpoint does too: every request needs a
// credential, except the static assets and /healthz (which then answers
// its status without naming queues). A credential is
//
//   - the HTTP token (Options.Token), which may do everything, as
//     "Authorization: Bearer <token>" or as the password of HTTP Basic;
//   - or a user's token, checked by the node's access.Store exactly as a
//     client's hello is: "Authorization: Bearer <user>:<token>", or HTTP
//     Basic with the user's name and token (so a browser can prompt for
//     them).
//
// A user's request must be allowed by the user's permissions:
//
//	GET  /api/queues/{name}, /queues/{name}     any permission on the queue (as get-queue-info)
//	POST /api/queues/{name}/peek                consume on the queue (it reads payloads)
//	POST /api/queues/{name}/mode, purge,
//	     delete, reopen, sync                   admin on the queue
//	everything else (/metrics, /debug/actors,
//	/api/queues, /api/connections, /api/stats,
//	/api/node, the settings, the cluster views,
//	the dashboard's pages)                      admin on the pattern "*" (node-wide)
//
// No credential is answered 401, a credential that does not verify 401,
// and one that verifies without the permission 403. The endpoint's
// actions then run on the node's own in-process session (every
// permission): the check above is what authorizes them.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/fibrilmq/fibril/access"
	"github.com/valyala/fasthttp"
)

// UsersNode is an optional capability of a Node: a node with a users
// file. When Users returns a Store, the endpoint asks every request for a
// credential as the file comment says.
type UsersNode interface {
	// Users returns the node's users, or nil when it has no users file.
	Users() *access.Store
}

// authenticateTimeout bounds the wait for a user's token to verify (an
// argon2id derivation, or a wait for a hash slot while others run).
const authenticateTimeout = 5 * time.Second

// need is what a request's credential must allow. The zero need is
// node-wide: admin on the pattern "*", which every request that shows or
// changes more than one queue needs.
type need struct {
	public    bool             // no credential needed (assets; /healthz without queue names)
	queue     string           // the queue, or "" for a node-wide request
	operation access.Operation // with a queue: this operation on it
	visible   bool             // with a queue: any permission on it will do
}

// nodeWide is the need of a node-wide request.
var nodeWide = need{}

// onQueue is the need of a request about one queue.
func onQueue(queue string, operation access.Operation) need {
	return need{queue: queue, operation: operation}
}

// visibleQueue is the need of a read of one queue: any permission on it.
func visibleQueue(queue string) need { return need{queue: queue, visible: true} }

// errNoCredential is the refusal of a request without a credential.
var errNoCredential = errors.New("this node has a users file, so this request needs a credential: the HTTP token " +
	"(Authorization: Bearer <token>) or a user's token (Authorization: Bearer <user>:<token>, or HTTP Basic " +
	"with the user's name and token)")

// errBadCredential is the refusal of a credential that does not verify.
var errBadCredential = errors.New("the credential does not verify: send the HTTP token or <user>:<token> of a user " +
	"in the users file")

// users returns the node's users, or nil.
func (s *Server) users() *access.Store {
	if node, ok := s.node.(UsersNode); ok {
		return node.Users()
	}
	return nil
}

// verified is who an Authorization header proves to be: the holder of
// the HTTP token, or a user.
type verified struct {
	operator bool // the HTTP token: every right
	identity access.Identity
}

// verify checks a request's credential against the HTTP token and the
// users: errNoCredential without one, errBadCredential when it does not
// verify.
func (s *Server) verify(ctx *fasthttp.RequestCtx, users *access.Store) (verified, error) {
	header := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if len(header) == 0 {
		return verified{}, errNoCredential
	}
	if s.options.Token != "" && tokenMatches(header, s.options.Token) {
		return verified{operator: true}, nil
	}
	credential, ok := userCredential(header)
	if !ok {
		return verified{}, errBadCredential
	}
	deadline, cancel := context.WithTimeout(context.Background(), authenticateTimeout)
	defer cancel()
	identity, err := users.AuthenticateCredential(deadline, credential)
	if err != nil {
		return verified{}, errBadCredential
	}
	return verified{identity: identity}, nil
}

// admitUser applies a users file's rule to a request and answers it when
// it is refused; it reports whether the handler may run.
func (s *Server) admitUser(ctx *fasthttp.RequestCtx, users *access.Store, needs need) bool {
	if needs.public {
		return true
	}
	who, err := s.verify(ctx, users)
	if err != nil {
		s.challenge(ctx, err)
		return false
	}
	if who.operator {
		return true
	}
	if err := permits(users, who.identity, needs); err != nil {
		writeError(ctx, fasthttp.StatusForbidden, "%v", err)
		return false
	}
	return true
}

// permits checks a verified user's permissions against a need.
func permits(users *access.Store, identity access.Identity, needs need) error {
	if needs.visible {
		if users.Visible(identity, needs.queue) {
			return nil
		}
		if err := users.Revoked(identity); err != nil {
			return err
		}
		return fmt.Errorf("access: user %q holds no permission on queue %q", identity.User, needs.queue)
	}
	if needs.queue == "" {
		if err := users.Check(identity, access.Admin, ""); err != nil {
			return fmt.Errorf("%w: this request shows or changes the whole node", err)
		}
		return nil
	}
	return users.Check(identity, needs.operation, needs.queue)
}

// userCredential reads "<user>:<token>" from an Authorization header:
// the bearer value as it is, or HTTP Basic's name and password joined.
func userCredential(header []byte) ([]byte, bool) {
	switch {
	case hasPrefixFold(header, "Bearer "):
		return bytes.TrimSpace(header[len("Bearer "):]), true
	case hasPrefixFold(header, "Basic "):
		decoded, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(header[len("Basic "):])))
		if err != nil || !bytes.Contains(decoded, []byte(":")) {
			return nil, false
		}
		return decoded, true
	}
	return nil, false
}

// challenge answers 401 with the scheme a client can answer: Basic for
// a browser (so it prompts), Bearer otherwise.
func (s *Server) challenge(ctx *fasthttp.RequestCtx, reason error) {
	challenge := `Bearer realm="fibril admin"`
	if wantsHTML(ctx) {
		challenge = `Basic realm="fibril admin", charset="UTF-8"`
	}
	ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, challenge)
	writeError(ctx, fasthttp.StatusUnauthorized, "%v", reason)
}

// healthNamesShown reports whether /healthz may name queues: always
// without a users file, and with one only for a credential that may read
// the whole node.
func (s *Server) healthNamesShown(ctx *fasthttp.RequestCtx) bool {
	users := s.users()
	if users == nil {
		return true
	}
	who, err := s.verify(ctx, users)
	return err == nil && (who.operator || permits(users, who.identity, nodeWide) == nil)
}

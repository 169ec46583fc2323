package admin

// Access rules, checked in this order before any handler runs:
//
//  1. Host: while bound to loopback, the Host header must name a loopback
//     address or "localhost" (any port). A browser page from another site
//     that rebinds its DNS name to 127.0.0.1 sends its own name and is
//     refused, so it cannot read the endpoint.
//  2. Credential: on a node with a users file (UsersNode), every request
//     but the static assets and /healthz's status needs the HTTP token or
//     a user's token whose permissions allow it (credentials.go).
//     Otherwise: with Options.Token set, a write needs it, and with
//     ProtectReads every request does. The token is accepted as
//     "Authorization: Bearer <token>" or as the password of HTTP Basic (any
//     user name), so a browser can prompt for it and then send it with the
//     dashboard's own requests. Without a users file and without a token
//     (a loopback node in development), requests pass, except the one
//     write that can weaken durability (settings.go).
//  3. Origin: a write whose Origin header names another site than the Host
//     it was sent to is refused, whatever the token, so a page elsewhere
//     cannot make a logged-in browser change settings.
//
// Requests without an Origin header (command-line tools) pass rule 3.

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"
)

// maybeAdmit applies the access rules and answers the request itself when
// they refuse it; it reports whether the handler may run. needs is what
// a user's credential must allow (rule 2, with a users file).
func (s *Server) maybeAdmit(ctx *fasthttp.RequestCtx, write bool, needs need) bool {
	if s.loopback && !hostIsLoopback(string(ctx.Host())) {
		writeError(ctx, fasthttp.StatusForbidden,
			"host %q is not a loopback address; this endpoint answers only requests addressed to loopback",
			clip(string(ctx.Host())))
		return false
	}
	if users := s.users(); users != nil {
		if needs.public && s.options.ProtectReads {
			needs = nodeWide
		}
		if !s.admitUser(ctx, users, needs) {
			return false
		}
	} else if s.options.Token != "" && (write || s.options.ProtectReads) &&
		!tokenMatches(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), s.options.Token) {
		s.challenge(ctx, errors.New("this request needs the admin token (Authorization: Bearer <token>)"))
		return false
	}
	if write && !sameOrigin(string(ctx.Request.Header.Peek(fasthttp.HeaderOrigin)), string(ctx.Host())) {
		writeError(ctx, fasthttp.StatusForbidden, "cross-origin write refused")
		return false
	}
	return true
}

// hostIsLoopback reports whether a Host header value (host, optional
// port) names loopback. An empty Host (HTTP/1.0) is let through: browsers
// always send one.
func hostIsLoopback(hostHeader string) bool {
	if hostHeader == "" {
		return true
	}
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	return isLoopbackHost(host)
}

// tokenMatches reports whether an Authorization header value carries
// token, as a bearer token or a Basic password. The comparison takes the
// same time wherever the first difference is.
func tokenMatches(header []byte, token string) bool {
	var presented []byte
	switch {
	case hasPrefixFold(header, "Bearer "):
		presented = bytes.TrimSpace(header[len("Bearer "):])
	case hasPrefixFold(header, "Basic "):
		decoded, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(header[len("Basic "):])))
		if err != nil {
			return false
		}
		_, password, ok := bytes.Cut(decoded, []byte(":"))
		if !ok {
			return false
		}
		presented = password
	default:
		return false
	}
	return subtle.ConstantTimeCompare(presented, []byte(token)) == 1
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// sameOrigin reports whether an Origin header value is absent or names the
// host the request was sent to.
func sameOrigin(origin, host string) bool {
	if origin == "" {
		return true
	}
	parsed, err := url.Parse(origin)
	if err != nil || parsed.Host == "" {
		return false // includes the opaque "null" origin
	}
	return strings.EqualFold(parsed.Host, host)
}

// clip shortens untrusted text quoted in an error message.
func clip(text string) string {
	const most = 100
	if len(text) > most {
		return text[:most] + "..."
	}
	return text
}

package main

// How failures are told. A failure is one line: the cause, said once, in
// words an operator reads without knowing the code (no "client:" or
// "actors:" package prefixes, no repeated "connection lost: connection
// lost"), and, where one helps, a hint in parentheses: a refused dial asks
// whether `fibril serve` runs at the address, a refused token names the
// flag and variable that set it, an unknown queue names the command that
// declares it. Typos of commands and flags get the nearest known name.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/tlsconfig"
	"github.com/fibrilmq/fibril/wire"
)

// packagePrefix matches the prefixes Go packages put on their errors.
var packagePrefix = regexp.MustCompile(`\b(client|actors|wire|cluster|admin|storage|log|queue|vfs|fibrilctl): `)

// describeError is the one line that reports err.
func describeError(err error, shared globals) string {
	cause := cleanCause(err)
	if hint := hintFor(err, shared); hint != "" {
		return cause + " (" + hint + ")"
	}
	return cause
}

// cleanCause is err's text without package prefixes, line breaks or
// repeated parts.
func cleanCause(err error) string {
	var refusal *client.ServerError
	if errors.As(err, &refusal) {
		// The node's own words, with its code by name; drop the SDK's wrapping.
		text := refusal.Code.String() + ": " + packagePrefix.ReplaceAllString(refusal.Message, "")
		if outer := err.Error(); strings.HasPrefix(outer, "message ") {
			if head, _, found := strings.Cut(outer, ": "); found {
				text = head + ": " + text // "message 7: unknown_queue: ..."
			}
		}
		return strings.Join(strings.Fields(text), " ")
	}
	text := packagePrefix.ReplaceAllString(err.Error(), "")
	text = strings.Join(strings.Fields(text), " ")
	parts := strings.Split(text, ": ")
	kept := parts[:0]
	for _, part := range parts {
		if len(kept) > 0 && kept[len(kept)-1] == part {
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, ": ")
}

// hintFor says what to try, when something helps.
func hintFor(err error, shared globals) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("is `fibril serve` running at %s? --server or $%s sets the address", shared.server, envServer)
	case isDNSFailure(err):
		return fmt.Sprintf("check the address in --server or $%s", envServer)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Sprintf("no answer in time from %s: is it a Fibril node's client address (not its HTTP one)?", shared.server)
	}
	if hint := tlsHint(err); hint != "" {
		return hint
	}
	switch client.CodeOf(err) {
	case wire.CodeUnauthorized:
		return fmt.Sprintf("pass the node's token, or <user>:<token> for a node with users, with --token-file, "+
			"--token or $%s", envToken)
	case wire.CodeForbidden:
		return "the user has no permission for this on this queue; the node's users file grants permissions"
	case wire.CodeResourceLimit, wire.CodeConnectionLimit:
		return "a limit of the node; see docs/security.md, Bounds"
	case wire.CodeUnknownQueue:
		return "declare it first: fibrilctl declare NAME"
	case wire.CodeModeConflict:
		return "a queue's mode is fixed at its first declare: name that mode, or pass --keep-mode"
	case wire.CodeUnavailable, wire.CodeNotOwner:
		return "retry in a moment: the queue's owner may be starting or being elected"
	case wire.CodeFenced:
		return "the queue hit a storage fault; see the node's log and GET /healthz"
	}
	var usage usageError
	if errors.As(err, &usage) {
		return "fibrilctl help lists commands; fibrilctl COMMAND -h a command's flags"
	}
	return ""
}

// tlsHint says which TLS flag to change for a TLS failure.
func tlsHint(err error) string {
	var refusal *client.ServerError
	switch {
	case errors.As(err, &refusal) && refusal.Message == tlsconfig.PlainTextRefusal:
		return fmt.Sprintf("connect with --tls-ca FILE ($%s), or --tls for a certificate from a public CA", envTLSCA)
	case errors.Is(err, tlsconfig.ErrNotTLS):
		return "the node's listener does not speak TLS: drop --tls and --tls-ca, or enable TLS on the node"
	case errors.Is(err, tlsconfig.ErrUntrustedCertificate):
		return fmt.Sprintf("pass the CA that signed the node's certificate with --tls-ca or $%s", envTLSCA)
	case errors.Is(err, tlsconfig.ErrCertificateName):
		return "dial a name the certificate carries, or set --tls-server-name"
	case errors.Is(err, tlsconfig.ErrCertificateRefused):
		return fmt.Sprintf("the node wants a client certificate: --tls-cert and --tls-key ($%s, $%s)", envTLSCert, envTLSKey)
	}
	return ""
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

func isDNSFailure(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}

// didYouMean returns " (did you mean X?)" for the known name nearest to
// typed, or "" when none is close.
func didYouMean(typed string, known []string) string {
	best, bestDistance := "", 3
	for _, name := range known {
		distance := editDistance(typed, name)
		if strings.HasPrefix(name, typed) && len(typed) >= 2 {
			distance = min(distance, 1)
		}
		if distance < bestDistance {
			best, bestDistance = name, distance
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// flagSuggestion suggests a known flag for flag.Parse's "flag provided but
// not defined: -name" error.
func flagSuggestion(flags *flag.FlagSet, err error) string {
	const undefined = "flag provided but not defined: "
	typed, ok := strings.CutPrefix(err.Error(), undefined)
	if !ok {
		return ""
	}
	var known []string
	flags.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	suggestion := didYouMean(strings.TrimLeft(typed, "-"), known)
	if suggestion == "" {
		return ""
	}
	name := strings.TrimSuffix(strings.TrimPrefix(suggestion, `; did you mean "`), `"?`)
	return fmt.Sprintf("; did you mean --%s?", name)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	previous := make([]int, len(b)+1)
	current := make([]int, len(b)+1)
	for j := range previous {
		previous[j] = j
	}
	for i := 1; i <= len(a); i++ {
		current[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			current[j] = min(previous[j]+1, current[j-1]+1, previous[j-1]+cost)
		}
		previous, current = current, previous
	}
	return previous[len(b)]
}

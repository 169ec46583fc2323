package main

// The security settings of `fibril serve` (docs/security.md): where
// tokens come from, the users file, TLS on the client listener, the
// bounds, SIGHUP reloads, and `fibril hash-token`.
//
// Tokens. A token is read, first match wins, from its file flag
// (--auth-token-file, --http-token-file: the first line), its value flag
// (--auth-token, --http-token: visible to every local user in ps, so it
// is accepted with a warning), or its environment variable
// (FIBRIL_AUTH_TOKEN, FIBRIL_HTTP_TOKEN). Giving both a file and a value
// is a usage error.
//
// Reload on SIGHUP: the users file (sessions of revoked users close), the
// client listener's certificate files, and in a cluster the node's tls
// files (Raft's dialing side and the peer links; see docs/security.md for
// what dragonboat reloads). A file that does not load is logged and the
// one in force stays.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/fibrilmq/fibril/access"
	"github.com/fibrilmq/fibril/actors"
	"github.com/fibrilmq/fibril/cluster"
	"github.com/fibrilmq/fibril/tlsconfig"
)

// Environment variables of the tokens.
const (
	envAuthToken = "FIBRIL_AUTH_TOKEN"
	envHTTPToken = "FIBRIL_HTTP_TOKEN"
)

// securityFlags are the flags of this file.
type securityFlags struct {
	authToken, authTokenFile string
	httpToken, httpTokenFile string
	usersFile                string
	tlsCert, tlsKey          string
	tlsClientCA              string
	tlsRequireClientCert     bool
	allowInsecureListen      bool
	limits                   actors.Limits
	given                    map[string]bool // flags set on the command line
}

func (f *securityFlags) register(set *flag.FlagSet) {
	set.StringVar(&f.authToken, "auth-token", "",
		"token every client must present (shown by ps: prefer --auth-token-file or $"+envAuthToken+")")
	set.StringVar(&f.authTokenFile, "auth-token-file", "", "file whose first line is the clients' shared token")
	set.StringVar(&f.httpToken, "http-token", "",
		"bearer token for HTTP writes (shown by ps: prefer --http-token-file or $"+envHTTPToken+")")
	set.StringVar(&f.httpTokenFile, "http-token-file", "", "file whose first line is the HTTP bearer token")
	set.StringVar(&f.usersFile, "users", "", "users file: each client authenticates as a user with per-queue permissions "+
		"(docs/security.md); excludes a shared token")
	set.StringVar(&f.tlsCert, "tls-cert", "", "client listener certificate (PEM); with --tls-key, the listener speaks TLS only")
	set.StringVar(&f.tlsKey, "tls-key", "", "private key of --tls-cert (PEM)")
	set.StringVar(&f.tlsClientCA, "tls-client-ca", "", "CAs that sign client certificates; a certificate a client presents must verify")
	set.BoolVar(&f.tlsRequireClientCert, "tls-require-client-cert", false, "refuse clients without a certificate (needs --tls-client-ca)")
	set.BoolVar(&f.allowInsecureListen, "allow-insecure-listen", false,
		"allow a non-loopback --listen without TLS and authentication, and in a cluster a non-loopback "+
			"peer_address or raft_address without tls files (logs a warning)")
	limits := &f.limits
	set.IntVar(&limits.MaxConnections, "max-connections", actors.DefaultMaxConnections, "client connections open at once")
	set.IntVar(&limits.MaxConnectionsPerAddress, "max-connections-per-address", actors.DefaultMaxConnectionsPerAddress,
		"client connections open at once from one IP address")
	set.Int64Var(&limits.MaxPublishBytesInFlight, "max-publish-bytes-in-flight", actors.DefaultMaxPublishBytesInFlight,
		"publish frame bytes one session may have unanswered (the node stops reading it beyond)")
	set.IntVar(&limits.MaxPublishesInFlight, "max-publishes-in-flight", actors.DefaultMaxPublishesInFlight,
		"publishes one session may have unanswered (at most 32768)")
	set.IntVar(&limits.MaxRequestsInFlight, "max-requests-in-flight", actors.DefaultMaxRequestsInFlight,
		"requests one session may have unanswered (the node stops reading it beyond)")
	set.IntVar(&limits.MaxSubscriptions, "max-subscriptions", actors.DefaultMaxSubscriptions, "subscriptions per session")
	set.IntVar(&limits.MaxQueues, "max-queues", actors.DefaultMaxQueues,
		"queues of the node (each holds files open: keep it below the file limit)")
	set.Int64Var(&limits.MaxOutboxBytes, "max-outbox-bytes", actors.DefaultMaxOutboxBytes,
		"bytes waiting for one client to read them before it is disconnected (keep prefetch x message size below it)")
	set.Int64Var(&limits.MaxOutboxBytesTotal, "max-outbox-bytes-total", actors.DefaultMaxOutboxBytesTotal,
		"bytes waiting for clients to read them, all together")
}

// clusterOwnedSecurityFlags are the flags the cluster config replaces.
var clusterOwnedSecurityFlags = map[string]string{
	"users":                   "nodes[i].users_file",
	"tls-cert":                "nodes[i].client_tls.cert_file",
	"tls-key":                 "nodes[i].client_tls.key_file",
	"tls-client-ca":           "nodes[i].client_tls.client_ca_file",
	"tls-require-client-cert": "nodes[i].client_tls.require_client_cert",
}

// check refuses combinations that cannot work.
func (f *securityFlags) check(set *flag.FlagSet) error {
	f.given = map[string]bool{}
	set.Visit(func(given *flag.Flag) { f.given[given.Name] = true })
	switch {
	case f.given["auth-token"] && f.given["auth-token-file"]:
		return errors.New("--auth-token and --auth-token-file exclude each other")
	case f.given["http-token"] && f.given["http-token-file"]:
		return errors.New("--http-token and --http-token-file exclude each other")
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case f.tlsCert == "" && (f.tlsClientCA != "" || f.tlsRequireClientCert):
		return errors.New("--tls-client-ca and --tls-require-client-cert need --tls-cert and --tls-key")
	case f.tlsRequireClientCert && f.tlsClientCA == "":
		return errors.New("--tls-require-client-cert needs --tls-client-ca, to verify the certificates")
	}
	return nil
}

// security is what serve built from the flags (and the cluster config):
// what the broker takes, and what SIGHUP reloads.
type security struct {
	authToken, httpToken string
	users                *access.Store
	tls                  *tlsconfig.Server
	node                 *cluster.Node // cluster mode: its tls files
}

// buildSecurity reads tokens, the users file and the TLS files and fills
// config. Warnings go to logger.
func buildSecurity(config *actors.Config, flags serveFlags, self *cluster.NodeConfig, logger *slog.Logger) (*security, error) {
	f := &flags.security
	built := &security{}
	var err error
	if built.authToken, err = f.token("auth-token", f.authToken, f.authTokenFile, envAuthToken, logger); err != nil {
		return nil, err
	}
	if built.httpToken, err = f.token("http-token", f.httpToken, f.httpTokenFile, envHTTPToken, logger); err != nil {
		return nil, err
	}
	usersFile, serverSettings := f.usersFile, tlsconfig.ServerSettings{CertFile: f.tlsCert, KeyFile: f.tlsKey,
		ClientCAFile: f.tlsClientCA, RequireClientCert: f.tlsRequireClientCert}
	if self != nil { // cluster mode: the config names them
		usersFile, serverSettings = self.UsersFile, tlsconfig.ServerSettings{}
		if self.ClientTLS != nil {
			serverSettings = self.ClientTLS.Settings()
		}
	}
	if usersFile != "" {
		if built.authToken != "" {
			return nil, errors.New("a users file and a shared auth token exclude each other: with users, every client " +
				"authenticates as a user (unset $" + envAuthToken + " or drop --auth-token)")
		}
		if built.users, err = access.LoadStore(usersFile, access.Options{}); err != nil {
			return nil, err
		}
		for _, warning := range built.users.Users().Warnings() {
			logger.Warn("users file", "file", usersFile, "warning", warning)
		}
		logger.Info("users file loaded", "file", usersFile, "users", built.users.Users().Len())
	}
	if serverSettings.CertFile != "" {
		if built.tls, err = tlsconfig.NewServer(serverSettings); err != nil {
			return nil, fmt.Errorf("client listener TLS: %w", err)
		}
		for _, warning := range built.tls.Warnings() {
			logger.Warn("client listener TLS", "warning", warning)
		}
	}
	config.AuthToken, config.Users, config.TLS = built.authToken, built.users, built.tls
	config.AllowInsecureListen, config.Limits = f.allowInsecureListen, f.limits
	return built, nil
}

// token resolves one token from its file, its flag or the environment.
func (f *securityFlags) token(name, value, file, env string, logger *slog.Logger) (string, error) {
	switch {
	case file != "":
		return readTokenFile(name, file, logger)
	case f.given[name]:
		logger.Warn("a token on the command line is visible to every local user (ps, /proc): use --"+name+
			"-file or $"+env, "flag", "--"+name)
		return value, nil
	}
	return os.Getenv(env), nil
}

// readTokenFile reads a token file's first line; a file others may read
// is a warning.
func readTokenFile(name, path string, logger *slog.Logger) (string, error) {
	file, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", name, err)
	}
	defer file.Close()
	if info, err := file.Stat(); err == nil && info.Mode().Perm()&0o077 != 0 {
		logger.Warn("a token file is readable by others than its owner: chmod 600", "file", path,
			"mode", fmt.Sprintf("%04o", info.Mode().Perm()))
	}
	data, err := io.ReadAll(io.LimitReader(file, access.MaxTokenBytes+2))
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", name, err)
	}
	token, _, _ := strings.Cut(string(data), "\n")
	token = strings.TrimSuffix(token, "\r")
	if token == "" {
		return "", fmt.Errorf("--%s-file %s: the first line is empty", name, path)
	}
	return token, nil
}

// reload is what SIGHUP does: each file set is read again; one that does
// not load is logged and the one in force stays.
func (s *security) reload(broker *actors.Broker, logger *slog.Logger) {
	logger.Info("SIGHUP: reloading the users file and certificates")
	if s.users != nil {
		if err := broker.ReloadUsers(); err != nil {
			logger.Error("users file not reloaded", "err", err)
		} else {
			logger.Info("users file reloaded", "users", s.users.Users().Len())
			for _, warning := range s.users.Users().Warnings() {
				logger.Warn("users file", "warning", warning)
			}
		}
	}
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			logger.Error("client listener certificates not reloaded", "err", err)
		} else {
			logger.Info("client listener certificates reloaded; new handshakes use them")
		}
	}
	if s.node != nil && s.node.PeerTLS() != nil {
		if err := s.node.ReloadTLS(); err != nil {
			logger.Error("node certificates not reloaded", "err", err)
		} else {
			logger.Info("node certificates reloaded; new Raft and peer handshakes use them")
		}
	}
}

// hashToken is `fibril hash-token [--generate]`.
func hashToken(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("fibril hash-token", flag.ContinueOnError)
	set.SetOutput(stderr)
	generate := set.Bool("generate", false, "make a new random token and print it with its hash")
	set.Usage = func() {
		fmt.Fprint(stderr, `usage:
  fibril hash-token --generate   print a new 256-bit token and its hash for the users file
  fibril hash-token < FILE       print the hash of the token on the first line of standard input
`)
	}
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if set.NArg() > 0 {
		fmt.Fprintln(stderr, "fibril hash-token: the token is read from standard input, never from the command line")
		return exitUsage
	}
	if err := access.HashTokenCommand(stdin, stdout, *generate); err != nil {
		fmt.Fprintf(stderr, "fibril hash-token: %v\n", err)
		return exitError
	}
	return exitOK
}

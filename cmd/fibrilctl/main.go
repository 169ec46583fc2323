// Command fibrilctl talks to a Fibril node: it declares, inspects, purges
// and deletes queues, publishes and consumes (numbered test traffic or
// your own bodies), peeks, requeues dead letters, shows the cluster and
// measures latency.
//
//	fibrilctl [global flags] COMMAND [ARGS] [flags]
//
// Global flags may appear anywhere on the line, before or after the
// command, and default to the environment:
//
//	--server ADDR          node client address(es), comma-separated ($FIBRIL_SERVER; 127.0.0.1:7420)
//	--token TOKEN          the node's client token, or <user>:<token> ($FIBRIL_TOKEN)
//	--token-file FILE      the same, from a file's first line ($FIBRIL_TOKEN_FILE)
//	--http ADDR            a node's HTTP endpoint, for `cluster` ($FIBRIL_HTTP; 127.0.0.1:7480)
//	--tls                  connect with TLS, trusting the system's roots ($FIBRIL_TLS=1)
//	--tls-ca FILE          connect with TLS, trusting the CAs in FILE ($FIBRIL_TLS_CA)
//	--tls-cert, --tls-key  a client certificate and its key ($FIBRIL_TLS_CERT, $FIBRIL_TLS_KEY)
//	--tls-server-name N    the name the node's certificate must carry ($FIBRIL_TLS_SERVER_NAME)
//
// `fibrilctl help` lists the commands; `fibrilctl COMMAND -h` a command's
// flags. Exit codes: 0 success, 1 the operation failed, 2 the command line
// is wrong. A failure prints one line on stderr: the cause, said once, and
// a hint where one helps. Commands register themselves from their own
// files (register), so adding one touches no other file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fibrilmq/fibril/client"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// Defaults of the global flags.
const (
	defaultServer = "127.0.0.1:7420"
	defaultHTTP   = "127.0.0.1:7480"
)

// Environment variables the global flags default to.
const (
	envServer        = "FIBRIL_SERVER"
	envToken         = "FIBRIL_TOKEN"
	envTokenFile     = "FIBRIL_TOKEN_FILE"
	envHTTP          = "FIBRIL_HTTP"
	envTLS           = "FIBRIL_TLS"
	envTLSCA         = "FIBRIL_TLS_CA"
	envTLSCert       = "FIBRIL_TLS_CERT"
	envTLSKey        = "FIBRIL_TLS_KEY"
	envTLSServerName = "FIBRIL_TLS_SERVER_NAME"
)

// command is one subcommand.
type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands holds every registered command by name.
var commands = map[string]command{}

// helpOrder is the order `fibrilctl help` lists commands in; commands
// not named here (added later in their own files) follow, by name.
var helpOrder = []string{"declare", "publish", "consume", "peek", "info", "queues", "mode", "purge", "delete",
	"requeue", "reopen", "cluster", "version", "bench"}

// register adds a command; each command's file calls it from init.
func register(c command) {
	if _, taken := commands[c.name]; taken {
		panic("fibrilctl: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func init() {
	register(command{"declare", "NAME [--buffered|--durable|--keep-mode] [queue options]",
		"create or check a queue; prints its effective mode, policy and any warnings", runDeclare})
	register(command{"publish", "NAME [--count N] [--body TEXT | --body-file FILE|- [--lines]] [--header K=V] [--id ID]",
		"publish messages; prints \"confirmed N\" (and any unknown outcomes)", runPublish})
	register(command{"consume", "NAME [--count N] [--ack|--nack|--no-ack] [--timeout D] [--json] [--quiet] [--check]",
		"receive and settle deliveries, one line (or JSON object) each", runConsume})
	register(command{"info", "NAME [--json]", "print a queue's state", runInfo})
	register(command{"queues", "[--prefix P] [--json]", "list the queues (of the whole cluster, from any node)", runQueues})
	register(command{"delete", "NAME", "delete a queue and its messages", runDelete})
	register(command{"purge", "NAME", "remove a queue's ready messages", runPurge})
	register(command{"bench", "[--case NAME] [--mode durable|buffered|both] [--size BYTES] [--duration D] [--json FILE] | replay FILE [--speed X]",
		"measure latency, rates and broker CPU; prints markdown tables", runBench})
}

// globals are the flags every command shares.
type globals struct {
	server, token, http string
	tokenFile           string
	tls                 tlsGlobals
}

// tlsGlobals are the TLS flags: TLS is on when any of them is set.
type tlsGlobals struct {
	on                                    bool
	caFile, certFile, keyFile, serverName string
}

// options returns the SDK's TLS options, nil without TLS.
func (g tlsGlobals) options() *client.TLSOptions {
	if !g.on && g.caFile == "" && g.certFile == "" && g.keyFile == "" && g.serverName == "" {
		return nil
	}
	return &client.TLSOptions{CAFile: g.caFile, CertFile: g.certFile, KeyFile: g.keyFile, ServerName: g.serverName}
}

type globalsKey struct{}

// globalFlags names the global flags and where each value goes.
var globalFlags = map[string]func(*globals, string){
	"server":          func(g *globals, v string) { g.server = v },
	"token":           func(g *globals, v string) { g.token = v },
	"token-file":      func(g *globals, v string) { g.tokenFile = v },
	"http":            func(g *globals, v string) { g.http = v },
	"tls-ca":          func(g *globals, v string) { g.tls.caFile = v },
	"tls-cert":        func(g *globals, v string) { g.tls.certFile = v },
	"tls-key":         func(g *globals, v string) { g.tls.keyFile = v },
	"tls-server-name": func(g *globals, v string) { g.tls.serverName = v },
}

// globalSwitches are the global flags that take no value (--tls, or
// --tls=false).
var globalSwitches = map[string]func(*globals, bool){
	"tls": func(g *globals, v bool) { g.tls.on = v },
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code. Interrupts
// (SIGINT, SIGTERM) end the command early.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	shared, rest, err := splitGlobals(args)
	if err != nil {
		fmt.Fprintf(stderr, "fibrilctl: %v\n", err)
		return exitUsage
	}
	if len(rest) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name := rest[0]
	if name == "help" || name == "-h" || name == "--help" {
		printUsage(stdout)
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "fibrilctl: unknown command %q%s (fibrilctl help lists them)\n", name,
			didYouMean(name, commandNames()))
		return exitUsage
	}
	ctx = context.WithValue(ctx, globalsKey{}, shared)
	return report(stderr, name, shared, c.run(ctx, rest[1:], stdout))
}

// splitGlobals takes the global flags out of args, wherever they are, and
// fills what is not given from the environment and the defaults.
func splitGlobals(args []string) (globals, []string, error) {
	shared := globals{server: os.Getenv(envServer), token: os.Getenv(envToken), http: os.Getenv(envHTTP),
		tokenFile: os.Getenv(envTokenFile), tls: tlsGlobals{caFile: os.Getenv(envTLSCA), certFile: os.Getenv(envTLSCert),
			keyFile: os.Getenv(envTLSKey), serverName: os.Getenv(envTLSServerName)}}
	if on, err := strconv.ParseBool(os.Getenv(envTLS)); err == nil {
		shared.tls.on = on
	}
	var rest []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if toggle, isSwitch := globalSwitches[name]; isSwitch && strings.HasPrefix(arg, "-") {
			on := true
			if hasValue {
				parsed, err := strconv.ParseBool(value)
				if err != nil {
					return shared, nil, fmt.Errorf("flag --%s takes true or false, got %q", name, value)
				}
				on = parsed
			}
			toggle(&shared, on)
			continue
		}
		set, global := globalFlags[name]
		if !global || !strings.HasPrefix(arg, "-") {
			rest = append(rest, arg)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return shared, nil, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		set(&shared, value)
	}
	if shared.server == "" {
		shared.server = defaultServer
	}
	if shared.http == "" {
		shared.http = defaultHTTP
	}
	if shared.tokenFile != "" {
		if shared.token != "" && os.Getenv(envToken) != shared.token {
			return shared, nil, errors.New("--token and --token-file exclude each other")
		}
		token, err := readTokenFile(shared.tokenFile)
		if err != nil {
			return shared, nil, err
		}
		shared.token = token
	}
	return shared, rest, nil
}

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fibrilctl [--server ADDR] [--token TOKEN|--token-file FILE] [--http ADDR] [TLS flags] COMMAND [ARGS] [flags]")
	listed := map[string]bool{}
	var order []string
	for _, name := range helpOrder {
		if _, ok := commands[name]; ok {
			order = append(order, name)
			listed[name] = true
		}
	}
	for _, name := range commandNames() {
		if !listed[name] {
			order = append(order, name)
		}
	}
	for _, name := range order {
		c := commands[name]
		fmt.Fprintf(w, "%s\n           %s\n", strings.TrimRight(fmt.Sprintf("  %-8s %s", c.name, c.args), " "), c.summary)
	}
	fmt.Fprintf(w, "global flags, anywhere on the line: --server ADDR (default $%s, else %s; comma-separated for several),\n"+
		"  --token TOKEN or <user>:<token> (default $%s), --token-file FILE (default $%s),\n"+
		"  --http ADDR (a node's HTTP endpoint, default $%s, else %s),\n"+
		"  TLS: --tls (system roots; $%s=1), --tls-ca FILE ($%s), --tls-cert FILE --tls-key FILE ($%s, $%s),\n"+
		"  --tls-server-name NAME ($%s)\n",
		envServer, defaultServer, envToken, envTokenFile, envHTTP, defaultHTTP, envTLS, envTLSCA, envTLSCert, envTLSKey,
		envTLSServerName)
	fmt.Fprintln(w, "fibrilctl COMMAND -h lists a command's flags")
}

// readTokenFile reads a token from a file's first line.
func readTokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token, _, _ := strings.Cut(string(data), "\n")
	if token = strings.TrimSuffix(token, "\r"); token == "" {
		return "", fmt.Errorf("--token-file %s: the first line is empty", path)
	}
	return token, nil
}

// usageError is a wrong command line (exit code 2).
type usageError struct{ message string }

func (e usageError) Error() string { return e.message }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// report prints err as one line (errors.go says how) and maps it to the
// exit code.
func report(stderr io.Writer, name string, shared globals, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "fibrilctl %s: %s\n", name, describeError(err, shared))
	var usage usageError
	if errors.As(err, &usage) {
		return exitUsage
	}
	return exitFailure
}

// connection holds the global flags a command uses.
type connection struct {
	server string
	token  string
	http   string
	tls    tlsGlobals
}

// dial connects to the node.
func (c *connection) dial(ctx context.Context, options client.Options) (*client.Client, error) {
	for _, address := range strings.Split(c.server, ",") {
		if address = strings.TrimSpace(address); address != "" {
			options.Addresses = append(options.Addresses, address)
		}
	}
	if len(options.Addresses) == 0 {
		return nil, usagef("--server names no address")
	}
	if c.token != "" {
		options.AuthToken = []byte(c.token)
	}
	options.ClientName = "fibrilctl"
	options.DialTimeout = 5 * time.Second
	options.TLS = c.tls.options()
	return client.Dial(ctx, options)
}

// newFlags makes a flag set for a command, with shared filled from the
// global flags; help goes to stdout. The global flags are registered too,
// so -h lists them and their values (already taken out of the line).
func newFlags(ctx context.Context, name string, shared *connection) *flag.FlagSet {
	given, _ := ctx.Value(globalsKey{}).(globals)
	shared.server, shared.token, shared.http, shared.tls = given.server, given.token, given.http, given.tls
	if shared.server == "" {
		shared.server, shared.http = defaultServer, defaultHTTP
	}
	flags := flag.NewFlagSet("fibrilctl "+name, flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.Usage = func() {}
	flags.StringVar(&shared.server, "server", shared.server, "node address(es), comma-separated (global; $"+envServer+")")
	flags.StringVar(&shared.token, "token", shared.token, "auth token, when the node needs one (global; $"+envToken+")")
	flags.StringVar(&shared.http, "http", shared.http, "a node's HTTP endpoint (global; $"+envHTTP+")")
	flags.BoolVar(&shared.tls.on, "tls", shared.tls.on, "connect with TLS, trusting the system's roots (global; $"+envTLS+")")
	flags.StringVar(&shared.tls.caFile, "tls-ca", shared.tls.caFile, "connect with TLS, trusting these CAs (global; $"+envTLSCA+")")
	flags.StringVar(&shared.tls.certFile, "tls-cert", shared.tls.certFile, "client certificate (global; $"+envTLSCert+")")
	flags.StringVar(&shared.tls.keyFile, "tls-key", shared.tls.keyFile, "client certificate key (global; $"+envTLSKey+")")
	flags.StringVar(&shared.tls.serverName, "tls-server-name", shared.tls.serverName,
		"the name the node's certificate must carry (global; $"+envTLSServerName+")")
	return flags
}

// parseArgs parses flags placed anywhere among the positional arguments
// and checks the number of positional ones. -h prints the flags to stdout.
// An unknown flag is refused with the nearest known one suggested.
func parseArgs(flags *flag.FlagSet, args []string, stdout io.Writer, positional ...string) ([]string, error) {
	var values []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stdout, "usage: %s %s\n", flags.Name(), strings.Join(positional, " "))
				flags.SetOutput(stdout)
				flags.PrintDefaults()
				return nil, err
			}
			return nil, usageError{err.Error() + flagSuggestion(flags, err)}
		}
		args = flags.Args()
		if len(args) == 0 {
			break
		}
		values = append(values, args[0])
		args = args[1:]
	}
	if len(values) != len(positional) {
		if len(positional) == 0 {
			return nil, usagef("takes no arguments, got %q", values)
		}
		return nil, usagef("wants %s, got %d argument(s)", strings.Join(positional, " "), len(values))
	}
	return values, nil
}

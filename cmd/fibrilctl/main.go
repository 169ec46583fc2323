// Command fibrilctl talks to a Fibril node: it declares, inspects, purges
// and deletes queues, and publishes and consumes numbered test traffic.
//
//	fibrilctl declare NAME [--buffered] [--max-deliveries N] [--dead-letter Q] [--ttl D] [--lease D]
//	fibrilctl publish NAME [--count N] [--size BYTES] [--rate PER_SEC] [--body TEXT]
//	fibrilctl consume NAME [--count N] [--ack|--nack|--no-ack] [--timeout D] [--quiet] [--check]
//	fibrilctl info NAME [--json]
//	fibrilctl queues [--json]
//	fibrilctl delete NAME
//	fibrilctl purge NAME
//	fibrilctl reopen NAME [--http ADDR] [--http-token TOKEN]
//
// Every command takes --server ADDR (default 127.0.0.1:7420; several
// addresses may be given, comma-separated) and --token TOKEN. Exit codes:
// 0 success, 1 the operation failed, 2 the command line is wrong. A
// failure prints one line on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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

const defaultServer = "127.0.0.1:7420"

// command is one subcommand. Adding one is an entry here and a file with
// its run function.
type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands = []command{
	{"declare", "NAME [--buffered] [--max-deliveries N] [--dead-letter Q] [--ttl D] [--lease D]",
		"create or check a queue; prints its effective mode and any warnings", runDeclare},
	{"publish", "NAME [--count N] [--size BYTES] [--rate PER_SEC] [--body TEXT]",
		"publish numbered messages; prints \"confirmed N\"", runPublish},
	{"consume", "NAME [--count N] [--ack|--nack|--no-ack] [--timeout D] [--quiet] [--check]",
		"receive and settle deliveries, one line each", runConsume},
	{"info", "NAME [--json]", "print a queue's state", runInfo},
	{"queues", "[--json]", "list every queue", runQueues},
	{"delete", "NAME", "delete a queue and its messages", runDelete},
	{"purge", "NAME", "remove a queue's ready messages", runPurge},
	{"reopen", "NAME [--http ADDR] [--http-token TOKEN]",
		"reopen a fenced or failed queue (runs its log's recovery) through the node's HTTP endpoint", runReopen},
	{"bench", "[--case NAME] [--mode durable|buffered|both] [--size BYTES] [--duration D] [--json FILE] | replay FILE [--speed X]", "measure latency, rates and broker CPU; prints markdown tables", runBench},
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
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" {
		printUsage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			return report(stderr, name, c.run(ctx, args[1:], stdout))
		}
	}
	fmt.Fprintf(stderr, "fibrilctl: unknown command %q (fibrilctl help lists them)\n", name)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fibrilctl COMMAND [ARGS] [--server ADDR]")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n           %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, "every command takes --server ADDR (default %s; comma-separated for several) and --token TOKEN\n", defaultServer)
}

// usageError is a wrong command line (exit code 2).
type usageError struct{ message string }

func (e usageError) Error() string { return e.message }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// report prints err as one line and maps it to the exit code.
func report(stderr io.Writer, name string, err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	line := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintf(stderr, "fibrilctl %s: %s\n", name, line)
	var usage usageError
	if errors.As(err, &usage) {
		return exitUsage
	}
	return exitFailure
}

// connection holds the flags every command shares.
type connection struct {
	server string
	token  string
}

func (c *connection) register(flags *flag.FlagSet) {
	flags.StringVar(&c.server, "server", defaultServer, "node address(es), comma-separated")
	flags.StringVar(&c.token, "token", "", "auth token, when the node needs one")
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
	return client.Dial(ctx, options)
}

// newFlags makes a flag set for a command; help goes to stdout.
func newFlags(name string, shared *connection) *flag.FlagSet {
	flags := flag.NewFlagSet("fibrilctl "+name, flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.Usage = func() {}
	shared.register(flags)
	return flags
}

// parseArgs parses flags placed anywhere among the positional arguments
// and checks the number of positional ones. -h prints the flags to stdout.
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
			return nil, usageError{err.Error()}
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

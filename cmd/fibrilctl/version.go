package main

// version prints fibrilctl's own version and, when the node at --server
// answers, the node's id and version; an unreachable node is reported on
// the second line without failing the command.

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

// cliVersion is fibrilctl's release; it matches the node's (actors.Version)
// at release time.
const cliVersion = "0.1.0"

func init() {
	register(command{"version", "", "print fibrilctl's version and the node's", runVersion})
}

func runVersion(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "version", &shared)
	if _, err := parseArgs(flags, args, stdout); err != nil {
		return err
	}
	line := fmt.Sprintf("fibrilctl %s (protocol %d, %s", cliVersion, wire.ProtocolVersion, runtime.Version())
	if revision := buildRevision(); revision != "" {
		line += ", commit " + revision
	}
	fmt.Fprintln(stdout, line+")")
	dialCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := shared.dial(dialCtx, client.Options{})
	if err != nil {
		fmt.Fprintf(stdout, "node at %s: not reachable: %s\n", shared.server, describeError(err, globals{server: shared.server}))
		return nil
	}
	defer c.Close()
	session, _ := c.Session()
	fmt.Fprintf(stdout, "node %s at %s: fibril %s\n", session.NodeID, session.Address, session.ServerVersion)
	return nil
}

// buildRevision is the VCS revision the binary was built from, if the
// build recorded one.
func buildRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, setting := range info.Settings {
		if setting.Key == "vcs.revision" && len(setting.Value) >= 12 {
			return setting.Value[:12]
		}
	}
	return ""
}

package main

// fibrilctl mode NAME durable|buffered: change an existing queue's mode
// (docs/durability.md, "Changing the mode of an existing queue").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fibrilmq/fibril/client"
	"github.com/fibrilmq/fibril/wire"
)

func init() {
	register(command{"mode", "NAME durable|buffered [--wait D]",
		"change an existing queue's mode; waits for the switch (or says what it waits for)", runMode})
}

// errModePending is returned when the change is recorded and did not
// apply within --wait; the command exits non-zero so scripts notice.
var errModePending = errors.New("the mode change is recorded but not applied yet")

func runMode(ctx context.Context, args []string, stdout io.Writer) error {
	var shared connection
	flags := newFlags(ctx, "mode", &shared)
	wait := flags.Duration("wait", 30*time.Second, "how long to wait for the switch")
	values, err := parseArgs(flags, args, stdout, "NAME", "MODE")
	if err != nil {
		return err
	}
	mode, err := wire.ParseMode(values[1])
	if err != nil || mode == wire.ModeUnset {
		return usageError{fmt.Sprintf("mode must be durable or buffered, not %q", values[1])}
	}
	c, err := shared.dial(ctx, client.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	waitCtx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	change, err := c.ChangeMode(waitCtx, values[0], mode)
	if err != nil {
		return err
	}
	switch change.Outcome {
	case wire.ModeUnchanged:
		fmt.Fprintf(stdout, "%s already runs %s (revision %d); nothing changed\n", values[0], change.Mode, change.Revision)
	case wire.ModeApplied:
		fmt.Fprintf(stdout, "%s runs %s from revision %d on: every confirm and delivery from now on stands on the %s boundary\n",
			values[0], change.Mode, change.Revision, boundaryName(change.Mode))
	default:
		fmt.Fprintf(stdout, "%s: revision %d to %s is recorded, not applied yet (it still runs %s): %s\n"+
			"run the same command again to wait for it\n", values[0], change.Revision, change.Mode, change.Applied, change.Message)
		return errModePending
	}
	return nil
}

func boundaryName(mode wire.Mode) string {
	if mode == wire.ModeBuffered {
		return "written"
	}
	return "durable"
}

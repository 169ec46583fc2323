// Command fibril runs a Fibril node.
//
//	fibril serve [flags]                      run a node (single node on embedded defaults)
//	fibril serve --config FILE --node ID      run node ID of the cluster FILE describes
//	fibril hash-token [--generate]            hash a token from stdin (or a new one) for the users file
//	fibril version                            print the version
//
// `fibril serve` with no flags keeps its data in ./fibril-data, serves
// clients on 127.0.0.1:7420 and keeps 127.0.0.1:7480 for the HTTP endpoint.
// In a cluster the config file names each node's data dir and addresses
// (docs/cluster.md); a config problem stops start-up with a message that
// names the field. SIGINT or SIGTERM shuts it down cleanly (stop
// accepting, answer or refuse what is in flight, flush and sync every log,
// close); a second signal exits at once. A failure the node cannot contain exits with status 70.
//
// Exit status: 0 after a clean shutdown, 1 when the node could not start or
// shut down cleanly, 2 for bad usage, 70 after a fatal failure.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

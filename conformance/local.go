package conformance

// Local nodes for the suite's four profiles, in process:
//
//	default  defaults of `fibril serve`: no token, 16 MiB body limit
//	auth     requires the token LocalToken
//	small    max_body_bytes of SmallMaxBodyBytes
//	timers   short session timers: TimersHelloTimeout, and keepalive checks
//	         every TimersKeepaliveInterval closing after TimersKeepaliveMissedMax
//	         unanswered pings
//
// Each runs on 127.0.0.1 with a free port and its own data directory.

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/fibrilmq/fibril/actors"
)

// LocalToken is the token the auth profile's local node requires.
const LocalToken = "conformance-secret"

// SmallMaxBodyBytes is the small profile's body limit; the suite's cases
// of that profile compute their sizes from it.
const SmallMaxBodyBytes = 65536

// The timers profile's settings; its cases wait on them.
const (
	TimersHelloTimeout       = 300 * time.Millisecond
	TimersKeepaliveInterval  = 500 * time.Millisecond
	TimersKeepaliveMissedMax = 2
)

// Local is the running set of local nodes. Restart may be called from
// any goroutine.
type Local struct {
	mu      sync.Mutex
	brokers map[string]*actors.Broker
	configs map[string]actors.Config
}

// StartLocal starts the four profiles' nodes with data under dir.
func StartLocal(dir string) (*Local, error) {
	local := &Local{brokers: map[string]*actors.Broker{}, configs: map[string]actors.Config{}}
	profiles := map[string]func(*actors.Config){
		"default": func(*actors.Config) {},
		"auth":    func(config *actors.Config) { config.AuthToken = LocalToken },
		"small":   func(config *actors.Config) { config.MaxBodyBytes = SmallMaxBodyBytes },
		"timers": func(config *actors.Config) {
			config.HelloTimeout = TimersHelloTimeout
			config.KeepaliveInterval, config.KeepaliveMissedMax = TimersKeepaliveInterval, TimersKeepaliveMissedMax
		},
	}
	for name, mutate := range profiles {
		config := actors.DefaultConfig()
		config.DataDir = filepath.Join(dir, name)
		config.ListenAddr = "127.0.0.1:0"
		config.NodeID = "conformance-" + name
		mutate(&config)
		broker, err := actors.Start(config)
		if err != nil {
			local.Close()
			return nil, fmt.Errorf("start the %s node: %w", name, err)
		}
		local.brokers[name] = broker
		config.ListenAddr = broker.Addr().String() // a restart listens where the runners connect
		local.configs[name] = config
	}
	return local, nil
}

// Target addresses the local nodes, and restarts them.
func (l *Local) Target() Target {
	l.mu.Lock()
	defer l.mu.Unlock()
	target := Target{Addresses: map[string]string{}, Token: LocalToken, Restart: l.Restart}
	for name, broker := range l.brokers {
		target.Addresses[name] = broker.Addr().String()
	}
	return target
}

// Restart stops the profile's node cleanly (Broker.Close) and starts it
// again on the same data directory and address; it returns once the node
// serves again.
func (l *Local) Restart(profile string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	broker, ok := l.brokers[profile]
	if !ok {
		return fmt.Errorf("no local node of profile %q", profile)
	}
	delete(l.brokers, profile)
	if err := broker.Close(); err != nil {
		return fmt.Errorf("stop the %s node: %w", profile, err)
	}
	restarted, err := actors.Start(l.configs[profile])
	if err != nil {
		return fmt.Errorf("start the %s node again: %w", profile, err)
	}
	l.brokers[profile] = restarted
	return nil
}

// Close stops every node.
func (l *Local) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, broker := range l.brokers {
		errs = append(errs, broker.Close())
	}
	return errors.Join(errs...)
}

package access

// Store is the live set of users: the parsed users file, replaced whole on
// Reload, and what authentication needs around it.
//
// Concurrency: a Store is shared by every connection. The users are an
// immutable *Users behind an atomic pointer (a reload swaps it; readers
// never lock). The verified-token cache is the one mutable structure,
// guarded by cacheLock. Token hashing runs on the caller's goroutine and
// at most maxHashing at once (hashSlots), so a burst of hellos costs
// bounded memory (19 MiB each by default) and leaves cores to the broker.
//
// Timing: Authenticate does the same work for an unknown user as for a
// known user with a wrong token: one HMAC of the credential, one wait for
// a hash slot, one argon2id derivation (against a dummy hash with the
// parameters most users have), one constant-time comparison.
//
// The cache: after a token verifies, the Store keeps an HMAC-SHA256 of it
// (under a key drawn at start and never stored) with the hash it verified
// against, so a reconnect costs microseconds instead of an argon2id
// derivation. A failed verification is never cached: every wrong guess
// pays the full cost. An entry counts only while the user's token_hash is
// unchanged, and a reload drops entries of changed or removed users.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// Identity is an authenticated user, as a session holds it after hello.
// Check looks the user up again on every call, so a reload that changes
// the user's permissions applies at the next request, and one that
// removes the user or changes its token revokes the identity.
type Identity struct {
	User string
	hash string // the token_hash the token was verified against
}

// Options tune a Store.
type Options struct {
	// MaxConcurrentHashes bounds the argon2id derivations that run at
	// once; the others wait (or give up when their context ends).
	// 0 means max(1, GOMAXPROCS/2).
	MaxConcurrentHashes int
}

// Store is the reloadable set of users. Its methods are safe for
// concurrent use.
type Store struct {
	path      string // the users file; empty for a Store made by NewStore
	users     atomic.Pointer[Users]
	hashSlots chan struct{}
	cacheKey  [32]byte
	derive    deriveFunc

	cacheLock sync.Mutex
	cache     map[string]cachedToken // by user name; Lock cacheLock
}

// cachedToken is a token that verified: its HMAC and the hash it matched.
type cachedToken struct {
	mac  [sha256.Size]byte
	hash string
}

// LoadStore reads the users file at path. It refuses a file that others
// than its owner may write (anyone who can write it can grant themselves
// everything); a file that others may read is a warning.
func LoadStore(path string, options Options) (*Store, error) {
	users, err := readUsersFile(path)
	if err != nil {
		return nil, err
	}
	store := NewStore(users, options)
	store.path = path
	return store, nil
}

// NewStore returns a Store over parsed users, without a file (Reload then
// fails). It is for tests and for callers that build Users themselves.
func NewStore(users *Users, options Options) *Store {
	slots := options.MaxConcurrentHashes
	if slots <= 0 {
		slots = max(1, runtime.GOMAXPROCS(0)/2)
	}
	store := &Store{hashSlots: make(chan struct{}, slots), derive: argon2idDerive, cache: map[string]cachedToken{}}
	randomBytes(store.cacheKey[:])
	store.users.Store(users)
	return store
}

// Users returns the users in force.
func (s *Store) Users() *Users { return s.users.Load() }

// Reload reads the users file again and, when it parses, puts it in force
// and returns it. A file that cannot be read or parsed leaves the users in
// force as they were, and the error says why (the server logs it on
// SIGHUP and keeps serving).
func (s *Store) Reload() (*Users, error) {
	if s.path == "" {
		return nil, fmt.Errorf("%w: this store has no users file to reload", ErrInvalidUsersFile)
	}
	users, err := readUsersFile(s.path)
	if err != nil {
		return nil, fmt.Errorf("%w (the %d users loaded before stay in force)", err, s.users.Load().Len())
	}
	s.users.Store(users)
	s.cacheLock.Lock()
	for name, entry := range s.cache {
		if current, ok := users.byName[name]; !ok || current.hash.text != entry.hash {
			delete(s.cache, name)
		}
	}
	s.cacheLock.Unlock()
	return users, nil
}

// readUsersFile reads and parses the users file, checking its mode.
func readUsersFile(path string) (*Users, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidUsersFile, err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidUsersFile, err)
	}
	if err := checkUsersFileMode(path, info.Mode()); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(file, MaxUsersFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidUsersFile, path, err)
	}
	users, err := ParseUsers(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if info.Mode().Perm()&0o004 != 0 {
		users.warnings = append(users.warnings, fmt.Sprintf("%s is readable by every local user (mode %04o); its token hashes are material for guessing: chmod o-r", path, info.Mode().Perm()))
	}
	return users, nil
}

func checkUsersFileMode(path string, mode fs.FileMode) error {
	if !mode.IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrInvalidUsersFile, path)
	}
	if mode.Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %04o), and whoever can write it can grant themselves anything: chmod go-w %s",
			ErrInvalidUsersFile, path, mode.Perm(), path)
	}
	return nil
}

// ParseCredential splits the auth token a client sends in hello into user
// and token: "<user>:<token>", split at the first ':' (user names never
// hold one). A credential without a user or a token is ErrUnauthorized,
// like a wrong token.
func ParseCredential(authToken []byte) (user, token string, err error) {
	user, token, found := strings.Cut(string(authToken), ":")
	if !found || user == "" || token == "" {
		return "", "", fmt.Errorf("%w (the hello auth token must be <user>:<token>)", ErrUnauthorized)
	}
	return user, token, nil
}

// AuthenticateCredential is ParseCredential then Authenticate.
func (s *Store) AuthenticateCredential(ctx context.Context, authToken []byte) (Identity, error) {
	user, token, err := ParseCredential(authToken)
	if err != nil {
		return Identity{}, err
	}
	return s.Authenticate(ctx, user, token)
}

// Authenticate checks a user's token. It returns ErrUnauthorized for an
// unknown user and for a wrong token alike, after the same work, and the
// context's error if ctx ends while it waits for a hash slot (the hello
// deadline). On a cache miss it runs an argon2id derivation on the
// calling goroutine: do not call it from an actor's Receive.
func (s *Store) Authenticate(ctx context.Context, name, token string) (Identity, error) {
	if len(name) > MaxUserNameBytes || len(token) > MaxTokenBytes {
		return Identity{}, ErrUnauthorized // no such user or token can exist; nothing to hide
	}
	users := s.users.Load()
	known, isKnown := users.byName[name]
	target := &users.dummy
	if isKnown {
		target = &known.hash
	}
	mac := s.tokenMAC(name, token)
	if s.cachedMatch(name, target.text, mac) && isKnown {
		return Identity{User: name, hash: known.hash.text}, nil
	}
	if err := s.acquireHashSlot(ctx); err != nil {
		return Identity{}, err
	}
	matched := target.matches(token, s.derive)
	<-s.hashSlots
	if !matched || !isKnown {
		return Identity{}, ErrUnauthorized
	}
	s.cacheLock.Lock()
	s.cache[name] = cachedToken{mac: mac, hash: known.hash.text}
	s.cacheLock.Unlock()
	return Identity{User: name, hash: known.hash.text}, nil
}

func (s *Store) acquireHashSlot(ctx context.Context) error {
	select {
	case s.hashSlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("access: authentication abandoned while waiting to verify the token: %w", ctx.Err())
	}
}

// tokenMAC is the cache's fingerprint of a credential.
func (s *Store) tokenMAC(name, token string) [sha256.Size]byte {
	mac := hmac.New(sha256.New, s.cacheKey[:])
	mac.Write([]byte(name))
	mac.Write([]byte{0})
	mac.Write([]byte(token))
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	return sum
}

// cachedMatch reports whether the cache holds this credential, verified
// against the hash text. The comparison is constant-time.
func (s *Store) cachedMatch(name, hashText string, mac [sha256.Size]byte) bool {
	s.cacheLock.Lock()
	entry, ok := s.cache[name]
	s.cacheLock.Unlock()
	return hmac.Equal(entry.mac[:], mac[:]) && ok && entry.hash == hashText
}

// Check returns nil when the identity's user may do operation on queue,
// a *DeniedError (ErrForbidden) when it may not, and ErrRevoked when a
// reload removed the user or changed its token since it authenticated.
// An empty queue asks about a node-wide operation (admin: settings),
// which only a permission on the pattern "*" grants. Check does not judge
// the queue name: the caller validates it first (invalid_name is the
// better answer). It does not allocate when it allows.
func (s *Store) Check(identity Identity, operation Operation, queue string) error {
	current, err := s.current(identity)
	if err != nil {
		return err
	}
	for index := range current.grants {
		grant := &current.grants[index]
		if grant.operations&operation == 0 {
			continue
		}
		if queue == "" && grant.pattern.matchesEverything() || queue != "" && grant.pattern.match(queue) {
			return nil
		}
	}
	return &DeniedError{User: identity.User, Operation: operation, Queue: queue}
}

// Visible reports whether the identity's user holds any permission on
// queue: get-queue-info is allowed, and list-queues shows the queue,
// exactly when it does.
func (s *Store) Visible(identity Identity, queue string) bool {
	current, err := s.current(identity)
	if err != nil {
		return false
	}
	for index := range current.grants {
		if current.grants[index].pattern.match(queue) {
			return true
		}
	}
	return false
}

// Revoked returns nil while the identity holds (its user is in the users
// in force with the token_hash it authenticated against), and an error
// wrapping ErrRevoked once a reload removed the user or changed its
// token. A node calls it for every live session after a reload, so a
// revoked user loses its connections at once, not at its next request.
func (s *Store) Revoked(identity Identity) error {
	_, err := s.current(identity)
	return err
}

// current returns the identity's user as the users in force have it.
func (s *Store) current(identity Identity) (*user, error) {
	current, ok := s.users.Load().byName[identity.User]
	if !ok {
		return nil, fmt.Errorf("%w: user %q is no longer in the users file", ErrRevoked, identity.User)
	}
	if current.hash.text != identity.hash {
		return nil, fmt.Errorf("%w: user %q has a new token", ErrRevoked, identity.User)
	}
	return current, nil
}

// randomBytes fills b from crypto/rand (which does not fail on supported
// platforms; a failure there is fatal to the process).
func randomBytes(b []byte) {
	_, _ = rand.Read(b)
}

package access

// Token hashes. A user's token is stored only as an argon2id hash in the
// PHC string format:
//
//	$argon2id$v=19$m=<memory KiB>,t=<iterations>,p=<parallelism>$<salt>$<key>
//
// salt and key are base64 without padding (standard alphabet). The
// parameters travel with each hash, so they can be raised later without a
// format change; a hash made with other parameters keeps verifying.
//
// Why argon2id and not bcrypt: argon2id is memory-hard (a guessing attack
// on a stolen users file needs memory as well as compute per guess, which
// blunts GPUs), its parameters are in the hash string, and it takes tokens
// of any length, where bcrypt silently reads only 72 bytes (or, in
// golang.org/x/crypto, refuses longer ones). Its cost is memory per
// verification (19 MiB by default), so the Store bounds the verifications
// that run at once and remembers tokens it has verified (store.go).
//
// Bounds on parsed parameters keep a hostile or mistaken users file from
// making one hello cost gigabytes: memory at most 256 MiB, at most 16
// iterations and 16 lanes, salt 8-64 bytes, key 16-64 bytes.

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id's cost parameters.
type Params struct {
	MemoryKiB   uint32 // memory per verification, in KiB
	Iterations  uint32 // passes over the memory
	Parallelism uint8  // lanes
}

// DefaultParams are the parameters HashToken uses: the OWASP minimum for
// argon2id (19 MiB, 2 passes, 1 lane), about 20-60 ms per verification on
// one core of a current server.
var DefaultParams = Params{MemoryKiB: 19 << 10, Iterations: 2, Parallelism: 1}

// Bounds of a parsed hash.
const (
	maxMemoryKiB    = 256 << 10
	maxIterations   = 16
	maxParallelism  = 16
	minSaltBytes    = 8
	maxSaltBytes    = 64
	minKeyBytes     = 16
	maxKeyBytes     = 64
	saltBytes       = 16
	keyBytes        = 32
	argon2Version   = 19
	recommendedCost = 35840 // MemoryKiB x Iterations below this is weaker than OWASP's argon2id settings
)

// Token bounds.
const (
	// MinTokenBytes is the shortest token HashToken accepts. A token is a
	// machine credential: GenerateToken makes 43-character ones.
	MinTokenBytes = 16
	// MaxTokenBytes is the longest token: HashToken refuses longer ones
	// and Authenticate refuses them without hashing.
	MaxTokenBytes = 1024
)

// tokenHash is a parsed argon2id hash.
type tokenHash struct {
	params Params
	salt   []byte
	key    []byte
	text   string // the PHC string it was parsed from
}

// HashToken returns the argon2id hash of token with DefaultParams and a
// fresh random salt, in the PHC string format the users file holds.
func HashToken(token string) (string, error) {
	return HashTokenWithParams(token, DefaultParams)
}

// HashTokenWithParams is HashToken with chosen parameters (for example
// cheaper ones in tests; the users file loader warns about weak ones).
func HashTokenWithParams(token string, params Params) (string, error) {
	if len(token) < MinTokenBytes || len(token) > MaxTokenBytes {
		return "", fmt.Errorf("%w: %d bytes; a token is %d to %d bytes (GenerateToken makes one)",
			ErrInvalidToken, len(token), MinTokenBytes, MaxTokenBytes)
	}
	if err := params.check(); err != nil {
		return "", err
	}
	salt := make([]byte, saltBytes)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("access: reading random salt: %w", err)
	}
	key := argon2.IDKey([]byte(token), salt, params.Iterations, params.MemoryKiB, params.Parallelism, keyBytes)
	return formatHash(params, salt, key), nil
}

// GenerateToken returns a new random token: 32 bytes from crypto/rand,
// base64url without padding (43 characters).
func GenerateToken() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("access: reading random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// ReadToken reads a token from the first line of r (a pipe or a file, so
// it never appears on a command line), without its line ending. It is
// what `fibril hash-token` calls before HashToken.
func ReadToken(r io.Reader) (string, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, MaxTokenBytes+2), MaxTokenBytes+2).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("access: reading the token: %w", err)
	}
	token := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if len(token) < MinTokenBytes || len(token) > MaxTokenBytes {
		return "", fmt.Errorf("%w: the first line holds %d bytes; a token is %d to %d bytes",
			ErrInvalidToken, len(token), MinTokenBytes, MaxTokenBytes)
	}
	return token, nil
}

// check keeps parameters within the bounds a verification may cost.
func (p Params) check() error {
	switch {
	case p.Parallelism < 1 || p.Parallelism > maxParallelism:
		return fmt.Errorf("%w: parallelism %d, want 1 to %d", ErrInvalidHash, p.Parallelism, maxParallelism)
	case p.Iterations < 1 || p.Iterations > maxIterations:
		return fmt.Errorf("%w: iterations %d, want 1 to %d", ErrInvalidHash, p.Iterations, maxIterations)
	case p.MemoryKiB < 8*uint32(p.Parallelism) || p.MemoryKiB > maxMemoryKiB:
		return fmt.Errorf("%w: memory %d KiB, want %d to %d", ErrInvalidHash, p.MemoryKiB, 8*uint32(p.Parallelism), maxMemoryKiB)
	}
	return nil
}

// weak reports whether p costs less than OWASP's argon2id settings.
func (p Params) weak() bool {
	return uint64(p.MemoryKiB)*uint64(p.Iterations) < recommendedCost
}

func formatHash(params Params, salt, key []byte) string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2Version,
		params.MemoryKiB, params.Iterations, params.Parallelism,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// parseHash parses a PHC argon2id string strictly: one spelling per hash
// (no padding, no extra fields, parameters in m, t, p order, decimal
// without leading zeros), so that formatHash(parseHash(s)) == s.
func parseHash(text string) (tokenHash, error) {
	fields := strings.Split(text, "$")
	if len(fields) != 6 || fields[0] != "" {
		return tokenHash{}, fmt.Errorf("%w: want $argon2id$v=19$m=...,t=...,p=...$salt$key", ErrInvalidHash)
	}
	if fields[1] != "argon2id" {
		return tokenHash{}, fmt.Errorf("%w: algorithm %q; only argon2id is supported", ErrInvalidHash, clip(fields[1]))
	}
	if fields[2] != "v="+strconv.Itoa(argon2Version) {
		return tokenHash{}, fmt.Errorf("%w: version %q; want v=%d", ErrInvalidHash, clip(fields[2]), argon2Version)
	}
	params, err := parseParams(fields[3])
	if err != nil {
		return tokenHash{}, err
	}
	salt, err := decodeBase64(fields[4], "salt", minSaltBytes, maxSaltBytes)
	if err != nil {
		return tokenHash{}, err
	}
	key, err := decodeBase64(fields[5], "key", minKeyBytes, maxKeyBytes)
	if err != nil {
		return tokenHash{}, err
	}
	return tokenHash{params: params, salt: salt, key: key, text: text}, nil
}

func parseParams(field string) (Params, error) {
	parts := strings.Split(field, ",")
	if len(parts) != 3 {
		return Params{}, fmt.Errorf("%w: parameters %q; want m=...,t=...,p=...", ErrInvalidHash, clip(field))
	}
	var values [3]uint32
	for index, name := range []string{"m", "t", "p"} {
		digits, ok := strings.CutPrefix(parts[index], name+"=")
		value, err := strconv.ParseUint(digits, 10, 32)
		if !ok || err != nil || strconv.FormatUint(value, 10) != digits {
			return Params{}, fmt.Errorf("%w: parameter %q; want %s=<decimal>", ErrInvalidHash, clip(parts[index]), name)
		}
		values[index] = uint32(value)
	}
	if values[2] > maxParallelism {
		return Params{}, fmt.Errorf("%w: parallelism %d, want 1 to %d", ErrInvalidHash, values[2], maxParallelism)
	}
	params := Params{MemoryKiB: values[0], Iterations: values[1], Parallelism: uint8(values[2])}
	return params, params.check()
}

func decodeBase64(field, name string, minBytes, maxBytes int) ([]byte, error) {
	if len(field) > base64.RawStdEncoding.EncodedLen(maxBytes) {
		return nil, fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidHash, name, maxBytes)
	}
	raw, err := base64.RawStdEncoding.Strict().DecodeString(field)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not base64 without padding", ErrInvalidHash, name)
	}
	if len(raw) < minBytes || len(raw) > maxBytes {
		return nil, fmt.Errorf("%w: %s of %d bytes, want %d to %d", ErrInvalidHash, name, len(raw), minBytes, maxBytes)
	}
	return raw, nil
}

// matches derives the key of token under h's salt and parameters and
// compares it with h's key in constant time. It always does the full
// derivation, whatever token holds.
func (h *tokenHash) matches(token string, derive deriveFunc) bool {
	key := derive([]byte(token), h.salt, h.params, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(key, h.key) == 1
}

// deriveFunc is argon2id's key derivation; tests wrap it to see each call.
type deriveFunc func(token, salt []byte, params Params, keyLen uint32) []byte

func argon2idDerive(token, salt []byte, params Params, keyLen uint32) []byte {
	return argon2.IDKey(token, salt, params.Iterations, params.MemoryKiB, params.Parallelism, keyLen)
}

// clip shortens a value for an error message.
func clip(value string) string {
	if len(value) > 40 {
		return value[:40] + "..."
	}
	return value
}

// HashTokenCommand is `fibril hash-token`: with generate it makes a new
// token, otherwise it reads one from the first line of in (never from the
// command line, where ps would show it); it writes the token (when it
// made one) and its hash for the users file to out:
//
//	token       <the new token: give it to the application>
//	token_hash  $argon2id$v=19$m=19456,t=2,p=1$...
func HashTokenCommand(in io.Reader, out io.Writer, generate bool) error {
	var token string
	var err error
	if generate {
		token, err = GenerateToken()
	} else {
		token, err = ReadToken(in)
	}
	if err != nil {
		return err
	}
	hash, err := HashToken(token)
	if err != nil {
		return err
	}
	if generate {
		if _, err := fmt.Fprintf(out, "token       %s\n", token); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(out, "token_hash  %s\n", hash)
	return err
}

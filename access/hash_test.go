package access

import (
	"errors"
	"strings"
	"testing"
)

// cheapParams keep tests fast; they are weak on purpose.
var cheapParams = Params{MemoryKiB: 64, Iterations: 1, Parallelism: 1}

func mustHash(t testing.TB, token string) string {
	t.Helper()
	hash, err := HashTokenWithParams(token, cheapParams)
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

func TestHashTokenVerifiesOnlyItsToken(t *testing.T) {
	token := "correct-horse-battery-staple"
	text, err := HashToken(token) // the default parameters, once
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q", text)
	}
	hash, err := parseHash(text)
	if err != nil {
		t.Fatal(err)
	}
	if formatHash(hash.params, hash.salt, hash.key) != text || hash.params != DefaultParams {
		t.Fatalf("hash does not parse back to itself: %+v", hash)
	}
	if !hash.matches(token, argon2idDerive) {
		t.Fatal("the token does not match its own hash")
	}
	for _, wrong := range []string{"", "correct-horse-battery-stapl", "correct-horse-battery-staple ", "Correct-horse-battery-staple"} {
		if hash.matches(wrong, argon2idDerive) {
			t.Fatalf("%q matches the hash of %q", wrong, token)
		}
	}
	again, _ := HashToken(token)
	if again == text {
		t.Fatal("two hashes of one token are equal: the salt is not fresh")
	}
}

func TestHashTokenRefusesShortAndLongTokens(t *testing.T) {
	for _, token := range []string{"", "short", strings.Repeat("x", MinTokenBytes-1), strings.Repeat("x", MaxTokenBytes+1)} {
		if _, err := HashTokenWithParams(token, cheapParams); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%d bytes: %v", len(token), err)
		}
	}
	if _, err := HashTokenWithParams(strings.Repeat("x", MinTokenBytes), Params{MemoryKiB: 1 << 30, Iterations: 1, Parallelism: 1}); !errors.Is(err, ErrInvalidHash) {
		t.Errorf("1 TiB of memory accepted: %v", err)
	}
}

func TestParseHashRefusesAnythingButStrictArgon2id(t *testing.T) {
	good := mustHash(t, "a-token-of-16-bytes")
	if _, err := parseHash(good); err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(good, "$")
	salt, key := fields[4], fields[5]
	cases := map[string]string{
		"empty":               "",
		"bcrypt":              "$2b$10$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyzABCDE",
		"argon2i":             "$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"version 16":          "$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"no leading dollar":   "argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"extra field":         good + "$x",
		"params out of order": "$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key,
		"leading zero":        "$argon2id$v=19$m=064,t=1,p=1$" + salt + "$" + key,
		"memory 1 GiB":        "$argon2id$v=19$m=1048576,t=1,p=1$" + salt + "$" + key,
		"memory below 8p":     "$argon2id$v=19$m=8,t=1,p=2$" + salt + "$" + key,
		"100 iterations":      "$argon2id$v=19$m=64,t=100,p=1$" + salt + "$" + key,
		"0 iterations":        "$argon2id$v=19$m=64,t=0,p=1$" + salt + "$" + key,
		"0 lanes":             "$argon2id$v=19$m=64,t=1,p=0$" + salt + "$" + key,
		"256 lanes":           "$argon2id$v=19$m=4096,t=1,p=256$" + salt + "$" + key,
		"negative":            "$argon2id$v=19$m=-64,t=1,p=1$" + salt + "$" + key,
		"padded salt":         "$argon2id$v=19$m=64,t=1,p=1$" + salt + "==$" + key,
		"short salt":          "$argon2id$v=19$m=64,t=1,p=1$AAAA$" + key,
		"short key":           "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$AAAAAAAA",
		"huge key":            "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + strings.Repeat("A", 200),
		"not base64":          "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$!!!!!!!!!!!!!!!!!!!!!!",
	}
	for name, text := range cases {
		if _, err := parseHash(text); !errors.Is(err, ErrInvalidHash) {
			t.Errorf("%s: %q parsed (%v)", name, text, err)
		}
	}
}

func TestGenerateAndReadToken(t *testing.T) {
	first, err := GenerateToken()
	if err != nil || len(first) != 43 || strings.ContainsAny(first, ":=+/\n") {
		t.Fatalf("GenerateToken = %q, %v", first, err)
	}
	if second, _ := GenerateToken(); second == first {
		t.Fatal("two generated tokens are equal")
	}
	for input, want := range map[string]string{
		first + "\n":            first,
		first + "\r\n":          first,
		first:                   first,
		first + "\nsecond line": first,
	} {
		if got, err := ReadToken(strings.NewReader(input)); err != nil || got != want {
			t.Errorf("ReadToken(%q) = %q, %v", input, got, err)
		}
	}
	for _, input := range []string{"", "\n", "short\n", strings.Repeat("x", MaxTokenBytes+1) + "\n"} {
		if _, err := ReadToken(strings.NewReader(input)); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("ReadToken of %d bytes: %v", len(input), err)
		}
	}
}

func TestHashTokenCommand(t *testing.T) {
	var out strings.Builder
	if err := HashTokenCommand(strings.NewReader("a-token-read-from-stdin\n"), &out, false); err != nil {
		t.Fatal(err)
	}
	hashText, found := strings.CutPrefix(strings.TrimSuffix(out.String(), "\n"), "token_hash  ")
	hash, err := parseHash(hashText)
	if !found || err != nil || !hash.matches("a-token-read-from-stdin", argon2idDerive) || strings.Contains(out.String(), "a-token-read") {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	out.Reset()
	if err := HashTokenCommand(strings.NewReader(""), &out, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	token, tokenFound := strings.CutPrefix(lines[0], "token       ")
	hashText, hashFound := strings.CutPrefix(lines[len(lines)-1], "token_hash  ")
	hash, err = parseHash(hashText)
	if len(lines) != 2 || !tokenFound || !hashFound || err != nil || !hash.matches(token, argon2idDerive) {
		t.Fatalf("generated output %q: %v", out.String(), err)
	}
	if err := HashTokenCommand(strings.NewReader("short\n"), &out, false); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a short token: %v", err)
	}
}

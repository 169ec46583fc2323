package access

// The users file (docs/security.md has the user-facing description):
//
//	{
//	  "version": 1,
//	  "users": [
//	    {
//	      "name": "billing",
//	      "token_hash": "$argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>",
//	      "permissions": [
//	        {"queues": "orders.*", "allow": ["declare", "publish", "consume"]},
//	        {"queues": "billing", "allow": ["admin"]}
//	      ]
//	    }
//	  ]
//	}
//
// Rules: version is 1; unknown fields are refused (a misspelt
// "permisions" would otherwise grant nothing, silently); a user name is 1
// to 64 bytes of letters, digits, '.', '_' and '-', not starting with
// '.', and unique; token_hash is an argon2id PHC string (hash.go); each
// permission names a pattern (permission.go) and at least one operation.
// Every problem is reported, each naming its field. ParseUsers is pure: it
// reads no file and no clock.
//
// Invariant: a *Users is never modified after ParseUsers returns it, so
// any number of goroutines may read it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// UsersFileVersion is the only version of the users file format.
const UsersFileVersion = 1

// Bounds of a users file.
const (
	// MaxUsersFileBytes bounds the file read from disk.
	MaxUsersFileBytes = 4 << 20
	// MaxUserNameBytes bounds a user name.
	MaxUserNameBytes = 64
	maxUsers         = 10000
	maxGrantsPerUser = 1000
)

// usersFile is the JSON document.
type usersFile struct {
	Version *int       `json:"version"`
	Users   []userJSON `json:"users"`
}

type userJSON struct {
	Name        string           `json:"name"`
	TokenHash   string           `json:"token_hash"`
	Permissions []permissionJSON `json:"permissions"`
}

type permissionJSON struct {
	Queues string   `json:"queues"`
	Allow  []string `json:"allow"`
}

// Users is a parsed users file.
type Users struct {
	byName   map[string]*user
	dummy    tokenHash // verified against for an unknown user, so it costs what a wrong token costs
	warnings []string
}

// user is one user of a users file.
type user struct {
	name   string
	hash   tokenHash
	grants []grant
}

// Len returns the number of users.
func (u *Users) Len() int { return len(u.byName) }

// Names returns the user names, sorted.
func (u *Users) Names() []string {
	names := make([]string, 0, len(u.byName))
	for name := range u.byName {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Warnings returns what is allowed but unwise in the file (weak hash
// parameters, no users, a loosely protected file), for the log.
func (u *Users) Warnings() []string { return slices.Clone(u.warnings) }

// ParseUsers parses and checks a users file. The error, when not nil,
// joins one *UsersFileError per problem.
func ParseUsers(data []byte) (*Users, error) {
	if len(data) > MaxUsersFileBytes {
		return nil, &UsersFileError{Field: "(document)", Problem: fmt.Sprintf("%d bytes; the limit is %d", len(data), MaxUsersFileBytes)}
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	var file usersFile
	if err := decoder.Decode(&file); err != nil {
		return nil, decodeError(err)
	}
	if decoder.More() {
		return nil, &UsersFileError{Field: "(document)", Problem: "trailing data after the JSON object"}
	}
	var problems []error
	report := func(field, format string, args ...any) {
		problems = append(problems, &UsersFileError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	switch {
	case file.Version == nil:
		report("version", "required (the format version, %d)", UsersFileVersion)
	case *file.Version != UsersFileVersion:
		report("version", "%d is not a known version; want %d", *file.Version, UsersFileVersion)
	}
	if len(file.Users) > maxUsers {
		report("users", "%d users; the limit is %d", len(file.Users), maxUsers)
		return nil, errors.Join(problems...)
	}
	users := &Users{byName: make(map[string]*user, len(file.Users))}
	for index := range file.Users {
		users.add(&file.Users[index], fmt.Sprintf("users[%d]", index), report)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	users.finish()
	return users, nil
}

// add checks one user and adds it; problems go to report.
func (u *Users) add(entry *userJSON, field string, report reportFunc) {
	nameOK := checkUserName(entry.Name, field+".name", report)
	if _, taken := u.byName[entry.Name]; taken && nameOK {
		report(field+".name", "%q is already a user", entry.Name)
		nameOK = false
	}
	hash, err := parseHash(entry.TokenHash)
	if err != nil {
		report(field+".token_hash", "%v", err)
	}
	if len(entry.Permissions) > maxGrantsPerUser {
		report(field+".permissions", "%d permissions; the limit is %d", len(entry.Permissions), maxGrantsPerUser)
		return
	}
	grants := make([]grant, 0, len(entry.Permissions))
	for index, permission := range entry.Permissions {
		if compiled, ok := compileGrant(permission, fmt.Sprintf("%s.permissions[%d]", field, index), report); ok {
			grants = append(grants, compiled)
		}
	}
	if nameOK && err == nil {
		u.byName[entry.Name] = &user{name: entry.Name, hash: hash, grants: grants}
		if hash.params.weak() {
			u.warnings = append(u.warnings, fmt.Sprintf("user %q: token hash parameters m=%d,t=%d are weaker than recommended (hash it again with fibril hash-token)",
				entry.Name, hash.params.MemoryKiB, hash.params.Iterations))
		}
		if len(grants) == 0 {
			u.warnings = append(u.warnings, fmt.Sprintf("user %q has no permissions: it can connect and ping, nothing else", entry.Name))
		}
	}
}

// compileGrant checks one permission.
func compileGrant(permission permissionJSON, field string, report reportFunc) (grant, bool) {
	compiled, err := compilePattern(permission.Queues)
	if err != nil {
		report(field+".queues", "%v", err)
	}
	if len(permission.Allow) == 0 {
		report(field+".allow", "name at least one operation: declare, publish, consume or admin")
		return grant{}, false
	}
	var operations Operation
	for index, name := range permission.Allow {
		operation, opErr := ParseOperation(name)
		if opErr != nil {
			report(fmt.Sprintf("%s.allow[%d]", field, index), "%v", opErr)
			err = opErr
		}
		operations |= operation
	}
	return grant{pattern: compiled, operations: operations}, err == nil
}

// checkUserName applies the user-name rule: 1 to MaxUserNameBytes bytes
// of letters, digits, '.', '_' and '-', not starting with '.'. A name
// never holds ':', which separates it from the token in a credential.
func checkUserName(name, field string, report reportFunc) bool {
	switch {
	case name == "":
		report(field, "required")
		return false
	case len(name) > MaxUserNameBytes:
		report(field, "%d bytes; the limit is %d", len(name), MaxUserNameBytes)
		return false
	case name[0] == '.':
		report(field, "%q starts with '.'", clip(name))
		return false
	}
	if !validUserName(name) {
		report(field, "%q: a user name holds only letters, digits, '.', '_' and '-'", clip(name))
		return false
	}
	return true
}

func validUserName(name string) bool {
	if name == "" || len(name) > MaxUserNameBytes || name[0] == '.' {
		return false
	}
	for index := 0; index < len(name); index++ {
		c := name[index]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// finish chooses the dummy hash and adds file-wide warnings.
func (u *Users) finish() {
	if len(u.byName) == 0 {
		u.warnings = append(u.warnings, "the users file has no users: every hello will be refused")
	}
	u.dummy = dummyHash(u.commonParams())
}

// commonParams returns the parameters most users' hashes use (the
// costliest among equals), or DefaultParams for an empty file, so that
// an unknown user costs what a known one with a wrong token costs.
func (u *Users) commonParams() Params {
	counts := map[Params]int{}
	best, bestCount := DefaultParams, 0
	for _, name := range u.Names() { // sorted, so the choice is deterministic
		params := u.byName[name].hash.params
		counts[params]++
		count := counts[params]
		if count > bestCount || count == bestCount && cost(params) > cost(best) {
			best, bestCount = params, count
		}
	}
	return best
}

func cost(p Params) uint64 { return uint64(p.MemoryKiB) * uint64(p.Iterations) }

// dummyHash is a hash no token matches in practice (a random 32-byte
// key), with the given parameters.
func dummyHash(params Params) tokenHash {
	salt, key := make([]byte, saltBytes), make([]byte, keyBytes)
	randomBytes(salt)
	randomBytes(key)
	return tokenHash{params: params, salt: salt, key: key}
}

type reportFunc func(field, format string, args ...any)

// decodeError turns a JSON decoding error into a UsersFileError that
// names the field when the decoder knows it.
func decodeError(err error) error {
	var typeError *json.UnmarshalTypeError
	if errors.As(err, &typeError) && typeError.Field != "" {
		return &UsersFileError{Field: typeError.Field, Problem: "want " + typeError.Type.String() + ", got " + typeError.Value}
	}
	var syntaxError *json.SyntaxError
	if errors.As(err, &syntaxError) {
		return &UsersFileError{Field: "(document)", Problem: fmt.Sprintf("syntax error at byte %d: %v", syntaxError.Offset, err)}
	}
	return &UsersFileError{Field: "(document)", Problem: err.Error()}
}

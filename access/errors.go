package access

import (
	"errors"
	"fmt"
)

// Errors of the package; test with errors.Is.
var (
	// ErrUnauthorized: authentication failed. The same error, with the
	// same message, answers an unknown user, a wrong token and a
	// malformed credential, so a client learns nothing about which users
	// exist. The session answers it with code unauthorized (104) and
	// closes the connection.
	ErrUnauthorized = errors.New("access: unknown user or wrong token")
	// ErrForbidden: the user is authenticated but holds no permission for
	// the operation on the queue. Errors wrapping it are *DeniedError. The
	// session answers them with code forbidden (214); the connection stays
	// open.
	ErrForbidden = errors.New("access: forbidden")
	// ErrRevoked: the identity no longer holds: since it authenticated, a
	// reload removed its user or changed the user's token. The session
	// answers it with code unauthorized (104) and closes the connection.
	ErrRevoked = errors.New("access: credentials revoked by a users file reload")
	// ErrInvalidUsersFile: the users file cannot be read or breaks its
	// format. Errors wrapping it are *UsersFileError (several, joined,
	// when the file has several problems).
	ErrInvalidUsersFile = errors.New("access: invalid users file")
	// ErrInvalidHash: a token hash is not an argon2id hash in the PHC
	// string format, or its parameters are out of bounds.
	ErrInvalidHash = errors.New("access: invalid token hash")
	// ErrInvalidToken: a token given to HashToken is too short or too long.
	ErrInvalidToken = errors.New("access: invalid token")
)

// DeniedError is the error of Check for an operation the user may not do.
type DeniedError struct {
	User      string
	Operation Operation
	Queue     string // empty for a node-wide operation
}

func (e *DeniedError) Error() string {
	if e.Queue == "" {
		return fmt.Sprintf("access: user %q may not %s on this node (node-wide %s needs the pattern \"*\")",
			e.User, e.Operation, e.Operation)
	}
	return fmt.Sprintf("access: user %q may not %s queue %q", e.User, e.Operation, e.Queue)
}

// Unwrap makes every DeniedError match ErrForbidden.
func (e *DeniedError) Unwrap() error { return ErrForbidden }

// UsersFileError is one problem in a users file, naming the field by its
// JSON path (for example "users[2].permissions[0].queues").
type UsersFileError struct {
	Field   string
	Problem string
}

func (e *UsersFileError) Error() string {
	return fmt.Sprintf("access: users file: %s: %s", e.Field, e.Problem)
}

// Unwrap makes every UsersFileError match ErrInvalidUsersFile.
func (e *UsersFileError) Unwrap() error { return ErrInvalidUsersFile }

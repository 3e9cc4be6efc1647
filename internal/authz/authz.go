package authz

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
)

// Resource is the kind of resource an ACL protects, as kafka-acls.sh
// names it.
type Resource string

// The resource kinds the runtime uses.
const (
	Topic           Resource = "topic"
	Group           Resource = "group"
	TransactionalID Resource = "transactional-id"
	Cluster         Resource = "cluster"
)

// codes are the authorization errors, by the resource kind they refuse.
var codes = map[*kerr.Error]Resource{
	kerr.TopicAuthorizationFailed:           Topic,
	kerr.GroupAuthorizationFailed:           Group,
	kerr.TransactionalIDAuthorizationFailed: TransactionalID,
	kerr.ClusterAuthorizationFailed:         Cluster,
}

// Refused returns the resource kind an authorization error in err's chain
// refused, and whether there is one.
func Refused(err error) (Resource, bool) {
	for code, res := range codes {
		if errors.Is(err, code) {
			return res, true
		}
	}
	return "", false
}

// Error is an authorization error with the ACL that would have allowed the
// request. It unwraps to the broker's error (a *kerr.Error), and
// errors.Is(err, flechtwerk.ErrNotAuthorized) holds.
type Error struct {
	Operation string   // the ACL operation: Read, Write, Create, DescribeConfigs...
	Resource  Resource // the kind of resource
	Name      string   // its name (for a prefixed ACL: the prefix)
	Prefixed  bool     // the ACL may be prefixed (transactional ids)
	Err       error
}

func (e *Error) Error() string {
	pattern := ""
	if e.Prefixed {
		pattern = " (or prefixed)"
	}
	return fmt.Sprintf("%s: not authorized: the principal needs ACL %s on %s %q%s: %v",
		flechtwerk.CodeNotAuthorized, e.Operation, e.Resource, e.Name, pattern, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is flechtwerk.ErrNotAuthorized.
func (e *Error) Is(target error) bool { return target == flechtwerk.ErrNotAuthorized }

// Wrap returns err unchanged unless the broker refused the request for lack
// of authorization; then it returns an *Error naming operation on the
// resource called name, which is what the caller was doing. The resource
// kind comes from the broker's error code, so a TRANSACTIONAL_ID_
// AUTHORIZATION_FAILED met while producing is reported against the
// transactional id, not the topic: pass the name of each resource the
// request touched in names, by kind.
func Wrap(err error, operation string, names map[Resource]string) error {
	res, ok := Refused(err)
	if !ok {
		return err
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	name, ok := names[res]
	if !ok && res == Cluster {
		name, ok = "kafka-cluster", true
	}
	if !ok {
		name = "(unknown)"
	}
	op := operation
	if res == Group && operation != "Describe" {
		op = "Read" // every group request but DescribeGroups needs Read
	}
	if res == TransactionalID {
		op = "Write"
	}
	return &Error{Operation: op, Resource: res, Name: name, Prefixed: res == TransactionalID, Err: err}
}

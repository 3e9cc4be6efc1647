package transform

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/authz"
	"github.com/flechtwerk/flechtwerk/internal/group"
)

// fetchErr returns the error of a poll that ends Run, nil when there is
// none: a canceled or expired poll context is no error, and a lost group
// session is ridden out when its cause is transient (groupSession). A
// refused fetch names the ACL it needed (Read on the topic).
func (rn *run) fetchErr(fetches kgo.Fetches) error {
	var ferr error
	fetches.EachError(func(t string, p int32, err error) {
		if ferr != nil || group.IgnoredPollError(err) {
			return
		}
		var lost *kgo.ErrGroupSession
		if errors.As(err, &lost) {
			ferr = rn.groupSession(err)
			return
		}
		ferr = group.FetchError(t, p, authz.Wrap(err, "Read", map[authz.Resource]string{authz.Topic: t, authz.Group: rn.c.Group()}))
	})
	return ferr
}

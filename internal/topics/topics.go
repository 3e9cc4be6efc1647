package topics

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/authz"
)

// Info is what the runtime needs of one topic.
type Info struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// Describe loads the metadata of names and checks that every topic exists
// and that all have the same partition count. role names the topics in
// errors ("input", "config"). Every problem is reported at once.
func Describe(ctx context.Context, adm *kadm.Client, role string, names []string) (map[string]Info, int32, error) {
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		name := ""
		if len(names) == 1 {
			name = names[0]
		}
		return nil, 0, fmt.Errorf("topics: describing %s topics %v: %w", role, names, acl(err, role, name))
	}
	var errs []error
	out := make(map[string]Info, len(names))
	counts := map[int32][]string{}
	for _, name := range names {
		d, ok := details[name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeMissingTopic, "topic "+name,
				"%s topic %q does not exist", role, name))
			continue
		}
		if d.Err != nil {
			return nil, 0, fmt.Errorf("topics: describing %s topic %q: %w", role, name, acl(d.Err, role, name))
		}
		n := int32(len(d.Partitions))
		out[name] = Info{Name: name, ID: d.ID, Partitions: n}
		counts[n] = append(counts[n], name)
	}
	if len(counts) > 1 {
		var desc []string
		for n, ts := range counts {
			for _, t := range ts {
				desc = append(desc, fmt.Sprintf("%s=%d", t, n))
			}
		}
		sort.Strings(desc)
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, role+" topics",
			"%s topics must have equal partition counts, have %v", role, desc))
	}
	if len(errs) > 0 {
		return nil, 0, errors.Join(errs...)
	}
	var n int32
	for k := range counts {
		n = k
	}
	return out, n, nil
}

// acl names the ACL a refused describe of a topic in role needed: the
// operation the runtime needs on it anyway, which implies Describe (Write
// for a dead-letter or output topic, Read for the others).
func acl(err error, role, topic string) error {
	op := "Read"
	if role == "dead-letter" || role == "output" {
		op = "Write"
	}
	return authz.Wrap(err, op, map[authz.Resource]string{authz.Topic: topic})
}

package transform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/authz"
	"github.com/flechtwerk/flechtwerk/internal/retry"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// ensureOutputs checks that every declared output topic exists, creating
// those whose declaration asks for it (at replication, -1: the broker's
// default). A missing topic that is not to be created is a
// flechtwerk.CodeMissingTopic error, an existing one to be created with
// another partition count a flechtwerk.CodePartitionMismatch error; every
// problem is reported at once. A declared topic that is also an input, or
// one of the topics in reserved (the changelog, the dead-letter topic; the
// value says which), is a flechtwerk.CodeDuplicateTopic error, found
// before the cluster is asked. A topic being created (by another
// instance, or just now) that is not ready yet (LEADER_NOT_AVAILABLE,
// UNKNOWN_TOPIC_OR_PARTITION after its creation) is looked at again for
// up to about 15 seconds; then it is a flechtwerk.CodeMissingTopic error
// naming it, with the broker's last error.
func ensureOutputs(ctx context.Context, adm *kadm.Client, specs []stage.OutputSpec, inputs []string, reserved map[string]string, replication int16) error {
	if len(specs) == 0 {
		return nil
	}
	var loops []error
	for _, s := range specs {
		if slices.Contains(inputs, s.Topic) {
			loops = append(loops, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, "output topic "+s.Topic,
				"a declared output topic is also an input topic"))
		}
		if what, ok := reserved[s.Topic]; ok && s.Topic != "" {
			loops = append(loops, flechtwerk.Errorf(flechtwerk.CodeDuplicateTopic, "output topic "+s.Topic,
				"a declared output topic is also %s", what))
		}
	}
	if len(loops) > 0 {
		return errors.Join(loops...)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Topic
	}
	// A topic that exists but has no leader yet is being created: look
	// again.
	var details kadm.TopicDetails
	p := wait(func(err error) bool { return errors.Is(err, kerr.LeaderNotAvailable) })
	var last error
	err := p.Do(ctx, func() error {
		var err error
		details, err = adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
		if err != nil {
			return err
		}
		for _, d := range details {
			if errors.Is(d.Err, kerr.LeaderNotAvailable) {
				last = d.Err
				return fmt.Errorf("output topic %s: %w", d.Topic, d.Err)
			}
		}
		return nil
	}, nil)
	if err != nil && !errors.Is(err, kerr.LeaderNotAvailable) {
		return fmt.Errorf("runner: describing output topics %v: %w", names, err)
	}
	var errs []error
	for _, s := range specs {
		d, ok := details[s.Topic]
		missing := !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition)
		switch {
		case !missing && errors.Is(d.Err, kerr.LeaderNotAvailable):
			errs = append(errs, notReady(s.Topic, last))
		case !missing && d.Err != nil:
			errs = append(errs, fmt.Errorf("runner: describing output topic %s: %w", s.Topic,
				authz.Wrap(d.Err, "Write", map[authz.Resource]string{authz.Topic: s.Topic})))
		case !missing && s.Create && int32(len(d.Partitions)) != s.Partitions:
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "output topic "+s.Topic,
				"declared with %d partitions (transformer.CreateTopic), has %d", s.Partitions, len(d.Partitions)))
		case missing && !s.Create:
			errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeMissingTopic, "output topic "+s.Topic,
				"declared output topic %q does not exist (create it, or declare it with transformer.CreateTopic)", s.Topic))
		case missing:
			if err := createOutput(ctx, adm, s, replication); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// wait is the bounded wait for a topic being created: about 15 seconds,
// as changelog.Ensure waits.
func wait(transient func(error) bool) *retry.Policy {
	p := retry.Doubling(20*time.Millisecond, time.Second, transient)
	p.MaxAttempts = 21
	return p
}

// notReady is the error of an output topic that did not become ready
// within the wait; last is the broker's last answer.
func notReady(topic string, last error) error {
	return errors.Join(flechtwerk.Errorf(flechtwerk.CodeMissingTopic, "output topic "+topic,
		"the topic is being created but was not ready after waiting about 15s (start again)"), last)
}

// createOutput creates the output topic of s; another instance creating
// it at the same time is fine once the topic is visible with the declared
// partition count.
func createOutput(ctx context.Context, adm *kadm.Client, s stage.OutputSpec, replication int16) error {
	cfg := make(map[string]*string, len(s.Config))
	for k, v := range s.Config {
		cfg[k] = kadm.StringPtr(v)
	}
	_, err := adm.CreateTopic(ctx, s.Partitions, replication, cfg, s.Topic)
	if err == nil {
		return nil
	}
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("runner: creating output topic %s with %d partitions: %w", s.Topic, s.Partitions,
			authz.Wrap(err, "Create", map[authz.Resource]string{authz.Topic: s.Topic}))
	}
	// Created by another instance: wait until it is visible, then check it.
	return waitCreated(ctx, adm, s)
}

// waitCreated waits until the topic of s, created by another instance, is
// visible and ready, and checks its partition count.
func waitCreated(ctx context.Context, adm *kadm.Client, s stage.OutputSpec) error {
	creating := func(err error) bool {
		return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.LeaderNotAvailable)
	}
	var last error
	err := wait(creating).Do(ctx, func() error {
		details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), s.Topic)
		if err != nil {
			return err
		}
		d, ok := details[s.Topic]
		switch {
		case !ok:
			err = kerr.UnknownTopicOrPartition
		case d.Err != nil:
			err = d.Err
		case int32(len(d.Partitions)) != s.Partitions:
			return flechtwerk.Errorf(flechtwerk.CodePartitionMismatch, "output topic "+s.Topic,
				"declared with %d partitions (transformer.CreateTopic), has %d", s.Partitions, len(d.Partitions))
		}
		last = err
		return err
	}, nil)
	if err != nil && creating(last) && errors.Is(err, last) {
		return notReady(s.Topic, last)
	}
	return err
}

package config

import (
	"fmt"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/batch"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// InvalidRecords is one InvalidRecords option: what becomes of invalid
// records.
type InvalidRecords struct {
	Mode batch.Mode
	// Topic is the dead-letter topic of batch.DeadLetter.
	Topic string
	// Substitute is the hook of batch.Substitute.
	Substitute func(*transformer.InvalidRecordError) ([]byte, error)
}

func (p InvalidRecords) String() string {
	if p.Mode == batch.DeadLetter {
		return fmt.Sprintf("DeadLetter(%q)", p.Topic)
	}
	return p.Mode.String()
}

// Policy returns the invalid-record policy of the options (Crash when no
// InvalidRecords option was given), logging to the options' logger.
func (o *Options) Policy() *batch.Policy {
	p := &batch.Policy{Logger: o.Logger}
	if n := len(o.InvalidRecords); n > 0 {
		last := o.InvalidRecords[n-1]
		p.Mode, p.DeadLetterTopic, p.Substitute = last.Mode, last.Topic, last.Substitute
	}
	return p
}

// DeadLetterTopic returns the dead-letter topic, "" when the policy is not
// batch.DeadLetter.
func (o *Options) DeadLetterTopic() string {
	if p := o.Policy(); p.Mode == batch.DeadLetter {
		return p.DeadLetterTopic
	}
	return ""
}

// validateInvalidRecords reports a policy that contradicts itself or is
// incomplete, and a dead-letter topic that is an input or the changelog.
func (o *Options) validateInvalidRecords() []error {
	var errs []error
	bad := func(code flechtwerk.Code, format string, args ...any) {
		errs = append(errs, flechtwerk.Errorf(code, "InvalidRecords", format, args...))
	}
	for i, p := range o.InvalidRecords {
		switch {
		case p.Mode == batch.DeadLetter && p.Topic == "":
			bad(flechtwerk.CodeInvalidRecordPolicy, "DeadLetter needs a topic name")
		case p.Mode == batch.Substitute && p.Substitute == nil:
			bad(flechtwerk.CodeInvalidRecordPolicy, "Substitute needs a hook, got nil")
		}
		if i == 0 {
			continue
		}
		first := o.InvalidRecords[0]
		// Two substitute hooks cannot be compared: they contradict.
		if p.Mode != first.Mode || p.Topic != first.Topic || p.Mode == batch.Substitute {
			bad(flechtwerk.CodeInvalidRecordPolicy, "given twice with different policies, %v and %v; give one", first, p)
			break
		}
	}
	if dl := o.DeadLetterTopic(); dl != "" {
		for _, t := range o.InputTopics {
			if t == dl {
				bad(flechtwerk.CodeDuplicateTopic, "the dead-letter topic %q is an input topic", dl)
			}
		}
		if o.ApplicationID != "" && dl == o.Changelog() {
			bad(flechtwerk.CodeDuplicateTopic, "the dead-letter topic %q is the changelog topic", dl)
		}
	}
	return errs
}

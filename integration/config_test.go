package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
)

// TestConfigErrors checks that each misconfiguration ends in its coded
// error, with a message naming the option or topic at fault: static
// problems from runner.NewTransformer (all of them at once), problems that need the
// cluster from Run, before anything is consumed or created.
func TestConfigErrors(t *testing.T) {
	type names struct{ in, other, app string }
	tests := []struct {
		name string
		// setup creates the topics the case needs and returns its options.
		setup func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt
		// fromRun: the error comes from Run (New succeeds).
		fromRun bool
		want    []error
		// msgs are substrings of the error message; "{in}", "{other}" and
		// "{changelog}" stand for the case's topic names.
		msgs []string
	}{
		{
			name: "missing input topic",
			setup: func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt {
				return []runner.TransformerOpt{runner.InputTopics(n.in, n.other)} // other is never created
			},
			fromRun: true,
			want:    []error{flechtwerk.ErrMissingTopic},
			msgs:    []string{"MISSING_TOPIC", "{other}"},
		},
		{
			name: "unequal input partition counts",
			setup: func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt {
				c.CreateTopic(t, n.other, 3)
				return []runner.TransformerOpt{runner.InputTopics(n.in, n.other)}
			},
			fromRun: true,
			want:    []error{flechtwerk.ErrPartitionMismatch},
			msgs:    []string{"PARTITION_COUNT_MISMATCH", "{in}=2", "{other}=3"},
		},
		{
			name: "changelog with another partition count",
			setup: func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt {
				c.CreateTopic(t, changelog.Topic(n.app), 3)
				return []runner.TransformerOpt{runner.InputTopics(n.in)}
			},
			fromRun: true,
			want:    []error{flechtwerk.ErrChangelogMismatch},
			msgs:    []string{"CHANGELOG_MISMATCH", "{changelog}", "3 partitions", "inputs have 2"},
		},
		{
			name: "empty application id",
			setup: func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt {
				return []runner.TransformerOpt{runner.InputTopics(n.in), runner.ApplicationID("")}
			},
			want: []error{flechtwerk.ErrEmptyApplicationID},
			msgs: []string{"EMPTY_APPLICATION_ID", "ApplicationID"},
		},
		{
			name: "transaction timeout not above batch timeout",
			setup: func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt {
				return []runner.TransformerOpt{runner.InputTopics(n.in),
					runner.TransactionTimeout(10 * time.Second), runner.BatchTimeout(10 * time.Second)}
			},
			want: []error{flechtwerk.ErrTransactionTimeout},
			msgs: []string{"TRANSACTION_TIMEOUT_TOO_SHORT", "TransactionTimeout"},
		},
		{
			name: "several problems at once",
			setup: func(t *testing.T, c *kafkatest.Cluster, n names) []runner.TransformerOpt {
				return []runner.TransformerOpt{runner.ApplicationID(""), runner.InputTopics(),
					runner.TransactionTimeout(time.Second), runner.BatchTimeout(2 * time.Second),
					runner.MaxPollRecords(0)}
			},
			want: []error{flechtwerk.ErrEmptyApplicationID, flechtwerk.ErrNoInputTopics,
				flechtwerk.ErrTransactionTimeout, flechtwerk.ErrInvalidOption},
			msgs: []string{"ApplicationID", "InputTopics", "TransactionTimeout", "MaxPollRecords"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			n := names{in: kafkatest.Name("in"), other: kafkatest.Name("other"), app: kafkatest.Name("app")}
			c.CreateTopic(t, n.in, 2)
			c.Produce(t, values(n.in, 0, "v", 5, 2)...)
			opts := append([]runner.TransformerOpt{
				runner.SeedBrokers(c.Brokers...),
				runner.ApplicationID(n.app),
				runner.StateDir(t.TempDir()),
				runner.WithLogger(logger(t)),
			}, tc.setup(t, c, n)...)
			proc := echoCounter(kafkatest.Name("out"), nil) // stateful: Run would create a changelog

			r, err := runner.NewTransformer(proc, opts...)
			if tc.fromRun {
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err = r.Run(ctx)
				require.NoError(t, ctx.Err(), "Run must fail, not wait")
			} else {
				require.Nil(t, r)
			}
			require.Error(t, err)
			t.Logf("error: %v", err)
			for _, want := range tc.want {
				require.ErrorIs(t, err, want)
			}
			var ce *flechtwerk.ConfigError
			require.ErrorAs(t, err, &ce)
			clog := changelog.Topic(n.app)
			names := strings.NewReplacer("{in}", n.in, "{other}", n.other, "{changelog}", clog)
			for _, m := range tc.msgs {
				require.ErrorContains(t, err, names.Replace(m))
			}
			if !tc.fromRun {
				return
			}
			// Nothing was consumed or created.
			require.Empty(t, c.CommittedOffsets(t, n.app, n.in), "no offset committed")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			details, err := c.Adm.ListTopics(ctx, clog)
			require.NoError(t, err)
			if tc.want[0] == flechtwerk.ErrChangelogMismatch {
				require.Len(t, details[clog].Partitions, 3, "the existing changelog is left as it was")
				require.Empty(t, readStable(t, c, clog))
			} else {
				require.False(t, details.Has(clog), "no changelog created")
			}
		})
	}
}

// Package queue runs batch generation past one machine, as a NATS JetStream work queue that loses nothing when
// a worker dies.
//
// Submit publishes every line of a batch file (the batchfile format of generate --batch-file) as a prompt
// message to a work-queue stream, with an id derived from the file's content, the run's settings and the line
// (JetStream drops a message whose id it has seen within its duplicate window: re-submitting a file publishes
// nothing twice), then collects the results from the results stream and writes them in input order, one per
// line. Worker pulls prompts, generates them through the engine's batch loop (up to its batch size at once,
// pulling more as sequences end), publishes each result under the prompt's id and acknowledges the prompt only
// once JetStream has stored the result. A worker that dies leaves its prompts unacknowledged: JetStream delivers
// them again after the consumer's AckWait, another worker generates them again, and the duplicate result is
// dropped by id (by JetStream's duplicate window, and by Submit in any case): at-least-once delivery plus
// deduplication gives exactly one result per line. Each line's seed is batchfile.Line.SeedFor's, so a line
// gives the same text on any worker and in generate --batch-file.
//
// Streams (file storage), for a stream name S (Config.Stream):
//
//	S            work queue of prompts, subjects S.prompt.<job>.<line>, one durable pull consumer "workers"
//	S_RESULTS    results, subjects S.result.<job>.<line>, one message per subject, kept Config.ResultsMaxAge
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultStream is the prompt stream's name unless --stream gives another.
const DefaultStream = "LAYERSTREAM"

// Defaults of Config.
const (
	DefaultAckWait        = 30 * time.Second
	DefaultDuplicates     = 24 * time.Hour
	DefaultResultsMaxAge  = 7 * 24 * time.Hour
	consumerName          = "workers"
	publishAttemptTimeout = 5 * time.Second
)

// Config names the streams and sets how they and the workers' consumer are made when absent.
type Config struct {
	// Stream is the prompt stream's name (DefaultStream when empty); the results stream is Stream + "_RESULTS".
	Stream string
	// AckWait is how long JetStream waits for a prompt's acknowledgement (or a worker's heartbeat, sent every
	// AckWait/3) before it delivers the prompt again (DefaultAckWait when 0).
	AckWait time.Duration
	// Duplicates is both streams' duplicate window: a message whose id either stream stored within it is
	// dropped (DefaultDuplicates when 0).
	Duplicates time.Duration
	// ResultsMaxAge is how long results are kept (DefaultResultsMaxAge when 0).
	ResultsMaxAge time.Duration
	// Replicas is how many servers of a NATS cluster hold each stream (1 when 0; 3 in a cluster of 3, so that a
	// server lost loses no prompt nor result).
	Replicas int
}

var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// withDefaults fills the zero fields and checks the stream name.
func (c Config) withDefaults() (Config, error) {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if !streamName.MatchString(c.Stream) {
		return c, fmt.Errorf("queue: stream name %q: use letters, digits, - and _ only", c.Stream)
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Duplicates <= 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.ResultsMaxAge <= 0 {
		c.ResultsMaxAge = DefaultResultsMaxAge
	}
	if c.ResultsMaxAge < c.Duplicates {
		c.Duplicates = c.ResultsMaxAge
	}
	return c, nil
}

// ResultsStream is the results stream's name.
func (c Config) ResultsStream() string { return c.Stream + "_RESULTS" }

// promptSubject and resultSubject are the subjects of a line's prompt and result; id is "<job>.<line>".
func (c Config) promptSubject(id string) string { return c.Stream + ".prompt." + id }
func (c Config) resultSubject(id string) string { return c.Stream + ".result." + id }

// Connect connects to the NATS server at url (nats://HOST:PORT; several, comma-separated, for a cluster),
// reconnecting for ever after a disconnection, and returns the connection and its JetStream context.
func Connect(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	log := slog.Default().With("queue", url)
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "server", c.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, nil, fmt.Errorf("queue: connect to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("queue: %s: %w", url, err)
	}
	return nc, js, nil
}

// ensureStreams creates the two streams when absent; an existing stream is used as it is (whoever made it
// chose its replicas, duplicate window and retention).
func ensureStreams(ctx context.Context, js jetstream.JetStream, c Config) error {
	prompts := jetstream.StreamConfig{Name: c.Stream, Subjects: []string{c.Stream + ".prompt.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: c.Duplicates, Replicas: c.Replicas,
		Description: "layerstream prompts: one message per batch-file line, removed once a worker acknowledged it"}
	results := jetstream.StreamConfig{Name: c.ResultsStream(), Subjects: []string{c.Stream + ".result.>"},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Duplicates: c.Duplicates, Replicas: c.Replicas,
		MaxAge: c.ResultsMaxAge, MaxMsgsPerSubject: 1,
		Description: "layerstream results: one message per prompt id, read back by submit"}
	for _, sc := range []jetstream.StreamConfig{prompts, results} {
		if err := retry(ctx, func(ctx context.Context) error {
			st, err := js.Stream(ctx, sc.Name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				st, err = js.CreateStream(ctx, sc)
				if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // made meanwhile by another worker
					st, err = js.Stream(ctx, sc.Name)
				}
			}
			if err == nil && st.CachedInfo().Config.Retention != sc.Retention {
				err = permanent{fmt.Errorf("exists with retention %v, want %v (another use of the name? give --stream)", st.CachedInfo().Config.Retention, sc.Retention)}
			}
			return err
		}); err != nil {
			return fmt.Errorf("queue: stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// ensureConsumer creates (or updates) the workers' durable pull consumer of the prompt stream.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Consumer, error) {
	cc := jetstream.ConsumerConfig{Durable: consumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.AckWait,
		MaxDeliver: -1, MaxAckPending: 10000, Description: "layerstream workers"}
	var cons jetstream.Consumer
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		cons, err = js.CreateOrUpdateConsumer(ctx, c.Stream, cc)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue: consumer %s of stream %s: %w", consumerName, c.Stream, err)
	}
	return cons, nil
}

// permanent marks an error that no retry cures.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry runs f (each attempt with its own timeout) until it succeeds, ctx ends, or it fails with an error that
// a reconnection would not cure (one JetStream answered with, such as a stream configured otherwise, or a
// permanent one).
func retry(ctx context.Context, f func(context.Context) error) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		err := f(actx)
		cancel()
		var apiErr *jetstream.APIError
		var perm permanent
		if err == nil || errors.As(err, &apiErr) || errors.As(err, &perm) || ctx.Err() != nil {
			return err
		}
		slog.Debug("queue: retrying", "err", err, "after", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}
